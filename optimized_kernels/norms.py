"""NPU-style LayerNorm / GroupNorm kernels: how the statistics are computed, and in which format.

Statistics per normalized row (Chan, Golub & LeVeque, "Algorithms for computing the sample variance", 1983):
- twopass: mean = sum(x)/n, then var = sum((x - mean)^2)/n;
- welford: one pass of the updating recurrence mean += (x - mean)/k, m2 += (x - mean_old)(x - mean_new);
- onepass: var = sum(x^2)/n - mean^2 (what a single fused sweep computes; catastrophic cancellation when
  |mean| >> std, and in fp16 x^2 overflows for |x| >= 256). Sums are sequential (recursive), rounded per add.
Normalization y = (x - mean) * rstd * scale + bias runs in the statistics' format; the result is rounded once to
the storage format (the input's dtype). Public kernels follow the registry signatures of apis.md.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from ..fastfp16 import f16_arith, fast_fp16, fp16_running_sum

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _recursive_sum(rows: np.ndarray, acc: np.dtype) -> np.ndarray:
    if acc == F16 and rows.dtype == F16:
        return fp16_running_sum(rows, axis=1)  # the same sequential fp16 sum, compiled or vectorized (fastfp16.py)
    return np.add.accumulate(rows, axis=1, dtype=acc)[:, -1:]


def _arith(ufunc, a: np.ndarray, b: np.ndarray, acc: np.dtype) -> np.ndarray:
    """ufunc(a, b).astype(acc); fp16 operands go through fastfp16.f16_arith (numpy's float16 bits, faster)."""
    if acc == F16 and a.dtype == F16 and b.dtype == F16:
        return f16_arith(ufunc, a, b)
    return ufunc(a, b).astype(acc)


def stats_twopass(rows: np.ndarray, acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(mean, var) per row, shapes (M, 1), two passes in `acc` (numpy's fp32 sum: pairwise order)."""
    n = acc.type(rows.shape[1])
    mean = (np.add.reduce(rows, axis=1, keepdims=True, dtype=acc) / n).astype(acc)
    d = (rows - mean).astype(acc)
    var = (np.add.reduce((d * d).astype(acc), axis=1, keepdims=True, dtype=acc) / n).astype(acc)
    return mean, var


def stats_welford(rows: np.ndarray, acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(mean, var) by Welford's updating recurrence, vectorized over rows."""
    m = rows.shape[0]
    mean = np.zeros((m, 1), acc)
    m2 = np.zeros((m, 1), acc)
    for k in range(rows.shape[1]):
        xk = rows[:, k:k + 1]
        delta = (xk - mean).astype(acc)
        mean = (mean + (delta / acc.type(k + 1)).astype(acc)).astype(acc)
        m2 = (m2 + (delta * (xk - mean).astype(acc)).astype(acc)).astype(acc)
    return mean, (m2 / acc.type(rows.shape[1])).astype(acc)


def stats_onepass(rows: np.ndarray, acc: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(mean, var) from running sums of x and x^2: var = E[x^2] - E[x]^2, clamped at 0."""
    n = acc.type(rows.shape[1])
    mean = (_recursive_sum(rows, acc) / n).astype(acc)
    ex2 = (_recursive_sum(_arith(np.multiply, rows, rows, acc), acc) / n).astype(acc)
    var = np.maximum((ex2 - (mean * mean).astype(acc)).astype(acc), acc.type(0))
    return mean, var


StatsFn = Callable[[np.ndarray, np.dtype], tuple[np.ndarray, np.ndarray]]


@functools.lru_cache(maxsize=256)
def _f16_bits(value: float) -> int:
    """The bits of np.float16(value): the fp16 constant numpy makes of a Python number (stats_onepass's n)."""
    with np.errstate(over="ignore"):
        return int(np.float16(value).view(np.uint16))


def normalize_rows(rows: np.ndarray, stats: StatsFn, acc: np.dtype, epsilon: float) -> np.ndarray:
    """(x - mean) * rstd per row in `acc`, rstd = 1/sqrt(var + eps)."""
    rows = rows.astype(acc)
    eps = acc.type(epsilon)
    if stats is stats_onepass and acc == F16 and rows.size:
        fast = fast_fp16()
        if fast is not None:  # the same fp16 operations in one compiled pass per row (~20 numpy calls saved)
            rows = np.ascontiguousarray(rows)
            out = np.empty_like(rows)
            m, n = rows.shape
            fast.norm_rows_onepass(rows, m, n, _f16_bits(n), int(eps.view(np.uint16)), out)
            return out
    mean, var = stats(rows, acc)
    rstd = (acc.type(1) / np.sqrt((var + eps).astype(acc))).astype(acc)
    return _arith(np.multiply, _arith(np.subtract, rows, mean, acc), rstd, acc)


def _affine(z: np.ndarray, scale, bias, acc: np.dtype) -> np.ndarray:
    y = _arith(np.multiply, z, np.asarray(scale, dtype=acc), acc)
    return _arith(np.add, y, np.asarray(bias, dtype=acc), acc) if bias is not None else y


def _compiled_norm(stats: StatsFn, acc: np.dtype, x: np.ndarray, groups: int, hw: int, scale, bias,
                   epsilon: float) -> np.ndarray | None:
    """normalize_rows then _affine in one compiled call with the numpy route's bits (_fastfp16.norm_twopass for
    float32 two-pass statistics, norm_onepass for fp16 one-pass ones), or None: the caller's numpy route (another
    variant, a layout or dtype the compiled loops do not take, non-finite two-pass statistics, no extension).
    Why: a small norm is ~15 numpy calls, most of its time (a CLIP LayerNorm of 1,024 values: ~20 us -> ~2 us).
    Rows are x's `groups`-fold channel blocks of `hw` values each (LayerNorm: 1, 1); scale and bias hold one value
    per channel (the caller checks their shapes)."""
    if acc == F32 and stats is stats_twopass and x.dtype in (F16, F32):
        fast = fast_fp16()
        return None if fast is None else fast.norm_twopass(x, groups, hw, scale, bias, float(epsilon))
    if acc == F16 and stats is stats_onepass and x.dtype == F16 and scale.size:
        fast = fast_fp16()
        if fast is not None:
            n = scale.size // groups * hw  # the row length (norm_onepass declines sizes that do not fit)
            return fast.norm_onepass(x, groups, hw, scale, bias, _f16_bits(n), _f16_bits(epsilon))
    return None


def make_layer_norm(stats: StatsFn, acc) -> Callable[..., np.ndarray]:
    acc = np.dtype(acc)

    def layer_norm(x, scale, bias=None, axis: int = -1, epsilon: float = 1e-5):
        x = np.asarray(x)
        ax = axis % x.ndim
        if type(scale) is np.ndarray and scale.shape == x.shape[ax:] \
                and (bias is None or type(bias) is np.ndarray and bias.shape == scale.shape):
            y = _compiled_norm(stats, acc, x, 1, 1, scale, bias, epsilon)
            if y is not None:
                return y
        m = math.prod(x.shape[:ax])
        with np.errstate(all="ignore"):
            z = normalize_rows(x.reshape(m, -1), stats, acc, epsilon).reshape(x.shape)
            return _affine(z, scale, bias, acc).astype(x.dtype)

    layer_norm.__name__ = f"layer_norm_{stats.__name__}_{acc.name}"
    return layer_norm


def make_group_norm(stats: StatsFn, acc) -> Callable[..., np.ndarray]:
    acc = np.dtype(acc)

    def group_norm(x, scale, bias, num_groups: int, epsilon: float = 1e-5):
        x = np.asarray(x)
        if x.ndim >= 2 and type(scale) is np.ndarray and type(bias) is np.ndarray \
                and scale.shape == bias.shape == (x.shape[1],):
            y = _compiled_norm(stats, acc, x, num_groups, math.prod(x.shape[2:]), scale, bias, epsilon)
            if y is not None:
                return y
        cs = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        with np.errstate(all="ignore"):
            z = normalize_rows(x.reshape(x.shape[0] * num_groups, -1), stats, acc, epsilon).reshape(x.shape)
            return _affine(z, np.asarray(scale).reshape(cs), np.asarray(bias).reshape(cs), acc).astype(x.dtype)

    group_norm.__name__ = f"group_norm_{stats.__name__}_{acc.name}"
    return group_norm


# The variants the registry lists (storage dtype = input dtype).
layer_norm_fp32stats_twopass = make_layer_norm(stats_twopass, F32)
layer_norm_fp32stats_welford = make_layer_norm(stats_welford, F32)
layer_norm_fp16stats = make_layer_norm(stats_onepass, F16)
bug_layer_norm_onepass_fp32 = make_layer_norm(stats_onepass, F32)  # planted bug: naive E[x^2]-E[x]^2
group_norm_fp32stats_twopass = make_group_norm(stats_twopass, F32)
group_norm_fp32stats_welford = make_group_norm(stats_welford, F32)
group_norm_fp16stats = make_group_norm(stats_onepass, F16)
bug_group_norm_onepass_fp32 = make_group_norm(stats_onepass, F32)
