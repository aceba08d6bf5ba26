"""A peer as referee: judge a low-precision run by how far it is from float64 *relative to* how far another
low-precision run (the referee) is, instead of by an absolute tolerance.

Why: users of real accelerators judge an fp16 backend against another fp16 backend, not against a tolerance picked
by folklore. PyTorch's compiler accuracy check passes a compiled model when its error against a float64 run is at
most a few times eager fp16's error (``torch._dynamo.utils.same`` with ``fp64_ref``); msprobe's "benchmark
method" judges NPU-vs-GPU error ratios. A referee answers "is the NPU as accurate as an fp16 run can be on this
model and input?", which no fixed atol/rtol can.

The rule is PyTorch's, per output (``same``'s tensor branch with ``fp64_ref``, read at PYTORCH_SOURCE):

1. pass when ``allclose(referee, npu, atol=tol, rtol=tol)`` with PyTorch's default ``tol = 1e-4`` (the two runs
   agree, so the NPU is as good as the referee);
2. err_npu = RMSE(npu, float64), err_referee = RMSE(referee, float64), both computed in float64;
3. pass when the referee has a NaN, neither the NPU nor float64 has one, and the NPU is within
   ``allclose(atol = rtol = 4e-2)`` of float64 (PyTorch: "res is BETTER than ref so we count it pass");
4. pass when ``err_npu <= k * err_referee + tol / 10`` (the slack tol/10 = 1e-5 keeps a referee that is exact
   -- err 0 -- from demanding exactness);
5. otherwise pass only when both errors are NaN (``equal_nan``: PyTorch's benchmark runner passes
   ``equal_nan=True`` for every run but ``--float32``, PYTORCH_EQUAL_NAN_SOURCE; our runs are never fp32-only).

k (PyTorch's ``multiplier``) defaults as PyTorch picks it: 3.0 when the judged run's result is fp16/bf16 ("AMP
... false alarms. We use multiplier of 3 instead of 2"), when the tensor has fewer than 1000 elements ("noise
might dominate our error metric for smaller tensors") or is 4-D with 1x1 trailing dims; else 2.0. The emulated
NPU computes in reduced precision even where its outputs are declared fp32, so an NPU run always takes 3.0: it
is the AMP case, not the fp32 case (``reduced=True`` below). PyTorch's opt-in variants (``force_max_multiplier``
10, ``use_larger_multiplier_for_smaller_tensor`` 8 / 10) are off by default there and not used here; ``--referee-k``
replaces the whole choice with one number in [1, 1000].

The measure is fixed to RMSE (PyTorch's): an error *ratio* needs one scalar per side, RMSE weighs every element
and is the measure both PyTorch and msprobe's benchmark method ratio. msprobe's other ratios (max relative error
<= 10, mean relative error <= 2) are the documented alternative (docs/REFEREE.md), not a flag.

Sides (``parse_side``): ``ort-fp16[:EP]`` (the model converted to fp16 by the converter `mschecker bisect` writes
its patched model with, I/O kept fp32, on onnxruntime; an fp16 model runs as it is), ``ort:EP`` (the model as it
is on that onnxruntime execution provider), ``dir:DIR`` or an existing folder (the referee's graph outputs, as
``<safe name>.npy`` or a golden directory; a device-dump reader plugs in through ``graph_output_reader``).
"""
from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mschecker.errors import InputError, UsageError
from mschecker.untrusted import plain

PYTORCH_SOURCE = "pytorch/pytorch:torch/_dynamo/utils.py@001077cbc0f328b8a743c7a2d1bf64f98c096377 (same, rmse)"
PYTORCH_EQUAL_NAN_SOURCE = ("pytorch/pytorch:benchmarks/dynamo/common.py@55be6cf92fca3228c8851bab89c508555f74ed97 "
                            "(BenchmarkRunner.equal_nan)")
MEASURE = "rmse"
RULE_TEXT = "err(run vs float64) <= k * err(referee vs float64) + slack, err = RMSE"
#: same()'s default ``tol``: the allclose shortcut's atol and rtol, and (divided by 10) the slack.
TOL = 1e-4
SLACK = TOL / 10.0
#: same()'s ``loose_tol``: a NaN in the referee is forgiven when the run is this close to float64.
NAN_RESCUE_TOL = 1e-2 * 4
EQUAL_NAN = True
K_REDUCED, K_FP32 = 3.0, 2.0   # same()'s multiplier for fp16/bf16 results (and small tensors) / for the rest
SMALL_NUMEL = 1000             # "fp64_ref.numel() < 1000": small tensors take K_REDUCED
K_MIN, K_MAX = 1.0, 1000.0     # k < 1 would demand the run beat its referee; > 1000 judges nothing
JUDGES = ("both", "tolerance", "referee")

