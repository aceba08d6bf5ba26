"""The pointwise kernels (mschecker/kernels/entries/pointwise.py) and reduce_prod (products.py) beyond the registry-wide
suite (test_contracts.py, test_emulation.py, test_goldens.py run them like every entry):

- every fp16 variant on all 65,536 fp16 inputs (ONNX default attributes): inf/NaN like the reference, within the
  ULP budget of pointwise.EXHAUSTIVE, and the registry contract on the whole grid; every fp16 planted bug breaks it;
- Elu's expm1 matters: the exp(x) - 1 form meets only its own (looser) contract, not the expm1 one;
- the contracts are tight: a one-digit slip in a constant (Softplus' threshold, Selu's alpha and gamma, HardSigmoid's
  alpha, HardSwish's 1/6, Softsign's 1) breaks them;
- the kernels' attribute defaults are ONNX's schema defaults (a wrong default is a realistic bug: PyTorch's
  hardsigmoid slope is 1/6, ONNX's 0.2);
- reduce_prod: the float64 reference survives intermediate overflow and underflow, and the contract claims nothing
  where a partial product can overflow the accumulator (and that region is real).
"""
from __future__ import annotations

import inspect
import math

import numpy as np
import onnx.defs
import pytest

from mschecker.dtypes import round_to
from mschecker.kernels.check import check_case
from mschecker.kernels.entries import pointwise as K
from mschecker.optimized_kernels import pointwise as A
from mschecker.reference import pointwise as R
from mschecker.reference.products import reduce_prod
from mschecker.kernels.registry import Case, Variant, get_kernel

from .test_exhaustive_fp16 import ALL_FP16, _reference, _within_budget

GRID = Case((ALL_FP16.astype(np.float64),), {}, "all fp16")


@pytest.mark.parametrize("kernel,variant", sorted(K.EXHAUSTIVE), ids=lambda v: str(v))
def test_every_fp16_input(kernel, variant):
    info = get_kernel(kernel)
    v = info.variant(variant)
    out = v.fn(ALL_FP16.copy())
    assert out.dtype == np.float16
    ref = _reference(kernel)
    ref16 = round_to(ref, "float16")
    assert np.array_equal(np.isnan(ref16), np.isnan(out)), "NaN where the reference has none, or the reverse"
    inf = np.isinf(ref16)
    assert np.array_equal(out[inf], ref16[inf]), "overflow to a different value than the reference"
    ok, ulps = _within_budget(out, ref, K.EXHAUSTIVE[(kernel, variant)])
    finite = np.isfinite(ref16)
    assert ok.all(), f"{kernel}/{variant}: {np.sum(~ok)} inputs over budget, e.g. x={ALL_FP16[finite][~ok][:3]}"
    result = check_case(info, v, GRID)
    assert result.passed, result.describe()


ATTRIBUTES = {"elu": {"alpha": float(np.float32(0.1))}, "selu": {"alpha": 2.0, "gamma": 0.5}, "celu": {"alpha": 0.5},
              "hard_sigmoid": {"alpha": 0.5, "beta": 0.25}}
EVERY_VARIANT = [pytest.param(k, v.name, params, id=f"{k}-{v.name}-{'-'.join(params) or 'defaults'}")
                 for k in sorted({k for k, _ in K.EXHAUSTIVE}) for v in get_kernel(k).correct_variants
                 for params in ({}, ATTRIBUTES.get(k)) if params is not None]


@pytest.mark.parametrize("kernel,variant,params", EVERY_VARIANT)
def test_every_storage_format_on_the_fp16_grid(kernel, variant, params):
    """fp32 and bf16 storage too (their own contracts: u32 / u_bf16 final roundings, fp32's subnormal tail of
    Softplus and Mish below x = -87.3), on every fp16 value, with the ONNX defaults and with other attributes."""
    info = get_kernel(kernel)
    result = check_case(info, info.variant(variant), Case(GRID.inputs, params, "all fp16"))
    assert result.passed, result.describe()


BUG_SWEEPS = [("elu", "bug_fp16_exp_minus_1", {}), ("selu", "bug_swapped_constants", {}),
              ("celu", "bug_times_alpha", {"alpha": 2.0}), ("softplus", "bug_fp16_overflow", {}),
              ("softplus", "bug_log_not_log1p", {}), ("mish", "bug_fast_fp16", {}),
              ("hard_sigmoid", "bug_torch_default_alpha", {}), ("hard_swish", "bug_alpha_0_2", {}),
              ("softsign", "bug_no_abs", {})]


def test_bug_sweeps_cover_every_unary_bug():
    unary = {(k, v.name) for k, _ in K.EXHAUSTIVE for v in get_kernel(k).planted_bugs}
    assert unary == {(k, v) for k, v, _ in BUG_SWEEPS}


