"""Registry entries: gelu, gelu_tanh, sigmoid, silu, exp, erf, tanh.

Every contract has the form  bound = A + rel(x) |y| + u_storage |y| + floor  where
- A is the maximum absolute error of a documented approximation against the reference function (0 for kernels
  that compute the reference function itself). The A values are docs/NUMERICS.md §6's, and
  tests/kernels/test_exhaustive_fp16.py re-measures them on a dense float64 grid;
- rel(x) is the relative error of evaluating the formula in the accumulator format (u_acc), derived per kernel
  below; it may grow with |x| where a rounded argument is amplified (exp's range reduction, erfc's tail);
- u_storage |y| is the final rounding and floor = contracts.subnormal_floor is one subnormal step of storage.
`EXHAUSTIVE` turns the same terms into the ULP budgets of the exhaustive fp16 sweep.

The Ascend variants (issue 21) model what CANN's TBE kernels compute for fp16 input and carry their own bounds:
gelu `fp16_ascend_tanh` (default/high_precision: the tanh form in fp32 with the kernel's overflow-safe split),
`fp16_ascend_igelu` and `_sat` (high_performance: the i-GELU in fp16 arithmetic, IEEE or saturating overflow),
from dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/gelu.py@0fd5feed6b46627fba3685f30027dabbf396fecf;
sigmoid `fp16_vexp` and `_sat` (fp16 throughout: vexp(-x), +1, vrec; exp(-x) overflows below x = -11.09), from
dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/sigmoid.py@38d6337f5d92e0e0705d34d773f215bc350ec9d0.
Where the sources leave behaviour to the hardware (vexp, vrec, vdiv accuracy; fp16 subnormals), the kernels
assume correctly rounded results and kept subnormals (optimized_kernels/activations.py). Their accumulate field is
"float32" so that they join the existing (fp16, fp32, implmode) groups, whose declared defaults keep what a
generic NPU run selects; the device table selects them by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import float_format, gamma, round_to, unit_roundoff
from mschecker.optimized_kernels import activations as opt
from mschecker.reference import activations as ref
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.optimized_kernels import definitions as D

# Maximum |approximation - erf GELU| over the real line (docs/NUMERICS.md §6; re-measured on a dense float64
# grid over [-10, 10] in tests/kernels/test_exhaustive_fp16.py; outside it every form converges to GELU).
GELU_APPROX_MAX_ABS_ERR = {"tanh": 4.74e-4, "quick": 2.04e-2, "poly": 1.82e-2}
# Numerical Recipes' erfcc: fractional error < 1.2e-7 everywhere (Press et al., 2nd ed., section 6.2).
ERFC_NR_REL = 1.2e-7
# Relative error of the degree-4 Taylor polynomial of 2^f on |f| <= 1/2: the truncation ~ (f ln2)^5/5! / 2^f,
# largest at f = -1/2; measured 5.57e-5 on a dense grid (re-measured in test_exhaustive_fp16.py).
EXP2_TAYLOR_REL = 5.6e-5
# Budget for numpy's float32 exp/tanh: 4 fp32 ULPs (<= 8 u32 relative). test_exhaustive_fp16.py asserts it on
# every finite fp16 input; measured there: at most 2.8 u32 for exp and 1.8 u32 for tanh (relative).
LIBM_F32_ULPS = 4


def _libm(u: float) -> float:
    return 2 * LIBM_F32_ULPS * u


def _finite(x: np.ndarray) -> np.ndarray:
    """x with +-inf/NaN replaced by 0 for the conditioning terms (the limits there are exact)."""
    return np.where(np.isfinite(x), x, 0.0)


def _subnormal_step(dtype) -> float:
    fmt = float_format(dtype)
    return fmt.smallest_normal * 2.0 ** -fmt.mantissa_bits


def _nr_eval_rel(u: float) -> float:
    """Rounding error of evaluating erfc_nr: Horner's 18 operations on coefficients summing (in |.|) to
    sum|c_i| give an absolute error gamma_18 sum|c_i| in the exponent (Higham 5.1), i.e. that relative error
    in erfc; 4 more roundings (t, a*a, exp argument, the product t*exp) add 4u."""
    return gamma(18, u) * float(np.sum(np.abs(opt._NR_ERFC))) + 4 * u


# --- relative-error terms rel(x, u_acc), one per formula --------------------------------------------------------
def rel_gelu_erf(x, u):
    """x*erfc(-x/sqrt2)/2 in fp32: NR fractional error + Horner rounding; for x < 0 the rounded argument z and
    z^2 in exp(-z^2) carry a relative error ~2 z^2 u = x^2 u into erfc (d ln erfc(z)/dz ~ -2z); one more u for
    the final product."""
    xm = np.minimum(_finite(x), 0.0)
    return ERFC_NR_REL + _nr_eval_rel(u) + (xm * xm + 2) * u


def rel_approx_gelu(x, u):
    """Absolute rounding of 0.5x(1+L(x)) with |L| <= 1 in fp32: about six roundings of quantities bounded by
    |x| (tanh/sigmoid absorb their argument's relative error with factor |t| sech^2 t <= 0.45); we allow 8u|x|,
    applied to |x| instead of |y| (UnaryBound.rel_on_x)."""
    return 8 * u * np.abs(_finite(x))


def _t_tanh(x):
    x = _finite(x)
    return opt.SQRT_2_OVER_PI * (x + opt.GELU_TANH_CUBIC * x**3)


def rel_gelu_tanh_accurate(x, u):
    """x*sigmoid(2t) in fp32: t carries ~4u relative (x^3, two products, an add), amplified by (1-s)|2t| <= 2|t|
    in sigmoid; sigmoid itself: exp (libm) + add + divide; one product more."""
    return 8 * np.abs(_t_tanh(x)) * u + _libm(u) + 3 * u


def rel_sigmoid(x, u):
    """exp(-|x|) (argument exact), 1+e, divide (and e/(1+e) on x < 0)."""
    return _libm(u) + 3 * u + 0 * _finite(x)


def rel_silu(x, u):
    return rel_sigmoid(x, u) + u


def rel_exp(x, u):
    return _libm(u) + 0 * _finite(x)


def rel_tanh(x, u):
    return _libm(u) + 0 * _finite(x)


def rel_erf(x, u):
    """|x| < 1/2: Taylor (truncation < 2e-8 = 0.34 u32) by Horner in x^2 (7 terms, condition <= 1.2):
    gamma_14 * 1.2 < 20u. |x| >= 1/2: erf = 1 - r with r = erfc(|x|) <= 0.48 carrying NR + Horner error,
    divided by erf >= 0.52, plus the subtraction."""
    return ERFC_NR_REL + _nr_eval_rel(u) + 20 * u + 0 * _finite(x)


def rel_exp_fast(x, u):
    """fp16 2^(x log2e): log2e stored in fp16 (u) and the product (u) give t a relative error 2u, an absolute
    error 2u|t| in the exponent, i.e. 2u|x| ln2 log2e = 2u|x| relative in the result; f = t - n is exact
    (Sterbenz); Horner of degree 4 costs gamma_8 times its condition number 2^(2|f|) <= 2 (Higham 5.1), and
    the Taylor truncation EXP2_TAYLOR_REL; ldexp is exact above the subnormal range (below it: the floor)."""
    return EXP2_TAYLOR_REL + 2 * np.abs(_finite(x)) * u + 2 * gamma(8, u) + u


def rel_sigmoid_fast(x, u):
    """rel_exp_fast at -|x| (e <= 1 never overflows) plus 1+e and the divide (e/(1+e) passes e's error through
    with factor 1/(1+e) <= 1)."""
    return rel_exp_fast(x, u) + 3 * u


def rel_silu_fast(x, u):
    return rel_sigmoid_fast(x, u) + u


def rel_gelu_tanh_fast(x, u):
    """2t formed in fp32 then rounded to fp16 (u relative, amplified by sigmoid's |2t| (1-s)), then the fast
    sigmoid at 2t and the product with x."""
    t2 = 2 * np.abs(_t_tanh(x))
    return t2 * (u + 8 * 2.0**-24) + rel_sigmoid_fast(t2, u) + u


@dataclass(frozen=True)
class UnaryBound:
    """The bound A + rel(x)|y| + abs_rel(x) + u_storage|y| + floor, and its reason."""

    rel: Callable[[np.ndarray, float], np.ndarray]
    approx_abs: float = 0.0
    rel_on_x: bool = False  # rel multiplies |x| instead of |y| (absolute rounding of 0.5x(1+L))
    # y = x * s with s in [0, 1] held in the accumulator format: where s underflows to subnormals (deep negative
    # tail) it is off by up to one subnormal step of that format, and the product carries the step times |x|.
    x_times_subnormal: bool = False

    def __call__(self, case: Case, y, variant: Variant):
        x = case.inputs[0].astype(np.float64)
        ua, us = unit_roundoff(variant.accumulate), unit_roundoff(variant.dtype)
        with np.errstate(all="ignore"):
            r = self.rel(x, ua)
            compute = r if self.rel_on_x else r * np.abs(y)
            bound = self.approx_abs + compute + us * np.abs(y) + subnormal_floor(variant)
            if self.x_times_subnormal:
                bound = bound + np.abs(_finite(x)) * _subnormal_step(variant.accumulate)
        return np.where(np.isnan(bound), np.inf, bound)


def _contract(rel, why, approx_abs=0.0, rel_on_x=False, x_times_subnormal=False) -> Contract:
    doc = (rel.__doc__ or "").split("\n")[0].strip()
    if x_times_subnormal:
        why += " + |x| * subnormal step of u_acc's format (the factor s in y = x s underflows in the tail)"
    return Contract(UnaryBound(rel, approx_abs, rel_on_x, x_times_subnormal),
                    f"{why}; compute term: {doc}" if doc else why)


def _approx_contract(form: str) -> Contract:
    a = GELU_APPROX_MAX_ABS_ERR[form]
    return _contract(rel_approx_gelu, f"GELU {form} approximation max |error| {a:g} vs erf GELU (docs/NUMERICS.md §6, "
                     "re-measured) + 8u32|x| fp32 rounding + u_storage|y| + subnormal floor", a, rel_on_x=True,
                     x_times_subnormal=True)


# --- strategies -------------------------------------------------------------------------------------------------
@st.composite
def uniform_range(draw, lo: float, hi: float, dtype: str = "float16"):
    """Seeded uniform values on [lo, hi]: the range where a kernel's hazard lives (exp/sigmoid tails)."""
    shape = draw(S.shapes(max_side=32))
    rng = np.random.default_rng(draw(S.seeds()))
    return round_to(rng.uniform(lo, hi, shape), dtype).astype(np.float64)


def _unary(xs):
    return xs.map(lambda x: Case((x,), {}, label=f"shape {x.shape} max|x| {np.max(np.abs(x), initial=0):.3g}"))


def _strategies(tails: tuple[float, float] | None = None):
    s = {
        "generic": lambda: _unary(S.tensors(dtype="float16")),
        "elementwise": lambda: _unary(S.elementwise_tensors(dtype="float16")),
    }
    if tails is not None:
        s["tails"] = lambda: _unary(uniform_range(*tails))
    return s


def _golden_cases():
    rng = np.random.default_rng(20261130)
    specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, np.inf, -np.inf, 6e-8, -3.0, 2.7, -2.27])
    return [
        Case((rng.standard_normal((4, 64)) * 3,), {}, "normal*3 4x64"),
        Case((np.linspace(-20.0, 12.0, 257),), {}, "grid [-20, 12]"),
        Case((specials,), {}, "special values"),
    ]


