"""NPU-style kernels of ONNX's float-computing pointwise ops: Elu, Selu, Celu, Softplus, Mish, HardSigmoid,
HardSwish, Softsign, PRelu.

Every public kernel takes arrays in its storage dtype (fp16, bf16 or fp32) and returns that dtype.
- `*_accurate`: upcast to fp32 (exact), evaluate the formula in fp32 with numpy's fp32 ufuncs (one rounding per
  operation; libm's expf / expm1f / log1pf for the transcendental ones), round once to storage. Used for the fp32,
  fp16_fp32acc and bf16_fp32acc variants (the output dtype follows the input). Attributes (alpha, beta, gamma)
  are rounded to fp32, which is exact for ONNX's FLOAT attributes.
- `elu_exp_minus_1`: Elu's negative branch as alpha * (exp(x) - 1) in fp32 (high_performance): the subtraction
  is exact (Sterbenz, for exp(x) in [1/2, 1]) but exposes exp's own rounding, an absolute error of a few u32
  that is a large relative error for |x| << 1.
- `bug_*`: planted bugs for the kernel checker to catch; each docstring says what is wrong.
The formula helpers take the compute dtype as a parameter (as optimized_kernels/activations.py does).
"""
from __future__ import annotations

import numpy as np

from mschecker.reference import elementary as em

from mschecker.optimized_kernels.activations import _accurate, _limits
from mschecker.fastfp16 import lut_unary

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
#: Softplus returns x itself above this (PyTorch's threshold): ln(1 + e^x) - x = log1p(e^-x) < e^-20 = 2.1e-9
#: there, a relative error below 2.1e-9 / 20 = 1.03e-10 (0.002 u32) that also keeps exp(x) finite in fp32.
SOFTPLUS_THRESHOLD = 20.0
#: ONNX's attribute defaults as fp32 values (reference/pointwise.py holds the same numbers).
HARD_SIGMOID_ALPHA, HARD_SIGMOID_BETA = float(np.float32(0.2)), 0.5
HARD_SWISH_ALPHA = float(np.float32(1.0 / 6.0))
SELU_ALPHA = float(np.float32(1.67326319217681884765625))
SELU_GAMMA = float(np.float32(1.05070102214813232421875))


# ----------------------------------------------------------------------------------------- formula helpers
def elu_formula(x, dt=F32, alpha: float = 1.0):
    """alpha * expm1(x) for x < 0, x otherwise."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    return np.where(x < 0, dt.type(alpha) * em.expm1(np.minimum(x, dt.type(0))), x).astype(dt)


def selu_formula(x, dt=F32, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA):
    """gamma * (alpha * expm1(x) for x <= 0, x otherwise): the inner value rounded, then the product."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    inner = np.where(x <= 0, dt.type(alpha) * em.expm1(np.minimum(x, dt.type(0))), x).astype(dt)
    return (dt.type(gamma) * inner).astype(dt)


def celu_formula(x, dt=F32, alpha: float = 1.0):
    """alpha * expm1(x / alpha) for x < 0, x otherwise."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    z = (np.minimum(x, dt.type(0)) / dt.type(alpha)).astype(dt)
    return np.where(x < 0, dt.type(alpha) * em.expm1(z), x).astype(dt)


def softplus_formula(x, dt=F32, threshold: float = SOFTPLUS_THRESHOLD):
    """x above the threshold, log1p(exp(x)) below it (exp(x) <= e^20 cannot overflow there)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    small = em.log1p(em.exp(np.minimum(x, dt.type(threshold))))
    return np.where(x > threshold, x, small).astype(dt)


def mish_formula(x, dt=F32):
    """x * tanh(softplus(x)) (ONNX's function body), each step rounded; -inf gives -0 (the limit)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    return _limits(x, (x * em.tanh(softplus_formula(x, dt))).astype(dt), -0.0)


def hard_sigmoid_formula(x, dt=F32, alpha: float = HARD_SIGMOID_ALPHA, beta: float = HARD_SIGMOID_BETA):
    """max(0, min(1, alpha * x + beta)): the product and the sum rounded separately (no fused multiply-add)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    t = ((dt.type(alpha) * x).astype(dt) + dt.type(beta)).astype(dt)
    return np.maximum(dt.type(0), np.minimum(dt.type(1), t)).astype(dt)


