"""Runners: one interface over everything that can execute an ONNX model (onnxruntime now, the emulated NPU later).

The check and golden commands only speak `Runner`; `make_runner` picks the implementation by device name, so a new
device is one entry here and no change to the commands. Feeds are validated against the model's metadata before a
backend sees them (`check_feeds`), so wrong names, counts, shapes and dtypes are InputErrors naming the tensor
instead of a backend's multi-line exception.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from mschecker.onnxfile import read_model_file
from mschecker.dtypes import resolve_dtype
from mschecker.errors import InputError
from mschecker.tensors.meta import TensorMeta, check_feeds
from mschecker.fsio import check_readable

DEVICES = ("ort", "reference", "npu")


@runtime_checkable
class Runner(Protocol):
    name: str

    def inputs(self) -> list[TensorMeta]: ...

    def outputs(self) -> list[TensorMeta]: ...

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


def _ort_dtype(type_str: str, where: str) -> np.dtype:
    inner = type_str[len("tensor("):-1] if type_str.startswith("tensor(") else type_str
    try:
        return resolve_dtype(inner)  # onnxruntime's names (float, double, float16, bfloat16, int64, bool, ...)
    except ValueError:
        raise InputError(f"{where}: tensor type {type_str} is not supported") from None


def _check_model_path(model_path) -> Path:
    """A model path that is a regular file (os.stat before any open: a FIFO would block, a device never end)."""
    path = Path(model_path)
    if os.path.isdir(path):
        raise InputError(f"model {path}: is a directory, expected an .onnx file")
    check_readable(path, "model")
    return path


@contextlib.contextmanager
def native_stderr_silenced():
    """File descriptor 2 pointed at /dev/null for the duration: onnxruntime writes some lines from C++ before any
    logger setting can apply (at import: "Failed to persist telemetry device ID" where $HOME is not writable).
    Its errors still arrive as exceptions."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def import_onnxruntime():
    """onnxruntime, imported with its import-time log lines kept off stderr and its loggers set to fatal only."""
    if "onnxruntime" not in sys.modules:
        with native_stderr_silenced():
            import onnxruntime  # noqa: F401
    quiet_onnxruntime()
    return sys.modules["onnxruntime"]


def quiet_onnxruntime() -> None:
    """onnxruntime's process-wide logger to fatal only (4): its warnings and error lines go straight to stderr
    from C++ and would break the one-line contract (session options cover only the session's own logger); the
    errors still arrive as exceptions, which the runner shortens into its InputError."""
    import onnxruntime as ort

    try:
        ort.set_default_logger_severity(4)
    except Exception:  # noqa: BLE001 - an onnxruntime without the setter: session options still apply
        pass


def model_label(model, label: str | None = None) -> str:
    """How errors name a model: ``label`` when given (an in-memory model has no file), else its path."""
    if label:
        return label
    if isinstance(model, (str, Path)):
        return f"model {model}"
    path = getattr(model, "path", None)  # mschecker.graph.loader.LoadedModel
    return f"model {path}" if path is not None and Path(path).is_file() else "in-memory model"


class OrtRunner:
    """onnxruntime on the CPU: the fp32 peer and the default runner for `--model` checks.

    ``model``: an .onnx path, an onnx.ModelProto (over protobuf's 2 GB: its large initializers are handed to the
    session as OrtValues, no file is written) or a mschecker.graph.loader.LoadedModel."""

    def __init__(self, model, *, intra_op_threads: int | None = None, label: str | None = None):
        ort = import_onnxruntime()

        self.path = _check_model_path(model) if isinstance(model, (str, Path)) else None
        #: the model file's sha256, from the read that checked it (None for an in-memory model)
        self.model_sha256 = None
        if self.path is not None:  # every external-data location checked before onnxruntime follows them (some
            _, self.model_sha256 = read_model_file(self.path)  # versions followed `..`)
        where = self.label = model_label(model, label)
        self.name = f"onnxruntime {ort.__version__} (CPUExecutionProvider)"
        opts = ort.SessionOptions()
        opts.log_severity_level = 4  # fatal only: its error lines would repeat the exception we report, on stderr
        if intra_op_threads:
            opts.intra_op_num_threads = int(intra_op_threads)
        try:
            source, self._external_values = _ort_source(model, opts)
            with native_stderr_silenced():
                self._session = ort.InferenceSession(source, sess_options=opts, providers=["CPUExecutionProvider"])
        except InputError:
            raise
        except Exception as exc:  # InvalidProtobuf, Fail, NotImplemented...: the model is the problem
            raise InputError(f"{where}: onnxruntime cannot load it ({ort_message(exc)})") from None
        self._inputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{where} input {a.name!r}"))
                        for a in self._session.get_inputs()]
        self._outputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{where} output {a.name!r}"))
                         for a in self._session.get_outputs()]

    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        return list(self._outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_feeds(feeds, self._inputs, self.label)
        names = [m.name for m in self._outputs]
        # np.require keeps a 0-d feed 0-d (np.ascontiguousarray would make it shape (1,): a rank-0 timestep fails)
        contiguous = {k: np.require(np.asarray(v), requirements="C") for k, v in feeds.items()}
        try:
            values = self._session.run(names, contiguous)
        except Exception as exc:  # shapes the model cannot take (e.g. a Reshape that does not fit the input)
            raise InputError(f"{self.label}: onnxruntime failed on these inputs ({ort_message(exc)})") from None
        return dict(zip(names, values))


PROTOBUF_LIMIT = 2**31 - 2**26   # protobuf's 2 GB message limit, with 64 MB to spare for the graph itself
ORT_VALUE_BYTES = 2**20          # initializers over this go to onnxruntime as OrtValues when the proto is too big


def _ort_source(model, opts) -> tuple[object, list]:
    """(what onnxruntime.InferenceSession takes for ``model``: a path string or serialized bytes, the OrtValues
    the session reads from and the runner must keep alive). A ModelProto over protobuf's limit is serialized
    without its initializers over 1 MiB, which go to the session options as OrtValues."""
    import onnx

    if isinstance(model, (str, Path)):
        return str(model), []
    path = getattr(model, "path", None)
    if not isinstance(model, onnx.ModelProto):  # LoadedModel: its file when it has one, else its proto
        if path is not None and Path(path).is_file():
            return str(path), []
        model = model.proto
    if sum(len(t.raw_data) for t in model.graph.initializer) < PROTOBUF_LIMIT:
        return model.SerializeToString(), []
    import onnxruntime as ort
    from onnx import numpy_helper

    graph = model.graph
    large = [t for t in graph.initializer if len(t.raw_data) > ORT_VALUE_BYTES]
    # onnxruntime replaces only initializers declared as external data: a placeholder location no file holds
    placeholders = []
    for t in graph.initializer:
        if len(t.raw_data) > ORT_VALUE_BYTES:
            t = onnx.TensorProto(name=t.name, dims=t.dims, data_type=t.data_type,
                                 data_location=onnx.TensorProto.EXTERNAL)
            entry = t.external_data.add()
            entry.key, entry.value = "location", "supplied-as-OrtValue"
        placeholders.append(t)
    stripped = onnx.helper.make_model(
        onnx.helper.make_graph(list(graph.node), graph.name, list(graph.input), list(graph.output), placeholders,
                               value_info=list(graph.value_info)),
        opset_imports=list(model.opset_import))
    stripped.ir_version = model.ir_version
    values = [ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(t)) for t in large]
    opts.add_external_initializers([t.name for t in large], values)
    return stripped.SerializeToString(), values


