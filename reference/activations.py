"""Elementwise activations in float64: the truth the fp16/bf16 kernels are measured against.

Each function is written in the form that stays accurate in float64 over the whole fp16/fp32 range, and returns
the mathematical limit at +-inf (GELU(-inf) = -0, SiLU(-inf) = -0), where the textbook formula would give
inf*0 = NaN. NaN propagates.
- gelu: x * Phi(x) with Phi(x) = erfc(-x/sqrt2)/2 (exact erf GELU; erfc keeps the negative tail relatively
  accurate where 1 + erf(x/sqrt2) would cancel).
- gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) (ONNX Gelu approximate="tanh"), evaluated as
  x * sigmoid(2 t) which is the same function without the cancellation of 1 + tanh(t) for t << 0.
- sigmoid (also inside silu and gelu_tanh): a = exp64(-|x|) (reference/exp64.py), y = (x >= 0 ? 1 : a) / (1 + a);
  no overflow and no cancellation on either side. Error: exp64 < 1 ulp (<= 2u relative), 1 + a and the divide one
  rounding each, so |y - sigmoid(x)| <= 4u |y| (x < 0; 3u for x >= 0, where a's error is damped by a/(1+a)),
  down to y ~ 2^-1022 where subnormal steps take over. Through exp64 the bits are the same on every CPU
  (scipy's expit calls the platform's libm exp); the C loop (mschecker/_fastref.c sigmoid64) runs when built,
  sigmoid_numpy is its twin (same bits), MSCHECKER_NO_FASTREF=1 forces it. Measured in
  benchmarks/reference_bench.py: the C loop ~2x faster than scipy.special.expit, which also underflows to 0 for
  x < -709.8 (1/(1 + exp(-x)) with exp(-x) = inf) where the form above keeps the subnormal tail.
- exp: exp64 (reference/exp64.py), for the same reason: one algorithm, the same bits on every CPU.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from mschecker.reference import elementary
from mschecker.reference.exp64 import exp64, exp64_numpy, run_elementwise

SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
GELU_TANH_CUBIC = 0.044715


def _limits(x: np.ndarray, y: np.ndarray, neg_inf, pos_inf) -> np.ndarray:
    y = np.where(np.isneginf(x), neg_inf, y)
    return np.where(np.isposinf(x), pos_inf, y)


def gelu(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        y = x * (0.5 * special.erfc(-x / np.sqrt(2.0)))
    return _limits(x, y, -0.0, np.inf)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        t = SQRT_2_OVER_PI * (x + GELU_TANH_CUBIC * (x * x * x))  # not x**3: np.power follows the SIMD level
        y = x * sigmoid(2.0 * t)
    return _limits(x, y, -0.0, np.inf)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return run_elementwise("sigmoid64", sigmoid_numpy, x)


def sigmoid_numpy(x: np.ndarray) -> np.ndarray:
    """sigmoid with numpy operations, in the C loop's order (same bits)."""
    x = np.asarray(x, dtype=np.float64)
    a = exp64_numpy(-np.abs(x))
    with np.errstate(invalid="ignore"):
        y = np.asarray(np.where(x >= 0.0, 1.0, a) / (1.0 + a))  # asarray: 0-d input gives a numpy scalar
        nan = np.isnan(x)
        if nan.any():
            y[nan] = x[nan] + x[nan]
    return y


def silu(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        y = x * sigmoid(x)
    return _limits(x, y, -0.0, np.inf)


def exp(x: np.ndarray) -> np.ndarray:
    """exp64 (reference/exp64.py): < 1 ulp, the same bits on every CPU (np.exp takes numpy's SIMD exp on AVX512F
    machines and glibc's elsewhere), ~2x faster than np.exp through the C loop."""
    return exp64(x)


def erf(x: np.ndarray) -> np.ndarray:
    return special.erf(np.asarray(x, dtype=np.float64))


def tanh(x: np.ndarray) -> np.ndarray:
    """reference/elementary.py's tanh (< 3.5 ulp; np.tanh's bits follow the CPU's SIMD level)."""
    return elementary.tanh_64(x)
