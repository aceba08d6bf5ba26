"""Float64 truths for the quantized kernels: what quantization is supposed to approximate.

- weight_gemm: y = x @ w with the unquantized weights (x (..., K), w (K, N)); the int8 weight-only kernel's error
  against it is the quantization error plus the GEMM's rounding.
- roundtrip: the identity; a lossy quantize -> pack -> unpack -> dequantize chain is measured against it.
"""
from __future__ import annotations

import numpy as np


def weight_gemm(x, w) -> np.ndarray:
    return np.matmul(np.asarray(x, dtype=np.float64), np.asarray(w, dtype=np.float64))


def roundtrip(x, block: int = 32) -> np.ndarray:
    """The value a lossless round trip would return (block is the lossy kernel's parameter, unused here)."""
    return np.array(x, dtype=np.float64)
