"""Load an ONNX model without trusting its external-data paths, and turn tensors into numpy arrays.

Why not `onnx.load(path)`: it follows every external-data `location` the file names. A model is untrusted input,
so a location that is absolute, climbs out with `..`, or reaches outside through a symlink is refused with an
InputError *before any byte of it is read*. External data is memory-mapped (read-only, lazily paged in), so
models larger than protobuf's 2 GB limit load without copying their weights into memory.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mschecker.errors import InputError
from mschecker.fsio import safe_external_path
from mschecker.onnxfile import check_external_locations, external_info, read_model_proto


@dataclass
class LoadedModel:
    """A model proto (weights not inlined) plus its initializers as numpy arrays (memmaps for external data)."""

    path: Path
    proto: onnx.ModelProto
    initializers: dict[str, np.ndarray]

    @property
    def graph(self) -> onnx.GraphProto:
        return self.proto.graph

    @property
    def opset(self) -> int:
        """The default-domain opset the graph was written for."""
        for imp in self.proto.opset_import:
            if imp.domain in ("", "ai.onnx"):
                return int(imp.version)
        raise InputError(f"{self.path}: the model imports no default-domain (ai.onnx) opset")



def tensor_dtype(tensor: onnx.TensorProto, where: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except Exception:  # noqa: BLE001 - onnx raises KeyError/ValueError depending on version
        raise InputError(f"{where}: unsupported tensor element type {tensor.data_type}") from None


def external_array(tensor: onnx.TensorProto, model_dir: Path, model_path: Path) -> np.ndarray:
    """A read-only memmap of one external tensor (checked path, offset and length)."""
    info = external_info(tensor)
    path = safe_external_path(model_dir, info.get("location", ""), tensor.name, model_path)
    where = f"{model_path}: initializer {tensor.name!r}"
    dtype = tensor_dtype(tensor, where)
    shape = tuple(int(d) for d in tensor.dims)
    nbytes = _declared_nbytes(shape, dtype, where)
    count = math.prod(shape)
    offset, length = (_external_int(info, key, where) for key in ("offset", "length"))
    offset = offset or 0
    if length is not None and length < nbytes:
        raise InputError(f"{model_path}: initializer {tensor.name!r} needs {nbytes} bytes but its external data "
                         f"length is {info['length']}")
    size = path.stat().st_size
    if offset < 0 or offset + nbytes > size:
        raise InputError(f"{model_path}: initializer {tensor.name!r} reads bytes {offset}..{offset + nbytes} of "
                         f"{path.name}, which has {size} bytes")
    if count == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype.newbyteorder("<"), mode="r", offset=offset, shape=shape)


def _declared_nbytes(shape, dtype: np.dtype, where: str) -> int:
    """Bytes an initializer's dims need, exact (numpy's int64 product wraps); InputError past int64."""
    if any(d < 0 for d in shape):
        raise InputError(f"{where}: dims {list(shape)} have a negative dimension")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > 2**63 - 1:
        raise InputError(f"{where}: dims {list(shape)} describe more bytes than an int64 can count")
    return nbytes


def _external_int(info: dict[str, str], key: str, where: str) -> int | None:
    if not info.get(key):
        return None
    try:
        value = int(info[key])
    except ValueError:
        raise InputError(f"{where}: external data {key} {info[key]!r} is not an integer") from None
    if value < 0:
        raise InputError(f"{where}: external data {key} {value} is negative")
    return value


def tensor_to_array(tensor: onnx.TensorProto, model_dir: Path | None = None,
                    model_path: Path | None = None) -> np.ndarray:
    """numpy view of a TensorProto: zero-copy for raw data, memmap for external data, onnx's helper otherwise."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        if model_dir is None:
            raise InputError(f"tensor {tensor.name!r} uses external data but no model folder is known")
        return external_array(tensor, model_dir, model_path or model_dir)
    where = f"{model_path or 'model'}: initializer {tensor.name!r}"
    shape = tuple(int(d) for d in tensor.dims)
    if tensor.HasField("raw_data") and tensor.data_type not in (onnx.TensorProto.STRING,) \
            and tensor.data_type not in _PACKED_TYPES:
        dtype = tensor_dtype(tensor, where).newbyteorder("<")
        nbytes = _declared_nbytes(shape, dtype, where)
        if nbytes != len(tensor.raw_data):
            raise InputError(f"{where}: dims {list(shape)} need {nbytes} bytes of {dtype_name_of(dtype)}, its raw_data "
                             f"holds {len(tensor.raw_data)}")
        arr = np.frombuffer(tensor.raw_data, dtype=dtype)
        return arr.reshape(shape)
    if tensor.data_type != onnx.TensorProto.STRING:
        _declared_nbytes(shape, tensor_dtype(tensor, where), where)
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as exc:  # the typed data fields disagree with dims
        raise InputError(f"{where}: data does not match dims {list(shape)} ({str(exc).splitlines()[0][:200]})") from None


def dtype_name_of(dtype: np.dtype) -> str:
    return np.dtype(dtype).newbyteorder("=").name


# Sub-byte types pack two values per byte: onnx's own helper unpacks them.
_PACKED_TYPES = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)}




def load_model(path) -> LoadedModel:
    """Load `path` (an .onnx file) with every external-data location checked first; InputError on bad input."""
    path = Path(path)
    proto = read_model_proto(path)
    model_dir = path.parent
    inits = {t.name: tensor_to_array(t, model_dir, path) for t in proto.graph.initializer}
    return LoadedModel(path=path, proto=proto, initializers=inits)


def from_proto(proto: onnx.ModelProto, base_dir=None) -> LoadedModel:
    """Wrap an in-memory model (tests, builders). External data, if any, resolves against `base_dir`."""
    base = Path(base_dir) if base_dir is not None else None
    if base is not None:
        check_external_locations(proto.graph, base, base / "<in-memory model>")
    inits = {t.name: tensor_to_array(t, base, base) for t in proto.graph.initializer}
    return LoadedModel(path=(base or Path(".")) / "<in-memory model>", proto=proto, initializers=inits)
