"""What a model declares about a tensor (TensorMeta) and the one check of tensors against it: a tensor read from a
file, a set of feeds before a run (onnxruntime's or the graph executor's), --shape/--dtype overrides.

A leaf of the import graph: readers (tensors.io, tensors.sets), runners, the executor and the commands use it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import onnx

from mschecker.dtypes import bfloat16, dtype_name, resolve_dtype
from mschecker.errors import InputError, UsageError

Shape = Sequence["int | str | None"]


@dataclass(frozen=True)
class TensorMeta:
    """A model input/output as the model declares it; dims are ints, or str/None where dynamic."""

    name: str
    shape: tuple | None  # None: the rank is not declared
    dtype: np.dtype | None  # None: the element type is not declared

    def describe(self) -> str:
        if self.shape is None:
            return f"{self.name}: {dtype_name(self.dtype) if self.dtype is not None else '?'}[rank ?]"
        dims = "x".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape)
        return f"{self.name}: {dtype_name(self.dtype)}[{dims}]"


_FLOAT32 = np.dtype(np.float32)


def tensor_meta(info: onnx.ValueInfoProto, *, unknown_rank=(), unknown_dtype=_FLOAT32) -> TensorMeta:
    """A graph input/output declaration as a TensorMeta (dims: int, or str/None if dynamic). A declaration without
    a shape gets `unknown_rank` as its shape (None: anything goes), one without an element type `unknown_dtype`."""
    tt = info.type.tensor_type
    if tt.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
    else:
        dims = unknown_rank
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)) if tt.elem_type else unknown_dtype
    return TensorMeta(info.name, dims, dtype)


def fmt_shape(shape) -> str:
    return "(" + ", ".join("?" if not isinstance(d, (int, np.integer)) else str(int(d)) for d in shape) + ")"


def is_dynamic(dim) -> bool:
    """A model dimension that is not a fixed non-negative integer (a symbolic name or None)."""
    return not isinstance(dim, (int, np.integer)) or int(dim) < 0


def as_dtype(dtype, where: str) -> np.dtype:
    try:
        return resolve_dtype(dtype)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


def check_expected(arr: np.ndarray, shape: Shape | None, dtype, where: str) -> np.ndarray:
    """Check a tensor against the expected shape (dynamic dims match anything) and dtype; InputError if not."""
    if dtype is not None:
        dtype = as_dtype(dtype, where)
        if arr.dtype != dtype:
            raise InputError(f"{where}: dtype is {dtype_name(arr.dtype)}, expected {dtype_name(dtype)}")
    if shape is not None:
        shape = tuple(shape)
        ok = len(shape) == arr.ndim and all(is_dynamic(e) or int(e) == a for e, a in zip(shape, arr.shape))
        if not ok:
            raise InputError(f"{where}: shape is {fmt_shape(arr.shape)}, expected {fmt_shape(shape)}")
    return arr


def _family(dtype) -> str:
    d = np.dtype(dtype)
    return "float" if d.kind == "f" or d == bfloat16 else "bool" if d.kind == "b" else "integer"


def check_feeds(feeds: Mapping[str, np.ndarray], metas: Sequence[TensorMeta], model: str, *,
                any_width: bool = False) -> None:
    """InputError (one line, naming the tensor) unless `feeds` holds exactly the model inputs with the declared
    shapes (dynamic dims match anything) and dtypes. The one feed check of every runner.

    any_width: the run converts feeds itself (the graph executor rounds floats to its policy's dtype and casts
    integers to the declared width), so only the family must match: a float for a float input, an integer for
    an integer input, a bool for a bool one. onnxruntime needs the declared dtype exactly."""
    names = [m.name for m in metas]
    for key in feeds:
        if key not in names:
            raise InputError(f"{model}: {key!r} is not a model input (inputs: {', '.join(names) or 'none'})")
    for m in metas:
        if m.name not in feeds:
            raise InputError(f"{model}: model input {m.name!r} was not given")
        x = np.asarray(feeds[m.name])
        where = f"{model} input {m.name!r}"
        if any_width and m.dtype is not None and _family(x.dtype) != _family(m.dtype):
            raise InputError(f"{where}: dtype is {dtype_name(x.dtype)}, the model declares {dtype_name(m.dtype)}")
        check_expected(x, m.shape, None if any_width else m.dtype, where)


def apply_overrides(metas: list[TensorMeta], shapes: dict, dtypes: dict, *, others: Sequence[str] = ()) -> list[TensorMeta]:
    """Model metadata with --shape/--dtype applied. A nameless override needs exactly one tensor; a name must be
    one of `metas` or `others` (e.g. output names, whose overrides describe raw golden files)."""
    names = [m.name for m in metas]
    for flag, table in (("--shape", shapes), ("--dtype", dtypes)):
        for key in table:
            if key is None and len(metas) != 1:
                raise UsageError(f"{flag} without NAME: needs a model with exactly one input (inputs: {', '.join(names)})")
            if key is not None and key not in names and key not in others:
                raise UsageError(f"{flag} names {key!r}, which is not a model tensor (known: {', '.join(names + list(others))})")
    out = []
    for m in metas:
        shape = shapes.get(m.name, shapes.get(None) if len(metas) == 1 else None)
        dtype = dtypes.get(m.name, dtypes.get(None) if len(metas) == 1 else None)
        out.append(TensorMeta(m.name, tuple(shape) if shape is not None else m.shape,
                              dtype if dtype is not None else m.dtype))
    return out
