"""Direct Conv2D as an NPU cube unit computes it: im2col, then one GEMM per image and group.

- conv2d_fp16_fp32acc: fp16 inputs, the patch matrix and GEMM in fp32 (products of fp16 numbers are exact in
  fp32), bias added in fp32, output rounded once to fp16.
- conv2d_bf16_fp32acc: the same with bf16 storage (bf16 products are exact in fp32 too).
- conv2d_fp32: fp32 storage and arithmetic.
- conv2d_bug_fp16acc (planted bug): the same GEMM but every partial sum rounded to fp16 (a sequential fp16
  accumulator over the K = C_in/group*kH*kW terms), sold as fp32 accumulation.

Copies: the input is upcast to fp32 once (exact; fast for fp16, fastfp16.py); each image's patch matrix is
written by reference/conv.py's fill_patches into one reused fp32 buffer (padding never materialized), the GEMM
writes into the output buffer, the bias is added in place, then one rounding to the storage format. A 1x1,
stride-1, unpadded conv needs no patch matrix: the image itself is the GEMM operand.

Bits: OpenBLAS's sgemm result depends on the GEMM's shape (measured: splitting or widening N changes the last
bits of fp32 sums), so the fast path makes exactly the GEMM calls of the definition: per image and group,
(Cout/g, K) @ (K, OH*OW); except where one image has fewer than BATCH_PIXELS output pixels (the deep SD layers:
8x8 and 4x4), where the images sit side by side in one GEMM per group, (Cout/g, K) @ (K, N*OH*OW), as a cube
unit fills its tile with more than one image (an N of 16-64 columns wastes most of a GEMM: measured 1280->1280
3x3 at 4x4, batch 2: 77 -> 43 ms). Any summation order is inside the fp32-accumulation contract. The patch
matrix is one image's (K*OH*OW*4 bytes), or the batch's for those small images, not row-chunked like the float64
reference's. The definition's patch matrices are C-contiguous except in some
degenerate geometries (size-1 axes; `_definition_patches_are_c_order`), where BLAS gets a column-major operand
and sums in another order: those convs take the definition itself. tests/kernels/test_conv_fastpath.py pins
these bits against the batched np.matmul definition (`conv2d_definition`).
"""
from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from mschecker.dtypes import bfloat16
from mschecker.reference.conv import (PATCH_CHUNK_BYTES, check_conv_args, conv_output_size, fill_patches, is_pointwise,
                              workspace)
from mschecker.fastfp16 import as_f32, to_f16


def _geometry(x, w, strides, pads, dilations, group):
    check_conv_args(x, w, group, transpose=False)
    n, c_in, h, wd = x.shape
    c_out, cg, kh, kw = w.shape
    oh = max(conv_output_size(h, kh, strides[0], pads[0], pads[2], dilations[0]), 0)
    ow = max(conv_output_size(wd, kw, strides[1], pads[1], pads[3], dilations[1]), 0)
    return n, c_out, cg, kh, kw, oh, ow


def _upcast(a, compute, storage):
    """a (storage dtype, or float32 holding storage values: a constant the graph executor staged, see
    Variant.staged_f32_operands) in the compute dtype, exactly: as_f32 gives to_f32's values and layout (astype's
    bits, fast for fp16), taking a staged operand as it is; it is only read from here on."""
    return as_f32(a, storage) if np.dtype(compute) == np.float32 else np.asarray(a).astype(compute)


def _finish(y, b, group, out):
    """Bias in the compute dtype, added in place, then one rounding to the storage dtype."""
    if b is not None:
        y += np.asarray(b).astype(y.dtype).reshape(1, group, -1, 1)
    return to_f16(y) if np.dtype(out) == np.float16 else y.astype(out, copy=False)  # to_f16: astype's bits