def _accurate_variants(fn, contract, names=("fp32", "fp16_fp32acc", "bf16_fp32acc")) -> dict[str, Variant]:
    """The same fp32-compute kernel at each storage format (its output dtype follows its input)."""
    storage = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    out = {}
    for name in names:
        out[name] = Variant(name, fn, storage[name.split("_")[0]], contract, accumulate="float32",
                            doc="fp32 compute, one rounding to storage")
    return out


def _bug(name, fn, what, bug_of, catch_with="generic", dtype="float16", accumulate="float32") -> Variant:
    return Variant(name, fn, dtype, None, accumulate=accumulate, planted_bug=what, bug_of=bug_of,
                   catch_with=catch_with)


GELU_ERF_CONTRACT = _contract(rel_gelu_erf, "erf GELU via NR erfc (fractional error 1.2e-7, Press et al.) in fp32",
                              x_times_subnormal=True)
GELU_TANH_CONTRACT = _contract(rel_gelu_tanh_accurate, "tanh GELU (its own reference) in fp32",
                              x_times_subnormal=True)
GELU_TANH_FAST_CONTRACT = _contract(rel_gelu_tanh_fast, "tanh GELU with fp16 fast sigmoid", x_times_subnormal=True)
SIGMOID_CONTRACT = _contract(rel_sigmoid, "sigmoid in fp32, libm exp 4 ULP budget")
SIGMOID_FAST_CONTRACT = _contract(rel_sigmoid_fast, "fp16 sigmoid from fast exp(-|x|)")
SILU_CONTRACT = _contract(rel_silu, "x*sigmoid(x) in fp32",
                              x_times_subnormal=True)
