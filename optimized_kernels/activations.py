"""NPU-style elementwise activation kernels: accurate (high_precision) and fast (high_performance) forms.

Every public kernel takes an array in its storage dtype (fp16, bf16 or fp32) and returns the same dtype.
- `*_accurate`: upcast to fp32, evaluate an accurate formula in fp32, round once to storage. Used for the
  fp32, fp16_fp32acc and bf16_fp32acc variants (the output dtype follows the input).
- GELU approximations (`gelu_tanh_form`, `gelu_quick`, `gelu_poly`): fp32 evaluation of a cheaper formula; the
  error is dominated by the approximation itself (docs/NUMERICS.md §6), not by the arithmetic.
- `*_fast_fp16`: fp16 arithmetic throughout with exp computed as 2^n * p(f) (range reduction plus a degree-4
  polynomial), as a vector unit's high_performance mode does.
- `bug_*`: planted bugs for the kernel checker to catch; each docstring says what is wrong.

The formula helpers (`erfc_nr`, `gelu_*_formula`, `exp2_poly`) take the compute dtype as a parameter so that a test
can evaluate them in float64 and measure the approximation error alone.
"""
from __future__ import annotations

import numpy as np

from mschecker.reference import elementary as em

from mschecker.fastfp16 import lut_unary

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
GELU_TANH_CUBIC = 0.044715
QUICK_GELU_ALPHA = 1.702
# I-BERT's integer GELU (Kim et al., ICML 2021): erf(z) ~ sign(z) [a (min(|z|, -b) + b)^2 + 1].
IGELU_A, IGELU_B = -0.2888, -1.769
# Numerical Recipes (Press et al., 2nd ed., section 6.2, erfcc): fractional error < 1.2e-7 everywhere.
_NR_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
            -0.82215223, 0.17087277)
# Taylor coefficients of 2^f = exp(f ln2) up to degree 4; on |f| <= 1/2 the truncation error is < 4e-5 relative.
_EXP2_TAYLOR = tuple(float(em.log(2.0) ** k / np.prod(np.arange(1, k + 1))) for k in range(5))
LOG2E = float(np.log2(np.e))
# erf(x) = 2/sqrt(pi) * sum_k (-1)^k x^(2k+1) / (k! (2k+1)), used below |x| < 1/2 (truncation < 2e-8 relative).
_ERF_TAYLOR = tuple(2.0 / np.sqrt(np.pi) * (-1.0) ** k / (float(np.prod(np.arange(1, k + 1))) * (2 * k + 1))
                    for k in range(7))


def _horner(coefs, t, dt):
    acc = np.full_like(t, coefs[-1], dtype=dt)
    for c in reversed(coefs[:-1]):
        acc = (acc * t + dt.type(c)).astype(dt)
    return acc


def _limits(x, y, neg_inf):
    """Return the reference's limit at -inf (inf*0 would give NaN); +inf maps to +inf already."""
    return np.where(np.isneginf(x), y.dtype.type(neg_inf), y)


# ----------------------------------------------------------------------------------------- formula helpers
def erfc_nr(z: np.ndarray, dt=F32) -> np.ndarray:
    """erfc(z) for any real z in dtype dt: Numerical Recipes' Chebyshev fit for |z|, reflected for z < 0."""
    dt = np.dtype(dt)
    z = np.asarray(z, dtype=dt)
    a = np.abs(z)
    t = (dt.type(1) / (dt.type(1) + dt.type(0.5) * a)).astype(dt)
    r = t * em.exp(-a * a + _horner(_NR_ERFC, t, dt))
    return np.where(z < 0, dt.type(2) - r, r).astype(dt)


def erf_formula(x: np.ndarray, dt=F32) -> np.ndarray:
    """erf via its Taylor series for |x| < 1/2 (no cancellation near 0) and 1 - erfc_nr(|x|) beyond."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    small = x * _horner(_ERF_TAYLOR, x * x, dt)
    large = np.copysign(dt.type(1) - erfc_nr(np.abs(x), dt), x)
    return np.where(np.abs(x) < 0.5, small, large).astype(dt)


def gelu_erf_formula(x: np.ndarray, dt=F32) -> np.ndarray:
    """x * Phi(x), Phi(x) = erfc(-x/sqrt2)/2: accurate in both tails."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    y = x * (dt.type(0.5) * erfc_nr(-x * dt.type(1 / np.sqrt(2.0)), dt))
    return _limits(x, y.astype(dt), -0.0)


