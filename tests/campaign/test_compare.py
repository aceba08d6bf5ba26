"""Regression verdicts: bit-exact cells have no noise, repeated cells are judged beyond their measured spread,
crashes never count as regressions, changed cells are not compared as if unchanged."""
from __future__ import annotations

import math

import pytest

from mschecker.campaign.compare import (BETTER, CHANGED, MISSING, NEW, NO_BASELINE, SAME, WORSE, compare_runs,
                                        higher_is_better, judge_metric)
from mschecker.campaign.store import Store

from .helpers import add_run, cells_of, record, spec_raw


def test_directions():
    assert higher_is_better("image_psnr_db") and higher_is_better("logits.cosine") and higher_is_better("x.caught")
    assert higher_is_better("probs.snr_db") and higher_is_better("image_ssim")
    assert not higher_is_better("logits.max_abs_err") and not higher_is_better("fp16.error_ratio")
    assert not higher_is_better("nonfinite_outputs") and not higher_is_better("fp16.ulp_p99")


@pytest.mark.parametrize("name, base, run, verdict", [
    # bit-exact: the smallest change is real, in the metric's direction
    ("image_psnr_db", [41.0], [math.nextafter(41.0, 0)], WORSE),
    ("image_psnr_db", [41.0], [41.0], SAME),
    ("image_psnr_db", [41.0], [41.5], BETTER),
    ("decoded.max_abs_err", [1e-3], [1.0000001e-3], WORSE),
    ("decoded.max_abs_err", [1e-3], [0.9e-3], BETTER),
    ("image_psnr_db", [math.inf], [60.0], WORSE),       # identical images -> any difference
    ("image_psnr_db", [60.0], [math.inf], BETTER),
    ("image_psnr_db", [math.inf], [math.inf], SAME),
    ("x.cosine", [0.99], [math.nan], WORSE),              # a metric going NaN is the worst outcome
    ("x.max_abs_err", [math.nan], [0.1], BETTER),
    ("x.max_abs_err", [math.nan], [math.nan], SAME),
])
def test_bit_exact_any_change_is_real(name, base, run, verdict):
    assert judge_metric(name, base, run, bit_exact=True, allow=0.0).verdict == verdict


def test_noise_from_repeats():
    # baseline range 0.3 dB, run range 0.1: noise 0.3; medians 40.05 -> 39.85 (-0.2) is within noise
    m = judge_metric("image_psnr_db", [40.0, 40.2, 39.9, 40.1], [39.85, 39.9, 39.8], bit_exact=False, allow=0.0)
    assert m.noise == pytest.approx(0.3) and m.verdict == SAME and m.noise_measured
    assert m.baseline == pytest.approx(40.05) and m.run == pytest.approx(39.85)
    tight = judge_metric("image_psnr_db", [40.0, 40.01, 40.02], [39.9, 39.91, 39.9], bit_exact=False, allow=0.0)
    assert tight.noise == pytest.approx(0.02) and tight.verdict == WORSE
    # the same samples on a bit-exact device: no noise, a 0.11 dB drop is a regression, so is 1e-9 dB
    assert judge_metric("image_psnr_db", [40.0, 40.01, 40.02], [39.9, 39.91, 39.9], bit_exact=True,
                        allow=0.0).noise == 0.0
    assert judge_metric("image_psnr_db", [40.01], [40.01 - 1e-9], bit_exact=True, allow=0.0).verdict == WORSE
    # a single sample on a noisy device: noise unmeasured, judged strictly, flagged
    single = judge_metric("x.max_abs_err", [1.0], [1.01], bit_exact=False, allow=0.0)
    assert single.verdict == WORSE and not single.noise_measured


def test_allowance_applies_to_worsening_only():
    assert judge_metric("image_psnr_db", [40.0], [39.95], bit_exact=True, allow=0.1).verdict == SAME
    assert judge_metric("image_psnr_db", [40.0], [39.8], bit_exact=True, allow=0.1).verdict == WORSE
    assert judge_metric("image_psnr_db", [40.0], [40.05], bit_exact=True, allow=0.1).verdict == BETTER