SILU_FAST_CONTRACT = _contract(rel_silu_fast, "x*sigmoid(x) from fp16 fast exp", x_times_subnormal=True)
EXP_CONTRACT = _contract(rel_exp, "exp in fp32, libm 4 ULP budget")
EXP_FAST_CONTRACT = _contract(rel_exp_fast, "fp16 exp as 2^n p(f)")
ERF_CONTRACT = _contract(rel_erf, "erf from Taylor (|x|<1/2) and NR erfc in fp32")
TANH_CONTRACT = _contract(rel_tanh, "tanh in fp32, libm 4 ULP budget")


def _fp16_fast(name, fn, contract, doc) -> Variant:
    return Variant(name, fn, "float16", contract, accumulate="float16", implmode="high_performance", doc=doc)


def _approx(name, fn, form) -> Variant:
    return Variant(name, fn, "float16", _approx_contract(form), accumulate="float32",
                   implmode="high_performance", doc=f"GELU {form} approximation, fp32 compute")


# --- Ascend TBE kernels (issue 21) --------------------------------------------------------------------------------
# What CANN's Gelu and Sigmoid compute for fp16 input on 910B/310P (optimized_kernels/activations.py, ascend_*):
ASCEND_GELU_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/gelu.py"
                      "@0fd5feed6b46627fba3685f30027dabbf396fecf")