PASS, FAIL, NO_VALUE, NOT_JUDGED = "pass", "fail", "no referee value", "not judged"
SIDE_FORMS = "ort-fp16, ort-fp16:<ExecutionProvider>, ort:<ExecutionProvider> or dir:<DIR>"


# ---------------------------------------------------------------------------------------------------- the rule
def rmse(a, b) -> float:
    """sqrt(mean((a - b)^2)) in float64 (PyTorch's ``rmse``; its subtraction promotes to fp64_ref's float64)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return float(np.sqrt(np.mean(np.square(d)))) if d.size else float("nan")


def check_k(k, where: str = "--referee-k") -> float:
    """k as a float, finite and in [K_MIN, K_MAX]; UsageError naming ``where`` otherwise."""
    try:
        value = float(k)
    except (TypeError, ValueError):
        raise UsageError(f"{where} expects a number in [{K_MIN:g}, {K_MAX:g}], got {plain(repr(k))[:40]}") from None
    if isinstance(k, bool) or not (math.isfinite(value) and K_MIN <= value <= K_MAX):
        raise UsageError(f"{where} expects a finite number in [{K_MIN:g}, {K_MAX:g}], got {plain(repr(k))[:40]}")
    return value


def default_k(shape, reduced: bool) -> float:
    """PyTorch's multiplier for a result of ``shape``: K_REDUCED for a reduced-precision result, a tensor under
    SMALL_NUMEL elements or a 4-D one with 1x1 trailing dims (its noisy cases), K_FP32 otherwise."""
    shape = tuple(int(s) for s in shape)
    small = math.prod(shape) < SMALL_NUMEL
    one_by_one = len(shape) == 4 and shape[-1] == shape[-2] == 1
    return K_REDUCED if reduced or small or one_by_one else K_FP32


def is_reduced(dtype) -> bool:
    """Whether a result dtype is one of same()'s reduced formats (float16, bfloat16)."""
    from ml_dtypes import bfloat16

    return np.dtype(dtype) in (np.dtype(np.float16), np.dtype(bfloat16))


def _is_float_array(a: np.ndarray) -> bool:
    from mschecker.dtypes import is_float  # lazy: start-up (ml_dtypes, mschecker.dtypes)

    return is_float(np.asarray(a).dtype)


def _allclose(a, b, tol: float) -> bool:
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a64.shape == b64.shape and bool(np.allclose(a64, b64, atol=tol, rtol=tol, equal_nan=EQUAL_NAN))


@dataclass
class OutputVerdict:
    """One output's referee verdict; ``passed`` is None when there was nothing to judge (``status`` says why)."""

    name: str
    status: str
    err_npu: float | None = None
    err_referee: float | None = None
    k: float | None = None
    slack: float = SLACK
    reason: str = ""

    @property
    def passed(self) -> bool | None:
        return {PASS: True, FAIL: False}.get(self.status)

    @property
    def ratio(self) -> float | None:
        """err_npu / err_referee (1 when both are 0, inf when only the referee's is 0): the campaign metric."""
        if self.err_npu is None or self.err_referee is None:
            return None
        if self.err_referee == 0:
            return 1.0 if self.err_npu == 0 else (float("nan") if math.isnan(self.err_npu) else float("inf"))
        return self.err_npu / self.err_referee

    def to_dict(self) -> dict:
        # lazy: start-up (ml_dtypes, mschecker._fastcompare, mschecker.compare)
        from mschecker.compare.results import json_float

        return {"name": self.name, "status": self.status, "passed": self.passed, "measure": MEASURE,
                "err_npu": json_float(self.err_npu), "err_referee": json_float(self.err_referee),
                "ratio": json_float(self.ratio), "k": self.k, "slack": self.slack, "reason": self.reason}


