"""Per-tensor metrics and headroom of the bisection, on hand-made tensors with known answers."""
from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from mschecker.bisect.islands import islands
from mschecker.bisect.stats import SENTINEL_MAGNITUDE, ErrorStats, Headroom, ReferenceRange, is_overflow
from mschecker.compare import ToleranceRule

RULE = ToleranceRule.from_args(tolerance=1e-2)


def test_error_stats_values():
    ref = np.array([1.0, 2.0, -3.0, 4.0])
    npu = np.array([1.0, 2.004, -3.0, 4.1], np.float16)  # 2.004 -> 2.00390625: rel 1.95e-3
    s = ErrorStats.of(npu, ref, RULE, "t")
    d = npu.astype(np.float64) - ref
    assert math.isclose(s.rel_l2, np.linalg.norm(d) / np.linalg.norm(ref), rel_tol=1e-12)
    assert math.isclose(s.max_abs, np.abs(d).max(), rel_tol=1e-12)
    assert math.isclose(s.max_rel, (np.abs(d) / np.abs(ref)).max(), rel_tol=1e-12)
    assert s.ratio_1e3 == 0.5 and s.ratio_5e3 == 0.75  # 1.0 and -3.0 exact; 2.004 between; 4.1 off
    assert not s.passed  # 4.1 vs 4: 0.1 > 0.01 + 0.04
    assert s.ulp_p99 is not None and s.ulp_p99 > 0


def test_a_nan_where_the_reference_is_finite_is_infinite_error():
    s = ErrorStats.of(np.array([1.0, np.nan], np.float16), np.array([1.0, 2.0]), RULE, "t")
    assert s.rel_l2 == math.inf and not s.passed
    worst = ErrorStats.of(np.array([1.0, 2.0], np.float16), np.array([1.0, 2.0]), RULE, "t").worst(s)
    assert worst.rel_l2 == math.inf and not worst.passed


def test_headroom_counts():
    big = np.float16(65504.0)
    x = np.array([big, -big, 1.0, np.inf, np.nan, 1e-6, 0.0, 3e-5], np.float16)
    h = Headroom.of(x, hidden=2, hidden_nan=1)
    assert h.peak == 65504.0 and h.fraction_of_max == 1.0
    assert (h.nan, h.inf, h.saturated, h.hidden_overflow, h.hidden_nan) == (1, 1, 2, 2, 1)
    assert h.below_normal_share == 2 / 8  # 1e-6 and 3e-5 are below fp16's smallest normal 6.1e-5
    assert h.overflowed


def test_below_normal_share_counts_only_nonzero_subnormals():
    x = np.array([0.0, 1e-6, 5e-5, 7e-5, 1.0], np.float16)  # fp16 smallest normal 6.1035e-5
    assert Headroom.of(x).below_normal_share == 2 / 5


def test_overflow_rule_and_sentinels():
    inf_head = Headroom.of(np.array([np.inf, 1.0], np.float16))
    assert is_overflow(inf_head, ReferenceRange(peak=7e4))          # a real value past fp16's max
    assert is_overflow(inf_head, ReferenceRange(peak=10.0))         # an overflow inside a kernel
    assert not is_overflow(inf_head, ReferenceRange(peak=3.4e38))   # a -3.4e38 mask: fp16's -inf is right
    assert not is_overflow(inf_head, ReferenceRange(peak=SENTINEL_MAGNITUDE))
    assert is_overflow(inf_head, ReferenceRange(peak=SENTINEL_MAGNITUDE / 2))
    assert not is_overflow(inf_head, ReferenceRange(peak=1.0, nonfinite=True))
    nan_head = Headroom.of(np.array([np.nan], np.float16))
    assert is_overflow(nan_head, ReferenceRange(peak=1.0))
    clamped = Headroom.of(np.array([65504.0], np.float16), hidden=1)
    assert is_overflow(clamped, ReferenceRange(peak=1e5))
    assert not is_overflow(Headroom.of(np.array([65504.0], np.float16)), ReferenceRange(peak=65504.0))


def test_islands_and_cast_points():
    """a -> b -> c -> d chain plus a side reader e of b: keeping b, c gives one island entered through a's
    output and left through c's output (read by d) and b's output (read by e, outside)."""
    nodes = [helper.make_node("Relu", ["x"], ["ta"], name="a"), helper.make_node("Relu", ["ta"], ["tb"], name="b"),
             helper.make_node("Relu", ["tb"], ["tc"], name="c"), helper.make_node("Relu", ["tc"], ["y"], name="d"),
             helper.make_node("Relu", ["tb"], ["z"], name="e")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in ("y", "z")])
    floats = {"x", "ta", "tb", "tc", "y", "z"}
    order = ["a", "b", "c", "d", "e"]
    (one,) = islands(graph, {"b", "c"}, order, floats)
    assert one.nodes == ["b", "c"] and one.cast_in == ["ta"] and one.cast_out == ["tb", "tc"]
    two = islands(graph, {"a", "d"}, order, floats)  # not connected: two islands
    assert [i.nodes for i in two] == [["a"], ["d"]]
    assert two[0].cast_in == ["x"] and two[1].cast_out == ["y"]


def test_brief_stats_agree_with_the_full_ones():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000) * 3
    npu = (ref * (1 + 1e-3 * rng.standard_normal(1000))).astype(np.float16)
    full, brief = ErrorStats.of(npu, ref, RULE, "t"), ErrorStats.brief(npu, ref, RULE)
    for key in ("rel_l2", "max_abs", "max_rel"):
        assert math.isclose(getattr(full, key), getattr(brief, key), rel_tol=1e-9), key
    assert full.passed == brief.passed
    npu[3] = np.inf
    assert ErrorStats.brief(npu, ref, RULE).rel_l2 == math.inf and not ErrorStats.brief(npu, ref, RULE).passed
    same = np.array([np.nan, -np.inf, 1.0])
    assert ErrorStats.brief(same.astype(np.float16), same, RULE).passed


@pytest.mark.parametrize("kind", ["bits", "normal", "huge", "tiny", "view", "rank0", "empty"])
def test_fp16_headroom_compiled_route_counts_what_numpy_counts(kind, monkeypatch):
    """Headroom.of of an fp16 tensor by _fastfp16.half_range (bits, one pass) equals the float32 chunked count
    (MSCHECKER_NO_FASTFP16=1): peak, NaN, inf, +-65504 and subnormal counts, for every bit pattern class."""
    pytest.importorskip("mschecker._fastfp16")
    rng = np.random.default_rng(len(kind))
    with np.errstate(over="ignore"):  # "huge" overflows to inf on purpose
        x = _HEADROOM_CASES[kind](rng)
    fast = Headroom.of(x)
    monkeypatch.setenv("MSCHECKER_NO_FASTFP16", "1")
    assert fast == Headroom.of(x)


_HEADROOM_CASES = {
    "bits": lambda rng: rng.integers(0, 65536, 40000, dtype=np.uint16).view(np.float16),
    "normal": lambda rng: rng.standard_normal(33333).astype(np.float16),
    "huge": lambda rng: np.clip(rng.standard_normal(5000) * 1e5, -7e4, 7e4).astype(np.float16),
    "tiny": lambda rng: (rng.standard_normal(4097) * 1e-6).astype(np.float16),
    "view": lambda rng: rng.integers(0, 65536, (300, 70), dtype=np.uint16).view(np.float16).T[::2],
    "rank0": lambda rng: np.array(np.inf, np.float16),
    "empty": lambda rng: np.zeros((0, 3), np.float16)}
