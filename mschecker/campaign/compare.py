"""Regression verdicts: every cell of a run against the same cell of a baseline run, metric by metric.

A cell's samples (one on bit-exact devices, `repeats` on onnxruntime) are summarised by their median. For each
metric the run's median is compared with the baseline's:

  improvement = (run - baseline) if higher is better (PSNR, SSIM, cosine, SNR, planted bug caught) else
                (baseline - run)                       (errors, error/bound ratios, ULP, counts); the direction
                is the metric's declaration (MetricInfo, beside the code of the kind that records it:
                mschecker.campaign.kinds), by the part after the last dot
  noise       = 0 on bit-exact devices (float64 reference, emulated NPU, kernel suite: deterministic, so any
                change is real), else the larger of the baseline's and the run's sample range (max - min over
                the repeats of this cell and metric): the run-to-run spread measured on this machine, for this
                cell. With a single sample on a non-bit-exact device the noise is unmeasured and taken as 0
                (flagged in the result), so a change is never hidden.
  allow       = the campaign's declared allowance for the metric ([compare] allow, by full name or by the
                part after the last dot), default 0.
Only the metrics matching `[compare] metrics` (fnmatch patterns, default every metric) are judged; every metric
is stored either way.
  worse  if improvement < -(noise + allow);  better if improvement > noise;  same otherwise.
NaN counts as the worst value (a finite metric turning NaN is worse; NaN turning finite is better).

Machine facts (mschecker.campaign.cells.MACHINE_FACTS, and the CPU model): a bit-exact cell whose status or any
metric differs between the runs while its machine facts differ (BLAS library, version, core type or thread
count, numpy's SIMD level, NPY_DISABLE_CPU_FEATURES / OPENBLAS_CORETYPE, CPU model; only facts recorded in both
runs count) is judged as a non-bit-exact cell is (noise from its repeats, unmeasured with one sample, plus the
declared allowance): `worse` (a regression, the machine change named in the reason) when a metric got worse
beyond noise + allow or the status went pass -> fail, else `machine` ("differs only with the machine: BLAS core
Haswell -> SkylakeX"), which is not a regression. With equal facts any change stays real.

A cell is `worse` (a regression) when its status went pass -> fail or any metric is worse; `better` when it went
fail -> pass or some metric improved and none got worse. A cell that did not finish in the run (crashed,
timeout, killed) is reported with that status and is NOT a regression (a crash must never look like one; the run
command's exit code reports it); so is a cell whose parameters changed (`changed`: spec hash differs), a cell new
in the run (`new`) or missing from it (`missing`), and one whose baseline did not finish (`no baseline`).
"""
from __future__ import annotations

import fnmatch
import math
import statistics
from dataclasses import dataclass, field

from mschecker.errors import InputError
from mschecker.campaign.expected import Expectation, ExpectedResults
from mschecker.campaign.fingerprints import Moved, first_moved_node
from mschecker.campaign.kinds import metric_info
from mschecker.campaign.kinds.base import FINISHED, STATUS_FAIL, STATUS_PASS
from mschecker.campaign.history import BLIP, MIN_SERIES, STEADY, STEP, HistoryJudgement, Series, judge_series, load_series
from mschecker.campaign.store import CellRecord, Store

WORSE, SAME, BETTER = "worse", "same", "better"
CHANGED, NEW, MISSING, NO_BASELINE = "changed", "new", "missing", "no baseline"
MACHINE = "machine"
# Expected-results outcomes (mschecker.campaign.expected): what a cell named in the file did.
EXPECTED_FAILURE, UNEXPECTED_PASS, FLAKY_FAILURE, FLAKY_PASS = ("expected failure", "unexpected pass",
                                                                "flaky (failure tolerated)", "flaky (passed)")