@functools.lru_cache(maxsize=1024)  # ~130 us per geometry; a model has a few dozen
def _definition_patches_are_c_order(x_shape, kh, kw, strides, pads, dilations, group) -> bool:
    """Whether the definition's im2col hands np.matmul C-contiguous patch matrices. Usually it does, but where
    size-1 axes let the reshape after astype(order='K') stay a view (e.g. one output column and a row stride
    above the dilation), the matrix is column-major and numpy/BLAS take another route (measured: other fp32
    bits; hypothesis found x (1,1,4,3) w (1,1,2,3) strides (2,1)). Decided on a zero-byte stand-in with the
    padded input's strides (views and an unwritten empty_like, nothing is read), for one image and group of at
    most 2 channels: one (n, g) matrix's layout depends on the spatial sizes and on whether the channel axis
    has size 1, not on the sizes of the outer axes."""
    _, c_in, h, wd = x_shape
    cg = min(c_in // group, 2)
    padded = (1, cg, h + pads[0] + pads[2], wd + pads[1] + pads[3])
    byte_strides = tuple(int(np.prod(padded[i + 1:])) * 4 for i in range(4))
    stand_in = as_strided(np.empty(1, np.float32), shape=padded, strides=byte_strides, writeable=False)
    (sh, sw), (dh, dw) = strides, dilations
    oh = conv_output_size(h, kh, sh, pads[0], pads[2], dh)
    ow = conv_output_size(wd, kw, sw, pads[1], pads[3], dw)
    win = sliding_window_view(stand_in, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, : sh * (oh - 1) + 1: sh, : sw * (ow - 1) + 1: sw, ::dh, ::dw]
    cols = win.reshape(1, 1, cg, oh, ow, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
    return np.empty_like(cols, order="K").reshape(1, 1, -1, oh * ow).flags.c_contiguous


#: Below this many output pixels per image, the images of a batch share one GEMM per group (see the docstring).
BATCH_PIXELS = 256


def _images_share_gemm(n: int, oh: int, ow: int, k: int, pointwise: bool) -> bool:
    """Whether the GEMM of a group spans all images (small images, a patch matrix within the scratch budget)."""
    return n > 1 and 0 < oh * ow < BATCH_PIXELS and not pointwise and k * n * oh * ow * 4 <= PATCH_CHUNK_BYTES


def _direct(x, w, b, strides, pads, dilations, group, compute, out):
    n, c_out, cg, kh, kw, oh, ow = _geometry(x, w, strides, pads, dilations, group)
    if _images_share_gemm(n, oh, ow, cg * kh * kw, is_pointwise(w, strides, pads)):
        return _batched(x, w, b, strides, pads, dilations, group, compute, out)
    if 0 in (n, oh, ow) or not _definition_patches_are_c_order(
            tuple(x.shape), kh, kw, tuple(strides), tuple(pads), tuple(dilations), group):
        return conv2d_definition(x, w, b, strides, pads, dilations, group, compute, out)
    cog, k = c_out // group, cg * kh * kw
    xc = np.ascontiguousarray(_upcast(x, compute, out))
    wm = _upcast(w, compute, out).reshape(group, cog, k)  # the definition's weight matrix, layout included
    y = np.empty((n, group, cog, oh * ow), dtype=compute)
    pointwise = is_pointwise(w, strides, pads)
    buf = None if pointwise else workspace("npu.patches", (cg, kh, kw, 1, oh, ow), compute)
    rows = slice(0, oh)
    for i in range(n):
        for g in range(group):
            chans = slice(g * cg, (g + 1) * cg)
            if pointwise:  # the image is its own patch matrix (a view, no copy)
                cols = xc[i, chans].reshape(k, oh * ow)
            else:
                cols = fill_patches(buf, xc, kh, kw, strides, pads, dilations, slice(i, i + 1), chans, rows)
            np.matmul(wm[g], cols.reshape(k, oh * ow), out=y[i, g])  # the batched np.matmul's sgemm, same shape
    return _finish(y, b, group, out).reshape(n, c_out, oh, ow)


def _batched(x, w, b, strides, pads, dilations, group, compute, out):
    """_direct for small images: per group one GEMM over the patches of all images side by side."""
    n, c_out, cg, kh, kw, oh, ow = _geometry(x, w, strides, pads, dilations, group)
    cog, k = c_out // group, cg * kh * kw
    xc = np.ascontiguousarray(_upcast(x, compute, out))
    wm = _upcast(w, compute, out).reshape(group, cog, k)
    y = np.empty((n, group, cog, oh * ow), dtype=compute)
    buf = workspace("npu.patches", (cg, kh, kw, n, oh, ow), compute)
    prod = np.empty((cog, n * oh * ow), dtype=compute)
    for g in range(group):
        cols = fill_patches(buf, xc, kh, kw, strides, pads, dilations, slice(0, n), slice(g * cg, (g + 1) * cg),
                            slice(0, oh))
        np.matmul(wm[g], cols.reshape(k, n * oh * ow), out=prod)
        y[:, g] = prod.reshape(cog, n, oh * ow).transpose(1, 0, 2)
    return _finish(y, b, group, out).reshape(n, c_out, oh, ow)


def im2col(x: np.ndarray, kh: int, kw: int, strides, pads, dilations, group: int, dtype):
    """(patches, (OH, OW)): patches of x as (N, group, Cg*kh*kw, OH*OW) in `dtype`, rows ordered (c, i, j) like
    w.reshape(O, -1). The whole batch at once through numpy's sliding_window_view (a view; the copy happens in
    the cast): the definition's patch builder, independent of fill_patches, which the fast path uses."""
    n, c_in, h, wd = x.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oh = conv_output_size(h, kh, sh, pt, pb, dh)
    ow = conv_output_size(wd, kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, : sh * (oh - 1) + 1: sh, : sw * (ow - 1) + 1: sw, ::dh, ::dw]  # (N, C, OH, OW, kh, kw)
    cols = win.reshape(n, group, c_in // group, oh, ow, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
    return cols.astype(dtype).reshape(n, group, (c_in // group) * kh * kw, oh * ow), (oh, ow)


def conv2d_definition(x, w, b, strides, pads, dilations, group, compute, out, accumulate=None):
    """The kernel's definition (the implementation before the copy-saving fast path): the whole batch's patch
    matrix, one batched np.matmul, i.e. an sgemm (Cout/g, K) @ (K, OH*OW) per image and group, bias, one
    rounding. `_direct` computes exactly these bits with fewer copies; `accumulate` replaces the GEMM (the
    planted fp16-accumulation bug)."""
    n, c_out, cg, kh, kw, oh, ow = _geometry(x, w, strides, pads, dilations, group)
    cols, _ = im2col(_upcast(x, compute, out), kh, kw, strides, pads, dilations, group, compute)
    wm = _upcast(w, compute, out).reshape(group, c_out // group, -1)
    if accumulate is not None:
        y = accumulate(wm, cols)
    elif _images_share_gemm(n, oh, ow, cg * kh * kw, is_pointwise(w, strides, pads)):
        # (G, K, N*OH*OW): the images side by side, one sgemm per group
        side_by_side = np.ascontiguousarray(cols.transpose(1, 2, 0, 3)).reshape(group, cols.shape[2], -1)
        y = np.matmul(wm, side_by_side).reshape(group, c_out // group, n, oh * ow).transpose(2, 0, 1, 3)
        y = np.ascontiguousarray(y)
    else:
        y = np.matmul(wm[None], cols)
    return _finish(y, b, group, out).reshape(n, c_out, oh, ow)


def conv2d_fp16_fp32acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, np.float16)


def conv2d_bf16_fp32acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, bfloat16)


def conv2d_fp32(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, np.float32)


def _fp16_running_sum(wm, cols):
    """Sequential fp16 accumulation over K: partial sums rounded to fp16 after every term."""
    acc = np.zeros((cols.shape[0],) + wm.shape[:2] + cols.shape[-1:], dtype=np.float16)
    for k in range(wm.shape[-1]):
        prod = (wm[None, :, :, k, None] * cols[:, :, None, k, :]).astype(np.float16)
        acc = (acc + prod).astype(np.float16)
    return acc.astype(np.float32)


def conv2d_bug_fp16acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """Planted bug: fp16 accumulation in a kernel whose contract promises fp32 accumulation."""
    return conv2d_definition(x, w, b, strides, pads, dilations, group, np.float32, np.float16,
                             accumulate=_fp16_running_sum)
