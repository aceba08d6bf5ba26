"""NPU-style LayerNorm / GroupNorm kernels: how the statistics are computed, and in which format.

Statistics per normalized row (Chan, Golub & LeVeque, "Algorithms for computing the sample variance", 1983):
- twopass: mean = sum(x)/n, then var = sum((x - mean)^2)/n;
- welford: one pass of the updating recurrence mean += (x - mean)/k, m2 += (x - mean_old)(x - mean_new);
- onepass: var = sum(x^2)/n - mean^2 (what a single fused sweep computes; catastrophic cancellation when
  |mean| >> std, and in fp16 x^2 overflows for |x| >= 256). Sums are sequential (recursive), rounded per add.
Normalization y = (x - mean) * rstd * scale + bias runs in the statistics' format; the result is rounded once to
the storage format (the input's dtype). Public kernels follow the registry signatures of apis.md.
The Ascend device kernels (issue 21: the TIK GroupNorm, TBE InstanceNorm and LayerNorm) are in the section at the
end of this file, each modelled from the CANN source it names.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from mschecker.fastfp16 import f16_arith, fast_fp16, fp16_running_sum
from mschecker.reference import elementary as em

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


# ------------------------------------------------------------------------------------------------------------------
# Ascend device kernels (issue 21): what CANN's GroupNorm / InstanceNorm / LayerNorm kernels compute for fp16 input,
# modelled from the 2022 canndev TBE/TIK sources (GitHub mirror dengguojie/vue-element-admin; each function names
# the file and the commit read). What the source leaves to the hardware is a stated modelling choice:
# - fp16 -> fp32 conversions are exact, fp32 -> fp16 is round-to-nearest-even with IEEE overflow to inf and
#   subnormals kept (TIK vec_conv / TBE cast_to with no round mode: CAST_NONE, which rounds to nearest);
# - vector add/mul/div/sqrt are IEEE fp32 operations (one rounding each);
# - vlog/vexp are the float64 functions rounded once to fp32 (reference/elementary.py: docs/NUMERICS.md §11, the
#   accurate end of the bracket the contracts' 4-ULP budget closes);
# - a TBE `reduce_sum` (auto-scheduled: its summation order is the compiler's, not the source's) is numpy's fp32
#   add.reduce over the flattened reduced axes (pairwise order); the contracts allow any order;
# - TIK vec_rsqrt_high_preci (Newton-refined, accuracy unpublished) is 1/sqrt in float64 rounded once to fp32; the
#   contract allows two fp32 roundings for it;
# - TIK vcadd (the 16-lane reduce after the fold) adds adjacent pairs in a 4-level tree; the contract allows any
#   order of the 16 lanes.

GE_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/group_norm.py"
             "@cc16de6168c38cfbb6cf865107e9a28ee1a8e44f")
INSTANCE_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/instance_norm.py"
                   "@ce531f352f7283f6c3287bc6cfed22ac8c5f3ca4")
LAYER_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/layer_norm.py"
                "@63623ef90456129b7a22a52b334bb77109395cfc")

GE_UB_ELEMENTS = 512 * 16  # GroupNorm5HD's ub_n * c0: the fp32 elements one UB load (one chunk) holds
GE_FOLDS = 9  # data_sum's iter_num: 9 halvings take a chunk from 8192 elements to 16 lanes
GE_LANES = GE_UB_ELEMENTS >> GE_FOLDS  # 16, summed by vcadd


def _pairs(a: np.ndarray) -> np.ndarray:
    """vcadd over the last axis (a power of two wide): adjacent pairs, level by level."""
    while a.shape[-1] > 1:
        a = a[..., 0::2] + a[..., 1::2]
    return a[..., 0]


def _ge_fold(chunk: np.ndarray, width: int) -> np.ndarray:
    """data_sum then vcadd on (rows, width) chunks (width a power of two >= 16, the chunk zero-padded to it):
    element i + width/2 added onto element i until 16 lanes are left, then the 16 lanes."""
    a = chunk
    while a.shape[-1] > GE_LANES:
        h = a.shape[-1] // 2
        a = a[..., :h] + a[..., h:]
    return _pairs(a)


def ge_group_sum(rows: np.ndarray) -> np.ndarray:
    """The TIK GroupNorm's sum of each row (rows (M, n), fp32 or fp16: the arithmetic is rows' dtype): the row in
    chunks of 8192 (the last zero-padded), each chunk folded (_ge_fold), the chunk sums added in order onto a zero
    accumulator (mean_sum). A chunk shorter than 8192 is folded at the next power of two >= its length (>= 16):
    the levels above only add padding zeros, x + 0 = x, except that they turn a -0 into +0, which `+ 0` before the
    fold does here. Returns (M, 1)."""
    m, n = rows.shape
    dt = rows.dtype
    acc = np.zeros((m, 1), dt)
    full = n // GE_UB_ELEMENTS
    if full:
        sums = _ge_fold(rows[:, :full * GE_UB_ELEMENTS].reshape(m, full, GE_UB_ELEMENTS), GE_UB_ELEMENTS)
        for k in range(full):
            acc = acc + sums[:, k:k + 1]
    tail = n - full * GE_UB_ELEMENTS
    if tail or not full:
        width = max(GE_LANES, 1 << max(tail - 1, 0).bit_length())
        chunk = np.zeros((m, width), dt)
        chunk[:, :tail] = rows[:, full * GE_UB_ELEMENTS:]
        if width < GE_UB_ELEMENTS:
            chunk = chunk + dt.type(0)
        acc = acc + _ge_fold(chunk, width)[:, None]
    return acc


def ge_stats(rows: np.ndarray, acc: np.dtype = F32) -> tuple[np.ndarray, np.ndarray]:
    """(mean, E[x^2] - mean^2) of each row as the TIK GroupNorm computes them, in `acc` (fp32 on the device; the
    planted bug passes fp16): one pass of sums of x and x*x (ge_group_sum), 1/n on the scalar unit, mean = sum *
    (1/n), var = sumsq * (1/n) + (-(mean * mean)): no clamp, so a cancelling group can give var < 0."""
    x = rows.astype(acc, copy=False)
    recip = acc.type(1) / acc.type(rows.shape[1])
    mean = ge_group_sum(x) * recip
    ex2 = ge_group_sum(x * x) * recip
    return mean, ex2 + (-(mean * mean))


def _rsqrt_high_preci(v: np.ndarray) -> np.ndarray:
    """vec_rsqrt_high_preci: 1/sqrt in float64 rounded once to fp32 (NaN below 0, inf at 0)."""
    return (1.0 / np.sqrt(v.astype(np.float64))).astype(F32)


def _affine_f32(z: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """z * scale + bias in fp32, in place in z (scale, bias broadcast; fp16 values are exact in fp32)."""
    np.multiply(z, scale.astype(F32), out=z)
    np.add(z, bias.astype(F32), out=z)
    return z


def _group_rows(x: np.ndarray, num_groups: int) -> tuple[np.ndarray, tuple]:
    return x.reshape(x.shape[0] * num_groups, -1), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _make_ge_group_norm(acc) -> Callable[..., np.ndarray]:
    acc = np.dtype(acc)

    def group_norm(x, scale, bias, num_groups: int, epsilon: float = 1e-5):
        x = np.asarray(x)
        rows, cs = _group_rows(x, num_groups)
        with np.errstate(all="ignore"):
            z = rows.astype(F32)  # fp16 -> fp32 (exact): the statistics' input, then the output's work array
            mean, var = ge_stats(z, acc)
            rstd = _rsqrt_high_preci((var + acc.type(epsilon)).astype(acc))
            np.subtract(z, mean.astype(F32), out=z)
            np.multiply(z, rstd, out=z)
            z = _affine_f32(z.reshape(x.shape), np.asarray(scale).reshape(cs), np.asarray(bias).reshape(cs))
            return z.astype(x.dtype)

    group_norm.__name__ = f"group_norm_ge_onepass_{acc.name}"
    return group_norm


group_norm_ge_onepass = _make_ge_group_norm(F32)
bug_group_norm_ge_fp16_sums = _make_ge_group_norm(F16)  # planted bug: the statistics' UB buffers in fp16


def _tbe_sum(t: np.ndarray) -> np.ndarray:
    """A TBE reduce_sum of (M, n) fp32 rows: numpy's add.reduce (pairwise), (M, 1)."""
    return np.add.reduce(t, axis=1, keepdims=True, dtype=F32)


