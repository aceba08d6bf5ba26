"""`[[check]]` cells: one model + inputs + goldens per (device, profile), run by the check command's library entry
point (mschecker.modelcheck.check.check_model) on the worker, its files shipped to the workers by the engine.

A check cell on a graph-executor device ("reference" or "npu") records per-node fingerprints for its first
repeat (mschecker.campaign.cells says why); with a ``referee`` it also records ``<output>.referee_ratio`` and
``referee_pass``, and its status follows ``judge`` (default both).
"""
from __future__ import annotations

from pathlib import Path

from mschecker.campaign.fingerprints import Recorder
from mschecker.campaign.kinds.base import (BIT_EXACT_DEVICES, REFEREE_METRICS, STATUS_FAIL, STATUS_PASS, Cell, CellKind,
                                           MetricInfo, cell_key, profile_hash, referee_side, repeats_on)
from mschecker.campaign.shipping import check_cell_files
from mschecker.campaign.validation import (REFEREE_KEYS, check_keys, check_referee, existing_path, int_in, list_of,
                                           npu_options_of, profiles_of, referee_params)
from mschecker.compare.rules import TOLERANCE_KEYS, ToleranceRule
from mschecker.errors import InputError
from mschecker.limits import COUNT_MAX, ULP_MAX

DEVICES = ("ort", "reference", "npu")
# The per-output metrics of a check cell (mschecker.compare.TensorComparison fields), recorded as <output>.<name>.
OUTPUT_METRICS = (MetricInfo("max_abs_err", False), MetricInfo("rel_euclidean", False), MetricInfo("cosine", True),
                  MetricInfo("snr_db", True, "dB"), MetricInfo("ulp_max", False, "ulp"),
                  MetricInfo("mismatch_frac", False))
# The tolerance table's value types (the key names are the rule's own: mschecker.compare.rules.TOLERANCE_KEYS).
_TOLERANCE_TYPES = {"ulp": int}


class CheckKind(CellKind):
    name = "check"
    keys = {"name": str, "timeout_s": (int, float), "model": str, "inputs": (str, list), "golden": str,
            "devices": list, "profiles": list, "npu_options": dict, "tolerance": dict, "topk": int, **REFEREE_KEYS}
    required = ("name", "model", "inputs", "golden")
    metrics = OUTPUT_METRICS + REFEREE_METRICS
    headline = ("rel_euclidean", "worst relative error over outputs, mean over cells")

    def validate(self, block: dict, where: str, base: Path) -> dict:
        block["model"] = existing_path(block["model"], base, where, "model")
        inputs = block["inputs"]
        items = [inputs] if isinstance(inputs, str) else inputs
        if not items or not all(isinstance(i, str) for i in items):
            raise InputError(f"{where}: inputs must be a path or a non-empty array of paths")
        block["inputs"] = [existing_path(i, base, where, "inputs") for i in items]
        block["golden"] = existing_path(block["golden"], base, where, "golden")
        block["devices"] = list_of(block, "devices", str, where, ["ort"])
        for j, d in enumerate(block["devices"]):
            if d not in DEVICES:
                raise InputError(f"{where}: devices[{j}] {d!r} is not one of {', '.join(DEVICES)}")
        block["profiles"] = profiles_of(block, where) if "npu" in block["devices"] else []
        block["npu_options"] = npu_options_of(block, "npu_options", where)
        block["tolerance"] = _tolerance(block, where)
        block["topk"] = int_in(block, "topk", 5, 0, COUNT_MAX, where)
        try:  # the model's external data by the graph loader's rule, every shipped file a regular file
            check_cell_files(block)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None
        check_referee(block, where)
        return block

    def expand(self, block: dict, repeats: int) -> list[Cell]:
        out = []
        for device in block["devices"]:
            for profile in (block["profiles"] if device == "npu" else [None]):
                coords = {"device": device} | ({"profile": profile} if profile else {})
                params = {"model": block["model"], "inputs": block["inputs"], "golden": block["golden"],
                          "device": device, "profile": profile,
                          "npu_options": block["npu_options"] if device == "npu" else {},
                          "tolerance": block["tolerance"], "topk": block["topk"], **referee_params(block)}
                key = cell_key(block["name"], coords)
                out += [Cell(key, "check", block["name"], coords, params, device in BIT_EXACT_DEVICES, device, r,
                             block["timeout_s"]) for r in repeats_on(device, repeats)]
        return out

    def run(self, cell: Cell, params: dict) -> dict:
        return run_check(params, fingerprints=cell.repeat == 0)

    def shipped_files(self, params: dict) -> list[Path]:
        return check_cell_files(params)

    def declared_paths(self, params: dict) -> list[str]:
        return [params["model"], *params["inputs"], params["golden"]]

    def localize(self, params: dict, local: dict[str, str]) -> dict:
        if not local:
            return params
        out = dict(params)
        for key in ("model", "golden"):
            if key in out:
                out[key] = local.get(out[key], out[key])
        if "inputs" in out:
            out["inputs"] = [local.get(p, p) for p in out["inputs"]]
        return out

    def group_label(self, block: str, coords: dict) -> str:
        return f"{block} / {coords.get('device')}" + (f" {coords['profile']}" if coords.get("profile") else "")

    def profile_hash(self, params: dict, device: str) -> str | None:
        return profile_hash(params["profile"], params["npu_options"]) if device == "npu" else None

    def model_path(self, params: dict) -> str | None:
        return params.get("model", "")


