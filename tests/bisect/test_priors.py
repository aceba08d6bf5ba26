"""The search's candidate order (mschecker/bisect/priors.py): AutoCast-style priors and error per second of the move,
on hand-made analyses (the arithmetic) and end to end through bisect (--order, the report, the cost order's
effect on which culprits are found)."""
from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import helper

from mschecker.bisect.lockstep import Analysis, NodeRecord, OutputRecord
from mschecker.bisect.priors import DATA_MAX, INIT_MAX, Prior, item_prior, move_seconds, node_priors, order_candidates
from mschecker.bisect.stats import ErrorStats, ReferenceRange
from mschecker.compare import ToleranceRule

RULE = ToleranceRule.from_args(tolerance=1e-2)


def _stats(rel_l2: float) -> ErrorStats:
    ref = np.ones(4)
    return ErrorStats.of(ref * (1 + rel_l2), ref, RULE, "t")


def _record(i, name, op_type, own, peak=1.0, inputs=()):
    out = OutputRecord(f"{name}_out", (4,), own=_stats(own), reference=ReferenceRange(peak=peak))
    return NodeRecord(i, name, op_type, "", False, outputs=[out], inputs=list(inputs))


def _analysis(records, ranges=None):
    ranges = ranges or {o.tensor: o.reference for r in records for o in r.outputs}
    return Analysis(records, {}, [], [], ranges)


def _node(name, op_type, inputs):
    return helper.make_node(op_type, list(inputs), [f"{name}_out"], name=name)


def test_each_prior_is_read_from_its_own_evidence():
    """range: a float input or output beyond 512 (an input's range too, and a graph input's from the feeds);
    init: a constant beyond 65504; class: torch.autocast's float32 list. Constants do not count for range."""
    # literals, not the module's constants: a slip in DATA_MAX / INIT_MAX must fail here
    recs = [_record(0, "mm", "MatMul", 0.1, peak=520.0),                     # its output passes 512
            _record(1, "sm", "Softmax", 0.1, peak=1.0, inputs=["mm_out"]),   # reads it: range too, and class
            _record(2, "mul", "Mul", 0.1, peak=1.0),                         # a big constant: init
            _record(3, "add", "Add", 0.1, peak=512.0),                       # exactly 512: not beyond
            _record(4, "sub", "Sub", 0.1, peak=1.0)]                         # a constant of exactly 65504
    nodes = {"mm": _node("mm", "MatMul", ["x", "w"]), "sm": _node("sm", "Softmax", ["mm_out"]),
             "mul": _node("mul", "Mul", ["x", "big"]), "add": _node("add", "Add", ["g", "w"]),
             "sub": _node("sub", "Sub", ["x", "edge"])}
    consts = {"w": np.full((4, 4), 1e6, np.float32), "big": np.float32(70000.0), "edge": np.float32(65504.0)}
    p = node_priors(_analysis(recs), nodes, consts, {"x": np.ones(4, np.float32), "g": np.full(4, 600.0)})
    assert p["mm"] == Prior(range=True, init=True, op_class=False, peak=520.0)
    assert not p["sub"].init and not p["sub"].range
    assert (DATA_MAX, INIT_MAX) == (512.0, 65504.0)
    assert (p["sm"].range, p["sm"].init, p["sm"].op_class) == (True, False, True)
    assert (p["mul"].range, p["mul"].init, p["mul"].op_class) == (False, True, False)
    assert p["add"].range and p["add"].peak == 600.0    # the graph input g (feeds), not the constant w
    assert Prior(True, True, True).weight == 8.0 and Prior(op_class=True).weight == 2.0 and Prior().weight == 1.0


def test_the_orders_differ_only_where_priors_or_cost_say_so():
    recs = [_record(0, "a", "Add", 0.30), _record(1, "b", "Softmax", 0.20), _record(2, "c", "Exp", 0.12),
            _record(3, "d", "Exp", 0.01)]
    a = _analysis(recs)
    ranked = ["a", "b", "c", "d"]
    priors = {r.name: Prior(op_class=r.op_type in ("Softmax", "Exp")) for r in recs}
    assert order_candidates(ranked, a, "error").items == ranked
    # Softmax 0.20 * 2 = 0.40 overtakes 0.30; Exp 0.12 * 2 = 0.24 does not (it would at a factor of 3)
    assert order_candidates(ranked, a, "priors", priors).items == ["b", "a", "c", "d"]
    seconds = {"a": 1.0, "b": 10.0, "c": 0.1, "d": 1.0}
    o = order_candidates(ranked, a, "cost", priors, seconds)
    assert o.items == ["c", "a", "b", "d"]       # 2.4, 0.3, 0.04, 0.02 per second
    assert o.score["c"] == pytest.approx(2.4) and o.move_seconds == seconds
    doc = o.to_dict()
    assert doc["order"] == "cost" and [r["item"] for r in doc["top"]] == o.items
    with pytest.raises(ValueError):
        order_candidates(ranked, a, "cost", priors)        # no move costs
    with pytest.raises(ValueError):
        order_candidates(ranked, a, "fastest")