@pytest.mark.parametrize("kernel,variant,params", BUG_SWEEPS, ids=[f"{k}-{v}" for k, v, _ in BUG_SWEEPS])
def test_planted_bugs_fail_the_sweep(kernel, variant, params):
    info = get_kernel(kernel)
    result = check_case(info, info.variant(variant), Case(GRID.inputs, params, "all fp16"))
    assert not any(o.passed for o in result.outputs), f"{kernel}/{variant} met its contract on every fp16 input"


def test_elu_exp_minus_1_loses_digits_only_where_storage_has_them():
    """alpha (exp(x) - 1) in fp32 is off by ~u32 e^x absolute. In fp16 storage that is under half the spacing of any
    nonzero result: at most 1 ULP from the correctly rounded value, like expm1. In fp32 storage it is a relative
    error up to ~1 near 0: the expm1 contract breaks, the exp-1 form's own contract (8u e^x / |expm1 x|) holds."""
    from mschecker.dtypes import ulp_distance

    info = get_kernel("elu")
    ref = _reference("elu")
    fin = np.isfinite(ref)
    out16 = info.variant("fp16_exp_minus_1").fn(ALL_FP16.copy())
    assert ulp_distance(out16[fin], round_to(ref[fin], "float16")).max() == 1
    fast32 = info.variant("fp32_exp_minus_1")
    assert check_case(info, fast32, GRID).passed
    # fp32 inputs between the fp16 grid's points near 0: exp(x) rounds to 1 - k 2^-24 and exp(x) - 1 keeps none of
    # x's low digits (x = -2^-30: exp rounds to 1, the result is 0; docs/NUMERICS.md §6). On the fp16 grid itself
    # exp(x) - 1 is far better (1 - k 2^-24 is x exactly for the smallest x): 1.2e-4 measured.
    neg = -np.float32(2.0 ** -30) * np.arange(1, 2000, dtype=np.float32)
    exact = np.expm1(neg.astype(np.float64))
    rel = np.abs(fast32.fn(neg) - exact) / -exact
    assert rel.max() > 0.5
    held_to_expm1 = Variant("exp_minus_1_as_expm1", fast32.fn, "float32", K.ELU_CONTRACT)
    assert not check_case(info, held_to_expm1, GRID).passed


def _mutant(kernel: str, fn, params=None) -> bool:
    """Does fn, standing in for the kernel's fp32 variant (same contract), pass on the fp16 grid?"""
    info = get_kernel(kernel)
    v = Variant("mutant", fn, "float32", info.variant("fp32").contract)
    return check_case(info, v, Case(GRID.inputs, params or {}, "all fp16")).passed


@pytest.mark.parametrize("kernel,fn", [
    ("softplus", lambda x: A._accurate(lambda x, dt: A.softplus_formula(x, dt, threshold=10.0), x)),
    ("selu", lambda x: A.selu_accurate(x, alpha=1.6723)),
    ("selu", lambda x: A.selu_accurate(x, gamma=1.0517)),
    ("hard_sigmoid", lambda x: A.hard_sigmoid_accurate(x, alpha=0.21)),
    ("hard_swish", lambda x: A._accurate(lambda x, dt: A.hard_swish_formula(x, dt, alpha=0.1667), x)),
    ("softsign", lambda x: A._accurate(lambda x, dt: (x / (dt.type(1.001) + np.abs(x))).astype(dt), x)),
    ("celu", lambda x: A.celu_accurate(x, alpha=1.01)),
], ids=["softplus-threshold-10", "selu-alpha", "selu-gamma", "hard_sigmoid-alpha", "hard_swish-1/6",
        "softsign-1", "celu-alpha"])
def test_contract_catches_a_slipped_constant(kernel, fn):
    assert not _mutant(kernel, fn)
    assert _mutant(kernel, get_kernel(kernel).variant("fp32").fn)  # the real fp32 kernel passes the same check


# --- attribute defaults are ONNX's --------------------------------------------------------------------------------
DEFAULTS = [("Elu", "elu", "alpha"), ("Selu", "selu", "alpha"), ("Selu", "selu", "gamma"), ("Celu", "celu", "alpha"),
            ("HardSigmoid", "hard_sigmoid", "alpha"), ("HardSigmoid", "hard_sigmoid", "beta")]


@pytest.mark.parametrize("op,kernel,attribute", DEFAULTS, ids=[f"{k}-{a}" for _, k, a in DEFAULTS])
def test_defaults_are_onnx_schema_defaults(op, kernel, attribute):
    schema = onnx.defs.get_schema(op).attributes[attribute].default_value.f
    info = get_kernel(kernel)
    for fn in [info.reference] + [v.fn for v in info.correct_variants] + [v.definition for v in info.correct_variants]:
        default = inspect.signature(getattr(fn, "__wrapped__", fn)).parameters[attribute].default
        assert default == schema, (kernel, attribute, fn, default, schema)