# (label, fact) of the machine facts compared per cell; "cpu" is in CellRecord.versions, the rest in .machine.
MACHINE_LABELS = (("CPU", "cpu"), ("numpy SIMD", "numpy_simd"),
                  ("NPY_DISABLE_CPU_FEATURES", "npy_disable_cpu_features"), ("BLAS library", "blas_library"),
                  ("BLAS version", "blas_version"), ("BLAS core", "blas_coretype"),
                  ("BLAS threads", "blas_threads"), ("OPENBLAS_CORETYPE", "openblas_coretype"))


def higher_is_better(metric: str) -> bool:
    """The metric's declared direction (mschecker.campaign.kinds: each kind's MetricInfo); InputError for a
    metric no kind declares."""
    return metric_info(metric).higher_is_better


@dataclass
class MetricVerdict:
    name: str
    baseline: float
    run: float
    noise: float
    allow: float
    verdict: str
    samples: tuple[int, int]          # (baseline, run) sample counts; against the history: (runs, run's samples)
    noise_measured: bool
    against: str = "baseline"         # "baseline": the baseline run's value; "history": the window's center
    history: HistoryJudgement | None = None   # the series' center, band, nights and trend (with --history)

    @property
    def delta(self) -> float:
        return self.run - self.baseline if not (math.isinf(self.run) and self.run == self.baseline) else 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "baseline": self.baseline, "run": self.run, "delta": self.delta,
                "noise": self.noise, "allow": self.allow, "verdict": self.verdict,
                "higher_is_better": higher_is_better(self.name), "samples": list(self.samples),
                "noise_measured": self.noise_measured, "against": self.against,
                **({"history": self.history.to_dict()} if self.history else {})}


@dataclass
class CellComparison:
    key: str
    kind: str
    block: str
    coords: dict
    device: str
    baseline_status: str | None
    run_status: str | None
    verdict: str
    reason: str = ""
    metrics: list[MetricVerdict] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)   # inputs that differ: model sha256, profile hash
    machine: list[str] = field(default_factory=list)   # machine facts that differ (bit-exact cells that moved)
    expected: str = ""          # the expected-results outcome: expected failure / unexpected pass / flaky ...
    expected_reason: str = ""   # the reason the expected-results file gives
    first_moved: Moved | None = None  # a worse cell: the first device op whose fingerprint moved (fingerprints.py)

    @property
    def regressed(self) -> bool:
        """Worse than the baseline or the history, and not declared as a known failure or flaky."""
        return self.verdict == WORSE and self.expected not in (EXPECTED_FAILURE, FLAKY_FAILURE)

    @property
    def trend(self) -> str:
        """The history trend of the cell (the strongest of its metrics': step, then blip); "" without one."""
        trends = {m.history.trend for m in self.metrics if m.history is not None}
        return next((t for t in (STEP, BLIP, STEADY) if t in trends), "")

    def trend_metric(self) -> MetricVerdict | None:
        """The metric whose history trend is the cell's (worse first), for the report and the plot."""
        t = self.trend
        cands = [m for m in self.metrics if m.history is not None and m.history.trend == t]
        return min(cands, key=lambda m: (m.verdict != WORSE, m.verdict != BETTER, m.name)) if cands else None

    def worst(self) -> MetricVerdict | None:
        """The metric that got relatively worst (largest worsening in units of its baseline magnitude)."""
        worse = [m for m in self.metrics if m.verdict == WORSE]
        return max(worse, key=_relative_worsening) if worse else None

    def to_dict(self) -> dict:
        return {"key": self.key, "kind": self.kind, "block": self.block, "coords": self.coords,
                "device": self.device, "baseline_status": self.baseline_status, "run_status": self.run_status,
                "verdict": self.verdict, "regressed": self.regressed, "reason": self.reason,
                "changes": self.changes, "machine_changes": self.machine,
                **({"trend": self.trend} if self.trend else {}),
                **({"expected": self.expected, "expected_reason": self.expected_reason} if self.expected else {}),
                **({"first_moved": self.first_moved.to_dict()} if self.first_moved is not None else {}),
                "metrics": [m.to_dict() for m in self.metrics]}


