"""The Ascend TBE Gelu and Sigmoid variants (issue 21): constants, formulas, contracts on every fp16 input, the
device hazards they reproduce, and which check catches each planted bug.

Sources (facts; our own code): dengguojie/vue-element-admin (the 2022 canndev mirror)
ops/built-in/tbe/impl/dynamic/gelu.py@0fd5feed6b46627fba3685f30027dabbf396fecf and
ops/built-in/tbe/impl/dynamic/sigmoid.py@38d6337f5d92e0e0705d34d773f215bc350ec9d0.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from mschecker.kernels.entries import activations as K
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.suite import draw_cases
from mschecker.kernels.check import check_case
from mschecker.optimized_kernels import activations as A
from mschecker.kernels.registry import Case, get_kernel

ALL_FP16 = np.arange(2**16, dtype=np.uint16).view(np.float16)
FINITE = ALL_FP16[np.isfinite(ALL_FP16)]
X = np.linspace(-12.0, 12.0, 480_001)
VARIANTS = [("gelu", "fp16_ascend_tanh"), ("gelu", "fp16_ascend_igelu"), ("gelu", "fp16_ascend_igelu_sat"),
            ("sigmoid", "fp16_vexp"), ("sigmoid", "fp16_vexp_sat")]


def _gelu(x):
    return x * 0.5 * special.erfc(-x / math.sqrt(2.0))


def _run(kernel, variant, x):
    with np.errstate(all="ignore"):
        return get_kernel(kernel).variant(variant).fn(np.asarray(x, np.float16).copy())


# ------------------------------------------------------------------------------------------------- constants
def test_constants_are_the_sources():
    """The kernel's decimal constants (gelu.py: const_0, CSVALUE; const_c, const_b/const_b_, const_a_half,
    const_offset), the definitions' own copies, and what fp16 makes of them (the DSL casts a tvm const to the
    tensor's dtype)."""
    assert A.ASCEND_GELU_TANH_K == D.ASC_GELU_K == 1.5957691
    assert A.ASCEND_GELU_CUBIC == D.ASC_GELU_C3 == 0.044715
    assert (A.ASCEND_IGELU_C, A.ASCEND_IGELU_B, A.ASCEND_IGELU_A_HALF, A.ASCEND_IGELU_OFFSET) == (
        D.ASC_IGELU["c"], D.ASC_IGELU["b"], D.ASC_IGELU["a_half"], D.ASC_IGELU["offset"]) == (
        0.7071, 1.769, -0.1444, 1e-12)
    assert abs(A.ASCEND_GELU_TANH_K - 2 * math.sqrt(2 / math.pi)) < 1e-7  # 2 sqrt(2/pi) to 8 digits
    assert A.ASCEND_IGELU_A_HALF == -0.2888 / 2 and abs(A.ASCEND_IGELU_C - 1 / math.sqrt(2)) < 1e-5
    fp16 = [float(np.float16(c)) for c in (0.7071, 1.769, -0.1444, 1e-12)]
    assert fp16 == [0.70703125, 1.7685546875, -0.1444091796875, 0.0]


def test_ascend_tanh_formula_is_the_kernels():
    """x / (exp(-|y|) + 1) * exp(min(y, 0)) with y = 1.5957691 (x + 0.044715 x^3) is x * sigmoid(y) (written here
    as (1 + tanh(y/2))/2): float64 evaluation of the helper against that transcription. A digit slip in either
    constant moves the result far beyond float64 rounding."""
    y = 1.5957691 * (X + 0.044715 * X**3)
    want = X * 0.5 * (1 + np.tanh(y / 2))
    got = A.ascend_gelu_tanh_formula(X, np.float64)
    assert np.all(np.abs(got - want) <= 1e-15 + 1e-13 * np.abs(want))
    slipped = A.ascend_gelu_tanh_formula(X, np.float64, k=1.5957961)
    assert np.max(np.abs(slipped - want)) > 1e-6


def test_ascend_igelu_formula_is_the_kernels():
    """gelu(x) = x (sgn(x) [(a/2)(min(|c x|, -b) + b)^2 + 1/2] + 1/2) (the kernel's docstring) in float64."""
    nz = X[X != 0]
    want = nz * (np.sign(nz) * (-0.1444 * (np.minimum(np.abs(0.7071 * nz), 1.769) - 1.769) ** 2 + 0.5) + 0.5)
    got = A.ascend_igelu_formula(nz, np.float64)
    assert np.all(np.abs(got - want) <= 1e-15 + 1e-13 * np.abs(want))


