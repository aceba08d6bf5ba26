"""Registry entries: gelu, gelu_tanh, sigmoid, silu, exp, erf, tanh.

Every contract has the form  bound = A + rel(x) |y| + u_storage |y| + floor  where
- A is the maximum absolute error of a documented approximation against the reference function (0 for kernels
  that compute the reference function itself). The A values are docs/NUMERICS.md §6's, and
  tests/kernels/test_exhaustive_fp16.py re-measures them on a dense float64 grid;
- rel(x) is the relative error of evaluating the formula in the accumulator format (u_acc), derived per kernel
  below; it may grow with |x| where a rounded argument is amplified (exp's range reduction, erfc's tail);
- u_storage |y| is the final rounding and floor = contracts.subnormal_floor is one subnormal step of storage.
`EXHAUSTIVE` turns the same terms into the ULP budgets of the exhaustive fp16 sweep.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..contracts import subnormal_floor
from ..dtypes import float_format, gamma, round_to, unit_roundoff
from ..optimized_kernels import activations as opt
from ..reference import activations as ref
from ..registry import Case, Contract, KernelInfo, Variant, register_kernel
from . import definitions as D

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


KERNELS = [
    KernelInfo(
        name="gelu", family="activations", reference=ref.gelu, defaults=("fp16_poly",),
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
        },
        strategies=_strategies(), golden_cases=_golden_cases,
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
        name="sigmoid", family="activations", reference=ref.sigmoid,
        variants={
            **_accurate_variants(opt.sigmoid_accurate, SIGMOID_CONTRACT),
            "fp16_fast": _fp16_fast("fp16_fast", opt.sigmoid_fast_fp16, SIGMOID_FAST_CONTRACT,
                                    "fp16 arithmetic, exp(-|x|) as 2^n p(f)"),
            "bug_fp16_naive": _bug("bug_fp16_naive", opt.bug_sigmoid_naive_fp16,
                                   "1/(1+exp(-x)) in fp16: exp overflows for x < -11.09 and sigmoid becomes 0",
                                   "fp16_fast", "tails", accumulate="float16"),
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
             "fp16_tanh": D.gelu_tanh_textbook, "fp16_quick": D.gelu_quick, "fp16_poly": D.gelu_ibert},
    "gelu_tanh": {**dict.fromkeys(_ACCURATE, D.gelu_tanh_sigmoid), "fp16_fp16acc": D.gelu_tanh_fast16},
    "sigmoid": {**dict.fromkeys(_ACCURATE, D.sigmoid), "fp16_fast": D.sigmoid_fast16},
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