def ort_message(exc: BaseException) -> str:
    """onnxruntime's message, shortened to the useful part on one line: its "[ONNXRuntimeError] : 2 :
    INVALID_ARGUMENT :" prefix, C++ source locations and function signatures and its "Please fix ..." advice
    dropped, the remaining lines joined (the detail often sits on the second line)."""
    text = re.sub(r"^\s*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*", "", str(exc).strip())
    parts = []
    for line in (ln.strip() for ln in text.splitlines()):
        line = _strip_cpp_location(line)
        if line and not line.startswith("Please fix"):
            parts.append(line)
    short = "; ".join(parts) or type(exc).__name__
    return short if len(short) <= 500 else short[:497] + "..."


def _strip_cpp_location(line: str) -> str:
    """Drop "/path/file.cc:123 ns::Func(args...) " that onnxruntime puts before the actual message."""
    m = re.search(r"\S+\.(?:cc|cpp|h):\d+\s+", line)
    if not m:
        return line
    head, rest = line[:m.start()], line[m.end():]
    if re.match(r"[\w:~<>,\s*&]+\(", rest):  # a C++ signature: skip to its matching ')'
        depth, i = 0, rest.index("(")
        for i in range(i, len(rest)):
            depth += rest[i] == "("
            depth -= rest[i] == ")"
            if depth == 0:
                break
        rest = rest[i + 1:].lstrip(" :")
    return (head.rstrip(" :") + ": " if head.strip() else "") + rest.strip()


def _reference_runner(model, profile, label, options) -> Runner:
    from mschecker.graph.policy import ReferencePolicy  # lazy: the graph executor (heavy) only for this device
    from mschecker.graph.runner import GraphRunner

    if profile is not None or any(v for v in options.values()):
        raise InputError("--device reference is the float64 truth: it takes no --profile or precision options")
    return GraphRunner(model, ReferencePolicy(), label=label)


def _npu_runner(model, profile, label, options) -> Runner:
    """The emulated NPU: `profile` and `options` as mschecker.npu.knobs.apply_knobs takes them."""
    from mschecker.graph.policy import KernelUnavailable  # lazy: the executor and the emulator (heavy)
    from mschecker.graph.runner import GraphRunner
    from mschecker.npu.knobs import apply_knobs
    from mschecker.npu.policy import NpuPolicy

    try:
        policy = NpuPolicy(apply_knobs(profile, **options))
    except KernelUnavailable as exc:
        raise InputError(f"--device npu: {exc}") from None
    return GraphRunner(model, policy, label=label)


#: The devices the graph executor runs, by the policy that gives them their numerics.
GRAPH_DEVICES = {"reference": _reference_runner, "npu": _npu_runner}


def make_runner(model, device: str = "ort", profile: str | None = None, *, label: str | None = None,
                **options) -> Runner:
    """The runner for a device: "ort" (onnxruntime CPU), "reference" (float64 graph executor) or "npu" (the
    emulated NPU with numerics `profile`). InputError for an unknown device or a device this build lacks.

    ``model`` is an .onnx path, an onnx.ModelProto or a mschecker.graph.loader.LoadedModel: in-memory models
    (the bundled SD graphs) run without a temporary file; ``label`` names such a model in error messages."""
    if device == "ort":
        if profile is not None:
            raise InputError(f"--profile {profile} applies to --device npu or reference, not ort")
        return OrtRunner(model, label=label, **options)
    if device in GRAPH_DEVICES:
        if isinstance(model, (str, Path)):
            _check_model_path(model)
        runner = GRAPH_DEVICES[device](model, profile, label, options)
        from mschecker.npu.entries import check_opset  # lazy: only graph devices have an executor opset

        check_opset(runner.executor.model.opset, model_label(model, label))  # newer than the executor knows
        return runner
    raise InputError(f"unknown --device {device!r} (choose from {', '.join(DEVICES)})")