ASCEND_SIGMOID_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/sigmoid.py"
                         "@38d6337f5d92e0e0705d34d773f215bc350ec9d0")
U16, U32 = unit_roundoff("float16"), unit_roundoff("float32")
# Max |i-GELU - erf GELU| with the kernel's constants as fp16 holds them (0.70703125, 1.7685546875,
# -0.1444091796875) in exact arithmetic: 0.018171 at x = -2.349 (re-measured on a dense float64 grid in
# tests/kernels/test_ascend_activations.py; I-BERT's own constants give 0.018151).
ASCEND_IGELU_APPROX_MAX_ABS_ERR = 1.82e-2
# |x| at or below which fp16 vrec(|x|) overflows (1/|x| >= 65520): IEEE mode gives sgn = 0 * inf = NaN at 0 and
# +-inf beyond, so the fp16 i-GELU returns NaN at +-0 and +inf for 0 < |x| <= 2^-16.
ASCEND_IGELU_VREC_OVERFLOW = 2.0 ** -16
# x at or below which fp16 exp(-x) is inf (exp(-x) >= 65520, the fp16 overflow threshold): -11.0901; the largest
# such fp16 x is -11.09375.
ASCEND_SIGMOID_EXP_OVERFLOW = -math.log(65520.0)


def rel_ascend_gelu_tanh(x, u):
    """y = 1.5957691 (x + 0.044715 x^3) carries <= 5u relative (three products and an add of same-sign terms;
    6u allowed); for y >= 0 the result x/(1 + e^-y) absorbs it with factor (1 - s) |y| <= 1/e, for y < 0 the result
    x e^y/(1 + e^y) with factor |y| (through both exps); two libm exps, the +1, the divide and the product."""
    x = _finite(x)
    y = opt.ASCEND_GELU_TANH_K * (x + opt.ASCEND_GELU_CUBIC * x * x * x)
    return 2 * _libm(u) + 12 * u * np.abs(np.minimum(y, 0.0)) + 6 * u


@dataclass(frozen=True)
class AscendGeluTanhBound:
    """|fl16(g^) - y| <= |fl16(g^) - g^| + |g^ - g| + |g - y| <= u16 |g| (1 + rel) + rel |g| + A_tanh (+ the
    subnormal floor of the cast, + |x| * fp32 subnormal step where exp(min(y, 0)) is an fp32 subnormal multiplied
    by ~x): g is the tanh form's own value (float64), g^ its fp32 evaluation, y the erf GELU. The compute terms
    scale with |g|, not |y|: in the negative tail the two differ by more than g itself."""

    def __call__(self, case: Case, y, variant: Variant):
        x = _finite(case.inputs[0].astype(np.float64))
        with np.errstate(all="ignore"):
            g = np.abs(opt.ascend_gelu_tanh_formula(x, np.float64))
            rel = rel_ascend_gelu_tanh(x, U32)
            bound = (GELU_APPROX_MAX_ABS_ERR["tanh"] + rel * g + U16 * g * (1 + rel) + subnormal_floor(variant)
                     + np.abs(x) * _subnormal_step("float32"))
        return np.where(np.isnan(bound), np.inf, bound)


def ascend_igelu_dt1(x, u=U16):
    """Absolute error of t1 = t0 sgn + 1/2 in fp16: t0 = (d^2)(a/2) + 1/2 with z = x c and d = min(|z|, b) - b:
    z's rounding moves d by u b, d's own rounding by u |d|, then d^2 (u), the product (u) and the add (u |t0|):
    |dt0| <= (5 b^2 |a/2| + b^2 |a/2| + 1/2) u < 4u. sgn = x vrec(|x|) carries vrec's rounding (u relative, or
    2^-25 absolute where 1/|x| is an fp16 subnormal, |x| > 2^14: |x| 2^-25 relative) and its own (u); t0 sgn
    (u/2) and + 1/2 (u): |dt1| <= 4u + (2u + max(u, |x| 2^-25))/2 + 1.5u <= 7u + |x| 2^-26."""
    return 7 * u + np.abs(_finite(x)) * 2.0 ** -26