def _store(tmp_path, base: dict, run: dict, raw_run=None, raw_base=None):
    raw = spec_raw()
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add_run(store, "base", raw_base or raw, tmp_path, base, created_at=1.0)
    add_run(store, "run", raw_run or raw, tmp_path, run, created_at=2.0)
    return store


def test_cell_verdicts(tmp_path):
    sd910, sdfp32, kern = [c.key for c in cells_of(spec_raw(), tmp_path)]
    base = {sd910: record("fail", {"image_psnr_db": 3.0}), sdfp32: record("pass", {"image_psnr_db": 45.0}),
            kern: record("pass", {"fp16.error_ratio": 0.5, "bug.caught": 1.0})}
    # pass -> fail is a regression even with equal metrics
    run = {sd910: record("fail", {"image_psnr_db": 3.0}), sdfp32: record("fail", {"image_psnr_db": 45.0}, "PSNR"),
           kern: record("pass", {"fp16.error_ratio": 0.5, "bug.caught": 1.0})}
    with _store(tmp_path, base, run) as store:
        cmp = compare_runs(store, "base", "run")
        verdicts = {c.key: c.verdict for c in cmp.cells}
        assert verdicts == {sd910: SAME, sdfp32: WORSE, kern: SAME}
        assert [c.key for c in cmp.regressed] == [sdfp32]
        assert cmp.to_dict()["regressed"] is True


def test_planted_bug_no_longer_caught_is_a_regression(tmp_path):
    kern = cells_of(spec_raw(), tmp_path)[2].key
    with _store(tmp_path, {kern: record("pass", {"bug.caught": 1.0})},
                {kern: record("pass", {"bug.caught": 0.0})}) as store:
        (c,) = compare_runs(store, "base", "run").cells
        assert c.verdict == WORSE and c.reason == "bug.caught: 1 -> 0"


@pytest.mark.parametrize("status", ["crashed", "timeout", "killed"])
def test_unfinished_cells_are_not_regressions(tmp_path, status):
    sd910, sdfp32, kern = [c.key for c in cells_of(spec_raw(), tmp_path)]
    base = {sd910: record("pass", {"image_psnr_db": 40.0}), sdfp32: record(status, reason="x")}
    run = {sd910: record(status, reason="worker died"), sdfp32: record("pass", {"image_psnr_db": 40.0}),
           kern: record("pass")}
    with _store(tmp_path, base, run) as store:
        cmp = compare_runs(store, "base", "run")
        verdicts = {c.key: (c.verdict, c.regressed) for c in cmp.cells}
        assert verdicts == {sd910: (status, False), sdfp32: (NO_BASELINE, False), kern: (NEW, False)}
        assert not cmp.regressed


def test_changed_and_missing_cells(tmp_path):
    raw_run = spec_raw(steps=20)
    sd910, sdfp32, kern = [c.key for c in cells_of(raw_run, tmp_path)]
    base = {sd910: record("pass", {"image_psnr_db": 40.0}), kern: record("pass", {"a.error_ratio": 0.1})}
    run = {sd910: record("pass", {"image_psnr_db": 20.0})}
    with _store(tmp_path, base, run, raw_run=raw_run) as store:
        cmp = compare_runs(store, "base", "run")
        by_key = {c.key: c for c in cmp.cells}
        assert by_key[sd910].verdict == CHANGED and by_key[sd910].metrics[0].verdict == WORSE
        assert by_key[kern].verdict == MISSING
        assert not cmp.regressed


