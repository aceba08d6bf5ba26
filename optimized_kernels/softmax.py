"""NPU-style softmax kernels.

- softmax_fp32: fp32 storage and arithmetic, max-shifted.
- softmax_fp16_fp32acc: fp16 storage; upcast to fp32 for shift, exp, sum and divide; output rounded to fp16
  (what a vector unit does with high_precision implmode).
- softmax_bf16_fp32acc: the same with bf16 storage.
- softmax_fp16_fp16acc: fp16 storage and fp16 arithmetic, including a sequential fp16 running sum
  (high_performance).
- softmax_fp16_nomax (planted bug): fp32 arithmetic like the accurate kernel but computes exp(x) in fp16 without
  subtracting the max: exp overflows for logits above ~11.09.
- softmax_fp16_v2: CANN's SoftmaxV2 (issue 21; the section at the end of this file): as softmax_fp16_fp32acc but
  x - max rounded to fp16 before the fp32 exp, as the TBE kernel subtracts before it casts.
"""
from __future__ import annotations

import numpy as np

from mschecker.reference import elementary as em

from mschecker.dtypes import bfloat16

from mschecker.threads import for_row_blocks
from mschecker.fastfp16 import astype, fast_fp16, fp16_running_sum, running_sum_f32, to_f16, to_f32


def _shifted_softmax(x: np.ndarray, axis: int, compute: np.dtype, out: np.dtype) -> np.ndarray:
    """exp(x - max) / sum in `compute`, rounded once to `out`. The shift, exp and divide write into the upcast copy
    when there is one (the same operations, without three more temporaries of x's size)."""
    x = np.asarray(x)
    xc = astype(x, compute)  # fastfp16.astype: astype's bits, compiled where the layout allows
    e = np.subtract(xc, np.max(xc, axis=axis, keepdims=True), out=None if xc is x else xc)
    em.exp(e, out=e)
    s = np.add.reduce(e, axis=axis, keepdims=True, dtype=compute)
    return astype(np.divide(e, s, out=e), out)