def gelu_tanh_formula(x: np.ndarray, dt=F32, cubic: float = GELU_TANH_CUBIC) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi)(x + cubic x^3))) as written by PyTorch/ONNX (approximate="tanh")."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    t = dt.type(SQRT_2_OVER_PI) * (x + dt.type(cubic) * x * x * x)
    y = dt.type(0.5) * x * (dt.type(1) + em.tanh(t))
    return _limits(x, y.astype(dt), -0.0)


def gelu_quick_formula(x: np.ndarray, dt=F32) -> np.ndarray:
    """x * sigmoid(1.702 x), sigmoid evaluated without overflow."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    y = x * sigmoid_formula(dt.type(QUICK_GELU_ALPHA) * x, dt)
    return _limits(x, y.astype(dt), -0.0)


def gelu_poly_formula(x: np.ndarray, dt=F32, a: float = IGELU_A, b: float = IGELU_B) -> np.ndarray:
    """I-BERT i-GELU: x/2 (1 + L(x/sqrt2)), L(z) = sign(z)[a (min(|z|, -b) + b)^2 + 1]."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    z = x * dt.type(1 / np.sqrt(2.0))
    c = np.minimum(np.abs(z), dt.type(-b)) + dt.type(b)
    erf_approx = np.sign(z) * (dt.type(a) * c * c + dt.type(1))
    y = (dt.type(0.5) * x) * (dt.type(1) + erf_approx)
    return _limits(x, y.astype(dt), -0.0)


def sigmoid_formula(x: np.ndarray, dt=F32) -> np.ndarray:
    """1/(1+e^-x) for x >= 0 and e^x/(1+e^x) for x < 0: exp never overflows, no cancellation."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    e = em.exp(-np.abs(x)).astype(dt)
    one = dt.type(1)
    return np.where(x >= 0, one / (one + e), e / (one + e)).astype(dt)


def exp2_poly(t: np.ndarray, dt=F16, coefs=_EXP2_TAYLOR, ftz: bool = False) -> np.ndarray:
    """2^t as 2^n * p(f), n = rint(t), f = t - n in [-1/2, 1/2] (exact by Sterbenz), p = degree-4 Taylor of 2^f.

    t is clamped to [-40, 40] first (2^-40 and 2^40 are already 0 and inf in fp16), which also maps +-inf to the
    right limits; NaN propagates. With ftz=True results below the smallest normal are flushed to zero.
    """
    dt = np.dtype(dt)
    t = np.asarray(t, dtype=dt)
    tc = np.clip(np.nan_to_num(t, nan=0.0), -40, 40).astype(dt)
    n = np.rint(tc)
    f = (tc - n).astype(dt)
    p = _horner(coefs, f, dt)
    y = np.ldexp(p, n.astype(np.int32)).astype(dt)
    if ftz:
        y = np.where(np.abs(y) < np.finfo(dt).smallest_normal, dt.type(0), y)
    return np.where(np.isnan(t), t, y).astype(dt)


def _accurate(fn, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        return fn(x.astype(F32), F32).astype(x.dtype)


# ------------------------------------------------------------------------------- accurate (fp32-compute) kernels
def gelu_accurate(x):
    """Exact-erf GELU, erf from erfc_nr in fp32 (high_precision); rounded once to storage."""
    return _accurate(gelu_erf_formula, x)


def gelu_tanh_accurate(x):
    """Tanh GELU in fp32 as x*sigmoid(2t) (no 1+tanh cancellation in the negative tail); rounded once."""

    def formula(x, dt):
        t = dt.type(SQRT_2_OVER_PI) * (x + dt.type(GELU_TANH_CUBIC) * x * x * x)
        return _limits(x, (x * sigmoid_formula(dt.type(2) * t, dt)).astype(dt), -0.0)

    return _accurate(formula, x)


def sigmoid_accurate(x):
    return _accurate(sigmoid_formula, x)


def silu_accurate(x):
    return _accurate(lambda x, dt: _limits(x, (x * sigmoid_formula(x, dt)).astype(dt), -0.0), x)


def exp_accurate(x):
    return _accurate(lambda x, dt: em.exp(x).astype(dt), x)


def erf_accurate(x):
    return _accurate(erf_formula, x)


def tanh_accurate(x):
    return _accurate(lambda x, dt: em.tanh(x).astype(dt), x)


# ------------------------------------------------------------------------------------ GELU approximations
def gelu_tanh_form(x):
    """Tanh GELU (4.73e-4 max abs error against erf GELU), fp32 compute, rounded to storage."""
    return _accurate(gelu_tanh_formula, x)


def gelu_quick(x):
    """x*sigmoid(1.702x) (2.03e-2 max abs error against erf GELU), fp32 compute, rounded to storage."""
    return _accurate(gelu_quick_formula, x)


def gelu_poly(x):
    """I-BERT piecewise quadratic GELU (1.82e-2 max abs error against erf GELU), fp32 compute, rounded."""
    return _accurate(gelu_poly_formula, x)


# ----------------------------------------------------------------------------------- fp16-arithmetic kernels
def exp_fast_fp16(x):
    """exp(x) = 2^(x log2 e) in fp16 arithmetic: the fp16 product x*log2e costs |x| u16 relative."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return exp2_poly((x * F16.type(LOG2E)).astype(F16), F16)


