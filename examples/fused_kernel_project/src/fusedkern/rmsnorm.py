"""Fused RMSNorm for fp16 tensors: mean of squares, rsqrt and both scalings in one pass.

`rmsnorm` is what the application calls. It computes in fp32 (inputs and weight are fp16; squares of fp16
numbers are exact in fp32) and rounds the result to fp16 once, as a vector unit in high-precision mode does.

Planted bug, for demonstrating that the test suite catches it: with FUSEDKERN_BUG=1 in the environment,
`rmsnorm` runs `rmsnorm_fp16_accumulate` instead, which squares and sums in fp16. That overflows to inf as
soon as a row holds |x| >= 256 (x^2 > 65504) and loses accuracy on long rows; it is the kind of mistake a
"keep everything in half" port makes.
"""
from __future__ import annotations

import os

import numpy as np

BUG_ENV = "FUSEDKERN_BUG"


def rmsnorm_fp16_fp32acc(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The correct kernel: fp16 in/out, fp32 arithmetic."""
    x32 = np.asarray(x, dtype=np.float16).astype(np.float32)
    w32 = np.asarray(weight, dtype=np.float16).astype(np.float32)
    mean_sq = np.mean(x32 * x32, axis=-1, keepdims=True, dtype=np.float32)
    inv_rms = np.float32(1.0) / np.sqrt(mean_sq + np.float32(eps))
    return (x32 * inv_rms * w32).astype(np.float16)


def rmsnorm_fp16_accumulate(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The planted bug: squares and their mean in fp16 (overflows for |x| >= 256)."""
    x16 = np.asarray(x, dtype=np.float16)
    with np.errstate(over="ignore"):
        mean_sq = np.mean(x16 * x16, axis=-1, keepdims=True, dtype=np.float16)
        inv_rms = np.float16(1.0) / np.sqrt(mean_sq + np.float16(eps))
    return (x16.astype(np.float32) * inv_rms.astype(np.float32) * np.asarray(weight, np.float32)).astype(np.float16)


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm over the last axis (fp16 in, fp16 out); FUSEDKERN_BUG=1 selects the planted bug."""
    if os.environ.get(BUG_ENV) == "1":
        return rmsnorm_fp16_accumulate(x, weight, eps)
    return rmsnorm_fp16_fp32acc(x, weight, eps)
