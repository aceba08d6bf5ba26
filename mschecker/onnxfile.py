"""An ONNX model file as untrusted input: parsed without its external data, every external-data location checked
(fsio.safe_external_path) before anything follows one.

Why its own leaf module: the graph loader, the onnxruntime runner, the referee, the SD folder reader and the
campaign's file shipping all open model files, and a plain onnxruntime check must not import the graph executor
to do it. `onnx.load(path)` would follow every location the file names; onnxruntime follows them itself too.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import onnx

from mschecker.errors import InputError
from mschecker.fsio import read_bytes, safe_external_path


def external_info(tensor: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def check_external_locations(graph: onnx.GraphProto, model_dir: Path, model_path: Path) -> None:
    """Validate every external location (initializers, Constant attributes, subgraphs) before reading anything."""
    tensors = list(graph.initializer)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                tensors.append(attr.t)
            elif attr.type == onnx.AttributeProto.GRAPH:
                check_external_locations(attr.g, model_dir, model_path)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    check_external_locations(g, model_dir, model_path)
    for t in tensors:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            safe_external_path(model_dir, external_info(t).get("location", ""), t.name, model_path)


def read_model_file(path) -> tuple[onnx.ModelProto, str]:
    """(the model parsed WITHOUT its external data, the sha256 of the file's bytes), from one read of the file:
    every external-data location checked (inside the model's folder), for load_model and for runners that hand
    the file to onnxruntime, which follows locations itself. A FIFO, socket or device is refused by os.stat
    before any open. The format follows the file's extension, as onnx.load infers it."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: model file does not exist")
    data = read_bytes(path, "model")
    fmt = onnx.serialization.registry.get_format_from_file_extension(path.suffix)
    try:
        proto = onnx.load_model(io.BytesIO(data), format=fmt or "protobuf", load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError and others
        detail = str(exc).strip().splitlines()
        raise InputError(f"{path}: not a readable ONNX model ({type(exc).__name__}"
                         f"{': ' + detail[0][:200] if detail else ''})") from None
    check_external_locations(proto.graph, path.parent, path)
    return proto, hashlib.sha256(data).hexdigest()


def read_model_proto(path) -> onnx.ModelProto:
    """The model parsed without its external data, every location checked (read_model_file)."""
    return read_model_file(path)[0]
