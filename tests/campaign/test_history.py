"""Cells judged against their history: the window is loaded from the store (oldest first, finished runs only,
same spec hash), the noise comes from the series, a persisting change is a step and a one-night outlier a blip,
bit-exact cells keep "any change is real", and the CLI refuses a window the store cannot fill."""
from __future__ import annotations

import math
import re

import pytest

from mschecker.campaign.compare import BETTER, SAME, WORSE, compare_runs
from mschecker.campaign.history import (BLIP, K_SIGMA, STEADY, STEP, judge_series, load_series)
from mschecker.campaign.spec import Cell
from mschecker.campaign.store import RUN_FINISHED, RUN_INTERRUPTED, Store
from mschecker.cli import main as cli

from .helpers import record

ORT = 'c | device="ort"'
NPU = 'c | device="npu"'
MARKUP = 'x[/bold]<b>y</b> | device="ort"'


def _cell(key: str, repeat: int = 0, spec: str = "p") -> Cell:
    ort = "ort" in key
    return Cell(key, "check", key.split(" |")[0], {"device": "ort" if ort else "npu"}, {"v": spec}, not ort,
                "ort" if ort else "npu", repeat)


def add(store: Store, run_id: str, t: float, values: dict, *, status=RUN_FINISHED, spec="p", cell_status="pass",
        repeats=3, campaign="nightly"):
    """values: {cell key: metric value or list of repeat values}; metric 'out.max_abs_err' (lower is better)."""
    store.begin_run(run_id, campaign, {"campaign": {"name": campaign}}, "sha", {})
    store.db.execute("UPDATE runs SET created_at=? WHERE run_id=?", (t, run_id))
    for key, v in values.items():
        vals = v if isinstance(v, list) else ([v] * (repeats if "ort" in key else 1))
        for r, x in enumerate(vals):
            store.record_cell(run_id, _cell(key, r, spec), record(cell_status, {"out.max_abs_err": x}))
    store.end_run(run_id, status)


def series_store(tmp_path, ort_values: list, npu_values: list | None = None, **kw) -> Store:
    """One run per value, ids r00, r01, ...; the last value is the run judged (id 'now')."""
    store = Store.open(tmp_path / "s.sqlite", create=True)
    npu_values = npu_values or [1.0] * len(ort_values)
    for i, (o, n) in enumerate(zip(ort_values, npu_values)):
        rid = "now" if i == len(ort_values) - 1 else f"r{i:02d}"
        add(store, rid, float(i + 1), {ORT: o, NPU: n}, **kw)
    return store


# ---------------------------------------------------------------------------------------------- the series
def test_load_series_is_oldest_first_finished_only_and_median_of_repeats(tmp_path):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add(store, "a", 1.0, {ORT: [1.0, 5.0, 2.0]})
    add(store, "b", 2.0, {ORT: [3.0, 3.0, 3.0]})
    add(store, "broken", 3.0, {ORT: 99.0}, status=RUN_INTERRUPTED)   # not a finished run: not in the window
    add(store, "other", 3.5, {ORT: 77.0}, campaign="weekly")        # another campaign
    add(store, "c", 4.0, {ORT: [4.0, math.nan, 4.0]})                  # NaN in a repeat: the run's value is NaN
    add(store, "now", 5.0, {ORT: 0.0})
    add(store, "later", 6.0, {ORT: 55.0})                               # after the run judged
    s = load_series(store, "nightly", "now", 3)
    assert s.runs == ["a", "b", "c"] and s.dates == [1.0, 2.0, 4.0]
    pts = s.of(ORT, "out.max_abs_err")
    assert [r for r, _ in pts] == ["a", "b", "c"]
    assert pts[0][1] == 2.0 and pts[1][1] == 3.0 and math.isnan(pts[2][1])
    assert load_series(store, "nightly", "now", 2).runs == ["b", "c"]   # the newest N