@dataclass(frozen=True)
class AscendIgeluBound:
    """A_igelu + |x| dt1(x) + u16 |y| + subnormal floor; `ieee`: no promise (infinite bound) for |x| <= 2^-16,
    where fp16 vrec(|x|) overflows and the kernel returns NaN (x = +-0) or +inf."""

    ieee: bool

    def __call__(self, case: Case, y, variant: Variant):
        x = case.inputs[0].astype(np.float64)
        xf = _finite(x)
        with np.errstate(all="ignore"):
            bound = (ASCEND_IGELU_APPROX_MAX_ABS_ERR + np.abs(xf) * ascend_igelu_dt1(xf) + U16 * np.abs(y)
                     + subnormal_floor(variant))
            if self.ieee:
                bound = np.where(np.isfinite(x) & (np.abs(x) <= ASCEND_IGELU_VREC_OVERFLOW), np.inf, bound)
        return np.where(np.isnan(bound), np.inf, bound)


@dataclass(frozen=True)
class AscendSigmoidBound:
    """(2 u16 + 2 u32) |y| + u16 |y| + subnormal floor, plus in the overflow region x <= -ln 65520 (fp16
    exp(-x) = inf) the kernel's answer there: 0 (IEEE: error y < 1.53e-5) or 2^-16 (saturation: error < 2^-16)."""

    sat: bool

    def __call__(self, case: Case, y, variant: Variant):
        x = case.inputs[0].astype(np.float64)
        ay = np.abs(y)
        with np.errstate(all="ignore"):
            bound = (2 * U16 + 2 * U32) * ay + U16 * ay + subnormal_floor(variant)
            overflow = x <= ASCEND_SIGMOID_EXP_OVERFLOW
            bound = bound + np.where(overflow, 2.0 ** -16 if self.sat else ay, 0.0)
        return np.where(np.isnan(bound), np.inf, bound)


ASCEND_GELU_TANH_CONTRACT = Contract(
    AscendGeluTanhBound(),
    f"Ascend Gelu tanh form (1.5957691, 0.044715) in fp32: max |tanh form - erf GELU| "
    f"{GELU_APPROX_MAX_ABS_ERR['tanh']:g} + fp32 compute on the form's own value (2 libm exps 4 ULP each, 6u32, "
    "12u32|y| for y < 0) + u16|g| cast + subnormal floor + |x| * fp32 subnormal step")
_IGELU_WHY = ("Ascend Gelu high_performance i-GELU in fp16: max |formula - erf GELU| "
              f"{ASCEND_IGELU_APPROX_MAX_ABS_ERR:g}"
              " (fp16 constants, exact arithmetic) + |x| (7u16 + |x| 2^-26) fp16 arithmetic (vrec's subnormal "
              "rounding beyond |x| = 2^14) + u16|y| + subnormal floor")
ASCEND_IGELU_CONTRACT = Contract(AscendIgeluBound(ieee=True), _IGELU_WHY + "; no promise for |x| <= 2^-16 (vrec(|x|) "
                                 "overflows: NaN at +-0, +inf beyond)")
ASCEND_IGELU_SAT_CONTRACT = Contract(AscendIgeluBound(ieee=False), _IGELU_WHY + " (saturation: vrec's 65504 keeps "
                                     "|x| <= 2^-16 within 0.05|x|)")
_SIGMOID_WHY = ("Ascend Sigmoid in fp16: exp (exp64 via fp32: u16 + u32) and +1 relative, vrec u16|y|, "
                "subnormal floor; "
                "x <= -ln 65520: fp16 exp(-x) overflows, ")
ASCEND_SIGMOID_CONTRACT = Contract(AscendSigmoidBound(sat=False), _SIGMOID_WHY + "y = 0, error = sigmoid(x) < 1.53e-5")
ASCEND_SIGMOID_SAT_CONTRACT = Contract(AscendSigmoidBound(sat=True), _SIGMOID_WHY + "saturated to 65504: y = 2^-16, "
                                       "error < 2^-16")


@st.composite
def wide_magnitudes(draw, lo_exp: float = -25.0, hi_exp: float = 16.0):
    """fp16 values with log-uniform magnitudes 2^[lo, hi) and random signs, clipped to 65504, plus a few exact
    zeros: fp16 subnormals (the i-GELU's vrec overflow at |x| <= 2^-16) and the top binades (its subnormal
    reciprocal beyond 2^14) in one draw."""
    shape = draw(S.shapes(max_side=32))
    rng = np.random.default_rng(draw(S.seeds()))
    mag = np.minimum(2.0 ** rng.uniform(lo_exp, hi_exp, shape), 65504.0)
    x = np.where(rng.random(shape) < 0.5, -mag, mag)
    x = np.where(rng.random(shape) < 0.02, 0.0, x)
    return round_to(x, "float16").astype(np.float64)


def _ascend(name, fn, contract, implmode, what, source) -> Variant:
    # accumulate="float32": the issue-21 design puts every new variant in its kernel's (fp16, fp32, implmode) group,
    # whose declared default (KernelInfo.defaults) keeps what a generic NPU run selects; the device table picks these
    # variants by name. The arithmetic is what `what` says (the fp16 kernels' contracts use u16 explicitly).
    return Variant(name, fn, "float16", contract, accumulate="float32", implmode=implmode,
                   doc=f"{what} ({source})")


