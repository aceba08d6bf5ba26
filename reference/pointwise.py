"""ONNX's float-computing pointwise activations in float64: the truth their fp16/bf16/fp32 kernels are measured on.

Each function is ONNX's operator (onnx.defs schema text, attribute defaults as ONNX stores them: FLOAT attributes
are fp32 values) written in a form that stays accurate in float64 over the whole fp16/fp32 input range:
- elu / selu / celu: the negative branch alpha (exp(z) - 1) is alpha * expm1(z): exp(z) - 1 cancels near z = 0
  (an absolute error of one ulp of 1, i.e. a relative error 2^-53 / |z| of the result), expm1 keeps < 1 ulp.
  The limit at -inf is -alpha (gamma alpha for selu), with no special case (expm1(-inf) = -1).
- softplus: ln(1 + e^x) = max(x, 0) + log1p(e^-|x|) with e^-|x| <= 1 by exp64: exp never overflows (ln(1 + e^x)
  is inf for x > 709.8 in float64, and for x > 88.7 in fp32) and log1p keeps the tail x << 0 (where 1 + e^x
  rounds to 1) relatively accurate. Error: exp64 < 1 ulp, log1p < 1 ulp with a conditioning factor <= 1 for its
  argument, one addition: a few u64 relative.
- hard_sigmoid / hard_swish: clip(alpha x + beta, 0, 1) (times x): a product and a sum in float64. hard_swish
  uses alpha = fp32(1/6), the constant of ONNX's own HardSwish function body (HardSigmoid<alpha=0.16666667>);
  its limit at -inf is -0 (x * 0 would be inf * 0 = NaN).
- mish: x tanh(softplus(x)), softplus as above; -inf -> -0 (the limit of x e^x; inf * 0 would be NaN).
- softsign: x / (1 + |x|); +-inf -> +-1.
- prelu: slope * x where x < 0, x elsewhere, slope broadcast unidirectionally to x (numpy's trailing-axes rule).
NaN propagates everywhere. exp, expm1, log1p and tanh are this package's own (reference/exp64.py,
reference/elementary.py: IEEE operations only), not numpy's, whose last bits follow the CPU's SIMD level: the
goldens' bits are the same on every CPU.
"""
from __future__ import annotations

import numpy as np

from mschecker.reference.activations import _limits
from mschecker.reference.elementary import expm1_64 as expm1, log1p_64 as log1p, tanh_64 as tanh
from mschecker.reference.exp64 import exp64

#: ONNX's attribute defaults, as the schema stores them (FLOAT attributes are fp32 values).
ELU_ALPHA = 1.0
SELU_ALPHA = float(np.float32(1.67326319217681884765625))
SELU_GAMMA = float(np.float32(1.05070102214813232421875))
CELU_ALPHA = 1.0
HARD_SIGMOID_ALPHA = float(np.float32(0.2))
HARD_SIGMOID_BETA = 0.5
#: HardSwish has no attributes; ONNX's function body is HardSigmoid<alpha = fp32(1/6), beta = 0.5>(X) * X.
HARD_SWISH_ALPHA = float(np.float32(1.0 / 6.0))
HARD_SWISH_BETA = 0.5


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def elu(x: np.ndarray, alpha: float = ELU_ALPHA) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x < 0, alpha * expm1(np.minimum(x, 0.0)), x)


def selu(x: np.ndarray, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return gamma * np.where(x <= 0, alpha * expm1(np.minimum(x, 0.0)), x)


def celu(x: np.ndarray, alpha: float = CELU_ALPHA) -> np.ndarray:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)); for alpha > 0 that is x (x >= 0) or alpha expm1(x / alpha)."""
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x < 0, alpha * expm1(np.minimum(x, 0.0) / alpha), x)


def softplus(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        y = np.maximum(x, 0.0) + log1p(exp64(-np.abs(x)))
    return np.where(np.isnan(x), x, y)


def mish(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        y = x * tanh(softplus(x))
    return _limits(x, y, -0.0, np.inf)


def hard_sigmoid(x: np.ndarray, alpha: float = HARD_SIGMOID_ALPHA, beta: float = HARD_SIGMOID_BETA) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.clip(alpha * x + beta, 0.0, 1.0)


def hard_swish(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore", over="ignore"):
        y = x * hard_sigmoid(x, HARD_SWISH_ALPHA, HARD_SWISH_BETA)
    return _limits(x, y, -0.0, np.inf)


def softsign(x: np.ndarray) -> np.ndarray:
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        y = x / (1.0 + np.abs(x))
    return _limits(x, y, -1.0, 1.0)


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    x, slope = _f64(x), _f64(slope)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(x < 0, x * slope, x)