def _sigmoid_fast(x, exp_fn):
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        e = exp_fn(-np.abs(x))  # <= 1: never overflows
        one = F16.type(1)
        return np.where(x >= 0, one / (one + e), e / (one + e)).astype(F16)


def sigmoid_fast_fp16(x):
    """sigmoid from the fast fp16 exp of -|x| (no overflow), fp16 add and divide."""
    return _sigmoid_fast(x, exp_fast_fp16)


def silu_fast_fp16(x):
    """x * sigmoid_fast_fp16(x) in fp16."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return _limits(x, (x * sigmoid_fast_fp16(x)).astype(F16), -0.0)


def gelu_tanh_fast_fp16(x):
    """Tanh GELU as x*sigmoid(2t) with the fast fp16 sigmoid; t = sqrt(2/pi)(x + 0.044715 x^3) in fp32 (the
    cubic overflows fp16 for |x| > 40)."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        x32 = x.astype(F32)
        t2 = (F32.type(2 * SQRT_2_OVER_PI) * (x32 + F32.type(GELU_TANH_CUBIC) * x32 * x32 * x32))
        t2 = np.clip(t2, -65504, 65504).astype(F16)
        return _limits(x, (x * sigmoid_fast_fp16(t2)).astype(F16), -0.0)


# ------------------------------------------------------------------------------------------- planted bugs
def bug_gelu_poly_wrong_coef(x):
    """Planted bug: i-GELU with a = -0.2 instead of -0.2888 (a typo in the quadratic's coefficient)."""
    return _accurate(lambda x, dt: gelu_poly_formula(x, dt, a=-0.2), x)


def bug_gelu_tanh_wrong_cubic(x):
    """Planted bug: tanh GELU with 0.44715 instead of 0.044715 in the cubic term."""
    return _accurate(lambda x, dt: gelu_tanh_formula(x, dt, cubic=0.44715), x)


def bug_sigmoid_naive_fp16(x):
    """Planted bug: 1/(1+exp(-x)) in fp16: exp(-x) overflows to inf for x < -11.09, so sigmoid becomes 0 where
    the true value (>= 6e-8 down to x = -16.6) is representable."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return (F16.type(1) / (F16.type(1) + em.exp(-x))).astype(F16)


def bug_silu_naive_fp16(x):
    """Planted bug: x * (1/(1+exp(-x))) in fp16: 0 instead of a small negative value for x < -11.09."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return _limits(x, (x * bug_sigmoid_naive_fp16(x)).astype(F16), -0.0)


def bug_exp_fast_ftz(x):
    """Planted bug: the fast fp16 exp with flush-to-zero: exp(x) for -17.3 < x < -9.7 (fp16 subnormal results)
    becomes 0."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return exp2_poly((x * F16.type(LOG2E)).astype(F16), F16, ftz=True)


def bug_erf_fp16_erfc(x):
    """Planted bug: erf as 1 - erfc(|x|) with erfc stored in fp16 first: near 0 the subtraction cancels the
    stored fp16 rounding error (u16 absolute) into a large relative error."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        r = erfc_nr(np.abs(x.astype(F32)), F32).astype(F16).astype(F32)
        return np.copysign(F32.type(1) - r, x.astype(F32)).astype(x.dtype)