KERNELS = [
    KernelInfo(
        name="gelu", family="activations", reference=ref.gelu, defaults=("fp16_poly", "fp16_erf_hp"),
        variants={
            "fp32": Variant("fp32", opt.gelu_accurate, "float32", GELU_ERF_CONTRACT),
            "fp16_erf_hp": Variant("fp16_erf_hp", opt.gelu_accurate, "float16", GELU_ERF_CONTRACT,
                                   doc="high_precision: fp32 erf GELU via NR erfc, rounded to fp16"),
            "bf16_erf_hp": Variant("bf16_erf_hp", opt.gelu_accurate, "bfloat16", GELU_ERF_CONTRACT),
            "fp16_tanh": _approx("fp16_tanh", opt.gelu_tanh_form, "tanh"),
            "fp16_quick": _approx("fp16_quick", opt.gelu_quick, "quick"),
            "fp16_poly": _approx("fp16_poly", opt.gelu_poly, "poly"),
            "bug_fp16_poly_coef": _bug("bug_fp16_poly_coef", opt.bug_gelu_poly_wrong_coef,
                                       "i-GELU with a = -0.2 instead of -0.2888", "fp16_poly"),
            "fp16_ascend_tanh": _ascend(
                "fp16_ascend_tanh", opt.gelu_ascend_tanh, ASCEND_GELU_TANH_CONTRACT, "high_precision",
                "Ascend Gelu default/high_precision: fp16 -> fp32, tanh form x/(1+exp(-|y|)) * exp(min(y,0)), "
                "y = 1.5957691(x + 0.044715x^3), one cast to fp16", ASCEND_GELU_SOURCE),
            "fp16_ascend_igelu": _ascend(
                "fp16_ascend_igelu", opt.gelu_ascend_igelu, ASCEND_IGELU_CONTRACT, "high_performance",
                "Ascend Gelu high_performance: i-GELU (a/2 = -0.1444, b = -1.769, c = 0.7071, sign via vrec(|x|)) "
                "in fp16 arithmetic, IEEE overflow", ASCEND_GELU_SOURCE),
            "fp16_ascend_igelu_sat": _ascend(
                "fp16_ascend_igelu_sat", opt.gelu_ascend_igelu_sat, ASCEND_IGELU_SAT_CONTRACT, "high_performance",
                "fp16_ascend_igelu with every fp16 instruction saturating (inf -> +-65504, NaN -> 0)",
                ASCEND_GELU_SOURCE),
            "bug_fp16_ascend_tanh_cubic": _bug("bug_fp16_ascend_tanh_cubic", opt.bug_gelu_ascend_tanh_cubic,
                                               "tanh-form Gelu with 0.04715 instead of 0.044715", "fp16_ascend_tanh"),
            "bug_fp16_ascend_igelu_b": _bug("bug_fp16_ascend_igelu_b", opt.bug_gelu_ascend_igelu_b,
                                            "fp16 i-GELU with b = 1.796 instead of 1.769", "fp16_ascend_igelu"),
            "bug_fp16_ascend_igelu_fp32": _bug("bug_fp16_ascend_igelu_fp32", opt.bug_gelu_ascend_igelu_fp32,
                                               "the high_performance i-GELU evaluated in fp32 (too accurate)",
                                               "fp16_ascend_igelu"),
            "bug_fp16_ascend_igelu_ieee_as_sat": _bug(
                "bug_fp16_ascend_igelu_ieee_as_sat", opt.bug_gelu_ascend_igelu_ieee_as_sat,
                "the IEEE-mode fp16 i-GELU sold as the saturating one (NaN/inf for |x| <= 2^-16)",
                "fp16_ascend_igelu_sat", "wide"),
        },
        strategies={**_strategies(), "wide": lambda: _unary(wide_magnitudes())}, golden_cases=_golden_cases,
        doc="GELU with exact erf (ONNX Gelu approximate='none'); approximations are held to their documented error."),
    KernelInfo(
        name="gelu_tanh", family="activations", reference=ref.gelu_tanh,
        variants={
            **_accurate_variants(opt.gelu_tanh_accurate, GELU_TANH_CONTRACT),
            "fp16_fp16acc": _fp16_fast("fp16_fp16acc", opt.gelu_tanh_fast_fp16, GELU_TANH_FAST_CONTRACT,
                                       "x*sigmoid(2t), sigmoid in fp16 with the fast exp"),
            "bug_fp16_wrong_cubic": _bug("bug_fp16_wrong_cubic", opt.bug_gelu_tanh_wrong_cubic,
                                         "cubic coefficient 0.44715 instead of 0.044715", "fp16_fp32acc"),
        },
        strategies=_strategies(), golden_cases=_golden_cases,
        doc="GELU tanh form (ONNX Gelu approximate='tanh'), its own float64 reference."),
    KernelInfo(
        name="sigmoid", family="activations", reference=ref.sigmoid, defaults=("fp16_fp32acc",),
        variants={
            **_accurate_variants(opt.sigmoid_accurate, SIGMOID_CONTRACT),
            "fp16_fast": _fp16_fast("fp16_fast", opt.sigmoid_fast_fp16, SIGMOID_FAST_CONTRACT,
                                    "fp16 arithmetic, exp(-|x|) as 2^n p(f)"),
            "bug_fp16_naive": _bug("bug_fp16_naive", opt.bug_sigmoid_naive_fp16,
                                   "1/(1+exp(-x)) in fp16: exp overflows for x < -11.09 and sigmoid becomes 0",
                                   "fp16_fast", "tails", accumulate="float16"),
            "fp16_vexp": _ascend(
                "fp16_vexp", opt.sigmoid_vexp_fp16, ASCEND_SIGMOID_CONTRACT, "high_precision",
                "Ascend Sigmoid: fp16 throughout, vexp(-x), +1, vrec(HIGH_PRECISION); 0 for x <= -11.09 "
                "(fp16 exp overflow, IEEE)", ASCEND_SIGMOID_SOURCE),
            "fp16_vexp_sat": _ascend(
                "fp16_vexp_sat", opt.sigmoid_vexp_fp16_sat, ASCEND_SIGMOID_SAT_CONTRACT, "high_precision",
                "fp16_vexp with every fp16 instruction saturating: 2^-16 for x <= -11.09", ASCEND_SIGMOID_SOURCE),
            "bug_fp16_vexp_fp32": _bug("bug_fp16_vexp_fp32", opt.bug_sigmoid_vexp_fp32,
                                       "the Ascend Sigmoid evaluated in fp32 (too accurate in the tail)",
                                       "fp16_vexp", "tails"),
            "bug_fp16_vexp_sign": _bug("bug_fp16_vexp_sign", opt.bug_sigmoid_vexp_sign,
                                       "vmuls by +1 instead of -1: sigmoid(-x)", "fp16_vexp"),
            "bug_fp16_vexp_ieee_as_sat": _bug("bug_fp16_vexp_ieee_as_sat", opt.bug_sigmoid_vexp_ieee_as_sat,
                                              "the IEEE-mode Sigmoid sold as the saturating one (0, not 2^-16, "
                                              "below x = -11.09)", "fp16_vexp_sat", "tails"),
        },
        strategies=_strategies((-20.0, 12.0)), golden_cases=_golden_cases, doc="Logistic sigmoid."),
    KernelInfo(
        name="silu", family="activations", reference=ref.silu,
        variants={
            **_accurate_variants(opt.silu_accurate, SILU_CONTRACT),
            "fp16_fast": _fp16_fast("fp16_fast", opt.silu_fast_fp16, SILU_FAST_CONTRACT,
                                    "x * fast fp16 sigmoid"),
            "bug_fp16_naive": _bug("bug_fp16_naive", opt.bug_silu_naive_fp16,
                                   "x/(1+exp(-x)) in fp16: 0 instead of a small negative value for x < -11.09",
                                   "fp16_fast", "tails", accumulate="float16"),
        },
        strategies=_strategies((-24.0, 12.0)), golden_cases=_golden_cases, doc="SiLU / swish: x*sigmoid(x)."),
    KernelInfo(
        name="exp", family="activations", reference=ref.exp,
        variants={
            **_accurate_variants(opt.exp_accurate, EXP_CONTRACT),
            "fp16_fast": _fp16_fast("fp16_fast", opt.exp_fast_fp16, EXP_FAST_CONTRACT,
                                    "fp16 2^(x log2e) with degree-4 polynomial"),
            "bug_fp16_fast_ftz": _bug("bug_fp16_fast_ftz", opt.bug_exp_fast_ftz,
                                      "fast exp flushing subnormal results (x in (-17.3, -9.7)) to zero",
                                      "fp16_fast", "tails", accumulate="float16"),
        },
        strategies=_strategies((-18.0, 11.0)), golden_cases=_golden_cases, doc="Elementwise exp."),
    KernelInfo(
        name="erf", family="activations", reference=ref.erf,
        variants={
            **_accurate_variants(opt.erf_accurate, ERF_CONTRACT),
            "bug_fp16_erfc_cancel": _bug("bug_fp16_erfc_cancel", opt.bug_erf_fp16_erfc,
                                         "erf = 1 - erfc(|x|) with erfc stored in fp16: cancels near 0",
                                         "fp16_fp32acc"),
        },
        strategies=_strategies(), golden_cases=_golden_cases, doc="Error function."),
    KernelInfo(
        name="tanh", family="activations", reference=ref.tanh,
        variants={
            **_accurate_variants(opt.tanh_accurate, TANH_CONTRACT),
            "bug_fp16_exp_form": _bug("bug_fp16_exp_form", opt.bug_tanh_exp_form_fp16,
                                      "(e^2x-1)/(e^2x+1) in fp16: inf/inf = NaN for x > 5.5", "fp16_fp32acc"),
        },
        strategies=_strategies(), golden_cases=_golden_cases, doc="Hyperbolic tangent."),
]

