"""Every SD-relevant op under the emulated NPU against a naive implementation of the same precision.

The peer: onnx.reference (not ours) run on the same graph with fp32 or fp16 inputs, i.e. numpy arithmetic in that
format. Both are measured against the float64 reference on the same rounded inputs; the house rule for a peer
baseline is ours <= 2x the naive error, plus one rounding of the output (u * max|y|) as the floor where the naive
error is ~0. The fp16 run uses high_precision implmode: high_performance deliberately swaps in approximations
(checked separately below against their documented error).
"""
import warnings

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from mschecker.graph import Executor, ReferencePolicy
from mschecker.kernels.entries import activations as K
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.knobs import apply_knobs
from mschecker.reference import elementary as em

from ..graph.test_sd_ops_vs_onnx_reference import CASES
from ..profiles import GENERIC_FP16


def _model(node, inputs, elem, opset):
    vin = [h.make_tensor_value_info(n, T.INT64 if a.dtype == np.int64 else (T.BOOL if a.dtype == np.bool_ else elem),
                                    a.shape) for n, a in inputs.items()]
    vout = [h.make_tensor_value_info(o, T.UNDEFINED, None) for o in node.output]
    return h.make_model(h.make_graph([node], "g", vin, vout), opset_imports=[h.make_opsetid("", opset)])


PROFILES = {"fp32": ("fp32", np.float32, T.FLOAT, 2.0**-24),
            "fp16": (load_profile("ascend910b").replace(implmode="high_precision"), np.float16, T.FLOAT16, 2.0**-11)}


@pytest.mark.parametrize("prec", sorted(PROFILES))
@pytest.mark.parametrize("name,node,inputs", CASES, ids=[c[0] for c in CASES])
def test_op_within_2x_of_naive_same_precision(name, node, inputs, prec):
    profile, dt, elem, u = PROFILES[prec]
    opset = 23 if node.op_type == "Attention" else 21
    low = {k: (v.astype(dt) if v.dtype == np.float64 else v) for k, v in inputs.items()}
    exact = {k: (v.astype(np.float64) if v.dtype == dt else v) for k, v in low.items()}
    ref = Executor(_model(node, exact, T.DOUBLE, opset), ReferencePolicy()).run(exact)
    ex = Executor(_model(node, low, elem, opset), NpuPolicy(profile))  # a registry gap is a failure
    ours = ex.run(low)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        naive = ReferenceEvaluator(_model(node, low, elem, opset)).run(None, low)
    for o, nv in zip(node.output, naive):
        r = ref[o]
        assert ours[o].dtype == dt
        e_ours = np.abs(ours[o].astype(np.float64) - r).max()
        e_naive = np.abs(np.asarray(nv, np.float64) - r).max()
        assert e_ours <= 2 * e_naive + u * np.abs(r).max(), (name, prec, e_ours, e_naive)


def _gelu_error(profile):
    """(the gelu variant bound, its output, max |error| against the float64 erf GELU off the NaNs) on a fp16 grid."""
    x = np.linspace(-10, 10, 4001).astype(np.float16)
    node = h.make_node("Gelu", ["x"], ["y"])
    ex = Executor(_model(node, {"x": x}, T.FLOAT16, 21), NpuPolicy(profile))
    variant = ex.steps[0].ctx.description.split("gelu:")[1]
    ref = Executor(_model(node, {"x": x.astype(np.float64)}, T.DOUBLE, 21), ReferencePolicy()).run(
        {"x": x.astype(np.float64)})["y"]
    with np.errstate(all="ignore"):
        y = ex.run({"x": x})["y"].astype(np.float64)
    return x, variant, y, np.nanmax(np.abs(y - ref))


def test_high_performance_gelu_is_the_documented_approximation():
    """A generic fp16 profile (high_performance) maps exact Gelu to an approximation variant; its error must be the
    one docs/NUMERICS.md §6 measured for that approximation (i-GELU 1.82e-2 at most, tanh form 4.73e-4) plus fp16
    rounding of inputs and output (u_fp16 (|x| + |y|) with |x| <= 10)."""
    _, variant, y, err = _gelu_error(load_profile(GENERIC_FP16))
    documented = {"fp16_poly": 1.82e-2, "fp16_tanh": 4.73e-4, "fp16_quick": 2.03e-2}[variant]
    assert not np.isnan(y).any() and err <= documented + 2.0**-11 * 20, (variant, err)