def judge_output(name: str, run, referee, truth, *, k: float | None = None, reduced: bool = False) -> OutputVerdict:
    """The referee verdict on one output (the module docstring's steps 1-5). ``run`` is the judged run's value,
    ``referee`` the referee's (None: no referee value), ``truth`` the float64 reference's; ``k`` None picks
    PyTorch's default for the output's shape and precision (``reduced`` or a fp16/bf16 ``run``)."""
    if referee is None:
        return OutputVerdict(name, NO_VALUE, reason="the referee has no value for this output")
    run, referee, truth = np.asarray(run), np.asarray(referee), np.asarray(truth)
    if not _is_float_array(run):
        return OutputVerdict(name, NOT_JUDGED, reason=f"{run.dtype} output: the tolerance verdict judges it")
    if run.shape != referee.shape or run.shape != truth.shape:
        raise InputError(f"referee value for output {plain(name)!r}: shape {referee.shape}, the run's is {run.shape}")
    k = default_k(run.shape, reduced or is_reduced(run.dtype)) if k is None else float(k)
    out = OutputVerdict(name, FAIL, rmse(run, truth), rmse(referee, truth), k)
    if _allclose(referee, run, TOL):
        out.status, out.reason = PASS, f"within allclose(tol={TOL:g}) of the referee"
    elif _nan_rescue(run, referee, truth):
        out.status, out.reason = PASS, "the referee has NaN; the run has none and is close to float64"
    elif out.err_npu <= k * out.err_referee + SLACK:
        out.status, out.reason = PASS, f"{out.err_npu:.4g} <= {k:g} * {out.err_referee:.4g} + {SLACK:g}"
    elif EQUAL_NAN and math.isnan(out.err_npu) and math.isnan(out.err_referee):
        out.status, out.reason = PASS, "both errors are NaN (equal_nan)"
    else:
        out.reason = f"{out.err_npu:.4g} > {k:g} * {out.err_referee:.4g} + {SLACK:g}"
    return out


def _nan_rescue(run, referee, truth) -> bool:
    """PyTorch's corner case: the referee (not float64, not the run) has NaN and the run is close to float64."""
    if np.isnan(truth).any() or np.isnan(np.asarray(run, dtype=np.float64)).any():
        return False
    if not np.isnan(np.asarray(referee, dtype=np.float64)).any():
        return False
    return _allclose(truth.astype(run.dtype), run, NAN_RESCUE_TOL)


# ------------------------------------------------------------------------------------------------- the verdict
@dataclass
class RefereeVerdict:
    """Every output's verdict, the side and the declared rule. ``passed``: no judged output failed and at least
    one was judged; outputs without a referee value are listed, not failed."""

    side: str
    spec: str
    outputs: list[OutputVerdict]
    k: float | None = None          # --referee-k, or None: PyTorch's default per output
    notes: list[str] = field(default_factory=list)

    @property
    def judged(self) -> list[OutputVerdict]:
        return [o for o in self.outputs if o.passed is not None]

    @property
    def passed(self) -> bool:
        return bool(self.judged) and all(o.passed for o in self.judged)

    @property
    def failed(self) -> list[OutputVerdict]:
        return [o for o in self.outputs if o.passed is False]

    @property
    def missing(self) -> list[str]:
        return [o.name for o in self.outputs if o.status == NO_VALUE]

    @property
    def k_from(self) -> str:
        return "--referee-k" if self.k is not None else "PyTorch's default (3 for fp16/bf16/NPU runs or < 1000 " \
                                                         "elements, else 2)"

    def describe_rule(self) -> str:
        k = f"k={self.k:g} (--referee-k)" if self.k is not None else f"k={self.k_from}"
        return f"{RULE_TEXT}, {k}, slack={SLACK:g}, pass when allclose(tol={TOL:g}) to the referee"

    def failure_reasons(self) -> list[str]:
        out = [f"referee: {plain(o.name)}: {o.reason}" for o in self.failed]
        if not self.judged:
            out.append("referee: no output could be judged")
        return out

    def to_dict(self) -> dict:
        return {"side": self.side, "spec": self.spec, "rule": RULE_TEXT, "measure": MEASURE, "k": self.k,
                "k_from": self.k_from, "slack": SLACK, "allclose_tol": TOL, "nan_rescue_tol": NAN_RESCUE_TOL,
                "equal_nan": EQUAL_NAN, "source": PYTORCH_SOURCE, "equal_nan_source": PYTORCH_EQUAL_NAN_SOURCE,
                "passed": self.passed, "verdict": "PASS" if self.passed else "FAIL",
                "no_referee_value": self.missing, "notes": list(self.notes),
                "outputs": [o.to_dict() for o in self.outputs]}

    def metrics(self) -> dict[str, float]:
        """Campaign metrics: ``<output>.referee_ratio`` per judged output and ``referee_pass`` (1 or 0)."""
        out = {f"{o.name}.referee_ratio": float(o.ratio) for o in self.judged if o.ratio is not None}
        out["referee_pass"] = 1.0 if self.passed else 0.0
        return out


