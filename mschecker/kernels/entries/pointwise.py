"""Registry entries: elu, selu, celu, softplus, mish, hard_sigmoid, hard_swish, softsign, prelu (ONNX's
float-computing pointwise ops, formerly run by onnx.reference in the node's dtype, or not at all).

The contracts follow mschecker/kernels/entries/activations.py: bound = compute term + u_storage |y| + subnormal floor,
the compute term derived per kernel below from the fp32 formula the variants evaluate (u = u_acc = 2^-24; libm's
expm1f / expf / log1pf held to activations.LIBM_F32_ULPS = 4 ULPs, i.e. 8u relative; attributes are rounded to
fp32 by the kernel, which costs u per attribute when the caller's value is not an fp32 number and nothing for
ONNX's FLOAT attributes):
- elu (x < 0: alpha expm1(x)): expm1 8u, alpha's rounding u, the product u: 8u + 2u relative. x >= 0 is exact.
- elu *_exp_minus_1 (x < 0: alpha (exp(x) - 1), high_performance): exp's 8u relative error is an absolute
  error 8u e^x in exp(x) - 1 (the subtraction is exact for e^x in [1/2, 1] by Sterbenz, u relative below), so the
  relative error of the result is 8u e^x / |expm1(x)| + 3u: ~8u / |x| near 0, where an fp32 or bf16 result
  (Elu(-1e-6) ~ -1e-6, spacing 2^-43 in fp32) keeps digits that exp(x) - 1 has already lost. In fp16 the loss is
  invisible: every nonzero fp16 result is spaced >= 2^-24 apart, more than the fp32 error near 1 (measured: <= 1
  fp16 ULP on every input, tests/kernels/test_pointwise.py). This is why the high_precision variants use expm1.
- selu: alpha expm1(x) (8u + 2u) for x <= 0 or x, then gamma's rounding and the product (2u): 8u + 4u.
- celu: z = x / alpha (alpha's rounding and the quotient: 2u relative in z, i.e. 2u |z| absolute in the
  exponent, which moves expm1(z) by 2u |z| e^z / |expm1(z)| <= 2u relative since t / (e^t - 1) <= 1 for t = -z),
  expm1 8u, alpha and the product 2u: 8u + 4u.
- softplus: x > 20: x itself, off by log1p(e^-x) / x < SOFTPLUS_THRESHOLD_REL = 1.03e-10 relative; else
  log1p(e) with e = exp(x) (8u relative) entering log1p with condition e / ((1 + e) log1p(e)) <= 1, plus log1p's
  own 8u: 16u + the threshold term.
- mish: x tanh(s) with s = softplus(x) as above (16u + 1.03e-10): tanh passes s's relative error on with
  condition s sech^2(s) / tanh(s) = 2s / sinh(2s) <= 1 and adds its own 8u, the product u: 24u + u + 1.03e-10.
  Below x = -87.3 exp(x) (and so s = tanh(s) ~ e^x) is an fp32 subnormal, off by up to one subnormal step, which
  the product carries times |x| (UnaryBound x_times_subnormal).
- hard_sigmoid: t = fl(fl(alpha x) + beta): alpha's rounding and the product u |alpha x| each, beta's rounding
  u |beta|, the sum u |t|; the clamp to [0, 1] is 1-Lipschitz: absolute u (2 |alpha x| + |beta| + |t|). No
  relative form: alpha x + beta cancels near x = -beta / alpha.
- hard_swish: y = fl(x h) with h = hard_sigmoid(x; fp32(1/6), 1/2) (alpha exact): |x| u (|alpha x| + |t|) from h
  plus u |y| from the product: the absolute term |x| u (|alpha x| + |t| + h) (UnaryBound rel_on_x).
- softsign: x / fl(1 + |x|): the sum and the quotient, 2u relative.
- prelu: slope x (one rounding, u |y|; exact in fp32 for fp16/bf16 operands) where x < 0, x elsewhere.
Domain: the fp32 computations cannot overflow for any fp16/bf16/fp32 input (expm1 and exp see x <= 0 or
x <= 20; alpha x + beta and slope x may overflow only where the float64 result itself exceeds fp32's range, and
then the rounded reference is inf too).
`EXHAUSTIVE` gives the fp16 variants' ULP budgets for the all-65,536-inputs sweep (tests/kernels/test_pointwise.py),
with the ONNX default attributes.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import unit_roundoff
from mschecker.optimized_kernels import pointwise as opt
from mschecker.reference import pointwise as ref
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.entries.activations import (_ONE_ULP, UnaryBound, _accurate_variants, _bug, _contract, _fast_budget, _finite, _libm,
                          uniform_range)

#: log1p(e^-20) / 20: the relative error of returning x for Softplus(x) above the threshold 20.
SOFTPLUS_THRESHOLD_REL = float(np.log1p(np.exp(-opt.SOFTPLUS_THRESHOLD)) / opt.SOFTPLUS_THRESHOLD)


# --- relative-error terms rel(x, u_acc) (UnaryBound: times |y|; absolute as they stand with rel_on_x) ------------
def rel_elu(x, u):
    """expm1 (libm, 8u) + alpha's rounding + the product."""
    return _libm(u) + 2 * u + 0 * _finite(x)