def test_hard_swish_slope_is_onnx_function_body_constant():
    """ONNX's HardSwish function body is HardSigmoid<alpha = 0.16666667, beta = 0.5>: fp32(1/6)."""
    assert R.HARD_SWISH_ALPHA == A.HARD_SWISH_ALPHA == float(np.float32(1 / 6))
    body = onnx.defs.get_schema("HardSwish").function_body
    alpha = [a.f for n in body.node if n.op_type == "HardSigmoid" for a in n.attribute if a.name == "alpha"]
    assert alpha == [pytest.approx(R.HARD_SWISH_ALPHA, rel=0, abs=0)]


# --- reduce_prod ------------------------------------------------------------------------------------------------
def test_reference_product_survives_intermediate_overflow_and_underflow():
    x = np.array([65504.0] * 70 + [2.0 ** -24] * 60 + [-1.5])  # np.prod: inf after 64 factors, then inf * tiny
    want = -1.5 * math.exp(70 * math.log(65504.0) - 60 * 24 * math.log(2.0))
    assert reduce_prod(x, None) == pytest.approx(want, rel=1e-13)
    with np.errstate(over="ignore"):
        assert np.isinf(np.prod(x))  # what the naive float64 product gives
    rng = np.random.default_rng(3)
    y = rng.standard_normal((4, 5, 6))
    for axis in (-1, 0, (0, 2), None):
        np.testing.assert_allclose(reduce_prod(y, axis, keepdims=True), np.prod(y, axis=axis, keepdims=True),
                                   rtol=30 * 2.0 ** -53)


def test_reference_product_specials():
    x = np.array([[0.0, np.inf], [-0.0, 2.0], [np.inf, -2.0], [np.nan, 1.0], [1e300, 1e300]])
    got = reduce_prod(x, 1)
    assert np.isnan(got[0]) and got[1] == 0 and np.signbit(got[1]) and got[2] == -np.inf and np.isnan(got[3])
    assert got[4] == np.inf
    assert reduce_prod(np.zeros((2, 0)), -1).tolist() == [1.0, 1.0]
    assert reduce_prod(np.array(3.0), None) == 3.0


def test_product_contract_claims_nothing_where_a_partial_product_overflows():
    """300 * 300 / 300: fp16 accumulators overflow (90000 > 65504) and give inf where the product is 300; the
    fp16_fp16acc contract's bound is inf there (its domain), fp32 accumulators stay within theirs."""
    info = get_kernel("reduce_prod")
    case = Case((np.array([300.0, 300.0, round(1 / 300, 8)]),), {"axis": -1, "keepdims": False}, "overflow on the way")
    case = case.cast("float16")
    v16 = info.variant("fp16_fp16acc")
    assert np.isinf(v16.fn(*case.inputs, axis=-1))
    ref = info.reference(case.inputs[0].astype(np.float64))
    assert np.isinf(v16.contract.bound(case, ref, v16))
    assert check_case(info, v16, case).passed
    v32 = info.variant("fp16_fp32acc")
    assert np.isfinite(v32.contract.bound(case, ref, v32)) and check_case(info, v32, case).passed


def test_libm_expm1_and_log1p_within_the_contract_budget():
    """The contracts budget libm's fp32 expm1 and log1p like exp and tanh (activations.LIBM_F32_ULPS = 4 ULPs, 8u32
    relative); measured on every finite fp16 input (log1p also on the exp(x) values Softplus feeds it): at most
    1.17 u32 and 1.29 u32 relative."""
    from mschecker.kernels.entries.activations import LIBM_F32_ULPS

    x = ALL_FP16[np.isfinite(ALL_FP16)]
    budget = 2 * LIBM_F32_ULPS * 2.0 ** -24
    with np.errstate(all="ignore"):
        for fn, domain in ((np.expm1, x <= 0), (np.log1p, x > -1)):
            a = x[domain]
            got, want = fn(a.astype(np.float32)), fn(a.astype(np.float64))
            keep = np.abs(want) > np.finfo(np.float32).smallest_normal
            assert np.max(np.abs(got[keep] - want[keep]) / np.abs(want[keep])) <= budget, fn.__name__
        e = np.exp(x[x <= 20].astype(np.float32))
        want = np.log1p(e.astype(np.float64))
        keep = want > np.finfo(np.float32).smallest_normal
        assert np.max(np.abs(np.log1p(e)[keep] - want[keep]) / want[keep]) <= budget