def judge_outputs(names, run: dict, referee: dict, truth: dict, *, side: str, spec: str, k: float | None = None,
                  reduced: bool = False) -> RefereeVerdict:
    """The verdict over ``names`` (run order); an output the referee lacks is NO_VALUE."""
    outs = [judge_output(n, run[n], referee.get(n), truth[n], k=k, reduced=reduced) for n in names]
    return RefereeVerdict(side, spec, outs, k)


def combine(tolerance_passed: bool, referee: RefereeVerdict | None, judge: str = "both") -> bool:
    """The exit-code verdict: without a referee the tolerance verdict; with one, per ``judge``: "both" (the
    default: a demanding user's reading -- either failing fails), "tolerance" or "referee" (the other verdict is
    still reported)."""
    if referee is None or judge == "tolerance":
        return tolerance_passed
    if judge == "referee":
        return referee.passed
    return tolerance_passed and referee.passed


def check_judge(judge: str, where: str = "--judge") -> str:
    if judge not in JUDGES:
        raise UsageError(f"{where} {plain(judge)!r}: choose one of {', '.join(JUDGES)}")
    return judge


# ------------------------------------------------------------------------------------------------------- sides
def parse_side(text: str, flag: str = "--referee"):
    """The referee side a SIDE string names; UsageError naming ``flag`` for an unknown form, a missing folder,
    an execution provider this onnxruntime lacks, or a missing converter package."""
    text = str(text).strip()
    head, sep, rest = text.partition(":")
    if text == "ort-fp16" or (head == "ort-fp16" and sep):
        provider = rest or "CPUExecutionProvider"
        _check_converter(flag, text)
        return OrtFp16Side(_check_provider(provider, flag, text))
    if head == "ort" and sep:
        return OrtProviderSide(_check_provider(rest, flag, text))
    if head == "dir" and sep:
        return DirSide(_check_folder(rest, flag, text))
    if text and os.path.isdir(text):
        return DirSide(_check_folder(text, flag, text))
    raise UsageError(f"{flag} {plain(text)!r}: unknown referee (give {SIDE_FORMS})")


def _check_provider(provider: str, flag: str, text: str) -> str:
    from mschecker.modelcheck.runners import import_onnxruntime  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

    available = import_onnxruntime().get_available_providers()
    if provider not in available:
        raise UsageError(f"{flag} {plain(text)!r}: execution provider {plain(provider)!r} is not available in this "
                         f"onnxruntime (available: {', '.join(available)})")
    return provider


def _check_converter(flag: str, text: str) -> None:
    if importlib.util.find_spec("onnxconverter_common") is None:
        raise UsageError(f"{flag} {plain(text)}: needs the onnxconverter-common package, which is not installed "
                         "(pip install onnxconverter-common)")


def _check_folder(folder: str, flag: str, text: str) -> Path:
    path = Path(folder)
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise UsageError(f"{flag} {plain(text)!r}: {plain(folder)} {what}")
    return path