@dataclass
class Comparison:
    baseline: str
    run: str
    campaign: str
    cells: list[CellComparison]
    environment: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)  # what differs: base, run
    history: list[str] = field(default_factory=list)   # --history: the window's run ids, oldest first
    series: Series | None = None                       # --history: the values (for the HTML plots)
    expected_file: str | None = None                   # --expected / [campaign] expected
    strict_expected: bool = False                      # --strict-expected: an unexpected pass fails

    @property
    def regressed(self) -> list[CellComparison]:
        return [c for c in self.cells if c.regressed]

    @property
    def unexpected_passes(self) -> list[CellComparison]:
        return [c for c in self.cells if c.expected == UNEXPECTED_PASS]

    @property
    def failed(self) -> bool:
        """Whether the comparison fails (exit 1): a regression, or with --strict-expected an unexpected pass."""
        return bool(self.regressed) or (self.strict_expected and bool(self.unexpected_passes))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.cells:
            out[c.verdict] = out.get(c.verdict, 0) + 1
        return out

    def to_dict(self) -> dict:
        return {"schema_version": 1, "tool": "mschecker campaign compare", "campaign": self.campaign,
                "baseline": self.baseline, "run": self.run, "regressed": bool(self.regressed),
                "counts": self.counts(),
                **({"history": self.history} if self.history else {}),
                **({"expected_file": self.expected_file, "strict_expected": self.strict_expected,
                    "unexpected_passes": [c.key for c in self.unexpected_passes]} if self.expected_file else {}),
                "environment_changes": {k: {"baseline": b, "run": r} for k, (b, r) in self.environment.items()},
                "cells": [c.to_dict() for c in self.cells]}


def _relative_worsening(m: MetricVerdict) -> float:
    if math.isnan(m.run):
        return math.inf
    scale = abs(m.baseline) if math.isfinite(m.baseline) and m.baseline else 1.0
    return abs(m.delta) / scale if math.isfinite(m.delta) else math.inf


def _group(records: list[CellRecord]) -> dict[str, list[CellRecord]]:
    out: dict[str, list[CellRecord]] = {}
    for r in records:
        out.setdefault(r.key, []).append(r)
    return out


def cell_status(samples: list[CellRecord]) -> str:
    """One status for a cell's samples: an unfinished sample's status wins, then fail, then pass."""
    unfinished = [s.status for s in samples if s.status not in FINISHED]
    if unfinished:
        return unfinished[0]
    return STATUS_FAIL if any(s.status == STATUS_FAIL for s in samples) else STATUS_PASS


def allowance(name: str, allow: dict[str, float]) -> float:
    return allow.get(name, allow.get(name.rsplit(".", 1)[-1], 0.0))


def _center(values: list[float]) -> float:
    if any(math.isnan(v) for v in values):
        return math.nan
    return float(statistics.median(values))


