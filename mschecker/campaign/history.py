"""A cell judged against its history: the last N finished runs of its campaign, not one baseline run.

Why: one run's repeats measure the noise of one night on one machine; a nightly's real spread (the machine's
load, onnxruntime's thread-dependent reduction orders, the worker a cell lands on) shows only over many nights.
And a change that persists (a step) is a different finding from a one-night outlier (a blip). asv detects steps
over a benchmark's whole series (a piecewise-constant fit, asv/step_detect.py); conbench judges a result against
a lookback distribution (its z-score over a window of earlier results). This module does the latter with robust
statistics and classifies the change by how many nights it has lasted (docs/CAMPAIGN.md, "Judged against the
history", has the rule and why each threshold is what it is).

Per (cell, metric), with `h` the values of the last `window` finished runs before the run judged (oldest first;
a run's value is the median of its repeats, NaN when any repeat is NaN, as compare._center) and `x` the run's:

  center  = median(h)                                  (robust: a few outliers or a recent step do not move it)
  sigma   = 1.4826 * median(|h - center|)             (the MAD scaled to a normal's standard deviation)
  band    = max(K_SIGMA * sigma, the run's own repeat spread, RESOLUTION * |center|)
  outside = |x - center| > band   (worse side: beyond band + the declared allowance)
  nights  = how many of the latest runs, this one included, lie outside the band on the same side
  trend   = "step"  when nights >= STEP_NIGHTS   (a change that persisted: h[-1] and x both outside, same side)
            "blip"  when only this run is outside (nights == 1: a one-night change, a step only if it stays),
                    or when this run is back inside and the run before it alone was outside (the outlier came
                    back)
            "same"  otherwise
Bit-exact cells keep "any change is real": their band is 0 and `outside` means "differs from the history's
center" (for a deterministic series, the value it has held), while the verdict is still against the baseline
run's value (compare.py), down to one bit.

Only runs whose cell has the run's `spec_hash` (the cell computes the same thing) and finished (pass or fail)
count; a cell with fewer than MIN_SERIES such runs is judged against the baseline run alone (as without
--history) and says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from mschecker.errors import InputError
from mschecker.campaign.store import RUN_FINISHED, Store

# --history N: at least 2 runs (one run has no spread: that is the baseline comparison); at most HISTORY_MAX,
# over a year and a half of nightlies: the load is linear in N (30 runs x 500 cells: docs/CAMPAIGN.md) and a
# window older than the code it judges says more about last year than about tonight.
HISTORY_MIN, HISTORY_MAX = 2, 1000
# K_SIGMA = 4: a nightly of 500 cells x 3 judged metrics makes 1,500 decisions a night. For normal noise a
# 3-sigma band is crossed by chance 0.27% of the time: ~4 false alarms every night; 4 sigma: 6.3e-5, ~0.1 a
# night (one false alarm in ten nights), and a sigma estimated from 20-30 nights by the MAD is itself uncertain
# by ~15-20%, which 4 sigma absorbs. A real regression of an accuracy metric is usually many sigma.
K_SIGMA = 4.0
# 1.4826 = 1 / Phi^-1(3/4): the MAD of a normal distribution times this is its standard deviation.
MAD_TO_SIGMA = 1.4826
# The band is never narrower than 1e-12 relative: below that a float64 metric computed by a different summation
# order differs by rounding alone (a few hundred ulp of float64 at 2.2e-16 each); a non-bit-exact cell whose
# history is constant to the bit would otherwise flag a one-ulp wobble as a step.
RESOLUTION = 1e-12
# A step is a change seen on at least 2 consecutive runs (this one included): the smallest evidence that it
# persists; one night alone is a blip until the next run confirms it.
STEP_NIGHTS = 2
# Fewer runs of a cell than this in the window (new cell, changed parameters, crashes): no spread to speak of.
MIN_SERIES = 3
STEP, BLIP, STEADY = "step", "blip", "same"


@dataclass
class Series:
    """The run ids and dates of a window (oldest first) and, per (cell key, metric), the run's value per run
    (missing: the cell did not finish in that run, or computed something else: another spec_hash)."""

    campaign: str
    run_id: str
    runs: list[str]
    dates: list[float]
    values: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    spec_hash: dict[tuple[str, str], str] = field(default_factory=dict)   # (run_id, cell key) -> spec hash

    def of(self, key: str, metric: str, spec_hash: str | None = None) -> list[tuple[str, float]]:
        """(run id, value) oldest first for one cell and metric; only runs of the same spec_hash when given."""
        pts = self.values.get((key, metric), {})
        return [(r, pts[r]) for r in self.runs
                if r in pts and (spec_hash is None or self.spec_hash.get((r, key)) == spec_hash)]


def finished_runs_before(store: Store, campaign: str, run_id: str) -> list[tuple[str, float]]:
    """(run id, created_at) of the finished runs of `campaign` created before `run_id` (all of them when it is
    not in the store yet, as before `campaign run`), newest first; one query on the runs_by_campaign index."""
    this = store.run(run_id, missing_ok=True)
    before = this.created_at if this is not None else math.inf
    rows = store.db.execute("SELECT run_id, created_at FROM runs WHERE campaign=? AND created_at<? AND run_id<>? "
                            "AND status=? ORDER BY created_at DESC", (campaign, before, run_id, RUN_FINISHED))
    out = []
    for rid, created in rows.fetchall():
        if not isinstance(rid, str) or isinstance(created, bool) or not isinstance(created, (int, float)):
            raise InputError(f"store {store.path}: damaged (runs.run_id / created_at of campaign {campaign!r} is "
                             f"not text / a number)")
        out.append((rid, float(created)))
    return out


def check_window(store: Store, campaign: str, run_id: str, window: int) -> list[tuple[str, float]]:
    """The `window` newest finished runs before `run_id`, newest first; InputError (exit 2) when the store holds
    fewer."""
    runs = finished_runs_before(store, campaign, run_id)
    if len(runs) < window:
        raise InputError(f"--history {window}: the store {store.path} holds only {len(runs)} finished run(s) of "
                         f"campaign {campaign!r} before {run_id!r}")
    return runs[:window]


def check_store_holds_window(store_path, campaign: str, run_id: str | None, window: int) -> None:
    """Before `campaign run --history N` runs anything: InputError (exit 2, nothing written) when the store at
    `store_path` holds fewer than `window` finished runs of `campaign` before `run_id` (None: a new run; a
    store that does not exist yet holds none). Opens the store as a reader: never creates or upgrades it."""
    from pathlib import Path

    path = Path(store_path)
    held = 0
    if path.exists():
        with Store.open(path) as store:
            held = len(finished_runs_before(store, campaign, run_id or ""))
    if held < window:
        raise InputError(f"--history {window}: the store {path} holds only {held} finished run(s) of campaign "
                         f"{campaign!r}")


def load_series(store: Store, campaign: str, run_id: str, window: int) -> Series:
    """Per (cell key, metric) the values of the last `window` finished runs of `campaign` before `run_id`
    (see the module docstring). Two queries: the runs (index runs_by_campaign), then every metric of those runs
    joined with its cell's status and spec hash (the primary keys, run_id first); no query per run or cell."""
    runs = check_window(store, campaign, run_id, window)[::-1]
    ids = [r for r, _ in runs]
    series = Series(campaign, run_id, ids, [d for _, d in runs])
    samples: dict[tuple[str, str, str], list] = {}
    marks = ",".join("?" * len(ids))
    try:
        rows = store.db.execute(
            "SELECT c.run_id, c.cell_key, c.spec_hash, m.name, m.value FROM cells c JOIN metrics m "
            "ON m.run_id=c.run_id AND m.cell_key=c.cell_key AND m.repeat=c.repeat "
            f"WHERE c.run_id IN ({marks}) AND c.status IN ('pass','fail')", ids)
        for rid, key, spec_hash, name, value in rows:
            if not (isinstance(key, str) and isinstance(name, str) and isinstance(spec_hash, str)) or (
                    value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))):
                raise InputError(f"store {store.path}: damaged (run {str(rid)[:60]!r}: a cell key, metric name, "
                                 f"spec hash or metric value of the wrong type)")
            samples.setdefault((key, name, rid), []).append(math.nan if value is None else float(value))
            series.spec_hash[(rid, key)] = spec_hash
    except Exception as exc:  # sqlite3.DatabaseError: a damaged store is bad input, one line
        import sqlite3

        if isinstance(exc, sqlite3.DatabaseError):
            raise InputError(f"store {store.path}: damaged or not readable ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
        raise
    for (key, name, rid), vals in samples.items():
        series.values.setdefault((key, name), {})[rid] = center(vals)
    return series


def center(values: list[float]) -> float:
    """A run's value from its repeats: the median; NaN when any repeat is NaN (compare._center's rule)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    return float(statistics.median(values))


@dataclass
class HistoryJudgement:
    """A metric against its history (module docstring). `improvement` > 0 is better, < 0 worse."""

    center: float
    sigma: float
    band: float
    outside: int          # -1 below the band, +1 above, 0 inside
    nights: int           # latest runs (this one included) outside on the same side
    trend: str            # step / blip / same
    since: str | None     # the first run of a step or the outlier run of a blip that came back
    points: int           # runs in the series
    series: list = field(default_factory=list, repr=False)   # [(run id, value)] oldest first (the HTML plot)

    def to_dict(self) -> dict:
        return {"center": self.center, "sigma": self.sigma, "band": self.band, "nights": self.nights,
                "trend": self.trend, "since": self.since, "points": self.points}


def _side(value: float, center_: float, band: float) -> int:
    if math.isnan(value) or math.isnan(center_):
        return 0 if math.isnan(value) and math.isnan(center_) else (2 if math.isnan(value) else -2)
    if value == center_:
        return 0
    if math.isinf(value) or math.isinf(center_):
        return 1 if value > center_ else -1
    d = value - center_
    return 0 if abs(d) <= band else (1 if d > 0 else -1)


def judge_series(history: list[tuple[str, float]], value: float, *, bit_exact: bool,
                 run_spread: float = 0.0) -> HistoryJudgement:
    """Where `value` lies against `history` [(run id, value)] oldest first, and its trend (module docstring).
    NaN in the history is left out of the center and spread; a NaN value is outside (side 2, worse whatever the
    metric's direction: compare treats NaN as the worst value); `_side` returns +-2 for NaN vs finite."""
    finite = [v for _, v in history if math.isfinite(v)]
    vals = [v for _, v in history if not math.isnan(v)]
    if finite:
        c = float(statistics.median(finite))
        sigma = 0.0 if bit_exact else MAD_TO_SIGMA * float(statistics.median([abs(v - c) for v in finite]))
    elif vals:   # only +-inf (e.g. PSNR of identical images every night)
        c, sigma = float(statistics.median(vals)), 0.0
    else:
        c, sigma = math.nan, 0.0
    band = 0.0 if bit_exact else max(K_SIGMA * sigma, run_spread, RESOLUTION * abs(c) if math.isfinite(c) else 0.0)
    sides = [_side(v, c, band) for _, v in history] + [_side(value, c, band)]
    last = sides[-1]
    nights = 0
    if last:
        for s in reversed(sides):
            if s != last:
                break
            nights += 1
    ids = [r for r, _ in history]
    since = None
    if nights >= STEP_NIGHTS:
        trend, since = STEP, ids[max(0, len(ids) - (nights - 1))]
    elif nights == 1:
        trend = BLIP
    elif len(sides) >= 3 and sides[-2] and not sides[-3]:
        trend, since = BLIP, ids[-1]  # the run before was alone outside and this one is back: it came back
    else:
        trend = STEADY
    return HistoryJudgement(c, sigma, band, last, nights, trend, since, len(history), list(history))