def model_proto(model):
    """The full ModelProto of an .onnx path (external data checked, then loaded) or of an in-memory model."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if not isinstance(model, (str, Path)):  # mschecker.graph.loader.LoadedModel
        return model.proto
    from mschecker.onnxfile import read_model_proto  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

    proto = read_model_proto(model)  # every external-data location checked before onnx follows them
    onnx.load_external_data_for_model(proto, str(Path(model).parent))
    return proto


def has_fp32(proto) -> bool:
    """Whether the model holds fp32 tensors the fp16 converter would convert (an initializer, a graph input or
    output): an fp16 export has none and runs as it is."""
    import onnx

    graph = proto.graph
    values = [*graph.input, *graph.output]
    return any(t.data_type == onnx.TensorProto.FLOAT for t in graph.initializer) or \
        any(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in values)


def to_fp16(proto):
    """The model in fp16, I/O kept fp32: `mschecker bisect`'s converter (bisect.writers.patched_onnx) with no
    node kept in fp32, so the referee is the same fp16 model bisect writes, not a second conversion."""
    from mschecker.bisect.writers import patched_onnx  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

    return patched_onnx(proto, set())


class _OrtSide:
    """Shared by the onnxruntime sides: a runner per model (the SD stages), outputs for one feed set."""

    provider = "CPUExecutionProvider"
    spec = ""

    def prepare(self, model):
        return model

    def runner(self, model, label: str | None = None):
        from mschecker.modelcheck.runners import OrtRunner  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

        prepared = self.prepare(model)
        label = label or (f"referee {self.spec} of model {model}" if isinstance(model, (str, Path))
                          else f"referee {self.spec} model")
        if self.provider == "CPUExecutionProvider":
            return OrtRunner(prepared, label=label)
        return ProviderRunner(prepared, self.provider, label)

    def outputs(self, model, feeds: dict, metas) -> dict[str, np.ndarray]:
        return self.runner(model).run(feeds)


class OrtFp16Side(_OrtSide):
    """onnxruntime on the model converted to fp16 (I/O fp32): an fp16 peer of the NPU on the same graph."""

    def __init__(self, provider: str = "CPUExecutionProvider"):
        self.provider = provider
        self.spec = "ort-fp16" + ("" if provider == "CPUExecutionProvider" else f":{provider}")
        self.converted: bool | None = None

    def prepare(self, model):
        proto = model_proto(model)
        self.converted = has_fp32(proto)
        return to_fp16(proto) if self.converted else proto

    def describe(self) -> str:
        how = "the model as it is (already fp16)" if self.converted is False else \
            "the model converted to fp16 (onnxconverter-common, I/O kept fp32; bisect's converter)"
        return f"onnxruntime {_ort_version()} {self.provider} on {how}"


class OrtProviderSide(_OrtSide):
    """The model as it is on an onnxruntime execution provider (a GPU provider: the user's other device)."""

    def __init__(self, provider: str):
        self.provider = provider
        self.spec = f"ort:{provider}"

    def describe(self) -> str:
        return f"onnxruntime {_ort_version()} {self.provider} on the model as it is"


def _ort_version() -> str:
    from mschecker.modelcheck.runners import import_onnxruntime  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

    return import_onnxruntime().__version__


class ProviderRunner:
    """onnxruntime on ``provider`` (CPU as onnxruntime's own fallback for nodes the provider lacks; ``name``
    lists the providers the session really took). The Runner protocol, as runners.OrtRunner."""

    def __init__(self, model, provider: str, label: str):
        # lazy: start-up (google.protobuf, ml_dtypes, onnx)
        from mschecker.modelcheck.runners import _ort_dtype, _ort_source, import_onnxruntime, native_stderr_silenced, ort_message
        from mschecker.tensors.meta import TensorMeta

        ort = import_onnxruntime()
        opts = ort.SessionOptions()
        opts.log_severity_level = 4
        self.label = label
        try:
            source, self._external_values = _ort_source(model, opts)
            with native_stderr_silenced():
                self._session = ort.InferenceSession(source, sess_options=opts, providers=list(dict.fromkeys(
                    [provider, "CPUExecutionProvider"])))
        except Exception as exc:  # noqa: BLE001 - the provider cannot take this model
            raise InputError(f"{label}: onnxruntime cannot load it on {provider} ({ort_message(exc)})") from None
        self.name = f"onnxruntime {ort.__version__} ({', '.join(self._session.get_providers())})"
        self._inputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{label} input {a.name!r}"))
                        for a in self._session.get_inputs()]
        self._outputs = [TensorMeta(a.name, tuple(a.shape), _ort_dtype(a.type, f"{label} output {a.name!r}"))
                         for a in self._session.get_outputs()]

    def inputs(self):
        return list(self._inputs)

    def outputs(self):
        return list(self._outputs)

    def run(self, feeds: dict) -> dict:
        from mschecker.modelcheck.runners import ort_message  # lazy: start-up (google.protobuf, ml_dtypes, onnx)
        from mschecker.tensors.meta import check_feeds

        check_feeds(feeds, self._inputs, self.label)
        names = [m.name for m in self._outputs]
        try:
            values = self._session.run(names, {k: np.require(np.asarray(v), requirements="C")
                                               for k, v in feeds.items()})
        except Exception as exc:  # noqa: BLE001
            raise InputError(f"{self.label}: onnxruntime failed on these inputs ({ort_message(exc)})") from None
        return dict(zip(names, values))


