"""NPU-style ReduceSum / ReduceMean with an explicit summation order and accumulator format.

Every addition is rounded to the accumulator format, as the hardware does; the emulation vectorizes over the
non-reduced elements (rows) and walks the reduced axis in the algorithm's order. (numpy's own float16 `sum`
accumulates in float32 internally, so it cannot stand in for an fp16 accumulator: np.add.accumulate with
dtype=float16 does round after each step.)

Algorithms (Higham, Accuracy and Stability of Numerical Algorithms, ch. 4):
- recursive: s += x_i left to right;
- pairwise: sum adjacent pairs, log2(n) levels (zero padding of odd levels is exact);
- blocked: recursive inside blocks of BLOCK = 128 elements (one 256-byte fp16 vector register's worth), then
  recursive over the block sums;
- kahan: compensated summation (compensation dropped once the running sum overflows, so overflow stays inf).
Storage dtype follows the input; the result is rounded once from the accumulator to storage. ReduceMean divides
the accumulated sum by n in the accumulator format (n itself rounded to it).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mschecker.fastfp16 import fp16_running_sum

BLOCK = 128


def reduced_axes(ndim: int, axis) -> tuple[int, ...]:
    """Normalized, sorted reduced axes for axis = int, tuple of ints or None (all axes)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if np.isscalar(axis) else tuple(axis)
    return tuple(sorted({int(a) % ndim for a in axes})) if ndim else ()


def _as_rows(x: np.ndarray, axis) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    """(rows (M, n), reduced axes, kept shape): the reduced axes moved last and flattened."""
    axes = reduced_axes(x.ndim, axis)
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, kept + list(axes))
    kept_shape = tuple(x.shape[a] for a in kept)
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return moved.reshape(int(np.prod(kept_shape, dtype=np.int64)), n), axes, kept_shape


def _recursive(rows: np.ndarray, acc: np.dtype) -> np.ndarray:
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0], acc)
    if acc == np.float16 and rows.dtype == np.float16:
        return fp16_running_sum(rows, axis=1, keepdims=False)  # the same bits, compiled or vectorized (fastfp16.py)
    return np.add.accumulate(rows.astype(acc), axis=1, dtype=acc)[:, -1]


def _pairwise(rows: np.ndarray, acc: np.dtype) -> np.ndarray:
    r = rows.astype(acc)
    if r.shape[1] == 0:
        return np.zeros(r.shape[0], acc)
    while r.shape[1] > 1:
        if r.shape[1] % 2:
            r = np.concatenate([r, np.zeros((r.shape[0], 1), acc)], axis=1)
        r = (r[:, 0::2] + r[:, 1::2]).astype(acc)
    return r[:, 0]


def _blocked(rows: np.ndarray, acc: np.dtype, block: int = BLOCK) -> np.ndarray:
    m, n = rows.shape
    if n == 0:
        return np.zeros(m, acc)
    nb = -(-n // block)
    padded = np.zeros((m, nb * block), acc)
    padded[:, :n] = rows.astype(acc)
    block_sums = _recursive(padded.reshape(m * nb, block), acc).reshape(m, nb)  # each block summed in order
    return _recursive(block_sums, acc)


def _kahan(rows: np.ndarray, acc: np.dtype) -> np.ndarray:
    r = rows.astype(acc)
    s = np.zeros(r.shape[0], acc)
    c = np.zeros(r.shape[0], acc)
    for j in range(r.shape[1]):
        y = (r[:, j] - c).astype(acc)
        t = (s + y).astype(acc)
        c = ((t - s).astype(acc) - y).astype(acc)
        # A literal Kahan loop turns an overflowed running sum into NaN (c = inf, then x - inf + inf);
        # hardware-style kernels keep the overflow an inf by dropping the compensation there.
        c = np.where(np.isfinite(t), c, acc.type(0))
        s = t
    return s


ALGORITHMS: dict[str, Callable[[np.ndarray, np.dtype], np.ndarray]] = {
    "recursive": _recursive, "pairwise": _pairwise, "blocked": _blocked, "kahan": _kahan,
}


def _reduce(x, axis, keepdims, algorithm: str, acc, mean: bool) -> np.ndarray:
    x = np.asarray(x)
    acc = np.dtype(acc)
    rows, axes, kept_shape = _as_rows(x, axis)
    with np.errstate(all="ignore"):
        s = ALGORITHMS[algorithm](rows, acc)
        if mean:
            s = (s / acc.type(rows.shape[1])).astype(acc)
        out = s.astype(x.dtype).reshape(kept_shape)
    if keepdims:
        out = np.expand_dims(out, axes)
    return out


def make_reduce(algorithm: str, acc, *, mean: bool = False) -> Callable[..., np.ndarray]:
    """A ReduceSum (or ReduceMean) kernel with the given summation order and accumulator dtype."""
    acc_name = np.dtype(acc).name

    def kernel(x, axis=-1, keepdims: bool = False):
        return _reduce(x, axis, keepdims, algorithm, acc, mean)

    kernel.__name__ = f"reduce_{'mean' if mean else 'sum'}_{algorithm}_{acc_name}acc"
    kernel.__doc__ = f"{'Mean' if mean else 'Sum'} by {algorithm} summation with {acc_name} accumulators."
    return kernel
