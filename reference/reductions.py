"""ReduceSum / ReduceMean in float64 (ONNX ReduceSum/ReduceMean with one axis, a tuple of axes, or None = all).

float64 summation (numpy's pairwise) errs by at most gamma_{log2 n}(2^-53) sum|x|, some 1e-13 relative for the
sizes we test: negligible against every fp16/bf16/fp32 bound it is compared with.
"""
from __future__ import annotations

import numpy as np


def reduce_sum(x: np.ndarray, axis=-1, keepdims: bool = False) -> np.ndarray:
    return np.sum(np.asarray(x, dtype=np.float64), axis=axis, keepdims=keepdims)


def reduce_mean(x: np.ndarray, axis=-1, keepdims: bool = False) -> np.ndarray:
    return np.mean(np.asarray(x, dtype=np.float64), axis=axis, keepdims=keepdims)