_ACCURATE = ("fp32", "fp16_fp32acc", "bf16_fp32acc")
DEFINITIONS = {
    "gelu": {"fp32": D.gelu_erf, "fp16_erf_hp": D.gelu_erf, "bf16_erf_hp": D.gelu_erf,
             "fp16_tanh": D.gelu_tanh_textbook, "fp16_quick": D.gelu_quick, "fp16_poly": D.gelu_ibert,
             "fp16_ascend_tanh": D.ascend_gelu_tanh, "fp16_ascend_igelu": D.ascend_igelu16,
             "fp16_ascend_igelu_sat": D.ascend_igelu16_sat},
    "gelu_tanh": {**dict.fromkeys(_ACCURATE, D.gelu_tanh_sigmoid), "fp16_fp16acc": D.gelu_tanh_fast16},
    "sigmoid": {**dict.fromkeys(_ACCURATE, D.sigmoid), "fp16_fast": D.sigmoid_fast16,
                "fp16_vexp": D.ascend_sigmoid16, "fp16_vexp_sat": D.ascend_sigmoid16_sat},
    "silu": {**dict.fromkeys(_ACCURATE, D.silu), "fp16_fast": D.silu_fast16},
    "exp": {**dict.fromkeys(_ACCURATE, D.exp), "fp16_fast": D.exp_fast16},
    "erf": dict.fromkeys(_ACCURATE, D.erf),
    "tanh": dict.fromkeys(_ACCURATE, D.tanh),
}