@pytest.mark.parametrize("chip", ["ascend910b", "ascend310p"])
def test_device_gelu_is_the_ascend_kernel_of_its_implmode(chip):
    """The device runs ONNX Gelu as the IR op Gelu (TBE gelu.py): its own default path is high_precision, the tanh
    form in fp32 (4.73e-4 from erf GELU); --op-precision Gelu=high_performance gives the fp16 i-GELU (1.82e-2),
    whose sign x * vrec(|x|) is NaN at x = 0 where vrec overflows IEEE-style (the table's pessimistic bracket on
    the 910B), finite where it saturates (the modelled reading, and every saturation-mode part). Slack as above:
    fp16 rounding of inputs and output."""
    x, variant, y, err = _gelu_error(chip)
    assert variant == "fp16_ascend_tanh" and not np.isnan(y).any()
    assert err <= K.GELU_APPROX_MAX_ABS_ERR["tanh"] + 2.0**-11 * 20, err
    for bracket in ("modelled", "pessimistic"):
        x, variant, y, err = _gelu_error(apply_knobs(chip, implmode_by_op_type={"Gelu": "high_performance"},
                                                     bracket=bracket))
        assert variant in ("fp16_ascend_igelu", "fp16_ascend_igelu_sat"), variant
        assert err <= K.ASCEND_IGELU_APPROX_MAX_ABS_ERR + 2.0**-11 * 20, (bracket, err)
        assert list(x[np.isnan(y)]) == ([0.0] if variant == "fp16_ascend_igelu" else []), (bracket, variant)
        if chip == "ascend310p":  # saturation overflow: the saturating twin whatever the bracket
            assert variant == "fp16_ascend_igelu_sat"
        elif bracket == "pessimistic":  # the 910B's IEEE reading of vrec
            assert variant == "fp16_ascend_igelu"


def _sin_via_float64(x):
    return em.rounded(np.sin, x)


@pytest.mark.parametrize("op,ufunc", [("Neg", np.negative), ("Sqrt", np.sqrt), ("Sin", _sin_via_float64),
                                      ("Log", em.log), ("Reciprocal", np.reciprocal), ("Sign", np.sign),
                                      ("IsNaN", np.isnan)])
def test_fp16_unary_op_is_numpys_ufunc_bit_for_bit(op, ufunc):
    """fp16 unary ops are answered from a table of their 65,536 results (ops/elementwise.py): under the fp16 NPU
    profile, every fp16 pattern (NaN payloads included), shuffled and in a strided view, gives the bits of the
    op's definition: numpy's ufunc for the exact ones, the float64 evaluation rounded to float32 and then fp16
    for Sin and Log (reference/elementary.py: numpy's own float32 sin/log bits follow the CPU's SIMD level)."""
    x = np.random.default_rng(7).permutation(np.arange(65536, dtype=np.uint16)).view(np.float16).reshape(256, 256)
    node = h.make_node(op, ["x"], ["y"])
    vout = [h.make_tensor_value_info("y", T.BOOL if op == "IsNaN" else T.FLOAT16, None)]
    model = h.make_model(h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT16, x.shape)], vout),
                         opset_imports=[h.make_opsetid("", 21)])
    ex = Executor(model, NpuPolicy(load_profile("ascend910b")))
    for feed in (x, x.T):
        with np.errstate(all="ignore"):
            got, want = ex.run({"x": feed})["y"], ufunc(feed)
        assert got.dtype == want.dtype
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


@pytest.mark.parametrize("ufunc", [np.sin, np.cos, np.log, np.exp, np.tanh, np.expm1, np.log1p])
def test_fp16_transcendental_tables_are_within_one_ulp_of_numpys(ufunc):
    """The portable fp16 transcendentals (float64, rounded to float32, then to fp16) and numpy's own fp16 loops
    (float32 SIMD or libm, rounded to fp16) round the same function: they agree on every finite fp16 input but a
    few near a rounding boundary, and there by one fp16 ULP."""
    from mschecker.dtypes import ulp_distance

    x = np.arange(65536, dtype=np.uint16).view(np.float16)
    ours = {np.sin: _sin_via_float64, np.cos: lambda v: em.rounded(np.cos, v), np.log: em.log, np.exp: em.exp,
            np.tanh: em.tanh, np.expm1: em.expm1, np.log1p: em.log1p}[ufunc]
    with np.errstate(all="ignore"):
        got, want = ours(x), ufunc(x)
    both = np.isfinite(got) & np.isfinite(want)
    assert (np.isfinite(got) == np.isfinite(want)).all()
    assert ulp_distance(got[both], want[both]).max() <= 1
    assert (got[both] != want[both]).sum() <= 64