def rel_elu_exp_minus_1(x, u):
    """exp's libm error 8u e^x is absolute in exp(x) - 1: relative 8u e^x / |expm1(x)| for x < 0, + 3u."""
    xn = np.minimum(_finite(x), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        amplified = np.where(xn < 0, _libm(u) * np.exp(xn) / -np.expm1(xn), 0.0)
    return amplified + 3 * u


def rel_selu(x, u):
    """alpha expm1(x) (8u + 2u), then gamma's rounding and the product (2u)."""
    return _libm(u) + 4 * u + 0 * _finite(x)


def rel_celu(x, u):
    """z = x / alpha (2u in z, amplified by t / (e^t - 1) <= 1), expm1 (8u), alpha and the product (2u)."""
    return _libm(u) + 4 * u + 0 * _finite(x)


def rel_softplus(x, u):
    """exp (8u, condition <= 1 through log1p) + log1p (8u) + the threshold's 1.03e-10."""
    return 2 * _libm(u) + SOFTPLUS_THRESHOLD_REL + 0 * _finite(x)


def rel_mish(x, u):
    """softplus (16u + threshold), tanh (8u, condition <= 1), the product."""
    return rel_softplus(x, u) + _libm(u) + u


def rel_hard_swish(x, u):
    """|x| u (|alpha x| + |t| + h), t = alpha x + 1/2, h = clip(t, 0, 1): an absolute term (rel_on_x)."""
    xf = _finite(x)
    t = opt.HARD_SWISH_ALPHA * xf + 0.5
    return np.abs(xf) * u * (np.abs(opt.HARD_SWISH_ALPHA * xf) + np.abs(t) + np.clip(t, 0.0, 1.0))


def rel_softsign(x, u):
    """1 + |x| and the quotient."""
    return 2 * u + 0 * _finite(x)


def _storage_terms(y, variant: Variant):
    return unit_roundoff(variant.dtype) * np.abs(y) + subnormal_floor(variant)


def _hard_sigmoid_bound(case: Case, y, variant: Variant):
    x = case.inputs[0].astype(np.float64)
    alpha = case.params.get("alpha", ref.HARD_SIGMOID_ALPHA)
    beta = case.params.get("beta", ref.HARD_SIGMOID_BETA)
    u = unit_roundoff(variant.accumulate)
    with np.errstate(all="ignore"):
        ax = alpha * _finite(x)
        bound = u * (2 * np.abs(ax) + abs(beta) + np.abs(ax + beta)) + _storage_terms(y, variant)
    return np.where(np.isnan(bound), np.inf, bound)


def _prelu_bound(case: Case, y, variant: Variant):
    with np.errstate(all="ignore"):
        bound = unit_roundoff(variant.accumulate) * np.abs(y) + _storage_terms(y, variant)
    return np.where(np.isnan(bound), np.inf, bound)


ELU_CONTRACT = _contract(rel_elu, "Elu as alpha expm1(x) in fp32")
ELU_EXP_MINUS_1_CONTRACT = _contract(rel_elu_exp_minus_1, "Elu as alpha (exp(x) - 1) in fp32 (exp's error "
                                     "amplified by e^x / |expm1(x)| near 0)")
SELU_CONTRACT = _contract(rel_selu, "Selu as gamma alpha expm1(x) / gamma x in fp32")
CELU_CONTRACT = _contract(rel_celu, "Celu as alpha expm1(x / alpha) in fp32")
SOFTPLUS_CONTRACT = _contract(rel_softplus, "Softplus as log1p(exp(x)) in fp32, x above 20")
MISH_CONTRACT = _contract(rel_mish, "Mish as x tanh(log1p(exp(x))) in fp32", x_times_subnormal=True)
HARD_SWISH_CONTRACT = _contract(rel_hard_swish, "HardSwish as x clip(x fp32(1/6) + 1/2, 0, 1) in fp32",
                                rel_on_x=True)
SOFTSIGN_CONTRACT = _contract(rel_softsign, "Softsign as x / (1 + |x|) in fp32")
HARD_SIGMOID_CONTRACT = Contract(_hard_sigmoid_bound, "HardSigmoid in fp32: absolute u_acc (2|alpha x| + |beta| + "
                                 "|alpha x + beta|) (alpha, the product, beta, the sum; the clamp is 1-Lipschitz) + "
                                 "u_storage|y| + subnormal floor")
PRELU_CONTRACT = Contract(_prelu_bound, "PRelu: one fp32 product u_acc|y| (exact for fp16/bf16 operands) + "
                          "u_storage|y| + subnormal floor")


# --- strategies ---------------------------------------------------------------------------------------------------
def _fp32_numbers(*values: float):
    """Attribute values as ONNX stores them (fp32 numbers), so the attribute's rounding is not what is measured."""
    return st.sampled_from([float(np.float32(v)) for v in values])


@st.composite
def _with_attributes(draw, xs, attributes: Mapping[str, st.SearchStrategy]):
    """A unary case whose attributes are each either drawn or left out (the kernel's ONNX default applies: a
    wrong default is a bug these cases catch)."""
    x = draw(xs)
    params = {}
    for name, values in attributes.items():
        if draw(st.booleans()):
            params[name] = draw(values)
    shown = " ".join(f"{k}={v:g}" for k, v in params.items()) or "default attributes"
    return Case((x,), params, label=f"shape {x.shape} max|x| {np.max(np.abs(x), initial=0):.3g} {shown}")


def _unary_strategies(attributes: Mapping[str, st.SearchStrategy], tails: tuple[float, float] | None = None):
    s = {
        "generic": lambda: _with_attributes(S.tensors(dtype="float16"), attributes),
        "elementwise": lambda: _with_attributes(S.elementwise_tensors(dtype="float16"), attributes),
    }
    if tails is not None:
        s["tails"] = lambda: _with_attributes(uniform_range(*tails), attributes)
    return s


@st.composite
def prelu_cases(draw, xs=None, slope_scales=(0.01, 0.25, 1.0, 3.0)):
    """x and a slope unidirectionally broadcastable to it (a suffix of x's shape with some sides 1, or a
    scalar); slopes up to ~3 in magnitude (slopes above 1 are legal and break LeakyRelu's max(x, a x) shortcut)."""
    x = draw(xs if xs is not None else S.tensors(dtype="float16"))
    k = draw(st.integers(0, x.ndim))
    shape = tuple(d if draw(st.booleans()) else 1 for d in x.shape[x.ndim - k:])
    slope = draw(S.tensors(shape=shape, dtype="float16", scale=draw(st.sampled_from(slope_scales))))
    return Case((x, slope), {}, label=f"x {x.shape} slope {slope.shape}")


def _golden_cases(attributes: Mapping[str, float] | None = None):
    """activations' goldens (normal*3, a [-20, 12] grid, special values) with the default attributes, and once
    more on the grid with other attributes."""
    def cases():
        rng = np.random.default_rng(20261201)
        specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, np.inf, -np.inf, 6e-8, -6e-8, -3.0, 2.7,
                             -2.5, -1e-3, 25.0])
        out = [Case((rng.standard_normal((4, 64)) * 3,), {}, "normal*3 4x64"),
               Case((np.linspace(-20.0, 25.0, 257),), {}, "grid [-20, 25]"),
               Case((specials,), {}, "special values")]
        if attributes:
            out.append(Case((np.linspace(-8.0, 8.0, 129),), dict(attributes),
                            "grid [-8, 8] " + " ".join(f"{k}={v:g}" for k, v in attributes.items())))
        return out
    return cases