def test_overflow_stays_first_and_ties_keep_the_measured_ranking():
    recs = [_record(0, "big", "Mul", 0.01), _record(1, "x", "Exp", 0.5), _record(2, "y", "Add", 0.25)]
    recs[0].outputs[0].headroom = None
    from mschecker.bisect.stats import Headroom
    recs[0].outputs[0].headroom = Headroom("float16", 0.0, 0.0, 0, 4, 0, 0, 0.0)   # an inf: overflow
    a = _analysis(recs)
    assert recs[0].overflow
    priors = {r.name: Prior(op_class=r.op_type == "Exp") for r in recs}
    assert order_candidates(["big", "x", "y"], a, "priors", priors).items == ["big", "x", "y"]
    tie = {"big": Prior(), "x": Prior(), "y": Prior(op_class=True)}      # 0.5 vs 0.25 * 2: a tie, x first
    assert order_candidates(["big", "x", "y"], a, "priors", tie).items == ["big", "x", "y"]
    # infinite own error (NaN on the device) ranks as the largest
    recs[1].outputs[0].own = _stats(math.inf)
    assert order_candidates(["big", "y", "x"], a, "priors", tie).items[1] == "x"


def test_op_type_items_take_their_nodes_priors_and_costs():
    recs = [_record(0, "n0", "Softmax", 0.1, peak=1.0), _record(1, "n1", "Softmax", 0.1, peak=1e3, inputs=["t"])]
    a = _analysis(recs)
    p = {"n0": Prior(op_class=True, peak=1.0), "n1": Prior(range=True, op_class=True, peak=1e3)}
    merged = item_prior("OpType::Softmax", a, p)
    assert merged.range and merged.op_class and not merged.init and merged.peak == 1e3

    class _Cost:
        def __init__(self, by_op):
            self.by_op = by_op
    secs = move_seconds(["OpType::Softmax", "n0"], a, _Cost({"n0": 1.0, "n1": 2.0}), _Cost({"n0": 1.5, "n1": 4.0}),
                        lambda t: 0.25)
    # n0: 0.5 + Casts of its output; n1: 2.0 + Casts of its input t and its output
    assert secs == {"OpType::Softmax": pytest.approx(0.5 + 0.25 + 2.0 + 0.5), "n0": pytest.approx(0.75)}


# ------------------------------------------------------------------------------------------------ end to end
def _gelu_branches(tmp_path):
    """Three MatMul -> Gelu branches, each an output (tests/bisect/models.py)."""
    from . import models as M

    model = M.gelu_branches(n=3, d=64, rows=8)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npz"
    np.savez(x, **M.feeds(model, 3, 1.0))
    return path, x


def test_the_cost_order_finds_a_cheaper_fix_on_a_real_text_encoder():
    """The TorchScript export of a CLIP text encoder (tests/fixtures/real_sd) at 3e-3 on ascend910b: ordered by
    own error the search keeps two nodes in fp32; ordered by error per second it finds one cheaper node that
    suffices (benchmarks/bisect_cost.py records both; the evaluations stay within the bound)."""
    import warnings
    from pathlib import Path

    from mschecker.bisect import Sample, bisect_model

    d = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd" / "text_encoder_ts17"
    samples = [Sample("s", {"input_ids": np.load(d / "input_ids.npy")})]
    runs = {}
    for order in ("error", "cost"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs[order] = bisect_model(d / "model.onnx", samples, tolerance=3e-3, check_onnx=False, choose="cost",
                                       order=order)
    for r in runs.values():
        assert r.verdict == "FIXED" and r.search.located_in <= r.search.bound
    assert runs["cost"].cost_of_fewest < runs["error"].cost_of_fewest
    assert runs["cost"].search.recommended.changes < runs["error"].search.recommended.changes


def test_bisect_order_flag_reports_the_order_and_refuses_cost_without_a_chip(tmp_path, capsys):
    from mschecker.cli import main

    from ..profiles import GENERIC_FP16

    path, x = _gelu_branches(tmp_path)
    base = ["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-3", "--no-progress", "--json"]
    assert main(base + ["--out", str(tmp_path / "p"), "--order", "priors"]) in (0, 1)
    text = capsys.readouterr().out
    assert "candidate order: own error x priors" in text
    doc = json.loads((tmp_path / "p" / "bisect_report.json").read_text())
    assert doc["search"]["order"]["order"] == "priors" and doc["search"]["order"]["top"]
    assert main(base + ["--out", str(tmp_path / "c"), "--order", "cost"]) in (0, 1)
    doc = json.loads((tmp_path / "c" / "bisect_report.json").read_text())
    assert all(r["move_seconds"] > 0 for r in doc["search"]["order"]["top"])
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "g"), "--order", "cost", "--profile", str(GENERIC_FP16)]) == 2
    assert "needs a device profile" in capsys.readouterr().err
    assert not (tmp_path / "g").exists() or not any((tmp_path / "g").iterdir())