def _spread(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return max(finite) - min(finite) if len(finite) > 1 else 0.0


def judge_metric(name: str, base: list[float], run: list[float], *, bit_exact: bool, allow: float) -> MetricVerdict:
    """The verdict of one metric (see the module docstring for the rule)."""
    b, r = _center(base), _center(run)
    measured = bit_exact or len(base) > 1 or len(run) > 1
    noise = 0.0 if bit_exact else max(_spread(base), _spread(run))
    if math.isnan(b) or math.isnan(r):
        verdict = SAME if math.isnan(b) and math.isnan(r) else (WORSE if math.isnan(r) else BETTER)
    elif b == r:
        verdict = SAME
    else:
        improvement = (r - b) if higher_is_better(name) else (b - r)
        verdict = WORSE if improvement < -(noise + allow) else BETTER if improvement > noise else SAME
    return MetricVerdict(name, b, r, noise, allow, verdict, (len(base), len(run)), measured)


def _fact(record: CellRecord, fact: str) -> str | None:
    return record.versions.get(fact) if fact == "cpu" else record.machine.get(fact)


def machine_changes(base: list[CellRecord], run: list[CellRecord]) -> list[str]:
    """The machine facts that differ between a cell's baseline and run samples, e.g. "BLAS core Haswell ->
    SkylakeX". A fact not recorded on one side (an older store) is not evidence of a difference."""
    out = []
    for label, fact in MACHINE_LABELS:
        b = sorted({str(v) for v in (_fact(s, fact) for s in base) if v is not None})
        r = sorted({str(v) for v in (_fact(s, fact) for s in run) if v is not None})
        if b and r and b != r:
            out.append(f"{label} {','.join(x or '(unset)' for x in b)} -> {','.join(x or '(unset)' for x in r)}")
    return out


def judged(name: str, patterns: list[str]) -> bool:
    """Whether `[compare] metrics` (fnmatch patterns, default ["*"]) selects the metric for the verdicts."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def compare_cell(base: list[CellRecord] | None, run: list[CellRecord] | None,
                 allow: dict[str, float], patterns: list[str] = ("*",), series: Series | None = None) -> CellComparison:
    """One cell against its baseline samples; with `series` (--history) its metrics are judged against the
    window's runs of the same spec hash instead (bit-exact cells: still against the baseline's value, the
    history giving the trend)."""
    ref = (run or base)[0]
    bs = cell_status(base) if base else None
    rs = cell_status(run) if run else None
    out = CellComparison(ref.key, ref.kind, ref.block, ref.coords, ref.device, bs, rs, SAME)
    if not base:
        out.verdict = NEW
        return out
    if not run:
        out.verdict, out.reason = MISSING, "not in the run"
        return out
    for label, attr in (("model sha256", "model_sha256"), ("profile hash", "profile_hash")):
        b, r = sorted({str(getattr(s, attr)) for s in base}), sorted({str(getattr(s, attr)) for s in run})
        if b != r and getattr(run[0], attr) is not None:
            out.changes.append(f"{label} {','.join(x[:12] for x in b)} -> {','.join(x[:12] for x in r)}")
    if rs not in FINISHED:
        out.verdict, out.reason = rs, next((s.reason for s in run if s.status == rs), "")
        return out
    if bs not in FINISHED:
        out.verdict, out.reason = NO_BASELINE, f"baseline cell {bs}"
        return out
    bit_exact = ref.bit_exact and base[0].bit_exact
    names = sorted({n for s in base + run for n in s.metrics if judged(n, patterns)})
    hist = None
    if series is not None and len({s.spec_hash for s in run}) == 1:
        key, spec_hash = ref.key, run[0].spec_hash
        hist = lambda name: series.of(key, name, spec_hash)  # noqa: E731
    out.metrics = _judge_all(names, base, run, bit_exact, allow, hist)
    if {s.spec_hash for s in base} != {s.spec_hash for s in run}:
        out.verdict, out.reason = CHANGED, "the cell's parameters changed (spec hash differs): not comparable"
        return out
    moved = bs != rs or any(_moved(m) for m in out.metrics)
    if bit_exact and moved:
        out.machine = machine_changes(base, run)
        if out.machine:  # judged as a non-bit-exact cell: the machine's BLAS order / SIMD dispatch is its noise
            out.metrics = _judge_all(names, base, run, False, allow, hist)
    verdicts = {m.verdict for m in out.metrics}
    also = f" (the machine differs too: {'; '.join(out.machine)})" if out.machine else ""
    if bs == STATUS_PASS and rs == STATUS_FAIL:
        out.verdict, out.reason = WORSE, "pass -> fail: " + next((s.reason for s in run if s.reason), "") + also
    elif WORSE in verdicts:
        w = out.worst()
        out.verdict, out.reason = WORSE, f"{w.name}: {w.baseline:.6g} -> {w.run:.6g}" + (
            f" beyond noise + allow{also}" if out.machine else "")
    elif out.machine:
        out.verdict, out.reason = MACHINE, "differs only with the machine: " + "; ".join(out.machine)
    elif bs == STATUS_FAIL and rs == STATUS_PASS:
        out.verdict, out.reason = BETTER, "fail -> pass"
    elif BETTER in verdicts:
        out.verdict = BETTER
    return out


def _moved(m: MetricVerdict) -> bool:
    """Whether a metric's value changed at all (bits; NaN -> NaN is no change), whatever the verdict."""
    return not (m.baseline == m.run or (math.isnan(m.baseline) and math.isnan(m.run)))