for _info in KERNELS:
    register_kernel(D.attach(_info, DEFINITIONS[_info.name]))


# --- exhaustive fp16 budgets ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UlpBudget:
    """Pass where ulp(out, fl16(ref)) <= max_ulp(x) or |out - ref| <= abs_floor + u16|ref|."""

    max_ulp: Callable[[np.ndarray], np.ndarray]
    abs_floor: float
    why: str


_ONE_ULP = UlpBudget(lambda x: np.ones_like(x), 0.0,
                     "fp32 compute error (<= a few hundred u32 = 0.02 u16) can only move the result across one "
                     "fp16 rounding boundary: at most 1 ULP from the correctly rounded value")


def _approx_budget(form: str) -> UlpBudget:
    return UlpBudget(lambda x: np.ones_like(x), GELU_APPROX_MAX_ABS_ERR[form],
                     f"the {form} approximation is only {GELU_APPROX_MAX_ABS_ERR[form]:g} close to GELU in "
                     "absolute terms; near GELU's zero (negative tail) ULPs shrink to subnormal spacing, so "
                     "ULPs say nothing there and the absolute floor (the approximation's max error) applies")


def _fast_budget(rel) -> UlpBudget:
    # A relative error r is at most r/u16 ULPs (1 ULP >= u16 |y|), +1 for the final rounding; below the
    # smallest normal the subnormal rounding adds one step (the contract's floor).
    u = unit_roundoff("float16")
    return UlpBudget(lambda x: np.ceil(rel(x, u) / u) + 2, 0.0,
                     "relative error bound of the contract, converted to ULPs (r/u16 + 1 rounding + 1 subnormal)")


EXHAUSTIVE: dict[tuple[str, str], UlpBudget] = {
    ("gelu", "fp16_erf_hp"): _ONE_ULP,
    ("gelu", "fp16_tanh"): _approx_budget("tanh"),
    ("gelu", "fp16_quick"): _approx_budget("quick"),
    ("gelu", "fp16_poly"): _approx_budget("poly"),
    ("gelu_tanh", "fp16_fp32acc"): _ONE_ULP,
    ("gelu_tanh", "fp16_fp16acc"): _fast_budget(rel_gelu_tanh_fast),
    ("sigmoid", "fp16_fp32acc"): _ONE_ULP,
    ("sigmoid", "fp16_fast"): _fast_budget(rel_sigmoid_fast),
    ("silu", "fp16_fp32acc"): _ONE_ULP,
    ("silu", "fp16_fast"): _fast_budget(rel_silu_fast),
    ("exp", "fp16_fp32acc"): _ONE_ULP,
    ("exp", "fp16_fast"): _fast_budget(rel_exp_fast),
    ("erf", "fp16_fp32acc"): _ONE_ULP,
    ("tanh", "fp16_fp32acc"): _ONE_ULP,
}
