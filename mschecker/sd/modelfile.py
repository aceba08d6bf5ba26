"""Save/load the bundled SD graphs; ``generate_models`` writes one preset's three stages to a directory.

Graphs whose weights pass ``EXTERNAL_THRESHOLD`` bytes (always the sd15 preset; protobuf cannot serialise more
than 2 GB in one message) are saved with their weights as ONNX external data in ``<name>.onnx.data`` next to
the graph. sd15 is generated on demand (``generate_models("sd15", dir)``), never committed.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import numpy_helper

from mschecker.sd.clip import build_text_encoder
from mschecker.sd.presets import SDPreset, get_preset
from mschecker.sd.unet import build_unet
from mschecker.sd.vae import build_vae_decoder

EXTERNAL_THRESHOLD = 256 * 1024 * 1024
STAGE_BUILDERS = {"text_encoder": build_text_encoder, "unet": build_unet, "vae_decoder": build_vae_decoder}


def save_model(model: onnx.ModelProto, path: str | Path, *, external_data: bool | None = None,
               data_name: str | None = None) -> Path:
    """Write ``model`` to ``path`` (external data automatically above EXTERNAL_THRESHOLD bytes, in ``data_name``,
    default ``<name>.data``, next to it); ``model`` is not modified (onnx's own external-data writer strips the
    weights out of the model it is given).

    The graph file is written atomically (temp file + os.replace); the data file is rewritten in full first.
    """
    path = Path(path)
    if external_data is None:
        external_data = not fits_protobuf(model) or model.ByteSize() > EXTERNAL_THRESHOLD
    data_path = path.parent / (data_name or f"{path.name}.data")
    to_write = _with_external_weights(model, data_path) if external_data else model
    tmp = path.with_name(path.name + ".tmp")
    onnx.save_model(to_write, str(tmp))
    os.replace(tmp, path)
    return path


def _with_external_weights(model: onnx.ModelProto, data_path: Path) -> onnx.ModelProto:
    """A new ModelProto sharing nothing large with ``model``: every initializer over 1 KiB is written to
    ``data_path`` (4 KiB-aligned offsets, as onnx does) and referenced from there."""
    graph = model.graph
    new_graph = onnx.helper.make_graph(list(graph.node), graph.name, list(graph.input), list(graph.output),
                                       value_info=list(graph.value_info), doc_string=graph.doc_string)
    with open(data_path, "wb") as data:
        for tensor in graph.initializer:
            raw = tensor.raw_data if tensor.HasField("raw_data") else numpy_helper.to_array(tensor).tobytes()
            ref = onnx.TensorProto(name=tensor.name, dims=tensor.dims, data_type=tensor.data_type)
            if len(raw) <= 1024:
                ref.raw_data = raw
            else:
                offset = -data.tell() % 4096
                data.write(b"\0" * offset)
                start = data.tell()
                data.write(raw)
                ref.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", data_path.name), ("offset", str(start)), ("length", str(len(raw)))):
                    entry = ref.external_data.add()
                    entry.key, entry.value = key, value
            new_graph.initializer.append(ref)
    new = onnx.helper.make_model(new_graph, opset_imports=list(model.opset_import), producer_name=model.producer_name,
                                 doc_string=model.doc_string)
    new.ir_version = model.ir_version
    return new


def fits_protobuf(model: onnx.ModelProto) -> bool:
    """Whether the model (weights inline) stays under protobuf's 2 GB message limit, with 64 MB to spare."""
    total = sum(len(t.raw_data) for t in model.graph.initializer)
    return total < 2**31 - 2**26


def generate_models(preset: str | SDPreset, directory: str | Path, seed: int = 0) -> dict[str, Path]:
    """Build and save the three stages of ``preset`` as ``<directory>/<stage>.onnx``; returns their paths.

    Stages are built one at a time so that at most one stage's weights are in memory (sd15 UNet: ~3.4 GB).
    """
    p = get_preset(preset)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for stage, build in STAGE_BUILDERS.items():
        model = build(p, seed)
        paths[stage] = save_model(model, directory / f"{stage}.onnx")
        del model
    return paths