def _judge_all(names: list[str], base: list[CellRecord], run: list[CellRecord], bit_exact: bool,
               allow: dict[str, float], hist=None) -> list[MetricVerdict]:
    out = []
    for name in names:
        bvals = [s.metrics[name] for s in base if name in s.metrics]
        rvals = [s.metrics[name] for s in run if name in s.metrics]
        if not (bvals and rvals):
            continue
        points = hist(name) if hist is not None else []
        if len(points) < MIN_SERIES:
            out.append(judge_metric(name, bvals, rvals, bit_exact=bit_exact, allow=allowance(name, allow)))
        elif bit_exact:  # any change from the baseline's value is real; the history says step or blip
            m = judge_metric(name, bvals, rvals, bit_exact=True, allow=allowance(name, allow))
            m.history = judge_series(points, m.run, bit_exact=True)
            out.append(m)
        else:
            out.append(judge_history(name, points, rvals, allow=allowance(name, allow)))
    return out


def judge_history(name: str, points: list[tuple[str, float]], run: list[float], *, allow: float) -> MetricVerdict:
    """A non-bit-exact metric against its history (mschecker.campaign.history): worse when the run's value lies
    beyond the band (K_SIGMA x the series' MAD sigma, at least the run's own repeat spread) plus the declared
    allowance on the worse side, better beyond the band on the better side, same otherwise."""
    r = _center(run)
    j = judge_series(points, r, bit_exact=False, run_spread=_spread(run))
    c = j.center
    if math.isnan(c) or math.isnan(r):
        verdict = SAME if math.isnan(c) and math.isnan(r) else (WORSE if math.isnan(r) else BETTER)
    elif c == r or j.outside == 0:
        verdict = SAME
    elif math.isinf(c) or math.isinf(r):
        verdict = BETTER if (r > c) == higher_is_better(name) else WORSE
    else:
        improvement = (r - c) if higher_is_better(name) else (c - r)
        verdict = WORSE if improvement < -(j.band + allow) else BETTER if improvement > j.band else SAME
    return MetricVerdict(name, c, r, j.band, allow, verdict, (len(points), len(run)), True, "history", j)


def compare_runs(store: Store, baseline_id: str, run_id: str, allow: dict[str, float] | None = None, *,
                 history: int | None = None) -> Comparison:
    """Compare every cell of `run_id` with `baseline_id` (both must exist: InputError naming the id). The
    allowances ([compare] allow, unless given) and the judged metrics ([compare] metrics) are the run's
    campaign's. With `history` (N >= 2), each cell's metrics are judged against the last N finished runs of the
    campaign before `run_id` (mschecker.campaign.history; InputError when the store holds fewer); the baseline
    still decides status changes (pass -> fail), parameter and machine changes, and bit-exact cells' values."""
    store.run(baseline_id)  # InputError naming an unknown id
    run_info = store.run(run_id)
    series = load_series(store, run_info.campaign, run_id, history) if history else None
    try:  # the allowances and patterns stored with the run (spec_json): a tampered store is bad input
        declared = run_info.spec.get("compare") or {}
        if allow is None:
            allow = {str(k): float(v) for k, v in (declared.get("allow") or {}).items()}
        patterns = [str(p) for p in (declared.get("metrics") or ["*"])]
    except (AttributeError, TypeError, ValueError):
        raise InputError(f"store {store.path}: damaged (run {run_id!r}: runs.spec_json [compare] is not what a "
                         f"campaign file declares)") from None
    base, run = _group(store.cells(baseline_id)), _group(store.cells(run_id))
    keys = list(dict.fromkeys([*run, *base]))
    cells = [compare_cell(base.get(k), run.get(k), allow, patterns, series) for k in keys]
    for c in cells:  # where a worse cell's values first moved, from the stored fingerprints (nothing re-run)
        if c.verdict in (WORSE, MACHINE) and c.key in base and c.key in run:
            c.first_moved = first_moved_node(store, baseline_id, run_id, c.key)
    return Comparison(baseline_id, run_id, run_info.campaign, cells, environment_changes(base, run),
                      history=list(series.runs) if series else [], series=series)