def test_repeated_cells_use_their_spread(tmp_path):
    raw = {"campaign": {"name": "nightly", "repeats": 3},
           "check": [{"name": "m", "model": "../../golden/default/model.onnx",
                      "golden": "../../golden/default/expected",
                      "inputs": ["../../golden/default/x.bin", "../../golden/default/t.bin"]}]}
    from pathlib import Path

    here = Path(__file__).resolve().parent
    (cell0, cell1, cell2) = cells_of(raw, here)
    assert not cell0.bit_exact
    def samples(*values):
        return {c.task_key: record("pass", {"logits.max_abs_err": v}) for c, v in zip((cell0, cell1, cell2), values)}

    base, within, beyond = samples(1e-6, 3e-6, 2e-6), samples(2.5e-6, 3.5e-6, 3e-6), samples(5.1e-6, 5.2e-6, 5.3e-6)
    store = Store.open(tmp_path / "s.sqlite", create=True)
    with store:
        add_run(store, "base", raw, here, base, created_at=1.0)
        add_run(store, "within", raw, here, within, created_at=2.0)
        add_run(store, "beyond", raw, here, beyond, created_at=3.0)
        (w,) = compare_runs(store, "base", "within").cells
        assert w.verdict == SAME and w.metrics[0].noise == pytest.approx(2e-6) and w.metrics[0].samples == (3, 3)
        (b,) = compare_runs(store, "base", "beyond").cells
        assert b.verdict == WORSE


def test_allowance_comes_from_the_run_campaign(tmp_path):
    raw = spec_raw(allow={"image_psnr_db": 0.5})
    sd910 = cells_of(raw, tmp_path)[0].key
    with _store(tmp_path, {sd910: record("pass", {"image_psnr_db": 40.0})},
                {sd910: record("pass", {"image_psnr_db": 39.7})}, raw_run=raw, raw_base=raw) as store:
        (c,) = compare_runs(store, "base", "run").cells
        assert c.verdict == SAME and c.metrics[0].allow == 0.5


def test_only_the_declared_metrics_are_judged(tmp_path):
    raw = spec_raw()
    raw["compare"] = {"metrics": ["image_*", "*.caught"]}
    sd910, _, kern = [c.key for c in cells_of(raw, tmp_path)]
    base = {sd910: record("pass", {"image_psnr_db": 40.0, "decoded.max_abs_err": 0.1}),
            kern: record("pass", {"fp16.error_ratio": 0.5, "bug.caught": 1.0})}
    run = {sd910: record("pass", {"image_psnr_db": 40.0, "decoded.max_abs_err": 0.2}),
           kern: record("pass", {"fp16.error_ratio": 0.9, "bug.caught": 1.0})}
    with _store(tmp_path, base, run, raw_run=raw, raw_base=raw) as store:
        cmp = compare_runs(store, "base", "run")
        assert [c.verdict for c in cmp.cells] == [SAME, SAME]
        assert [m.name for c in cmp.cells for m in c.metrics] == ["image_psnr_db", "bug.caught"]
    with pytest.raises(Exception, match=r"\[compare\]: metrics\[0\] must be a string"):
        from mschecker.campaign.spec import parse_campaign

        parse_campaign({**raw, "compare": {"metrics": [1]}}, tmp_path / "c.toml")


def test_what_changed_between_the_runs_is_named(tmp_path):
    sd910 = cells_of(spec_raw(), tmp_path)[0].key
    newer = record("pass", {"image_psnr_db": 40.0})
    newer["versions"] = {**newer["versions"], "onnxruntime": "1.99"}
    newer["model_sha256"], newer["profile_hash"] = "b" * 64, "p" * 64
    old = record("pass", {"image_psnr_db": 40.0})
    old["model_sha256"], old["profile_hash"] = "a" * 64, "p" * 64
    with _store(tmp_path, {sd910: old}, {sd910: newer}) as store:
        cmp = compare_runs(store, "base", "run")
        assert cmp.environment == {"onnxruntime": (["1"], ["1.99"])}
        (c,) = cmp.cells
        assert c.verdict == SAME and c.changes == ["model sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb"]
        assert cmp.to_dict()["environment_changes"] == {"onnxruntime": {"baseline": ["1"], "run": ["1.99"]}}


# ----------------------------------------------------------------- issue 28: bug classes the suite let through
def test_cells_are_summarised_by_the_median_not_the_mean(tmp_path):
    # mean 4.0, median 2.0: a mean would call the run (all 2.0) better
    m = judge_metric("x.max_abs_err", [1.0, 2.0, 9.0], [2.0, 2.0, 2.0], bit_exact=False, allow=0.0)
    assert m.baseline == 2.0 and m.run == 2.0 and m.verdict == SAME
    even = judge_metric("x.max_abs_err", [1.0, 2.0, 4.0, 100.0], [3.0, 3.0], bit_exact=False, allow=0.0)
    assert even.baseline == 3.0 and even.verdict == SAME