def bug_tanh_exp_form_fp16(x):
    """Planted bug: tanh = (e^2x - 1)/(e^2x + 1) in fp16: e^2x overflows for x > 5.5 and gives inf/inf = NaN."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        e = em.exp((F16.type(2) * x).astype(F16))
        return ((e - F16.type(1)) / (e + F16.type(1))).astype(F16)


# ------------------------------------------------------------------- Ascend TBE activations (issue 21)
# What CANN's TBE kernels compute for fp16 input on 910B/310P (facts from the sources, our own code):
#   Gelu:    dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/gelu.py@0fd5feed6b46627fba3685f30027dabbf396fecf
#            (static twin ops/built-in/tbe/impl/gelu.py@be7bb339dc32b8dabafe4002f71de05031bbd5d4, same formula)
#   Sigmoid: dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/sigmoid.py
#            @38d6337f5d92e0e0705d34d773f215bc350ec9d0
# Every constant is a tvm.const(..., "float32"); in an fp16 computation the DSL's vmuls/vadds/vmins rebuild it in the
# tensor's dtype ("dtype of raw_tensor and scalar must be the same"; auto_cast_of_elewise re-creates a tvm const of
# another dtype as tvm.const(value, tensor dtype)), so the fp16 kernels below use the constants rounded to fp16:
# 0.7071 -> 0.70703125, 1.769 -> 1.7685546875, -0.1444 -> -0.1444091796875, and 1e-12 -> 0.
# Modelling assumptions where the source leaves behaviour to the hardware: vexp, vrec and vdiv are correctly rounded
# in their dtype (vexp: reference/elementary.py's exp, i.e. exp64 rounded through fp32 to the dtype, docs/NUMERICS.md
# section 11; vrec(x, HIGH_PRECISION) and vrec(x): 1/x rounded once), fp16 subnormals are kept (not flushed), and an
# instruction in saturation mode returns its IEEE result with +-inf -> +-65504 and NaN -> 0.
ASCEND_GELU_TANH_K = 1.5957691  # const_0, "2*np.sqrt(2/np.pi)" as the kernel writes it (fp32: 1.59576905, one ulp low)
ASCEND_GELU_CUBIC = 0.044715  # CSVALUE
ASCEND_IGELU_C = 0.7071  # const_c: 1/sqrt(2) to four digits
ASCEND_IGELU_B = 1.769  # const_b_ (and const_b = -1.769): the clip point -b of I-BERT's i-GELU
ASCEND_IGELU_A_HALF = -0.1444  # const_a_half: a/2 with I-BERT's a = -0.2888
ASCEND_IGELU_OFFSET = 1e-12  # const_offset of sgn(x) = (x + 1e-12)/|x + 1e-12|: 0 once cast to fp16
F16_MAX = 65504.0


def _saturate(v: np.ndarray, dt) -> np.ndarray:
    """A saturation-mode instruction's result: +-inf -> +-max of dt, NaN -> 0."""
    big = dt.type(np.finfo(dt).max)
    return np.where(np.isnan(v), dt.type(0), np.clip(v, -big, big)).astype(dt)


