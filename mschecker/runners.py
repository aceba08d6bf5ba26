"""Runners: one interface over everything that can execute an ONNX model (onnxruntime now, the emulated NPU later).

The check and golden commands only speak `Runner`; `make_runner` picks the implementation by device name, so a new
device is one entry here and no change to the commands. Feeds are validated against the model's metadata before a
backend sees them (`check_feeds`), so wrong names, counts, shapes and dtypes are InputErrors naming the tensor
instead of a backend's multi-line exception.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, runtime_checkable

import numpy as np

from .dtypes import dtype_name, resolve_dtype
from .errors import InputError
from .tensorio import check_expected

DEVICES = ("ort", "reference", "npu")


@dataclass(frozen=True)
class TensorMeta:
    """A model input/output as the model declares it; dims are ints, or str/None where dynamic."""

    name: str
    shape: tuple
    dtype: np.dtype

    def describe(self) -> str:
        dims = "x".join(str(d) if isinstance(d, int) else (d or "?") for d in self.shape)
        return f"{self.name}: {dtype_name(self.dtype)}[{dims}]"


@runtime_checkable
class Runner(Protocol):
    name: str

    def inputs(self) -> list[TensorMeta]: ...

    def outputs(self) -> list[TensorMeta]: ...

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def check_feeds(feeds: Mapping[str, np.ndarray], metas: list[TensorMeta], model: str) -> None:
    """InputError (one line, naming the tensor) unless feeds holds exactly the model inputs with matching
    dtypes and shapes (dynamic dims match anything)."""
    names = [m.name for m in metas]
    for key in feeds:
        if key not in names:
            raise InputError(f"{model}: {key!r} is not a model input (inputs: {', '.join(names)})")
    for m in metas:
        if m.name not in feeds:
            raise InputError(f"{model}: model input {m.name!r} was not given")
        check_expected(np.asarray(feeds[m.name]), m.shape, m.dtype, f"{model} input {m.name!r}")


def file_sha256(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _ort_dtype(type_str: str, where: str) -> np.dtype:
    inner = type_str[len("tensor("):-1] if type_str.startswith("tensor(") else type_str
    try:
        return resolve_dtype(inner)  # onnxruntime's names (float, double, float16, bfloat16, int64, bool, ...)
    except ValueError:
        raise InputError(f"{where}: tensor type {type_str} is not supported") from None


def _check_model_path(model_path) -> Path:
    path = Path(model_path)
    if not path.exists():
        raise InputError(f"model {path}: file not found")
    if path.is_dir():
        raise InputError(f"model {path}: is a directory, expected an .onnx file")
    return path


class OrtRunner:
    """onnxruntime on the CPU: the fp32 peer and the default runner for `--model` checks."""

    def __init__(self, model_path, *, intra_op_threads: int | None = None):
        import onnxruntime as ort

        self.path = _check_model_path(model_path)
        self.name = f"onnxruntime {ort.__version__} (CPUExecutionProvider)"
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only: warnings would break the one-line contract on stderr
        if intra_op_threads:
            opts.intra_op_num_threads = int(intra_op_threads)
        try:
            self._session = ort.InferenceSession(str(self.path), sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # InvalidProtobuf, Fail, NotImplemented...: the model file is the problem
            raise InputError(f"model {self.path}: onnxruntime cannot load it ({_first_line(exc)})") from None
        where = f"model {self.path}"
        self._inputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{where} input {a.name!r}"))
                        for a in self._session.get_inputs()]
        self._outputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{where} output {a.name!r}"))
                         for a in self._session.get_outputs()]

    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        return list(self._outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(feeds, self._inputs, f"model {self.path}")
        names = [m.name for m in self._outputs]
        try:
            values = self._session.run(names, {k: np.ascontiguousarray(v) for k, v in feeds.items()})
        except Exception as exc:  # shapes the model cannot take (e.g. a Reshape that does not fit the input)
            raise InputError(f"model {self.path}: onnxruntime failed on these inputs ({_first_line(exc)})") from None
        return dict(zip(names, values))


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def make_runner(model_path, device: str = "ort", profile: str | None = None, **options) -> Runner:
    """The runner for a device: "ort" (onnxruntime CPU), "reference" (float64 graph executor) or "npu" (the
    emulated NPU with numerics `profile`). InputError for an unknown device or a device this build lacks."""
    if device == "ort":
        if profile is not None:
            raise InputError(f"--profile {profile} applies to --device npu or reference, not ort")
        return OrtRunner(model_path, **options)
    if device in ("reference", "npu"):
        _check_model_path(model_path)
        try:
            from .graph.runner import make_graph_runner
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("mschecker.graph"):
                raise InputError(f"--device {device} needs the graph executor (mschecker.graph), "
                                 f"which is not in this build") from None
            raise
        return make_graph_runner(model_path, device, profile, **options)
    raise InputError(f"unknown --device {device!r} (choose from {', '.join(DEVICES)})")