def test_stored_repeats_are_summarised_by_their_median(tmp_path):
    from pathlib import Path

    raw = {"campaign": {"name": "nightly", "repeats": 3},
           "check": [{"name": "m", "model": "../../golden/default/model.onnx", "golden": "../../golden/default/expected",
                      "inputs": ["../../golden/default/x.bin", "../../golden/default/t.bin"]}]}
    here = Path(__file__).resolve().parent
    cells = cells_of(raw, here)

    def samples(*values):
        return {c.task_key: record("pass", {"logits.max_abs_err": v}) for c, v in zip(cells, values)}

    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "base", raw, here, samples(1.0, 1.0, 10.0), created_at=1.0)   # median 1, mean 4
        add_run(store, "run", raw, here, samples(2.0, 2.0, 2.1), created_at=2.0)     # median 2, mean 2.03
        (c,) = compare_runs(store, "base", "run").cells
        (m,) = c.metrics
        assert (m.baseline, m.run) == (1.0, 2.0) and m.noise == pytest.approx(9.0) and c.verdict == SAME
        add_run(store, "tight", raw, here, samples(1.0, 1.0, 1.0), created_at=3.0)
        add_run(store, "worse", raw, here, samples(1.5, 1.5, 40.0), created_at=4.0)  # median 1.5, mean 14.3
        (w,) = compare_runs(store, "tight", "worse").cells
        assert w.metrics[0].run == 1.5 and w.metrics[0].noise == pytest.approx(38.5) and w.verdict == SAME


def test_allowance_is_the_runs_own_and_matches_the_short_name(tmp_path):
    kern = cells_of(spec_raw(), tmp_path)[2].key
    base_raw = spec_raw(allow={"error_ratio": 10.0})        # the baseline's campaign is not the one judged
    run_raw = spec_raw(allow={"error_ratio": 0.5})          # by the part after the last dot
    base = {kern: record("pass", {"fp16.error_ratio": 0.5})}
    with _store(tmp_path, base, {kern: record("pass", {"fp16.error_ratio": 0.8})},
                raw_run=run_raw, raw_base=base_raw) as store:
        (c,) = compare_runs(store, "base", "run").cells
        assert c.verdict == SAME and c.metrics[0].allow == 0.5
    (tmp_path / "s.sqlite").unlink()
    with _store(tmp_path, base, {kern: record("pass", {"fp16.error_ratio": 1.2})},
                raw_run=run_raw, raw_base=base_raw) as store:
        (c,) = compare_runs(store, "base", "run").cells
        assert c.verdict == WORSE and c.metrics[0].allow == 0.5
    (tmp_path / "s.sqlite").unlink()
    full = spec_raw(allow={"fp16.error_ratio": 0.1, "error_ratio": 0.5})    # the full name wins
    with _store(tmp_path, base, {kern: record("pass", {"fp16.error_ratio": 0.8})}, raw_run=full,
                raw_base=full) as store:
        (c,) = compare_runs(store, "base", "run").cells
        assert c.verdict == WORSE and c.metrics[0].allow == 0.1


def test_changed_cell_that_went_pass_to_fail_is_reported_so(tmp_path, capsys):
    from mschecker.campaign.report import render_comparison
    from mschecker.commands.campaign import _console

    raw_run = spec_raw(steps=20)
    sd910 = cells_of(raw_run, tmp_path)[0].key
    with _store(tmp_path, {sd910: record("pass", {"image_psnr_db": 40.0})},
                {sd910: record("fail", {"image_psnr_db": 20.0}, "PSNR 20 < 30")}, raw_run=raw_run) as store:
        cmp = compare_runs(store, "base", "run")
        (c,) = cmp.cells
        assert (c.verdict, c.baseline_status, c.run_status) == (CHANGED, "pass", "fail")
        assert not c.regressed and not cmp.regressed and c.metrics[0].verdict == WORSE
        render_comparison(cmp, _console())
    row = next(line for line in capsys.readouterr().out.splitlines() if "changed" in line)
    assert row.index("pass") < row.index("fail")
