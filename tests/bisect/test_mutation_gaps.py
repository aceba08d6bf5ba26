"""What issue 28's bisect mutants showed no test checked: every evaluation of the fix search judges every input
set, the first crossing follows the accumulated error (not the own error), and an op-type entry needs every node
of the type and at least two of them. Each test here fails under the mutant of that class (tools/mutants)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.bisect import Sample, bisect_model
from mschecker.bisect.lockstep import Analysis, NodeRecord, analyse, reference_executor
from mschecker.bisect.search import FixConfig
from mschecker.bisect.writers import Recommendation
from mschecker.compare import ToleranceRule
from mschecker.npu.profile import load_profile

from ..profiles import GENERIC_FP16
from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy

from mschecker.npu.profile import load_profile

from ..profiles import GENERIC_FP16
from . import models as M

# the planted hazard is fp16 LayerNorm statistics, which the device presets' TBE LayerNorm kernels do not have: the
# search's mechanics are tested under the generic fp16 test profile (tests/profiles.py)
GENERIC = str(GENERIC_FP16)


def _two_input_norms(d: int = 256, rows: int = 4) -> onnx.ModelProto:
    """ln_a normalizes 40 * x, ln_b 40 * z: each overflows fp16 statistics only when its own input is loud."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.full((d,), 40.0, np.float32), "up"),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "gamma"),
             numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "beta")]
    nodes = [helper.make_node("Mul", ["x", "up"], ["xu"], name="up_a"),
             helper.make_node("LayerNormalization", ["xu", "gamma", "beta"], ["ya"], name="ln_a", axis=-1),
             helper.make_node("Mul", ["z", "up"], ["zu"], name="up_b"),
             helper.make_node("LayerNormalization", ["zu", "gamma", "beta"], ["yb"], name="ln_b", axis=-1)]
    f32 = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [rows, d]) for n in ("x", "z", "ya", "yb")]
    graph = helper.make_graph(nodes, "two_norms", f32[:2], f32[2:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _set(seed: int, x_scale: float, z_scale: float, rows: int = 4, d: int = 256) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": (x_scale * rng.standard_normal((rows, d))).astype(np.float32),
            "z": (z_scale * rng.standard_normal((rows, d))).astype(np.float32)}


@pytest.mark.parametrize("order", ["quiet_first", "loud_first"])
def test_every_evaluation_judges_every_input_set(tmp_path, order):
    """Only the second input set fails (a quiet set first): every evaluation must report both sets, and the
    leave-one-out attribution must see that the fix is needed (judging the first set alone, it passes)."""
    model = M.layernorm_pair(big=40.0)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    quiet, loud = Sample("quiet", M.feeds(model, 1, 0.05)), Sample("loud", M.feeds(model, 2, 3.0))
    samples = [quiet, loud] if order == "quiet_first" else [loud, quiet]
    r = bisect_model(path, samples, tolerance=1e-2, check_onnx=False, profile=GENERIC)
    assert r.verdict == "FIXED" and r.recommendation.by_node == {"ln_big": "high_precision"}
    assert all(len(e.per_sample) == 2 for e in r.search.log), [len(e.per_sample) for e in r.search.log]
    assert r.attribution and not any(a.passes_without for a in r.attribution)
    without = [e for e in r.search.log if e.config.changes == 0] or [r.search.baseline]
    assert not without[0].passed and without[0].per_sample[samples.index(loud)]["y_big"].passed is False


@pytest.mark.parametrize("swap", [False, True])
def test_a_fix_needs_what_each_input_set_needs(tmp_path, swap):
    """Set 1 needs ln_a, set 2 needs ln_b: judged on one set alone, the search would stop at one node and the
    proof on both would fail."""
    model = _two_input_norms()
    path = tmp_path / "two.onnx"
    onnx.save(model, str(path))
    samples = [Sample("a_loud", _set(1, 3.0, 0.05)), Sample("b_loud", _set(2, 0.05, 3.0))]
    if swap:
        samples.reverse()
    r = bisect_model(path, samples, tolerance=1e-2, check_onnx=False, profile=GENERIC)
    assert r.verdict == "FIXED" and r.proof.passed
    assert {n.name for n in r.culprits} == {"ln_a", "ln_b"}
    assert all(len(e.per_sample) == 2 for e in r.search.log)


def test_first_crossing_follows_the_accumulated_error(tmp_path):
    """In a deep fp16 chain no node adds much error of its own, but the accumulated error grows past the
    threshold: the first crossing is the first node whose accumulated error passes it, although its own error
    is far below."""
    model = M.deep_chain()
    path = tmp_path / "chain.onnx"
    onnx.save(model, str(path))
    rule = ToleranceRule.from_args(tolerance=1e-2)
    a = analyse(reference_executor(str(path)), Executor(str(path), NpuPolicy("ascend910b")),
                [Sample("s", M.feeds(model, 3))], rule)
    own_max = max(n.own_error for n in a.nodes)
    acc_max = max(n.error for n in a.nodes)
    assert acc_max > 3 * own_max  # the chain accumulates
    threshold = (own_max + acc_max) / 2
    first = a.first_crossing(threshold)
    expected = next(n for n in a.nodes if n.error > threshold)
    assert first is expected and first.own_error < threshold and first.index > 0
    assert all(n.error <= threshold for n in a.nodes[:first.index])


def _analysis(types: dict[str, str], folded=()) -> Analysis:
    nodes = [NodeRecord(i, name, t, "fp16", name in folded) for i, (name, t) in enumerate(types.items())]
    return Analysis(nodes, {}, [], [], {})


@pytest.mark.parametrize("move", ["keep_dtype", "high_precision"])
def test_an_op_type_entry_needs_every_node_of_the_type_and_at_least_two(move):
    """Both sides of the rule: the only node of its type stays a node name (an op-type entry would also select
    nodes a later model adds); two of two become one op-type entry; two of three stay node names; a folded node
    does not count."""
    a = _analysis({"ln1": "LayerNormalization", "g1": "Gelu", "g2": "Gelu", "m1": "MatMul", "m2": "MatMul",
                   "m3": "MatMul", "s1": "Softmax", "s2": "Softmax"}, folded=("s2",))

    def rec(names):
        generic = load_profile(GENERIC_FP16)
        r = Recommendation.from_config(FixConfig(**{move: frozenset(names)}), a, generic)
        p = r.items.profile(generic)  # what the files will hold
        return list(p.keep_dtype), dict(p.implmode_by_op_type), dict(p.implmode_by_node)

    keep, by_type, by_node = rec({"ln1"})  # one node, the only one of its type: a node entry
    assert keep == ["ln1"] if move == "keep_dtype" else (by_node == {"ln1": "high_precision"} and not by_type)
    keep, by_type, by_node = rec({"g1", "g2"})  # two of two: one op-type entry
    assert keep == ["OpType::Gelu"] if move == "keep_dtype" else \
        (by_type == {"Gelu": "high_precision"} and not by_node)
    keep, by_type, by_node = rec({"m1", "m2"})  # two of three: node entries
    assert keep == ["m1", "m2"] if move == "keep_dtype" else \
        (by_node == {"m1": "high_precision", "m2": "high_precision"} and not by_type)
    keep, by_type, by_node = rec({"s1"})  # one of one non-folded (s2 is folded): still a node entry
    assert keep == ["s1"] if move == "keep_dtype" else (by_node == {"s1": "high_precision"} and not by_type)
