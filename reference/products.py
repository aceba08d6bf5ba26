"""ReduceProd in float64 (ONNX ReduceProd over one axis, a tuple of axes, or None = all; the empty product is 1).

Why not np.prod: a float64 running product of fp16/fp32 values overflows or underflows in intermediate steps
where the true product is representable (64 factors of 65504 exceed DBL_MAX; then one factor 2^-60 brings the
total back), and numpy's multiply.reduce order is its own (SIMD unrolling on some CPUs), so bit-exact goldens
would hold only on one machine. Here each factor is split by frexp into a mantissa in [0.5, 1) and an integer
exponent; the mantissas are multiplied left to right along the flattened reduced axes (C order) and renormalized by
frexp after every product, the exponents are summed as integers, and ldexp applies the total once: no
intermediate overflow or underflow, one fixed order, and an error <= gamma_{n-1}(2^-53) |y| (every product is one
rounding of a normal number; frexp and ldexp are exact except for the final ldexp into the subnormal range).
Zeros, infinities and NaN follow IEEE: 0 * inf = NaN, a zero gives +-0, an inf gives +-inf.
"""
from __future__ import annotations

import numpy as np


def _rows(x: np.ndarray, axis) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    """(rows (M, n), reduced axes, kept shape): the reduced axes moved last (sorted) and flattened in C order."""
    if axis is None:
        axes = tuple(range(x.ndim))
    else:
        axes = tuple(sorted({int(a) % x.ndim for a in ((axis,) if np.isscalar(axis) else axis)})) if x.ndim else ()
    kept = [a for a in range(x.ndim) if a not in axes]
    kept_shape = tuple(x.shape[a] for a in kept)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    rows = np.transpose(x, kept + list(axes)).reshape(int(np.prod(kept_shape, dtype=np.int64)), n)
    return rows, axes, kept_shape


def _product(rows: np.ndarray) -> np.ndarray:
    m = np.ones(rows.shape[0])
    e = np.zeros(rows.shape[0], np.int64)
    special = np.ones(rows.shape[0])  # the signs, times every zero, infinity and NaN (IEEE: 0 * inf = NaN)
    for j in range(rows.shape[1]):
        col = rows[:, j]
        finite_nonzero = np.isfinite(col) & (col != 0)
        mj, ej = np.frexp(np.where(finite_nonzero, np.abs(col), 1.0))
        m, en = np.frexp(m * mj)
        e += ej.astype(np.int64) + en
        special = special * np.where(finite_nonzero, np.sign(col), col)
    # |total exponent| beyond the float64 range (with mantissa in [0.5, 1)) saturates the same way ldexp would
    y = np.ldexp(m, np.clip(e, -2200, 2200).astype(np.int32))
    # a zero or an infinite factor decides the result whatever the finite ones' magnitude (even one out of range)
    return np.where((special == 0) | ~np.isfinite(special), special, special * y)


def reduce_prod(x: np.ndarray, axis=-1, keepdims: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    rows, axes, kept_shape = _rows(x, axis)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        y = _product(rows).reshape(kept_shape)
    if keepdims:
        y = np.expand_dims(y, axes)
    return y