def test_approximation_errors_are_what_the_contracts_say():
    """Distance to erf GELU in exact arithmetic: the tanh form with the kernel's fp32 constants is within the
    tanh budget (4.73e-4 at x = 2.70); the i-GELU with the constants as fp16 holds them within 1% of
    ASCEND_IGELU_APPROX_MAX_ABS_ERR (0.018171 at x = -2.349)."""
    g = _gelu(X)
    k32, c32 = float(np.float32(1.5957691)), float(np.float32(0.044715))
    tanh_err = np.max(np.abs(A.ascend_gelu_tanh_formula(X, np.float64, k=k32, cubic=c32) - g))
    assert 0.99 * K.GELU_APPROX_MAX_ABS_ERR["tanh"] < tanh_err <= K.GELU_APPROX_MAX_ABS_ERR["tanh"]
    c16 = {name: float(np.float16(v)) for name, v in (("c", 0.7071), ("b", 1.769), ("a_half", -0.1444))}
    with np.errstate(all="ignore"):  # x = 0: 0 * (1/0) in exact arithmetic, excluded below
        ig = A.ascend_igelu_formula(X, np.float64, offset=0.0, **c16)
    ig_err = np.max(np.abs(np.where(X == 0, 0.0, ig) - g))
    assert 0.99 * K.ASCEND_IGELU_APPROX_MAX_ABS_ERR < ig_err <= K.ASCEND_IGELU_APPROX_MAX_ABS_ERR


# ------------------------------------------------------------------------------ every fp16 input, contracts
@pytest.mark.parametrize("kernel,variant", VARIANTS, ids=lambda v: str(v))
def test_contract_on_every_finite_fp16_input(kernel, variant):
    """The contract holds on all 63,488 finite fp16 inputs (a proof for this elementwise fp16 kernel), the bits
    equal the definition's (check_case's two-sided check), and the bound is not vacuous: its worst err/bound
    ratio is what the derivation leaves (measured: tanh 0.996, i-GELU 0.715, sigmoid 0.995/0.996)."""
    result = check_case(get_kernel(kernel), variant, Case((FINITE.astype(np.float64),)))
    assert result.passed, result.describe()
    assert result.worst_ratio > {"fp16_ascend_igelu": 0.6, "fp16_ascend_igelu_sat": 0.6}.get(variant, 0.95)


# ----------------------------------------------------------------------------------------- device hazards
def test_igelu_vrec_overflow_near_zero():
    """fp16 const_offset 1e-12 is 0, so sgn(x) = x vrec(|x|): NaN at +-0 (0 * inf) and, where 1/|x| >= 65520
    (0 < |x| <= 2^-16), +-inf and gelu = +inf (IEEE). Saturation gives vrec = 65504 and a tiny finite gelu."""
    tiny = np.float16(2.0**-16)
    x = np.array([0.0, -0.0, 2.0**-24, -(2.0**-24), tiny, -tiny, np.nextafter(tiny, np.float16(1))], np.float16)
    ieee, sat = _run("gelu", "fp16_ascend_igelu", x), _run("gelu", "fp16_ascend_igelu_sat", x)
    assert np.isnan(ieee[:2]).all() and np.all(ieee[2:6] == np.inf) and np.isfinite(ieee[6])
    assert np.all(np.isfinite(sat)) and np.all(np.abs(sat.astype(np.float64)) <= 2.0**-16)


def test_igelu_negative_tail_through_a_subnormal_reciprocal():
    """Beyond |x| = 2^14 vrec(|x|) is an fp16 subnormal: x vrec(|x|) = -(1 - 2^-11) at x = -65504, so
    t0 sgn + 1/2 = 2^-12 and gelu(-65504) = -65504 * 2^-12 = -15.99 (erf GELU: -0); the positive side rounds back
    to x."""
    x = np.array([-65504.0, 65504.0, -3.0, 3.0], np.float16)
    for variant in ("fp16_ascend_igelu", "fp16_ascend_igelu_sat"):
        y = _run("gelu", variant, x)
        assert y[0] == -65504.0 * 2.0**-12 and y[1] == 65504.0 and y[2] == 0.0 and y[3] == 3.0


def test_tanh_form_keeps_its_exps_negative():
    """The overflow-safe split: finite on every finite fp16 input (exp only sees -|y| and min(y, 0)), x on the far
    positive side and -0 on the far negative side."""
    y = _run("gelu", "fp16_ascend_tanh", FINITE)
    assert np.all(np.isfinite(y))
    assert _run("gelu", "fp16_ascend_tanh", np.array([65504.0, -65504.0]))[0] == 65504.0
    assert np.signbit(_run("gelu", "fp16_ascend_tanh", np.array([-65504.0]))[0])