def test_window_larger_than_the_store_is_refused(tmp_path, capsys):
    store = series_store(tmp_path, [1.0, 1.0, 1.0, 1.0])   # 3 finished runs before 'now'
    with pytest.raises(Exception, match=r"--history 4: the store .* holds only 3 finished run\(s\) of campaign "
                                        r"'nightly' before 'now'"):
        load_series(store, "nightly", "now", 4)
    store.close()
    assert cli(["campaign", "compare", "r02", "now", "--store", str(tmp_path / "s.sqlite"), "--history", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--history 4: the store" in err and "holds only 3" in err
    for bad in ("1", "1001", "x"):
        assert cli(["campaign", "compare", "r02", "now", "--store", str(tmp_path / "s.sqlite"), "--history", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--history expects an integer" in err


def test_cells_of_another_spec_hash_are_left_out(tmp_path):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    for i in range(4):
        add(store, f"old{i}", float(i), {ORT: 100.0}, spec="before")     # the cell computed something else
    for i in range(4):
        add(store, f"new{i}", 10.0 + i, {ORT: 1.0 + 0.01 * (i % 2)})
    add(store, "now", 20.0, {ORT: 1.0})
    cmp = compare_runs(store, "new3", "now", history=8)
    m = cmp.cells[0].metrics[0]
    assert m.against == "history" and m.samples[0] == 4 and m.baseline == pytest.approx(1.005)


# ------------------------------------------------------------------------------------ step / blip / noise
NOISY = [1.00, 1.02, 0.99, 1.01, 0.98, 1.03, 1.00, 0.97, 1.02, 1.01, 0.99, 1.00]


def _pts(values):
    return [(f"r{i:02d}", v) for i, v in enumerate(values)]


def test_value_within_the_series_noise_is_same_though_outside_one_runs_repeats():
    j = judge_series(_pts(NOISY), 1.04, bit_exact=False)
    assert j.trend == STEADY and j.outside == 0 and j.band == pytest.approx(K_SIGMA * j.sigma)
    assert 0.01 < j.sigma < 0.03   # the MAD of the series, not of one run


def test_one_night_blip_then_a_step():
    assert judge_series(_pts(NOISY), 1.5, bit_exact=False).trend == BLIP          # tonight only
    j = judge_series(_pts(NOISY + [1.5]), 1.5, bit_exact=False)                  # and last night: persists
    assert j.trend == STEP and j.nights == 2 and j.since == "r12"
    j = judge_series(_pts(NOISY + [1.5, 1.52, 1.49]), 1.51, bit_exact=False)
    assert j.trend == STEP and j.nights == 4 and j.since == "r12"
    # opposite sides do not make a step
    assert judge_series(_pts(NOISY + [0.5]), 1.5, bit_exact=False).trend == BLIP


def test_blip_that_came_back():
    j = judge_series(_pts(NOISY + [1.5]), 1.0, bit_exact=False)
    assert j.trend == BLIP and j.outside == 0 and j.since == "r12"
    # two nights back, not one: no longer reported
    assert judge_series(_pts(NOISY + [1.5, 1.0]), 1.0, bit_exact=False).trend == STEADY


def test_slow_drift_within_noise_is_same():
    drift = [1.0 + 0.002 * i + (0.02 if i % 2 else -0.02) for i in range(30)]
    j = judge_series(_pts(drift), drift[-1] + 0.002, bit_exact=False)
    assert j.trend == STEADY and j.outside == 0


def test_a_nan_repeat_makes_the_runs_value_nan():
    """The median would hide one NaN among three repeats; a run that produced a NaN is NaN (compare._center)."""
    from mschecker.campaign.history import center

    # (statistics.median of [1, 2, NaN] is 2: NaN compares false, so sorting leaves it where it is)
    assert all(math.isnan(center(v)) for v in ([1.0, 2.0, math.nan], [math.nan, 1.0, 2.0], [1.0, math.nan, 1.0]))
    assert center([1.0, 3.0, 2.0]) == 2.0


def test_the_band_is_four_robust_sigmas_exactly():
    """Literal numbers (a slip in K_SIGMA or the MAD factor must fail): history 1, 2, 3, ... 9 has median 5 and
    MAD 2 (|h - 5| = 4 3 2 1 0 1 2 3 4), so sigma = 1.4826 * 2 = 2.9652 and the band 4 * 2.9652 = 11.8608."""
    j = judge_series(_pts([float(v) for v in range(1, 10)]), 5.0, bit_exact=False)
    assert (j.center, j.sigma, j.band) == (5.0, pytest.approx(2.9652), pytest.approx(11.8608))
    assert judge_series(_pts([float(v) for v in range(1, 10)]), 5.0 + 11.8, bit_exact=False).outside == 0
    assert judge_series(_pts([float(v) for v in range(1, 10)]), 5.0 + 11.9, bit_exact=False).outside == 1


def test_band_at_least_the_runs_own_spread_and_resolution():
    flat = _pts([2.0] * 10)
    assert judge_series(flat, 2.0 + 1e-13, bit_exact=False).outside == 0        # below RESOLUTION * |center|
    assert judge_series(flat, 2.001, bit_exact=False).outside == 1              # constant history: any real change
    assert judge_series(flat, 2.001, bit_exact=False, run_spread=0.01).outside == 0


def test_compare_with_history_step_blip_and_noise(tmp_path):
    # lower is better (max_abs_err): the run at 1.5 is worse beyond the series' band
    store = series_store(tmp_path, NOISY + [1.5])
    cmp = compare_runs(store, "r11", "now", history=12)
    ort = next(c for c in cmp.cells if c.key == ORT)
    assert ort.verdict == WORSE and ort.trend == BLIP and ort.regressed
    m = ort.metrics[0]
    assert m.against == "history" and m.baseline == pytest.approx(1.0, abs=0.01) and m.history.points == 12
    assert cmp.history == [f"r{i:02d}" for i in range(12)]
    assert cmp.to_dict()["cells"][1]["trend"] == BLIP or cmp.to_dict()["cells"][0]["trend"] == BLIP
    # the same drop judged against one baseline run with tight repeats would also be worse; a value within the
    # series' noise but outside the last run's repeat spread is same only with the history
    store.close()
    (tmp_path / "s.sqlite").unlink()
    store = series_store(tmp_path, NOISY[:-1] + [1.0, 1.035])
    assert compare_runs(store, "r11", "now").cells[0].verdict == WORSE          # one run: spread 0
    c = next(c for c in compare_runs(store, "r11", "now", history=12).cells if c.key == ORT)
    assert c.verdict == SAME and not c.regressed


def test_improvement_beyond_the_band_is_better(tmp_path):
    store = series_store(tmp_path, NOISY + [0.5])
    c = next(c for c in compare_runs(store, "r11", "now", history=12).cells if c.key == ORT)
    assert c.verdict == BETTER and not c.regressed


def test_bit_exact_cells_keep_any_change_is_real(tmp_path):
    # the npu cell wobbles by one ulp: a noisy history would hide it, bit-exact must not
    npu = [1.0, 1.0 + 2**-52] * 6 + [1.0]
    store = series_store(tmp_path, [1.0] * 13, npu)
    c = next(c for c in compare_runs(store, "r11", "now", history=12).cells if c.key == NPU)
    assert c.verdict == BETTER   # 1 + ulp -> 1: lower error, a real change against the baseline run
    m = c.metrics[0]
    assert m.against == "baseline" and m.noise == 0.0 and m.history.band == 0.0
    store.close()
    (tmp_path / "s.sqlite").unlink()
    store = series_store(tmp_path, [1.0] * 13, [1.0] * 12 + [1.0 + 2**-52])
    c = next(c for c in compare_runs(store, "r11", "now", history=12).cells if c.key == NPU)
    assert c.verdict == WORSE and c.trend == BLIP
    store.close()
    (tmp_path / "s.sqlite").unlink()
    store = series_store(tmp_path, [1.0] * 13, [1.0] * 10 + [2.0] * 3)   # stepped two runs ago, unchanged now
    c = next(c for c in compare_runs(store, "r11", "now", history=12).cells if c.key == NPU)
    assert c.verdict == SAME and c.trend == STEP and c.metrics[0].history.since == "r10"


def test_too_short_a_series_falls_back_to_the_baseline(tmp_path):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add(store, "a", 1.0, {NPU: 1.0})
    add(store, "b", 2.0, {NPU: 1.0})
    add(store, "c", 3.0, {NPU: 1.0, ORT: 1.0})   # the ort cell is new: one run in the window
    add(store, "now", 4.0, {NPU: 1.0, ORT: 1.2})
    c = next(c for c in compare_runs(store, "c", "now", history=3).cells if c.key == ORT)
    assert c.metrics[0].against == "baseline" and c.verdict == WORSE and c.trend == ""


def test_cli_history_json_and_html(tmp_path, capsys):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    for i, v in enumerate(NOISY):
        add(store, f"r{i:02d}", float(i), {ORT: v, MARKUP: v, NPU: 1.0})
    add(store, "now", 100.0, {ORT: 1.5, MARKUP: 1.6, NPU: 1.0})
    store.close()
    page = tmp_path / "p.html"
    argv = ["campaign", "compare", "r11", "now", "--store", str(tmp_path / "s.sqlite"), "--history", "12"]
    assert cli(argv + ["--html", str(page)]) == 1
    out = capsys.readouterr().out
    assert "2 with a blip (one run)" in out and "REGRESSED: 2 cell(s) worse than its history" in out
    assert "x[/bold]<b>y</b>" in out   # printed as itself, not interpreted as Rich markup
    text = page.read_text()
    cell_figs = re.findall(r"<figure class='cell'><img alt='([^']*)' src='data:image/png;base64,", text)
    assert len(cell_figs) == 2   # the two changed cells, not the unchanged npu cell
    assert "x[/bold]&lt;b&gt;y&lt;/b&gt;" in text and "<b>y</b>" not in text
    assert cli(argv + ["--json"]) == 1
    import json

    data = json.loads(capsys.readouterr().out)
    assert data["history"][0] == "r00" and len(data["history"]) == 12
    ort = next(c for c in data["cells"] if c["key"] == ORT)
    assert ort["trend"] == BLIP and ort["metrics"][0]["against"] == "history"