def _prelu_golden_cases():
    rng = np.random.default_rng(20261201)
    x = rng.standard_normal((2, 3, 4, 5)) * 3
    return [Case((x, np.array([0.25])), {}, "NCHW, one shared slope"),
            Case((x, rng.standard_normal((3, 1, 1))), {}, "NCHW, per-channel slope (3, 1, 1)"),
            Case((x, rng.uniform(0.5, 3.0, (4, 5))), {}, "NCHW, slope (4, 5) up to 3"),
            Case((np.array([-np.inf, -65504.0, -1.0, -0.0, 0.0, 6e-8, np.inf, np.nan]), np.array(0.5)), {},
                 "special values, scalar slope")]


def _unary(name, reference, accurate_fn, contract, attributes, bugs, doc, *, definitions, tails=None, extra=None,
           goldens=None) -> KernelInfo:
    """An activations-family entry: the fp32-compute variants, any `extra` ones, the planted bugs, each variant's
    two-sided definition; cases with the attributes drawn or left at their defaults."""
    variants = {**_accurate_variants(accurate_fn, contract), **(extra or {}), **bugs}
    info = KernelInfo(name=name, family="activations", reference=reference, variants=variants,
                      strategies=_unary_strategies(attributes, tails),
                      golden_cases=_golden_cases(goldens), doc=doc)
    return D.attach(info, definitions)