def graph_output_reader():
    """The device-dump reader (mschecker.devdump.evidence.graph_outputs: ACL/GE, msaccucmp/msprobe npy, msprobe
    dump.json or tensor files, read by content) -> {name: array} for the names it finds."""
    from mschecker.devdump.evidence import graph_outputs  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

    def read(folder, model, names):
        try:
            return graph_outputs(folder, model, names)
        except InputError:  # nothing of the model in a device-dump form: the plain files below may still be
            return {}
    return read


class DirSide:
    """A folder holding the referee's graph outputs (another device's run): ``<safe name>.npy`` per output (the
    naming goldens use: tensors.io.safe_filename) or a golden directory with its manifest; a device-dump reader
    (graph_output_reader) is asked first when there is one. Outputs it lacks are listed, not errors."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.spec = f"dir:{folder}"

    def describe(self) -> str:
        return f"graph outputs read from {plain(self.folder)}"

    def runner(self, model, label: str | None = None):
        raise UsageError(f"--referee {plain(self.spec)}: a folder of outputs cannot run a pipeline's stages "
                         f"(give ort-fp16 or ort:<ExecutionProvider>)")

    def outputs(self, model, feeds: dict, metas) -> dict[str, np.ndarray]:
        metas = list(metas)
        found: dict[str, np.ndarray] = {}
        reader = graph_output_reader()
        if reader is not None:
            found.update(reader(self.folder, model, [m.name for m in metas]) or {})
        rest = [m for m in metas if m.name not in found]
        if rest:
            found.update(self._read_files(rest))
        if not any(m.name in found for m in metas):
            from mschecker.tensors.io import safe_filename  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

            wanted = ", ".join(plain(safe_filename(m.name)) + ".npy" for m in metas[:5])
            raise InputError(f"--referee {plain(self.spec)}: holds no value for any output of the model "
                             f"(expected {wanted}{', ...' if len(metas) > 5 else ''})")
        return found

    def _read_files(self, metas) -> dict[str, np.ndarray]:
        from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, ml_dtypes, onnx)
        from mschecker.tensors.io import read_tensor, safe_filename
        from mschecker.tensors.meta import check_expected

        if os.path.lexists(golden_store.manifest_path(self.folder)):
            stored = golden_store.load(self.folder, verify=True)
            return {m.name: check_expected(np.asarray(stored[m.name]), m.shape, None,
                                           f"{self.folder} (tensor {plain(m.name)!r})")
                    for m in metas if m.name in stored}
        out = {}
        for m in metas:
            path = self.folder / (safe_filename(m.name) + ".npy")
            if path.is_file():
                out[m.name] = read_tensor(path, shape=m.shape, name=m.name)
        return out


# ------------------------------------------------------------------------------------------------ one model
def referee_model(model, feeds: dict, run_outputs: dict, side, *, k: float | None = None, truth: dict | None = None,
                  reduced: bool = False) -> RefereeVerdict:
    """The referee verdict on one model run: ``run_outputs`` (the judged run, by output name) against ``side``'s
    outputs on the same ``feeds``, both measured against the float64 reference executor (``truth``: its outputs
    when the caller already has them)."""
    from mschecker.modelcheck.runners import make_runner  # lazy: start-up (google.protobuf, ml_dtypes, onnx)
    from mschecker.tensors.meta import TensorMeta

    names = list(run_outputs)
    metas = [TensorMeta(n, tuple(np.shape(run_outputs[n])), np.asarray(run_outputs[n]).dtype) for n in names]
    referee = side.outputs(model, feeds, metas)
    if truth is None:
        truth = make_runner(model, device="reference").run(feeds)
    verdict = judge_outputs(names, run_outputs, referee, truth, side=side.describe(), spec=side.spec, k=k,
                            reduced=reduced)
    if verdict.missing:
        verdict.notes.append("no referee value for " + ", ".join(plain(n) for n in verdict.missing))
    return verdict
