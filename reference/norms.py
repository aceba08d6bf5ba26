"""LayerNormalization and GroupNormalization in float64 (ONNX semantics), statistics by the two-pass formula.

- layer_norm: normalizes over the axes axis..rank-1 (ONNX LayerNormalization, opset 17); scale and bias
  broadcast against x.shape[axis:].
- group_norm: x is (N, C, D1, ...); channels split into num_groups contiguous groups, statistics per (n, group),
  then per-channel scale and bias of shape (C,) (ONNX GroupNormalization, opset 21).
Variance is the population variance (divide by n), as both ONNX operators define it.
"""
from __future__ import annotations

import math

import numpy as np


def _normalize_rows(rows: np.ndarray, epsilon: float) -> np.ndarray:
    # ndarray.mean is np.add.reduce divided by the count (the same pairwise sum, the same bits), at ~4x the
    # fixed cost per call: the small graphs' norms are mostly that cost
    n = rows.shape[1]
    mean = np.add.reduce(rows, axis=1, keepdims=True) / n
    d = rows - mean
    var = np.add.reduce(d * d, axis=1, keepdims=True) / n
    return d / np.sqrt(var + epsilon)


def layer_norm(x, scale, bias=None, axis: int = -1, epsilon: float = 1e-5) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    axis = axis % x.ndim
    m = math.prod(x.shape[:axis])
    z = _normalize_rows(x.reshape(m, -1), epsilon).reshape(x.shape)
    y = z * np.asarray(scale, dtype=np.float64)
    return y + np.asarray(bias, dtype=np.float64) if bias is not None else y


def channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel (C,) vector against x of shape (N, C, D1, ...)."""
    return (1, x.shape[1]) + (1,) * (x.ndim - 2)


def group_norm(x, scale, bias, num_groups: int, epsilon: float = 1e-5) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n, c = x.shape[:2]
    z = _normalize_rows(x.reshape(n * num_groups, -1), epsilon).reshape(x.shape)
    cs = channel_shape(x)
    return z * np.asarray(scale, dtype=np.float64).reshape(cs) + np.asarray(bias, dtype=np.float64).reshape(cs)
