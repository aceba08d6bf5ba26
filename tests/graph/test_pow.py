"""ONNX Pow (mschecker/graph/ops/elementwise.py): bits that do not follow numpy's SIMD level.

- exponent 2 everywhere: a * a in the base's dtype, the correctly rounded square (what a correctly rounded pow
  returns), bit for bit, broadcast to ONNX's output shape (rank 0 included);
- any other exponent on a float32/float16 base: float64 power rounded to float32 and then the base's dtype,
  bit for bit, and within 1 ULP of onnx.reference (numpy's power in the base's dtype);
- integer bases keep their type; special values (0^-1, (-2)^0.5, inf) as IEEE pow gives them.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from mschecker.dtypes import ulp_distance
from mschecker.graph import Executor
from mschecker.graph.ops.elementwise import pow_
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile

RNG = np.random.default_rng(11)
ELEM = {np.dtype(np.float64): T.DOUBLE, np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16,
        np.dtype(np.int64): T.INT64, np.dtype(np.int32): T.INT32}


def _pow_model(a, b, opset=15):
    node = h.make_node("Pow", ["a", "b"], ["y"])
    vin = [h.make_tensor_value_info(n, ELEM[x.dtype], x.shape) for n, x in (("a", a), ("b", b))]
    vout = [h.make_tensor_value_info("y", T.UNDEFINED, None)]
    return h.make_model(h.make_graph([node], "g", vin, vout), opset_imports=[h.make_opsetid("", opset)])


def _run(a, b):
    """The op itself on these dtypes (the reference policy would run a float32 graph in float64)."""
    return pow_(None, {}, a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("a_shape,b_shape", [((3, 5), ()), ((3, 5), (1,)), ((), (1,)), ((), ()), ((2, 1), (1, 4))])
def test_square_is_a_times_a(dtype, a_shape, b_shape):
    a = (RNG.standard_normal(a_shape) * 7).astype(dtype)
    b = np.full(b_shape, 2, dtype)
    y = _run(a, b)
    want = np.broadcast_to(a * a, np.broadcast_shapes(a_shape, b_shape))
    assert y.dtype == dtype and y.shape == want.shape
    assert y.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_other_exponents_round_from_float64(dtype):
    a = np.abs(RNG.standard_normal((4, 50)) * 3).astype(dtype) + dtype(0.01)
    b = RNG.uniform(-3, 3, (4, 50)).astype(dtype)
    y = _run(a, b)
    want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32).astype(dtype)
    assert y.tobytes() == want.tobytes()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        theirs = ReferenceEvaluator(_pow_model(a, b)).run(None, {"a": a, "b": b})[0]
    assert ulp_distance(y, theirs, np.dtype(dtype).name).max() <= 1


def test_specials_and_integer_base():
    a = np.array([0.0, -2.0, np.inf, -np.inf, np.nan, 1.0, -0.0], np.float32)
    b = np.array([-1.0, 0.5, 2.0, 3.0, 0.0, np.nan, 2.0], np.float32)
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    y = _run(a, b)
    assert np.array_equal(np.isnan(y), np.isnan(want)) and np.array_equal(y[~np.isnan(y)], want[~np.isnan(want)])
    ai, bi = np.array([2, -3, 5], np.int64), np.array([3, 2, 0], np.int64)
    yi = _run(ai, bi)
    assert yi.dtype == np.int64 and yi.tolist() == [8, 9, 1]


def test_npu_fp16_square_and_general_exponent():
    """Under the fp16 NPU profile a float32 graph's Pow runs on fp16 storage: the square is the fp16 product."""
    a = (RNG.standard_normal((2, 8)) * 5).astype(np.float32)
    b = np.array(2.0, np.float32)
    y = Executor(_pow_model(a, b), NpuPolicy(load_profile("ascend910b"))).run({"a": a, "b": b})["y"]
    a16 = a.astype(np.float16)
    assert np.array_equal(np.asarray(y, np.float16), a16 * a16)