def test_sigmoid_exp_overflow_boundary():
    """fp16 exp(-x) is inf from x = -11.09375 down (exp(11.0859375) = 65275 is still finite): sigmoid 0 (IEEE) or
    2^-16 (saturation: 65504 + 1 rounds to 65504), where the true value is 1.52e-5."""
    x = np.array([-11.09375, -11.0859375, -65504.0, -np.inf], np.float16)
    ieee, sat = _run("sigmoid", "fp16_vexp", x), _run("sigmoid", "fp16_vexp_sat", x)
    assert ieee[0] == 0 and ieee[1] > 0 and ieee[2] == 0 and ieee[3] == 0
    assert sat[0] == sat[2] == sat[3] == np.float16(2.0**-16) and sat[1] == ieee[1]
    assert -11.09375 <= K.ASCEND_SIGMOID_EXP_OVERFLOW < -11.0859375


def test_fp16_vexp_is_the_registrys_old_planted_bug():
    """The device kernel is the naive fp16 1/(1 + exp(-x)) that sigmoid's fp16_fast carries as a planted bug:
    the same bits on every non-NaN fp16 input."""
    keep = ~np.isnan(ALL_FP16)
    with np.errstate(all="ignore"):
        old = A.bug_sigmoid_naive_fp16(ALL_FP16.copy())
    assert np.array_equal(_run("sigmoid", "fp16_vexp", ALL_FP16)[keep].view(np.uint16), old[keep].view(np.uint16))


# ------------------------------------------------------------------------------------------- planted bugs
def _grid_result(kernel, variant):
    return check_case(get_kernel(kernel), variant, Case((FINITE.astype(np.float64),)))


@pytest.mark.parametrize("kernel,bug,contract_catches", [
    ("gelu", "bug_fp16_ascend_tanh_cubic", True),  # 0.04715: up to 2.2e-3 off, far beyond 4.74e-4
    ("gelu", "bug_fp16_ascend_igelu_b", False),  # 1.796: 0.01855 vs budget 0.0182 + fp16 slack: bits only
    ("gelu", "bug_fp16_ascend_igelu_fp32", False),  # too accurate
    ("gelu", "bug_fp16_ascend_igelu_ieee_as_sat", True),  # NaN/inf near 0 under the saturating contract
    ("sigmoid", "bug_fp16_vexp_fp32", False),  # too accurate in the tail
    ("sigmoid", "bug_fp16_vexp_sign", True),  # sigmoid(-x)
    ("sigmoid", "bug_fp16_vexp_ieee_as_sat", False),  # 0 instead of 2^-16: within the 2^-16 allowance
], ids=lambda v: str(v))
def test_which_check_catches_each_bug(kernel, bug, contract_catches):
    """On every finite fp16 input: the two-sided check (the correct twin's definition) flags every planted bug;
    the one-sided contract flags those it can. The others are why variants have definitions and goldens."""
    result = _grid_result(kernel, bug)
    assert result.emulation, f"{bug}: bits equal the definition"
    assert (not all(o.passed for o in result.outputs)) is contract_catches, result.describe()


def test_wide_strategy_reaches_both_hazards():
    """The gelu kernel's `wide` strategy draws fp16 subnormals and zeros (vrec overflow) and |x| > 2^14 (subnormal
    reciprocal) within a few cases."""
    info = get_kernel("gelu")
    xs = np.concatenate([c.inputs[0].ravel() for c in draw_cases(info.strategies["wide"](), 20)])
    assert np.any(np.abs(xs) <= 2.0**-16) and np.any(np.abs(xs) > 2.0**14)


def test_igelu_no_promise_region_is_exactly_the_vrec_overflow():
    """The IEEE i-GELU contract gives up (infinite bound) on 0 <= |x| <= 2^-16 and nowhere else; its saturating
    twin nowhere."""
    info = get_kernel("gelu")
    edge = np.float16(2.0**-16)
    x = np.array([0.0, 2.0**-24, edge, -edge, np.nextafter(edge, np.float16(1)), -np.nextafter(edge, np.float16(1)),
                  1.0], np.float16).astype(np.float64)
    case = Case((x,))
    for variant, infinite in (("fp16_ascend_igelu", [1, 1, 1, 1, 0, 0, 0]), ("fp16_ascend_igelu_sat", [0] * 7)):
        v = info.variant(variant)
        bound = info.contract_of(v).bound(case, info.reference(x), v)
        assert list(np.isinf(bound).astype(int)) == infinite, variant