def softmax_fp32(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return _shifted_softmax(x, axis, np.dtype(np.float32), np.dtype(np.float32))


def softmax_fp16_fp32acc(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """fp16 in, float32 shift / exp / sum / divide, fp16 out. Where mschecker._fastfp16 is built, a C-contiguous
    fp16 x along its last axis takes two compiled passes around numpy's own float32 exp (_softmax_fp32acc_c: the
    same bits, ~2x faster); everything else, and a tensor with a NaN, +inf or all -inf row, _shifted_softmax."""
    x = np.asarray(x)
    fast = fast_fp16()
    if fast is not None and x.dtype == np.float16 and x.ndim and axis in (-1, x.ndim - 1) and x.size \
            and x.flags.c_contiguous:
        y = _softmax_fp32acc_c(fast, x)
        if y is not None:
            return y
    return _shifted_softmax(x, axis, np.dtype(np.float32), np.dtype(np.float16))


def _softmax_fp32acc_c(fast, x: np.ndarray) -> np.ndarray | None:
    """_shifted_softmax(x, -1, float32, float16) by _fastfp16.softmax_fp32acc_shift (upcast, row max, shift in one
    pass), numpy's np.exp in place, and softmax_fp32acc_divide (the row sum in numpy's pairwise order, the divide
    and the fp16 rounding in one pass); None when a row holds NaN, +inf or only -inf (numpy's NaN payloads)."""
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    z, out = np.empty(x2.shape, np.float32), np.empty(x2.shape, np.float16)
    bad = []

    def rows(a: int, b: int) -> None:  # rows are independent (np.exp is elementwise): any split, the same bits
        if not fast.softmax_fp32acc_shift(x2[a:b], z[a:b]):
            bad.append(a)
            return
        em.exp(z[a:b], out=z[a:b])
        fast.softmax_fp32acc_divide(z[a:b], out[a:b])
    for_row_blocks(rows, x2.shape[0], n)
    return None if bad else out.reshape(x.shape)


def softmax_fp16_fp16acc_numpy(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax_fp16_fp16acc written with numpy's float16 ufuncs: the definition the fast path reproduces bit for
    bit (and the path taken for inputs with inf/NaN, whose NaN payloads the fast route does not track)."""
    x = x.astype(np.float16)
    z = x - np.max(x, axis=axis, keepdims=True)
    e = em.exp(z)
    # A running (recursive) fp16 sum, as a scalar vector loop would do it: the last partial sum is the total.
    s = np.take(np.add.accumulate(e, axis=axis, dtype=np.float16), [-1], axis=axis)
    return (e / s).astype(np.float16)


_EXP_FP16_AS_F32: list[np.ndarray] = []  # numpy's float16 exp of every fp16 bit pattern, as float32 (lazy)


def _exp_table() -> np.ndarray:
    if not _EXP_FP16_AS_F32:
        with np.errstate(all="ignore"):
            _EXP_FP16_AS_F32.append(em.exp(np.arange(65536, dtype=np.uint16).view(np.float16)).astype(np.float32))
    return _EXP_FP16_AS_F32[0]


def softmax_bf16_fp32acc(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """bf16 storage, fp32 shift/exp/sum/divide, output rounded once to bf16."""
    return _shifted_softmax(x, axis, np.dtype(np.float32), bfloat16)


def softmax_fp16_fp16acc(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """fp16 storage and arithmetic: fp16 x - max, fp16 exp, sequential fp16 sum, fp16 divide. Same bits as
    softmax_fp16_fp16acc_numpy, computed with the fast fp16 primitives of fastfp16.py (2-10x faster): the exp is
    a table lookup of numpy's fp16 exp (held as float32, read once in the layout of the sum and once in place),
    the sum is fastfp16.running_sum_f32, and the divide is the float32 quotient rounded once (numpy's fp16
    divide). Where mschecker._fastfp16 is built, one compiled pass per block of 32 rows does all of it (~5x
    faster, same bits; _softmax_fp16acc_c)."""
    x = np.asarray(x)
    x16 = to_f16(x) if x.dtype == np.float32 else x.astype(np.float16, copy=False)  # never written: no copy
    if x16.size == 0:
        return softmax_fp16_fp16acc_numpy(x16, axis)
    fast = fast_fp16()
    if fast is not None:
        return _softmax_fp16acc_c(fast, x16, axis)
    x32 = to_f32(x16)
    m = np.max(x32, axis=axis, keepdims=True)
    if not np.isfinite(m).all():
        return _softmax_with_nan_rows(x16, m, axis)
    axis %= x16.ndim
    n = x16.shape[axis]
    table = _exp_table()
    with np.errstate(all="ignore"):
        # x32 is our own copy (to_f32 of fp16 input makes one): shifted in place; the max is exact, so x - max
        # is rounded once, by to_f16, as numpy's fp16 subtract rounds it
        z = to_f16(np.subtract(x32, m, out=x32)).view(np.uint16)
        del x32
        rows = z.size // n
        if rows < 256:
            s = to_f32(fp16_running_sum(table[z].astype(np.float16), axis))
        else:
            # the table read through the transposed index view lands contiguous in (n, rows) order
            s = running_sum_f32(table[np.moveaxis(z, axis, 0)].reshape(n, rows))
            s = np.expand_dims(s.reshape(x16.shape[:axis] + x16.shape[axis + 1:]), axis)
        e = table[z]
        del z
        return to_f16(np.divide(e, s, out=e))  # quotients of positive finite values: no NaN


def _softmax_with_nan_rows(x16: np.ndarray, m: np.ndarray, axis: int) -> np.ndarray:
    """softmax_fp16_fp16acc where some rows' max `m` (keepdims, float32) is not finite. Such a row is NaN throughout
    in the definition: a NaN max makes x - max NaN everywhere; a +inf max makes inf - inf = NaN, whose exp joins
    the sum, and every quotient by a NaN sum is NaN; a row of -inf only makes -inf - -inf = NaN. Those rows are
    NaN here too (positions exact; payloads, as everywhere in the fast routes, not numpy's), the others are
    computed by the fast route with the bad rows replaced by zeros. A fully NaN attention (the usual case: one
    overflow upstream) costs two passes instead of numpy's fp16 route (~15x slower)."""
    bad = ~np.isfinite(m)
    if bad.all():
        return np.full(x16.shape, np.nan, np.float16)
    y = softmax_fp16_fp16acc(np.where(bad, np.float16(0), x16), axis)
    np.copyto(y, np.float16(np.nan), where=bad)
    return y


def _softmax_fp16acc_c(fast, x16: np.ndarray, axis: int) -> np.ndarray:
    """softmax_fp16_fp16acc by the compiled row loop (mschecker/_fastfp16.c) over the axis moved last (a copy
    unless it already is the contiguous last axis); a row holding NaN or +inf or of -inf only comes back NaN, as
    _softmax_with_nan_rows makes it on the numpy route."""
    last = axis in (-1, x16.ndim - 1)
    # the usual case, a C-contiguous x along its last axis, skips moveaxis's ~3 us of axis normalization
    moved = x16 if last and x16.flags.c_contiguous else np.ascontiguousarray(np.moveaxis(x16, axis, -1))
    out = np.empty_like(moved)
    n = moved.shape[-1]
    flat_in, flat_out, table = moved.reshape(-1, n), out.reshape(-1, n), _exp_table()
    # rows are independent: split over the thread budget (mschecker/threads.py), the same bits
    for_row_blocks(lambda a, b: fast.softmax_fp16acc(flat_in[a:b], b - a, n, table, flat_out[a:b]), flat_in.shape[0], n)
    return out if last else np.ascontiguousarray(np.moveaxis(out, -1, axis))


def softmax_bug_no_final_rounding(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Planted bug: softmax_fp16_fp32acc returning its fp32 quotients (the final rounding to fp16 dropped): closer
    to float64 than the kernel it claims to be; only the two-sided check (declared storage dtype) catches it."""
    return _shifted_softmax(x, axis, np.dtype(np.float32), np.dtype(np.float32))


def softmax_fp16_nomax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Planted bug: no max subtraction before an fp16 exp."""
    e = em.exp(x.astype(np.float16)).astype(np.float32)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(np.float16)


# ------------------------------------------------------------------------------------------------------------------
# Ascend SoftmaxV2 (issue 21): dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/softmax_v2.py
# @058c1e227ec3e904ebbdd5cc4c92203e49d26c2d, fp16 input on a part with fp32 vexp (910/910B/310P), ND format:
# reduce_max and x - max in fp16 (the max is exact; the shift rounds once to fp16), cast to fp32, vexp, reduce_sum,
# vdiv in fp32, one cast to fp16. impl_mode changes nothing on this path (it only picks vrec's precision on the
# FRACTAL_NZ path, which multiplies by a reciprocal instead of dividing; not modelled). Modelling choices: vexp is
# the float64 exp rounded once to fp32 (docs/NUMERICS.md §11), reduce_sum is numpy's fp32 add.reduce along the
# axis (the auto-schedule's order is not in the source), vdiv is IEEE division.
V2_SOURCE = ("dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/softmax_v2.py"
             "@058c1e227ec3e904ebbdd5cc4c92203e49d26c2d")


def _v2_numpy(x: np.ndarray, axis: int, exp_fp16: bool = False) -> np.ndarray:
    """The SoftmaxV2 steps with numpy (any axis, any row content). fp16 x - max is computed in fp32 and rounded
    to fp16: for fp16 operands that equals the correctly rounded fp16 difference (the fp32 difference is exact
    unless the operands' magnitudes differ by more than 2^13, and then the smaller one is below fp16's rounding
    position of the result: no double rounding)."""
    x = np.asarray(x, dtype=np.float16)
    with np.errstate(all="ignore"):
        z = (x - np.max(x, axis=axis, keepdims=True)).astype(np.float32)
        e = em.exp(z.astype(np.float16)).astype(np.float32) if exp_fp16 else em.exp(z, out=z)
        s = np.add.reduce(e, axis=axis, keepdims=True, dtype=np.float32)
        return np.divide(e, s, out=e).astype(np.float16)


_EXP_FP16_TABLE: list = []
V2_CHUNK_ELEMENTS = 1 << 16  # softmax_fp16_v2's rows per pass: a 256 KB float32 buffer (L2-sized)


def _exp_of_every_fp16() -> np.ndarray:
    """em.exp in fp32 of each of the 65,536 fp16 values, indexed by the fp16 bit pattern (built once)."""
    if not _EXP_FP16_TABLE:
        every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            _EXP_FP16_TABLE.append(em.exp(every))
    return _EXP_FP16_TABLE[0]


def softmax_fp16_v2(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """SoftmaxV2 for fp16 x. A C-contiguous x along its last axis takes the compiled passes of softmax_fp16_fp32acc
    (shift in fp32, pairwise sum + divide + fp16 rounding) with the shift rounded to fp16 and exponentiated in
    between (_fastfp16.softmax_v2_exp: a table of em.exp over the 65,536 fp16 values): the same bits as
    _v2_numpy, which takes every other layout and rows with NaN/+inf/all -inf."""
    x = np.asarray(x)
    fast = fast_fp16()
    # a compiled module built before softmax_v2_exp existed (a stale in-place build) takes the numpy route
    if fast is not None and hasattr(fast, "softmax_v2_exp") and x.dtype == np.float16 and x.ndim \
            and axis in (-1, x.ndim - 1) and x.size and x.flags.c_contiguous:
        n = x.shape[-1]
        x2 = x.reshape(-1, n)
        out = np.empty(x2.shape, np.float16)
        bad = []
        table = _exp_of_every_fp16()
        step = max(1, V2_CHUNK_ELEMENTS // n)  # rows per cache-sized chunk

        def rows(a: int, b: int) -> None:
            # chunks of rows through one small float32 buffer, so the three passes meet it in cache (rows are
            # independent: any split, the same bits); the whole-tensor float32 array was 1 GB per self-attention
            # softmax at a 64x64 latent, streamed from memory three times
            z = np.empty((min(step, b - a), n), np.float32)
            for r0 in range(a, b, step):
                r1 = min(b, r0 + step)
                zr = z[:r1 - r0]
                if not fast.softmax_fp32acc_shift(x2[r0:r1], zr):
                    bad.append(r0)
                    return
                # the fp16 shift and its exp in one compiled pass: exp of an fp16 value in fp32 is a look-up
                # by its bits (em.exp's values)
                fast.softmax_v2_exp(zr, table)
                fast.softmax_fp32acc_divide(zr, out[r0:r1])
        for_row_blocks(rows, x2.shape[0], n)
        if not bad:
            return out.reshape(x.shape)
    return _v2_numpy(x, axis)


def softmax_bug_v2_exp_fp16(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Planted bug: SoftmaxV2's Ascend310 branch (vexp on fp16 operands, the result cast back to fp32) sold as
    the 910B kernel: each exp rounded to fp16 before the fp32 sum and divide."""
    return _v2_numpy(x, axis, exp_fp16=True)