ENVIRONMENT = ("mschecker", "onnxruntime", "numpy", "python", "cpu")


def environment_changes(base: dict[str, list[CellRecord]], run: dict[str, list[CellRecord]]) -> dict:
    """{field: (baseline values, run values)} for the versions, CPU models and machine facts (recorded in both
    runs) that differ between the runs (what a reader checks first when many cells moved at once)."""
    out = {}
    for name in ENVIRONMENT:
        b = sorted({str(s.versions.get(name)) for v in base.values() for s in v})
        r = sorted({str(s.versions.get(name)) for v in run.values() for s in v})
        if b != r:
            out[name] = (b, r)
    for label, fact in MACHINE_LABELS:
        if fact != "cpu":
            b = sorted({str(x) for v in base.values() for s in v if (x := s.machine.get(fact)) is not None})
            r = sorted({str(x) for v in run.values() for s in v if (x := s.machine.get(fact)) is not None})
            if b and r and b != r:
                out[label] = (b, r)
    return out


# ------------------------------------------------------------------------------------- expected results
def apply_expected(comparison: Comparison, expected: ExpectedResults, *, strict: bool = False) -> None:
    """Mark every cell of the comparison that an expected-results file (campaign.expected) names with its
    outcome: expected failure / unexpected pass / flaky."""

    comparison.expected_file = str(expected.path)
    comparison.strict_expected = strict
    for c in comparison.cells:
        e = expected.get(c.key)
        if e is None or c.run_status not in FINISHED:
            continue
        c.expected_reason = e.reason
        c.expected = expected_outcome(e, c.run_status == STATUS_FAIL or c.verdict == WORSE)


def expected_outcome(e: Expectation, failed: bool) -> str:
    if e.status == "fail":
        return EXPECTED_FAILURE if failed else UNEXPECTED_PASS
    return FLAKY_FAILURE if failed else FLAKY_PASS


def run_exit_code(summary, expected, strict: bool) -> int:
    """RunSummary.exit_code with the expected results and --strict-expected taken into account: a regression
    (not an expected failure nor a flaky one) -> 1; without a baseline, a failed cell not expected to fail or be
    flaky -> 1; --strict-expected and an unexpected pass -> 1; a cell that did not finish -> 3; else 0."""
    if expected is None:
        return summary.exit_code
    cmp = summary.comparison
    if cmp is not None and cmp.failed:
        return 1
    if not summary.regression_mode:
        if any(s == STATUS_FAIL and expected.get(k) is None for k, s in summary.statuses.items()):
            return 1
        if strict and any(s == STATUS_PASS and (e := expected.get(k)) is not None and e.status == "fail"
                          for k, s in summary.statuses.items()):
            return 1
    if summary.unfinished:
        return 3
    return 0


def judge_run_against_history(store: Store, summary, window: int) -> None:
    """After `campaign run --history N`: replace the run's comparison (summary: a runner.RunSummary) by one
    against the last `window` finished runs; its baseline is the declared one, else the newest finished earlier
    run (none: the summary is left as it is). The run is then judged in regression mode."""
    baseline = summary.baseline_id
    if baseline is None:
        prev = store.previous_run(summary.run_id)
        baseline = prev.run_id if prev is not None else None
    if baseline is None:  # check_store_holds_window saw enough finished runs; kept for a store changed meanwhile
        return
    summary.baseline_id = baseline
    summary.regression_mode = True
    summary.comparison = compare_runs(store, baseline, summary.run_id, history=window)