def hard_swish_formula(x, dt=F32, alpha: float = HARD_SWISH_ALPHA):
    """x * hard_sigmoid(x; alpha, 1/2) (ONNX's function body); -inf gives -0 (the limit; inf * 0 is NaN)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    return _limits(x, (x * hard_sigmoid_formula(x, dt, alpha, 0.5)).astype(dt), -0.0)


def softsign_formula(x, dt=F32):
    """x / (1 + |x|); +-inf give +-1 (inf / inf is NaN)."""
    dt = np.dtype(dt)
    x = np.asarray(x, dtype=dt)
    y = (x / (dt.type(1) + np.abs(x)).astype(dt)).astype(dt)
    return np.where(np.isinf(x), np.sign(x), y).astype(dt)


# ------------------------------------------------------------------------------- accurate (fp32-compute) kernels
def elu_accurate(x, alpha: float = 1.0):
    """Elu in fp32 with expm1 (no cancellation near 0), rounded once to storage."""
    return _accurate(lambda x, dt: elu_formula(x, dt, alpha), x)


def selu_accurate(x, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA):
    return _accurate(lambda x, dt: selu_formula(x, dt, alpha, gamma), x)


def celu_accurate(x, alpha: float = 1.0):
    return _accurate(lambda x, dt: celu_formula(x, dt, alpha), x)


def softplus_accurate(x):
    """Softplus in fp32: log1p(exp(x)) up to x = 20, x beyond; rounded once to storage."""
    return _accurate(softplus_formula, x)


def mish_accurate(x):
    """Mish in fp32: x tanh(log1p(exp(x))) (x itself inside tanh above 20); rounded once to storage."""
    return _accurate(mish_formula, x)


def hard_sigmoid_accurate(x, alpha: float = HARD_SIGMOID_ALPHA, beta: float = HARD_SIGMOID_BETA):
    return _accurate(lambda x, dt: hard_sigmoid_formula(x, dt, alpha, beta), x)


def hard_swish_accurate(x):
    return _accurate(hard_swish_formula, x)


def softsign_accurate(x):
    return _accurate(softsign_formula, x)


def prelu_accurate(x, slope):
    """slope * x (fp32 product, exact for fp16/bf16 operands) where x < 0, x elsewhere; rounded once to storage."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        x32, s32 = x.astype(F32), np.asarray(slope).astype(F32)
        return np.where(x32 < 0, x32 * s32, x32).astype(x.dtype)


def elu_exp_minus_1(x, alpha: float = 1.0):
    """Elu's negative branch as alpha * (exp(x) - 1) in fp32 (the textbook form), rounded once to storage."""

    def formula(x, dt):
        d = (em.exp(np.minimum(x, dt.type(0))) - dt.type(1)).astype(dt)
        return np.where(x < 0, dt.type(alpha) * d, x).astype(dt)

    return _accurate(formula, x)


# ------------------------------------------------------------------------------------------- planted bugs
def bug_elu_fp16_exp_minus_1(x, alpha: float = 1.0):
    """Planted bug: exp(x) rounded to fp16 before the "- 1": near 0 the subtraction cancels exp's fp16 rounding
    (up to u16 = 4.9e-4 absolute) into a relative error of 4.9e-4 / |x| (e.g. Elu(-0.001) = -0.000977)."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        e = em.exp(np.minimum(x, x.dtype.type(0)).astype(F16))  # numpy's fp16 exp: fp32 exp, rounded to fp16
        d = (e - F16.type(1)).astype(F16).astype(F32)
        return np.where(x < 0, F32.type(alpha) * d, x.astype(F32)).astype(x.dtype)


def bug_selu_swapped_constants(x, alpha: float = SELU_GAMMA, gamma: float = SELU_ALPHA):
    """Planted bug: Selu with its default alpha (1.6733) and gamma (1.0507) swapped."""
    return selu_accurate(x, alpha, gamma)


def bug_celu_times_alpha(x, alpha: float = 1.0):
    """Planted bug: Celu's exponent as x * alpha instead of x / alpha (the same for alpha = 1 only)."""
    return _accurate(lambda x, dt: np.where(x < 0, dt.type(alpha) * em.expm1(np.minimum(x, dt.type(0))
                                                                            * dt.type(alpha)), x).astype(dt), x)