def tbe_stats(x32: np.ndarray, unbiased: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, d = x - mean, var) of C-contiguous fp32 rows (M, n) as TBE's instance_norm states them: c = 1/n as
    an fp32 constant (Python's 1/n rounded), mean = reduce_sum(x * c), var = reduce_sum((d * d) * c). `unbiased`
    (planted bug only): the variance's c is 1/(n - 1) (inf for n = 1)."""
    n = x32.shape[1]
    c = F32.type(1.0 / n)
    mean = _tbe_sum(x32 * c)
    d = x32 - mean
    t = d * d
    np.multiply(t, (F32.type(1.0 / (n - 1)) if n > 1 else F32.type(np.inf)) if unbiased else c, out=t)
    return mean, d, _tbe_sum(t)


def _make_tbe_instance_norm(unbiased: bool = False) -> Callable[..., np.ndarray]:
    def group_norm(x, scale, bias, num_groups: int, epsilon: float = 1e-5):
        x = np.asarray(x)
        rows, cs = _group_rows(x, num_groups)
        with np.errstate(all="ignore"):
            _, d, var = tbe_stats(np.ascontiguousarray(rows, dtype=F32), unbiased)
            rstd = F32.type(1) / np.sqrt(var + F32.type(epsilon))
            np.multiply(d, rstd, out=d)
            z = _affine_f32(d.reshape(x.shape), np.asarray(scale).reshape(cs), np.asarray(bias).reshape(cs))
            return z.astype(x.dtype)

    group_norm.__name__ = "group_norm_tbe_instance" + ("_unbiased" if unbiased else "")
    return group_norm


group_norm_tbe_instance = _make_tbe_instance_norm()
bug_group_norm_tbe_instance_unbiased = _make_tbe_instance_norm(unbiased=True)  # planted bug: 1/(n-1) variance


def _round16(a: np.ndarray) -> np.ndarray:
    """fp32 -> fp16 -> fp32 (TBE cast_to twice): RNE, >= 65520 to inf, subnormals kept."""
    return a.astype(F16).astype(F32)


def _make_tbe_layer_norm(mode: str) -> Callable[..., np.ndarray]:
    """mode: "high_precision" (rstd = 1 / sqrt(var + eps)), "high_performance" (rstd = exp(-0.5 * log(var +
    eps)) in fp32), "hperf_fp16_log_exp" (planted bug: vlog and vexp on fp16 operands), "keep_fp16" (planted bug:
    the kernel's fp16 path, every step in fp16, sums sequential)."""

    def layer_norm(x, scale, bias=None, axis: int = -1, epsilon: float = 1e-5):
        x = np.asarray(x)
        ax = axis % x.ndim
        lead = math.prod(x.shape[:ax])
        rows = x.reshape(lead, -1)
        scale = np.asarray(scale).reshape(1, -1)
        bias = np.zeros(1, F32) if bias is None else np.asarray(bias).reshape(1, -1)
        with np.errstate(all="ignore"):
            if mode == "keep_fp16":
                return _keep_fp16_rows(rows.astype(F16), scale, bias, epsilon).reshape(x.shape).astype(x.dtype)
            x32 = np.ascontiguousarray(rows, dtype=F32)
            n = rows.shape[1]
            c = F32.type(1.0 / n)
            mean = _round16(_tbe_sum(x32 * c))
            d = x32 - mean
            t = d * d
            np.multiply(t, c, out=t)
            var = _round16(_tbe_sum(t))
            a = var + F32.type(epsilon)
            if mode == "high_precision":
                rstd = F32.type(1) / np.sqrt(a)
            elif mode == "high_performance":
                rstd = em.exp(em.log(a) * F32.type(-0.5))
            else:  # hperf_fp16_log_exp
                rstd = em.exp((em.log(a.astype(F16)) * F16.type(-0.5)).astype(F16)).astype(F32)
            np.multiply(d, rstd, out=d)
            return _affine_f32(d, scale, bias).reshape(x.shape).astype(x.dtype)

    layer_norm.__name__ = f"layer_norm_tbe_{mode}"
    return layer_norm


def _keep_fp16_rows(x16: np.ndarray, scale, bias, epsilon: float) -> np.ndarray:
    """TBE LayerNorm without the cast (its fp16 path): c, x * c, the sums (sequential, rounded per add), x - mean,
    the squares, eps, sqrt and 1/sqrt all fp16."""
    c = F16.type(1.0 / x16.shape[1])
    mean = fp16_running_sum(x16 * c, axis=1)
    d = x16 - mean
    var = fp16_running_sum((d * d) * c, axis=1)
    rstd = F16.type(1) / np.sqrt(var + F16.type(epsilon))
    return (np.asarray(scale).astype(F16) * (d * rstd) + np.asarray(bias).astype(F16)).astype(F16)


layer_norm_tbe_hprec = _make_tbe_layer_norm("high_precision")
layer_norm_tbe_hperf = _make_tbe_layer_norm("high_performance")
bug_layer_norm_tbe_keep_fp16 = _make_tbe_layer_norm("keep_fp16")  # planted bug: the fp16 path sold as hprec
bug_layer_norm_tbe_hperf_fp16_log_exp = _make_tbe_layer_norm("hperf_fp16_log_exp")  # planted bug