def _tolerance(block: dict, where: str) -> dict:
    """The block's tolerance table, checked by the rule that will apply it (ToleranceRule.from_args)."""
    tol = block.get("tolerance", {})
    check_keys(tol, {k: _TOLERANCE_TYPES.get(k, (int, float)) for k in TOLERANCE_KEYS}, f"{where}: tolerance")
    try:
        ToleranceRule.from_args(**tol)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    if "ulp" in tol:
        int_in(tol, "ulp", 0, 0, ULP_MAX, f"{where}: tolerance")
    return dict(tol)


class _RecordingRunner:
    """A graph runner whose first run() records per-node fingerprints (fingerprints.Recorder through
    run_captured: the same bits as run(), with the capture hook). Everything else goes to the runner."""

    def __init__(self, runner):
        self._runner = runner
        self.recorder: Recorder | None = Recorder(runner.executor)
        self.recorded: dict | None = None

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, feeds):
        if self.recorder is None:
            return self._runner.run(feeds)
        recorder, self.recorder = self.recorder, None
        outputs = self._runner.run_captured(feeds, recorder)
        self.recorded = recorder.record()
        return outputs


def run_check(p: dict, *, fingerprints: bool = False) -> dict:
    """fingerprints: record per-node fingerprints (graph executor devices only; see the module docstring)."""
    # here, not at the top: the driver validates and ships without loading onnxruntime or the executor
    # lazy: start-up (google.protobuf, onnx, mschecker.modelcheck)
    from mschecker.modelcheck.check import check_model
    from mschecker.modelcheck.runners import make_runner

    options = p["npu_options"] if p["device"] == "npu" else {}
    runner = make_runner(p["model"], device=p["device"], profile=p["profile"], **options)
    recording = None
    if fingerprints and p["device"] in ("reference", "npu") and hasattr(runner, "run_captured"):
        runner = recording = _RecordingRunner(runner)
    report = check_model(p["model"], p["inputs"], p["golden"], tolerance=p["tolerance"], device=p["device"],
                         profile=p["profile"],
                         runner=runner, topk=p["topk"], referee=referee_side(p), referee_k=p.get("referee_k"),
                         judge=p.get("judge", "both"))
    metrics, reason = _outcome(report)
    verdict = getattr(report, "referee", None)
    out = {"status": STATUS_PASS if report.passed else STATUS_FAIL, "reason": reason, "metrics": metrics,
           "detail": {"rule": report.rule.to_dict() if hasattr(report.rule, "to_dict") else str(report.rule),
                      "timings_s": report.meta.get("timings_s"), "runner": report.meta.get("runner"),
                      **({"referee": verdict.to_dict()} if verdict is not None else {})},
           "profile_hash": profile_hash(p["profile"], options) if p["device"] == "npu" else None,
           "model_sha256": report.meta.get("model_sha256")}
    if recording is not None and recording.recorded is not None:
        out["fingerprints"] = recording.recorded
    return out


def _outcome(report) -> tuple[dict[str, float], str]:
    """(metrics, reason) of a check report: every output's OUTPUT_METRICS, the referee's, and why it failed."""
    metrics = {}
    for t in report.tensors:
        for m in OUTPUT_METRICS:
            v = getattr(t, m.name, None)
            if v is not None:
                metrics[f"{t.name}.{m.name}"] = float(v)
    failing = [t for t in report.tensors if not t.passed]
    reason = "; ".join(f"{t.name}: {', '.join(t.failed_rules) or 'failed'}" for t in failing)
    verdict = getattr(report, "referee", None)
    if verdict is not None:
        metrics.update(verdict.metrics())
        if report.judge != "tolerance":  # the reason says why the status is what it is
            reason = "; ".join(([reason] if reason else []) + verdict.failure_reasons())
    return metrics, reason
