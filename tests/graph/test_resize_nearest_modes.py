"""Resize mode=nearest, every nearest_mode x coordinate_transformation_mode, against onnx.reference (fast: tiny
tensors). The executor takes a np.repeat shortcut for integer factors where it proves the result equal
(mschecker/graph/ops/tensor.py, _resize_fast_scale) and delegates the rest to onnx.reference; a wrong rounding
admitted to the shortcut (floor vs ceil vs round_prefer_floor vs round_prefer_ceil) moves a row or column by one
at the ties: asymmetric with an even factor puts every other output exactly half-way, half_pixel with an even
downscale or a scale of 1.5 / 2.5 does too."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.policy import NpuPolicy

NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
CTM = ("half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners", "half_pixel_symmetric")
SCALES = ((1, 1, 2, 2), (1, 1, 3, 3), (1, 1, 4, 2), (1, 1, 1.5, 2.5), (1, 1, 0.5, 0.5), (1, 1, 2, 1))


def _model(nearest, ctm, by_sizes, opset=19):
    inputs = ["x", "", "", "sz"] if by_sizes else ["x", "", "sc"]
    node = h.make_node("Resize", inputs, ["y"], mode="nearest", nearest_mode=nearest,
                       coordinate_transformation_mode=ctm)
    extra = [h.make_tensor_value_info("sz", T.INT64, [4])] if by_sizes else \
        [h.make_tensor_value_info("sc", T.FLOAT, [4])]
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 5])] + extra,
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


X = np.arange(40, dtype=np.float32).reshape(1, 2, 4, 5) * 1.25 - 7  # distinct values: a moved index shows


@pytest.mark.parametrize("nearest,ctm", list(itertools.product(NEAREST, CTM)))
def test_every_nearest_mode_matches_onnx_reference_by_scales(nearest, ctm):
    m = _model(nearest, ctm, by_sizes=False)
    ref = ReferenceEvaluator(m)
    for policy in (ReferencePolicy(), NpuPolicy("fp32")):
        ex = Executor(m, policy)
        for scales in SCALES:
            sc = np.array(scales, np.float32)
            want = ref.run(None, {"x": X, "sc": sc})[0]
            got = ex.run({"x": X, "sc": sc})["y"]
            assert got.shape == want.shape, (scales, policy.name)
            np.testing.assert_array_equal(np.asarray(got, np.float64), want.astype(np.float64),
                                          err_msg=f"{nearest} {ctm} scales {scales} {policy.name}")


@pytest.mark.parametrize("nearest,ctm", list(itertools.product(NEAREST, CTM)))
def test_every_nearest_mode_matches_onnx_reference_by_sizes(nearest, ctm):
    m = _model(nearest, ctm, by_sizes=True)
    ref = ReferenceEvaluator(m)
    ex = Executor(m, ReferencePolicy())
    for sizes in ((1, 2, 8, 10), (1, 2, 12, 15), (1, 2, 8, 5), (1, 2, 6, 7), (1, 2, 2, 5), (1, 2, 16, 20)):
        sz = np.array(sizes, np.int64)
        want = ref.run(None, {"x": X, "sz": sz})[0]
        got = ex.run({"x": X, "sz": sz})["y"]
        np.testing.assert_array_equal(np.asarray(got, np.float64), want.astype(np.float64),
                                      err_msg=f"{nearest} {ctm} sizes {sizes}")


def test_the_half_way_ties_are_really_exercised():
    """The cases above reach ties: asymmetric x2 puts odd outputs at k + 0.5, where the four modes split
    (floor/round_prefer_floor -> k, ceil/round_prefer_ceil -> k + 1); half_pixel x2 never ties but floor/ceil
    still differ from rounding there (k -/+ 0.25)."""
    outs = {}
    for nearest in NEAREST:
        for ctm in ("asymmetric", "half_pixel"):
            m = _model(nearest, ctm, by_sizes=False)
            outs[nearest, ctm] = ReferenceEvaluator(m).run(None, {"x": X, "sc": np.array([1, 1, 2, 2], np.float32)})[0]
    assert np.array_equal(outs["floor", "asymmetric"], outs["round_prefer_floor", "asymmetric"])
    assert np.array_equal(outs["ceil", "asymmetric"], outs["round_prefer_ceil", "asymmetric"])
    assert not np.array_equal(outs["floor", "asymmetric"], outs["ceil", "asymmetric"])
    assert np.array_equal(outs["round_prefer_floor", "half_pixel"], outs["round_prefer_ceil", "half_pixel"])
    assert not np.array_equal(outs["floor", "half_pixel"], outs["round_prefer_floor", "half_pixel"])
    assert not np.array_equal(outs["ceil", "half_pixel"], outs["round_prefer_floor", "half_pixel"])