def bug_softplus_fp16_overflow(x):
    """Planted bug: log1p(exp(x)) with exp in fp16 and no threshold: exp(x) overflows to inf for x > 11.09 and
    Softplus returns inf where the true value is about x."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        return em.log1p(em.exp(x.astype(F16)).astype(F32)).astype(x.dtype)


def bug_softplus_log_not_log1p(x):
    """Planted bug: log(1 + exp(x)) in fp32: for x << 0 the sum 1 + exp(x) keeps exp(x) only to u32 absolute, a
    relative error ~u32 / e^x of the result: 1% at x = -12, all of it below x = -16.6. An fp32-storage bug: in
    fp16 the absolute error (<= 2^-24) stays under one fp16 subnormal step."""

    def formula(x, dt):
        e = em.exp(np.minimum(x, dt.type(SOFTPLUS_THRESHOLD)))
        return np.where(x > SOFTPLUS_THRESHOLD, x, em.log((dt.type(1) + e).astype(dt))).astype(dt)

    return _accurate(formula, x)


def bug_mish_fast_fp16(x):
    """Planted bug: the "fast Mish" identity tanh(ln(1 + e^x)) = (e^2x + 2e^x) / (e^2x + 2e^x + 2) in fp16: e^2x
    overflows for x > 5.55 and the quotient becomes inf / inf = NaN."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        h = x.astype(F16)
        e = em.exp(h)
        n = (e * e + F16.type(2) * e).astype(F16)
        return (h * (n / (n + F16.type(2))).astype(F16)).astype(x.dtype)


def bug_hard_sigmoid_torch_default(x, alpha: float = 1.0 / 6.0, beta: float = HARD_SIGMOID_BETA):
    """Planted bug: HardSigmoid with PyTorch's slope 1/6 as the default alpha instead of ONNX's 0.2."""
    return hard_sigmoid_accurate(x, alpha, beta)


def bug_hard_swish_alpha_0_2(x):
    """Planted bug: HardSwish as x * HardSigmoid(x) with HardSigmoid's ONNX default alpha 0.2 instead of 1/6."""
    return _accurate(lambda x, dt: hard_swish_formula(x, dt, alpha=HARD_SIGMOID_ALPHA), x)


def bug_softsign_no_abs(x):
    """Planted bug: x / (1 + x) (the absolute value dropped): wrong for every x < 0, a pole at x = -1."""
    return _accurate(lambda x, dt: (x / (dt.type(1) + x).astype(dt)).astype(dt), x)


def bug_prelu_max_form(x, slope):
    """Planted bug: PRelu as max(x, slope * x), LeakyRelu's shortcut, which is PRelu only for slope <= 1: a slope
    above 1 turns positive x into slope * x."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        x32 = x.astype(F32)
        return np.maximum(x32, x32 * np.asarray(slope).astype(F32)).astype(x.dtype)


# ------------------------------------------------------------------------------------ fp16 table lookup
# The attribute-free kernels answer fp16 inputs from a table of all 65,536 values (fastfp16.lut_unary: the same
# bits); with attributes passed, lut_unary calls the kernel itself.
for _name in ("softplus_accurate", "mish_accurate", "hard_swish_accurate", "softsign_accurate"):
    globals()[_name] = lut_unary(globals()[_name])
del _name