_ACCURATE = ("fp32", "fp16_fp32acc", "bf16_fp32acc")
_EXP_MINUS_1 = {"fp32_exp_minus_1": "float32", "fp16_exp_minus_1": "float16", "bf16_exp_minus_1": "bfloat16"}
_ALPHAS = _fp32_numbers(1.0, 0.1, 0.5, 2.0, 3.0)

KERNELS = [
    _unary("elu", ref.elu, opt.elu_accurate, ELU_CONTRACT, {"alpha": _ALPHAS}, {
        "bug_fp16_exp_minus_1": _bug("bug_fp16_exp_minus_1", opt.bug_elu_fp16_exp_minus_1,
                                     "exp(x) rounded to fp16 before the - 1: cancels near 0", "fp16_fp32acc"),
    }, "ONNX Elu: alpha (exp(x) - 1) for x < 0, x otherwise (alpha default 1).", tails=(-20.0, 12.0),
        extra={name: Variant(name, opt.elu_exp_minus_1, storage, ELU_EXP_MINUS_1_CONTRACT, accumulate="float32",
                             implmode="high_performance", doc="alpha (exp(x) - 1) in fp32: exp's error is amplified "
                             "near 0")
               for name, storage in _EXP_MINUS_1.items()},
        goldens={"alpha": 0.5},
        definitions={**dict.fromkeys(_ACCURATE, D.elu_expm1), **dict.fromkeys(_EXP_MINUS_1, D.elu_exp_minus_one)}),
    _unary("selu", ref.selu, opt.selu_accurate, SELU_CONTRACT,
           {"alpha": _fp32_numbers(ref.SELU_ALPHA, 1.0, 2.0), "gamma": _fp32_numbers(ref.SELU_GAMMA, 1.0, 2.0)}, {
        "bug_swapped_constants": _bug("bug_swapped_constants", opt.bug_selu_swapped_constants,
                                      "default alpha and gamma swapped", "fp16_fp32acc"),
    }, "ONNX Selu: gamma (alpha (exp(x) - 1)) for x <= 0, gamma x otherwise (defaults 1.6733, 1.0507).",
        goldens={"alpha": 2.0, "gamma": 0.5}, definitions=dict.fromkeys(_ACCURATE, D.selu)),
    _unary("celu", ref.celu, opt.celu_accurate, CELU_CONTRACT, {"alpha": _ALPHAS}, {
        "bug_times_alpha": _bug("bug_times_alpha", opt.bug_celu_times_alpha, "exponent x * alpha instead of "
                                "x / alpha", "fp16_fp32acc"),
    }, "ONNX Celu: max(0, x) + min(0, alpha (exp(x / alpha) - 1)) (alpha default 1).", goldens={"alpha": 2.0},
        definitions=dict.fromkeys(_ACCURATE, D.celu)),
    _unary("softplus", ref.softplus, opt.softplus_accurate, SOFTPLUS_CONTRACT, {}, {
        "bug_fp16_overflow": _bug("bug_fp16_overflow", opt.bug_softplus_fp16_overflow,
                                  "log1p(exp(x)) with fp16 exp, no threshold: inf for x > 11.09", "fp16_fp32acc",
                                  "tails"),
        "bug_log_not_log1p": _bug("bug_log_not_log1p", opt.bug_softplus_log_not_log1p,
                                  "log(1 + exp(x)): 1 + e^x drops e^x's digits for x << 0", "fp32", "tails",
                                  dtype="float32"),
    }, "ONNX Softplus: ln(exp(x) + 1).", tails=(-20.0, 20.0), definitions=dict.fromkeys(_ACCURATE, D.softplus)),
    _unary("mish", ref.mish, opt.mish_accurate, MISH_CONTRACT, {}, {
        "bug_fast_fp16": _bug("bug_fast_fp16", opt.bug_mish_fast_fp16, "fast-Mish identity (e^2x + 2e^x) / "
                              "(e^2x + 2e^x + 2) in fp16: NaN for x > 5.55", "fp16_fp32acc", "tails"),
    }, "ONNX Mish: x tanh(softplus(x)).", tails=(-20.0, 20.0), definitions=dict.fromkeys(_ACCURATE, D.mish)),
    _unary("hard_sigmoid", ref.hard_sigmoid, opt.hard_sigmoid_accurate, HARD_SIGMOID_CONTRACT,
           {"alpha": _fp32_numbers(0.2, 1 / 6, 0.5, 1.0), "beta": _fp32_numbers(0.5, 0.0, 0.25)}, {
        "bug_torch_default_alpha": _bug("bug_torch_default_alpha", opt.bug_hard_sigmoid_torch_default,
                                        "PyTorch's slope 1/6 as the default alpha (ONNX: 0.2)", "fp16_fp32acc"),
    }, "ONNX HardSigmoid: max(0, min(1, alpha x + beta)) (defaults alpha 0.2, beta 0.5).",
        goldens={"alpha": 0.5, "beta": 0.25}, definitions=dict.fromkeys(_ACCURATE, D.hard_sigmoid)),
    _unary("hard_swish", ref.hard_swish, opt.hard_swish_accurate, HARD_SWISH_CONTRACT, {}, {
        "bug_alpha_0_2": _bug("bug_alpha_0_2", opt.bug_hard_swish_alpha_0_2,
                              "x HardSigmoid(x) with HardSigmoid's default alpha 0.2 instead of 1/6", "fp16_fp32acc"),
    }, "ONNX HardSwish: x max(0, min(1, x / 6 + 1/2)).", definitions=dict.fromkeys(_ACCURATE, D.hard_swish)),
    _unary("softsign", ref.softsign, opt.softsign_accurate, SOFTSIGN_CONTRACT, {}, {
        "bug_no_abs": _bug("bug_no_abs", opt.bug_softsign_no_abs, "x / (1 + x): the absolute value dropped",
                           "fp16_fp32acc"),
    }, "ONNX Softsign: x / (1 + |x|).", definitions=dict.fromkeys(_ACCURATE, D.softsign)),
    D.attach(KernelInfo(
        name="prelu", family="pointwise", reference=ref.prelu,
        variants={**_accurate_variants(opt.prelu_accurate, PRELU_CONTRACT),
                  "bug_max_form": _bug("bug_max_form", opt.bug_prelu_max_form, "max(x, slope x): wrong for slopes "
                                       "above 1", "fp16_fp32acc")},
        strategies={"generic": lambda: prelu_cases(),
                    "elementwise": lambda: prelu_cases(S.elementwise_tensors(dtype="float16"))},
        golden_cases=_prelu_golden_cases,
        doc="ONNX PRelu: slope x for x < 0, x otherwise; slope broadcast unidirectionally to x."),
        dict.fromkeys(_ACCURATE, D.prelu)),
]

for _info in KERNELS:
    register_kernel(_info)


# --- exhaustive fp16 budgets (ONNX default attributes) ------------------------------------------------------------
EXHAUSTIVE = {
    **{(k.name, "fp16_fp32acc"): _ONE_ULP for k in KERNELS if k.family == "activations"},
    ("elu", "fp16_exp_minus_1"): _fast_budget(rel_elu_exp_minus_1),
}