def _nonfinite_limits(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """GELU's limits for non-finite inputs (+inf -> +inf, -inf -> -0, NaN -> NaN), the convention of every activation
    kernel here (kernels.check: a non-finite reference value needs the same value). The device arithmetic gives NaN
    at +-inf in IEEE mode (inf * vrec(inf) = inf * 0 in the i-GELU, -inf * exp(-inf) in the tanh form) and +-65504
    or 0 in saturation mode, where no non-finite tensor reaches a kernel (every instruction saturates)."""
    y = np.where(np.isnan(x), x.astype(y.dtype), y)
    y = np.where(np.isposinf(x), y.dtype.type(np.inf), y)
    return np.where(np.isneginf(x), y.dtype.type(-0.0), y).astype(y.dtype)


def _instruction(dt: np.dtype, sat: bool):
    """One vector instruction's result in dt: rounded to dt, and saturated (inf -> +-max, NaN -> 0) on a
    saturation-mode part, where the hardware clamps per instruction."""
    def op(v):
        v = np.asarray(v).astype(dt)
        return _saturate(v, dt) if sat else v
    return op


def ascend_gelu_tanh_formula(x: np.ndarray, dt=F32, k: float = ASCEND_GELU_TANH_K,
                             cubic: float = ASCEND_GELU_CUBIC) -> np.ndarray:
    """Ascend Gelu, default and high_precision implmode (gelu_compute): in dt (fp32 on the device), one rounding per
    instruction, in the kernel's order:
        p = x + (x*x*x) * 0.044715          (vmul, vmul, vmuls, vadd)
        y = p * 1.5957691                   (vmuls)
        gelu = x / (exp(-|y|) + 1) * exp(min(y, 0))   (vexp(vmins(y, 0)); vabs, vmuls -1, vexp, vadds 1, vdiv, vmul)
    the overflow-safe split of x / (1 + exp(-y)): neither exp sees a positive argument."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    x3 = ((x * x).astype(dt) * x).astype(dt)
    p = (x + (x3 * dt.type(cubic)).astype(dt)).astype(dt)
    y = (p * dt.type(k)).astype(dt)
    right = em.exp(np.minimum(y, dt.type(0)).astype(dt))
    e = em.exp((np.abs(y) * dt.type(-1)).astype(dt))
    left = (x / (e + dt.type(1)).astype(dt)).astype(dt)
    return (left * right).astype(dt)


def ascend_igelu_formula(x: np.ndarray, dt=F16, sat: bool = False, c: float = ASCEND_IGELU_C,
                         b: float = ASCEND_IGELU_B, a_half: float = ASCEND_IGELU_A_HALF,
                         offset: float = ASCEND_IGELU_OFFSET) -> np.ndarray:
    """Ascend Gelu, high_performance implmode (high_performance_compute), every instruction in dt (the fp16 input's
    dtype: this path never casts) with the constants rounded to dt, one rounding per instruction (sat: saturated):
        z = x * c;  d = min(|z|, b) + (-b);  t0 = (d*d) * (a/2) + 0.5
        s = x + offset;  sgn = s * vrec(|s|)
        gelu = x * (t0 * sgn + 0.5)
    In fp16 the offset is 0, so sgn(+-0) = 0 * inf = NaN and for 0 < |x| <= 2^-16 vrec overflows (sgn = +-inf,
    gelu = +inf); saturation turns vrec's inf into 65504 and gives ~0.5x there. Where vrec's result is an fp16
    subnormal (|x| > 2^14) or x * vrec(|x|) rounds to 1 -+ 2^-11, t0 * sgn + 0.5 is 2^-12 instead of 0 in the
    negative tail: gelu = x 2^-12 (-15.99 at x = -65504)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    op = _instruction(dt, sat)

    z = op(x * dt.type(c))
    d = op(np.minimum(np.abs(z), dt.type(b)) + dt.type(-b))
    t0 = op(op(op(d * d) * dt.type(a_half)) + dt.type(0.5))
    s = op(x + dt.type(offset))
    sgn = op(s * op(dt.type(1) / np.abs(s)))
    t1 = op(op(t0 * sgn) + dt.type(0.5))
    return op(x * t1)


def ascend_sigmoid_formula(x: np.ndarray, dt=F16, sat: bool = False, neg: float = -1.0) -> np.ndarray:
    """Ascend Sigmoid (sigmoid_compute) for fp16: every instruction in fp16, no cast on any chip:
        n = x * (-1);  e = vexp(n);  t = e + 1;  y = vrec(t, HIGH_PRECISION)
    No exp(-|x|) rewrite: exp(-x) overflows fp16 for x <= -11.0937 (exp(-x) >= 65520), so y = 1/inf = 0 (IEEE) or
    1/fp16(65504 + 1) = 2^-16 (saturation), where sigmoid(x) < 1.53e-5."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    op = _instruction(dt, sat)

    n = op(x * dt.type(neg))
    t = op(op(em.exp(n)) + dt.type(1))
    return op(dt.type(1) / t)


def _ascend16(formula, x, **kw):
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return formula(x, F16, **kw)


def gelu_ascend_tanh(x):
    """fp16 -> fp32 (exact), ascend_gelu_tanh_formula in fp32, one cast to fp16 (-inf -> -0 by convention)."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        y = ascend_gelu_tanh_formula(x.astype(F32), F32).astype(x.dtype)
    return _nonfinite_limits(x, y)


def gelu_ascend_igelu(x):
    """The i-GELU in fp16 arithmetic, IEEE overflow (inf/NaN propagate); +-inf and NaN inputs take GELU's limits."""
    x = np.asarray(x, dtype=F16)
    return _nonfinite_limits(x, _ascend16(ascend_igelu_formula, x))


def gelu_ascend_igelu_sat(x):
    """The i-GELU in fp16 arithmetic, every instruction saturating; +-inf and NaN inputs take GELU's limits."""
    x = np.asarray(x, dtype=F16)
    return _nonfinite_limits(x, _ascend16(ascend_igelu_formula, x, sat=True))


def sigmoid_vexp_fp16(x):
    """Ascend Sigmoid for fp16, IEEE overflow: 0 for x <= -11.0937."""
    return _ascend16(ascend_sigmoid_formula, x)


def sigmoid_vexp_fp16_sat(x):
    """Ascend Sigmoid for fp16, every instruction saturating: 2^-16 for x <= -11.0937; a NaN input stays NaN (the
    harness's convention: in saturation mode no NaN reaches a kernel; the instructions would give 0.5)."""
    x = np.asarray(x, dtype=F16)
    y = _ascend16(ascend_sigmoid_formula, x, sat=True)
    return np.where(np.isnan(x), x, y).astype(F16)


# planted bugs of the Ascend kernels
def bug_gelu_ascend_tanh_cubic(x):
    """Planted bug: the tanh-form Gelu with 0.04715 (a dropped digit) instead of 0.044715."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        y = ascend_gelu_tanh_formula(x.astype(F32), F32, cubic=0.04715).astype(x.dtype)
    return _nonfinite_limits(x, y)


def bug_gelu_ascend_igelu_b(x):
    """Planted bug: the fp16 i-GELU with the clip constant 1.796 (two digits swapped) instead of 1.769."""
    x = np.asarray(x, dtype=F16)
    return _nonfinite_limits(x, _ascend16(ascend_igelu_formula, x, b=1.796))


def bug_gelu_ascend_igelu_fp32(x):
    """Planted bug: the high_performance i-GELU evaluated in fp32 and cast once (as if the kernel's fp16 -> fp32
    improve-precision cast applied in high_performance, which it does not): too accurate, and finite near 0 where
    the fp16 kernel's offset 1e-12 has become 0."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        y = ascend_igelu_formula(x.astype(F32), F32).astype(F16)
    return _nonfinite_limits(x, y)


def bug_gelu_ascend_igelu_ieee_as_sat(x):
    """Planted bug: the IEEE-mode i-GELU sold as the saturating twin (inf/NaN for |x| <= 2^-16)."""
    return gelu_ascend_igelu(x)


def bug_sigmoid_vexp_fp32(x):
    """Planted bug: the Ascend Sigmoid evaluated in fp32 (1/(1+exp(-x)) in fp32, one cast): the emulator's
    pre-issue-21 high_precision sigmoid; too accurate in the tail, where exp(-x) overflows fp16 on the device."""
    x = np.asarray(x, dtype=F16)
    with np.errstate(all="ignore"):
        return ascend_sigmoid_formula(x.astype(F32), F32).astype(F16)


def bug_sigmoid_vexp_sign(x):
    """Planted bug: const_num_neg_one written as +1: 1/(1 + exp(x)) = sigmoid(-x)."""
    return _ascend16(ascend_sigmoid_formula, x, neg=1.0)


def bug_sigmoid_vexp_ieee_as_sat(x):
    """Planted bug: the IEEE-mode Sigmoid sold as the saturating twin (0 instead of 2^-16 below x = -11.09)."""
    return sigmoid_vexp_fp16(x)


for _name in ("gelu_ascend_tanh", "gelu_ascend_igelu", "gelu_ascend_igelu_sat", "sigmoid_vexp_fp16",
              "sigmoid_vexp_fp16_sat"):
    globals()[_name] = lut_unary(globals()[_name])


# ------------------------------------------------------------------------------------ fp16 table lookup
# Every kernel above is elementwise and deterministic, so on float16 input it is answered from a table of its
# values on all 65,536 fp16 bit patterns (fastfp16.lut_unary: the same bits, ~20x faster than re-evaluating the
# formula in numpy's float16 arithmetic). The planted bugs stay plain functions.
for _name in ("gelu_accurate", "gelu_tanh_accurate", "sigmoid_accurate", "silu_accurate", "exp_accurate",
              "erf_accurate", "tanh_accurate", "gelu_tanh_form", "gelu_quick", "gelu_poly", "exp_fast_fp16",
              "sigmoid_fast_fp16", "silu_fast_fp16", "gelu_tanh_fast_fp16"):
    globals()[_name] = lut_unary(globals()[_name])
del _name
