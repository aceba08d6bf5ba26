"""Elu, Selu, Celu, Softplus, Mish, HardSigmoid, HardSwish, Softsign, PRelu, ThresholdedRelu and ReduceProd in the
executor (mschecker/graph/ops/pointwise.py).

- Reference policy vs onnx.reference on float64 inputs, across opsets and attribute sets (the defaults included:
  a node without attributes must get ONNX's defaults). Both sides evaluate the same formulas in float64, so they
  agree to a few float64 roundings: rtol 1e-12 (a product of n factors: n u64 ~ 1e-15 for these sizes), where a
  wrong attribute, default or axis is off by O(1e-2) or more. Documented differences: HardSwish(-inf), Mish(-inf)
  and Softsign(+-inf) are the functions' limits (-0, -0, +-1) in our reference, NaN (inf * 0, inf / inf) in
  onnx.reference, as for SiLU and GELU (reference/activations.py).
- NPU policy: the node runs the registry variant the profile selects, in the node's dtype (fp16 under a generic
  fp16 profile), and the implmode picks between Elu's expm1 (high_precision) and exp - 1 (high_performance) forms;
  under a device profile (ascend910b) these ops have no implmode and run the device table's variant whatever the
  implmode.
- Integer PRelu and ReduceProd are exact numpy in the input's type.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.kernels.registry import get_kernel

from ..profiles import GENERIC_FP16

RNG = np.random.default_rng(11)
SPECIALS = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-4, -1e-4, 65504.0, -65504.0, 800.0, -800.0, 21.0, -3.0, 3.0,
                     np.nan, np.inf, -np.inf])
X = np.concatenate([RNG.standard_normal(40) * 4, SPECIALS]).reshape(4, 14)
ELEM = {np.dtype(np.float64): T.DOUBLE, np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16,
        np.dtype(np.int64): T.INT64, np.dtype(np.int32): T.INT32}


def _model(node, inputs, opset):
    vin = [h.make_tensor_value_info(n, ELEM[a.dtype], a.shape) for n, a in inputs.items()]
    vout = [h.make_tensor_value_info(o, T.UNDEFINED, None) for o in node.output]
    return h.make_model(h.make_graph([node], "g", vin, vout), opset_imports=[h.make_opsetid("", opset)])


def _onnx_reference(model, inputs):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, inputs)[0]


UNARY = [("Elu", {}, 6), ("Elu", {"alpha": 0.3}, 22), ("Selu", {}, 6), ("Selu", {"alpha": 2.0, "gamma": 0.5}, 22),
         ("Celu", {}, 12), ("Celu", {"alpha": 2.5}, 12), ("Softplus", {}, 1), ("Softplus", {}, 22), ("Mish", {}, 18),
         ("HardSigmoid", {}, 6), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.25}, 22), ("HardSwish", {}, 14),
         ("Softsign", {}, 22), ("ThresholdedRelu", {}, 10), ("ThresholdedRelu", {"alpha": -0.5}, 22)]
# (op, input) where our reference takes the function's limit and onnx.reference's formula gives NaN
LIMITS = {("HardSwish", -np.inf): -0.0, ("Mish", -np.inf): -0.0, ("Softsign", np.inf): 1.0, ("Softsign", -np.inf): -1.0}


@pytest.mark.parametrize("op,attrs,opset", UNARY, ids=[f"{o}-{a or 'defaults'}-opset{s}" for o, a, s in UNARY])
def test_unary_matches_onnx_reference(op, attrs, opset):
    model = _model(h.make_node(op, ["x"], ["y"], **attrs), {"x": X}, opset)
    got = Executor(model, ReferencePolicy()).run({"x": X})["y"]
    want = _onnx_reference(model, {"x": X}).copy()
    assert got.dtype == np.float64
    for (lop, at), value in LIMITS.items():
        if lop == op:
            assert np.isnan(want[X == at]).all()  # what onnx.reference's formula gives there
            want[X == at] = value
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{op} {attrs}")


PRELU = [("scalar slope", X, np.array([0.25]), 16), ("per-channel (C, 1) slope", X, RNG.uniform(0, 3, (4, 1)), 9),
         ("trailing slope", X, RNG.standard_normal(14), 7),
         ("old per-channel (C,) slope on NCHW", RNG.standard_normal((2, 3, 4, 5)), RNG.standard_normal(3), 6)]


@pytest.mark.parametrize("label,x,slope,opset", PRELU, ids=[p[0] for p in PRELU])
def test_prelu_matches_onnx_reference(label, x, slope, opset):
    feeds = {"x": x, "s": slope}
    model = _model(h.make_node("PRelu", ["x", "s"], ["y"]), feeds, opset)
    got = Executor(model, ReferencePolicy()).run(feeds)["y"]
    np.testing.assert_allclose(got, _onnx_reference(model, feeds), rtol=1e-12, atol=0)


def test_integer_prelu_is_exact():
    x, s = np.array([[-3, 0, 5], [7, -2, -1]], np.int64), np.array([2, -1, 3], np.int64)
    model = _model(h.make_node("PRelu", ["x", "s"], ["y"]), {"x": x, "s": s}, 16)
    got = Executor(model, ReferencePolicy()).run({"x": x, "s": s})["y"]
    assert got.dtype == np.int64 and got.tolist() == [[-6, 0, 5], [7, 2, -3]]


P = RNG.uniform(0.5, 2.0, (3, 4, 5)) * RNG.choice([-1.0, 1.0], (3, 4, 5))
REDUCE = [("axes input", 18, {"keepdims": 1}, [1]), ("two axes, keepdims 0", 18, {"keepdims": 0}, [0, 2]),
          ("all axes (no axes input)", 18, {}, None), ("empty axes, noop", 18, {"noop_with_empty_axes": 1}, []),
          ("axes attribute", 13, {"axes": [-1], "keepdims": 0}, None), ("all axes, opset 13", 13, {}, None)]


@pytest.mark.parametrize("label,opset,attrs,axes", REDUCE, ids=[r[0] for r in REDUCE])
def test_reduce_prod_matches_onnx_reference(label, opset, attrs, axes):
    feeds = {"x": P} if axes is None else {"x": P, "axes": np.array(axes, np.int64)}
    model = _model(h.make_node("ReduceProd", list(feeds), ["y"], **attrs), feeds, opset)
    got = Executor(model, ReferencePolicy()).run(feeds)["y"]
    want = _onnx_reference(model, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_reduce_prod_rank0_empty_and_integer():
    for x, want in ((np.array(2.5), 2.5), (np.zeros((2, 0)), [1.0, 1.0])):
        model = _model(h.make_node("ReduceProd", ["x"], ["y"], keepdims=0, **({"axes": [1]} if x.ndim else {})),
                       {"x": x}, 13)
        assert Executor(model, ReferencePolicy()).run({"x": x})["y"].tolist() == want
    xi = np.array([[2, -3], [4, 5]], np.int32)
    model = _model(h.make_node("ReduceProd", ["x"], ["y"], keepdims=0), {"x": xi}, 18)
    got = Executor(model, ReferencePolicy()).run({"x": xi})["y"]
    assert got.dtype == np.int32 and got.tolist() == -120


# --- NPU policy -------------------------------------------------------------------------------------------------
NPU_CASES = [("Elu", {"alpha": 0.5}, "elu", {"alpha": 0.5}), ("Softplus", {}, "softplus", {}),
             ("HardSigmoid", {}, "hard_sigmoid", {}), ("HardSwish", {}, "hard_swish", {}), ("Selu", {}, "selu", {}),
             ("ReduceProd", {"keepdims": 0}, "reduce_prod", {"axis": (0, 1), "keepdims": False})]


@pytest.mark.parametrize("implmode,elu_variant", [("high_precision", "fp16_fp32acc"),
                                                  ("high_performance", "fp16_exp_minus_1")])
@pytest.mark.parametrize("op,attrs,kernel,params", NPU_CASES, ids=[c[0] for c in NPU_CASES])
def test_npu_policy_runs_the_selected_variant(op, attrs, kernel, params, implmode, elu_variant):
    """A generic fp16 profile (force_fp16): the node computes in fp16 through the variant select_variant picks for
    its implmode, bit for bit (Elu: expm1 for high_precision, exp - 1 for high_performance)."""
    profile = load_profile(GENERIC_FP16).replace(implmode=implmode)
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    x[0, :5] = [-1e-3, -2e-4, 30.0, -4.2319e-4, -8.30078e-3]  # the last two: expm1 and exp - 1 differ by 1 fp16 ULP
    model = _model(h.make_node(op, ["x"], ["y"], **attrs), {"x": x}, 18)
    got = Executor(model, NpuPolicy(profile)).run({"x": x})["y"]
    assert got.dtype == np.float16
    info = get_kernel(kernel)
    if kernel == "elu":
        name = elu_variant
    elif kernel == "reduce_prod":
        name = "fp16_fp32acc" if implmode == "high_precision" else "fp16_fp16acc"
    else:
        name = "fp16_fp32acc"
    want = info.variant(name).fn(x.astype(np.float16), **params)
    if kernel == "elu":  # the input tells the two forms apart
        other = info.variant("fp16_exp_minus_1" if name == "fp16_fp32acc" else "fp16_fp32acc").fn(x.astype(np.float16),
                                                                                                 **params)
        assert not np.array_equal(other, want)
    assert np.array_equal(got.view(np.uint16), np.asarray(want).view(np.uint16)), (op, implmode, name)


DEVICE_VARIANTS = {"elu": "fp16_exp_minus_1", "softplus": "fp16_fp32acc", "hard_sigmoid": "fp16_fp32acc",
                   "hard_swish": "fp16_fp32acc", "selu": "fp16_fp32acc", "reduce_prod": "fp16_fp16acc"}


@pytest.mark.parametrize("implmode", ["default", "high_precision", "high_performance"])
@pytest.mark.parametrize("op,attrs,kernel,params", NPU_CASES, ids=[c[0] for c in NPU_CASES])
def test_device_profile_runs_the_device_tables_variant(op, attrs, kernel, params, implmode):
    """ascend910b: Elu, Softplus, HardSigmoid, HardSwish, Selu and ReduceProd(D) have no implmode on the device
    (implmode "none"), so every global implmode runs the variant the device table's row names, bit for bit."""
    from mschecker.npu.device_table import variant_for

    profile = load_profile("ascend910b").replace(implmode=implmode)
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    x[0, :5] = [-1e-3, -2e-4, 30.0, -4.2319e-4, -8.30078e-3]
    model = _model(h.make_node(op, ["x"], ["y"], **attrs), {"x": x}, 18)
    ex = Executor(model, NpuPolicy(profile))
    ir = ex.policy.op_type_of(ex.steps[0].node)
    name = DEVICE_VARIANTS[kernel]
    assert variant_for("ascend910b", ir, kernel, None) == name
    assert ex.steps[0].ctx.implmode == "none" and f"{kernel}:{name}" in ex.steps[0].ctx.description
    got = ex.run({"x": x})["y"]
    want = get_kernel(kernel).variant(name).fn(x.astype(np.float16), **params)
    assert got.dtype == np.float16
    assert np.array_equal(got.view(np.uint16), np.asarray(want).view(np.uint16)), (op, implmode, name)
