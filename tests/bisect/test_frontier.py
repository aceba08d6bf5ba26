"""The accuracy-cost frontier (mschecker/bisect/frontier.py): points, the Pareto front, the cheapest passing
configuration, and bisect choosing its fix by cost."""
from __future__ import annotations

import math

from mschecker.bisect.frontier import cheapest, frontier, frontier_png
from mschecker.bisect.search import Evaluation, FixConfig


def _ev(purpose, keep, err, passed):
    return Evaluation(purpose, FixConfig(keep_dtype=frozenset(keep)), passed, err, [], [], 0.0)


class _Price:
    """Each moved op costs its listed price; the profile as given costs 10."""

    def __init__(self, prices):
        self.prices = prices

    def __call__(self, config):
        return 10.0 + sum(self.prices[i] for i in config.keep_dtype)


def test_points_are_priced_once_sorted_by_cost_and_the_front_is_not_dominated():
    log = [_ev("as given", [], 0.5, False), _ev("all", ["a", "b", "c"], 1e-6, True),
           _ev("big", ["a"], 1e-3, True), _ev("small", ["b"], 2e-3, True), _ev("again", ["b"], 2e-3, True),
           _ev("worse and dearer", ["c"], 0.9, False)]
    front = frontier(log, _Price({"a": 100.0, "b": 1.0, "c": 5.0}))
    assert [p.purpose for p in front.points] == ["as given", "small", "worse and dearer", "big", "all"]
    assert [p.pareto for p in front.points] == [True, True, False, True, True]
    assert front.baseline_seconds == 10.0
    pick = cheapest(front)
    assert pick.purpose == "small" and pick.seconds == 11.0  # fewer moves would not be cheaper: b costs 1
    assert front.to_dict()["points"][1]["estimated_seconds"] == 11.0


def test_the_cheapest_fix_is_not_the_one_with_the_fewest_moves():
    """One expensive op (a 4096-token attention MatMul) vs two cheap ones (LayerNorms): both pass, the two cheap
    moves win on cost."""
    log = [_ev("one matmul", ["mm"], 1e-3, True), _ev("two norms", ["ln1", "ln2"], 1e-3, True)]
    pick = cheapest(frontier(log, _Price({"mm": 50.0, "ln1": 1.0, "ln2": 1.0})))
    assert pick.purpose == "two norms" and pick.changes == 2


def test_no_passing_point_means_no_cheapest_and_nan_errors_sort_last_on_the_front():
    log = [_ev("as given", [], math.nan, False), _ev("x", ["a"], 0.3, False)]
    front = frontier(log, _Price({"a": 1.0}))
    assert cheapest(front) is None
    assert [p.pareto for p in front.points] == [False, True]


def test_the_plot_is_a_png():
    log = [_ev("as given", [], 0.5, False), _ev("all", ["a"], 1e-6, True)]
    front = frontier(log, _Price({"a": 3.0}))
    assert frontier_png(front, cheapest(front))[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------ end to end
def _gn_overflow(tmp_path):
    import numpy as np
    import onnx

    from . import models as M

    model = M.device_group_norm_overflow()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npz"
    np.savez(x, **M.feeds(model, 10, 1.0))
    return path, x


def test_bisect_prices_the_evaluations_and_can_choose_by_cost(tmp_path, capsys):
    """--frontier adds the ranked prefixes, prices every configuration (npu.cost), writes frontier.png and the table;
    --choose cost takes the cheapest passing configuration, and the report gives both fixes' estimated times."""
    import json

    from mschecker.cli import main

    path, x = _gn_overflow(tmp_path)
    out = tmp_path / "fix"
    code = main(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out", str(out),
                 "--json", "--no-progress", "--frontier", "--choose", "cost", "--no-rescale"])
    text = capsys.readouterr().out
    assert code == 0 and "accuracy-cost frontier" in text and "estimated device time" in text
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((out / "bisect_report.json").read_text())
    points = doc["frontier"]["points"]
    configs = {tuple(p["config"]["keep_dtype"]) for p in points}
    assert {(), ("/scale_up/Mul",), ("/norm/Mul/GroupNorm", "/scale_up/Mul")} <= configs  # as given .. all-fp32
    assert any(p["pareto"] for p in points)
    assert doc["search"]["order"]["order"] == "cost"   # --choose cost orders the candidates by error per second
    cost = doc["cost"]
    # (on a graph this small the Casts of an island cost more than fp32 arithmetic: all-fp32 can be the cheapest)
    assert cost["baseline_estimated_seconds"] > 0
    assert cost["fix_estimated_seconds"] <= cost["fewest_moves_estimated_seconds"]
    passing = [p["estimated_seconds"] for p in points if p["passed"]]
    assert cost["fix_estimated_seconds"] == min(passing)


def test_a_measured_time_changes_the_price_and_a_bad_cost_file_is_exit_2_before_the_search(tmp_path, capsys):
    from mschecker.cli import main

    path, x = _gn_overflow(tmp_path)
    bad = tmp_path / "cost.csv"
    bad.write_text("op,dtype,time_us\n/norm/Mul/GroupNorm,float32,-3\n")
    argv = ["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out", str(tmp_path / "o"),
            "--no-progress", "--cost", str(bad), "--no-rescale"]  # the moves priced (the rescale would fix it)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cost.csv" in err[0] and not (tmp_path / "o" / "keep_dtype.cfg").exists()
    bad.write_text("op,dtype,time_us\n/nope,float32,3\n")
    assert main(argv) == 2 and "matches no device op" in capsys.readouterr().err
    bad.write_text("op,dtype,time_us\n/norm/Mul/GroupNorm,float32,5000\n")
    assert main(argv + ["--json"]) == 0
    import json

    doc = json.loads((tmp_path / "o" / "bisect_report.json").read_text())
    fp32_gn = [p for p in doc["frontier"]["points"] if "/norm/Mul/GroupNorm" in p["config"]["keep_dtype"]]
    assert fp32_gn and all(p["estimated_seconds"] >= 5000e-6 for p in fp32_gn)


def test_pricing_needs_a_device_profile(tmp_path, capsys):
    from mschecker.cli import main

    from ..profiles import GENERIC_FP16

    path, x = _gn_overflow(tmp_path)
    assert main(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out",
                 str(tmp_path / "o"), "--no-progress", "--frontier", "--profile", str(GENERIC_FP16)]) == 2
    assert "needs a device profile" in capsys.readouterr().err
