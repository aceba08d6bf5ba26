"""ConvTranspose2D (ONNX semantics) in the two forms NPU libraries use, fp16 storage with fp32 accumulation.

- conv_transpose2d_fp16_fp32acc_scatter: GEMM then col2im. cols = W^T x (a GEMM over C_in/group in fp32), and
  every column is scatter-added into the output at (p*sh + i*dh, q*sw + j*dw) in fp32; crop by pads, add bias,
  round once to fp16.
  conv_transpose2d_bf16_fp32acc_scatter and conv_transpose2d_fp32_scatter: the same with bf16 / fp32 storage
  (the emulated NPU's bf16 profile and its fp32 islands).
- conv_transpose2d_fp16_fp32acc_zero_insert: insert (s-1) zeros between input pixels, pad by d*(k-1) - pad
  (plus output_padding at the end), and run the direct stride-1 Conv2D (optimized_kernels/conv.py) with the
  kernel flipped in both spatial axes and its in/out channels swapped per group.
- conv_transpose2d_bug_noflip (planted bug): the zero-insertion form without the kernel flip (a common slip:
  correct for symmetric kernels only).
"""
from __future__ import annotations

import numpy as np

from mschecker.dtypes import bfloat16
from mschecker.reference.conv import check_conv_args, conv_transpose_output_size
from mschecker.optimized_kernels.conv import conv2d_fp16_fp32acc


def _scatter(x, w, b, strides, pads, dilations, group, output_padding, out):
    check_conv_args(x, w, group, transpose=True)
    n, c_in, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    cig = c_in // group
    full_h = sh * (h - 1) + dh * (kh - 1) + 1 + output_padding[0]
    full_w = sw * (wd - 1) + dw * (kw - 1) + 1 + output_padding[1]
    wm = w.astype(np.float32).reshape(group, cig, cog * kh * kw).transpose(0, 2, 1)  # (G, Cog*kh*kw, Cig)
    cols = np.matmul(wm[None], x.astype(np.float32).reshape(n, group, cig, h * wd))
    cols = cols.reshape(n, group, cog, kh, kw, h, wd)
    full = np.zeros((n, group, cog, full_h, full_w), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            full[..., i * dh: i * dh + sh * (h - 1) + 1: sh, j * dw: j * dw + sw * (wd - 1) + 1: sw] += cols[:, :, :, i, j]
    y = full.reshape(n, group * cog, full_h, full_w)[:, :, pt: full_h - pb, pl: full_w - pr]
    if b is not None:
        y = y + np.asarray(b).astype(np.float32).reshape(1, -1, 1, 1)
    return y.astype(out)


def conv_transpose2d_fp16_fp32acc_scatter(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                                          group=1, output_padding=(0, 0)):
    return _scatter(x, w, b, strides, pads, dilations, group, output_padding, np.float16)


def conv_transpose2d_bf16_fp32acc_scatter(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                                          group=1, output_padding=(0, 0)):
    return _scatter(x, w, b, strides, pads, dilations, group, output_padding, bfloat16)


def conv_transpose2d_fp32_scatter(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
                                  output_padding=(0, 0)):
    return _scatter(x, w, b, strides, pads, dilations, group, output_padding, np.float32)


def _zero_insert(x, w, b, strides, pads, dilations, group, output_padding, flip: bool):
    check_conv_args(x, w, group, transpose=True)
    n, c_in, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oh = conv_transpose_output_size(h, kh, sh, pt, pb, dh, output_padding[0])
    ow = conv_transpose_output_size(wd, kw, sw, pl, pr, dw, output_padding[1])
    if oh <= 0 or ow <= 0:
        return np.zeros((n, group * cog, max(oh, 0), max(ow, 0)), dtype=np.float16)
    xz = np.zeros((n, c_in, sh * (h - 1) + 1, sw * (wd - 1) + 1), dtype=x.dtype)
    xz[:, :, ::sh, ::sw] = x
    # Padding of the equivalent direct conv; a negative value crops the zero-inserted input instead.
    before = (dh * (kh - 1) - pt, dw * (kw - 1) - pl)
    after = (dh * (kh - 1) - pb + output_padding[0], dw * (kw - 1) - pr + output_padding[1])
    xz = np.pad(xz, ((0, 0), (0, 0), (max(before[0], 0), max(after[0], 0)), (max(before[1], 0), max(after[1], 0))))
    xz = xz[:, :, max(-before[0], 0): xz.shape[2] - max(-after[0], 0), max(-before[1], 0): xz.shape[3] - max(-after[1], 0)]
    cig = c_in // group
    # (G, Cig, Cog, kh, kw) -> (G, Cog, Cig, kh, kw) -> (G*Cog, Cig, kh, kw), flipped spatially.
    wc = w.reshape(group, cig, cog, kh, kw).transpose(0, 2, 1, 3, 4).reshape(group * cog, cig, kh, kw)
    if flip:
        wc = wc[:, :, ::-1, ::-1]
    return conv2d_fp16_fp32acc(xz, np.ascontiguousarray(wc), b, dilations=(dh, dw), group=group)


def conv_transpose2d_fp16_fp32acc_zero_insert(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                                              group=1, output_padding=(0, 0)):
    return _zero_insert(x, w, b, strides, pads, dilations, group, output_padding, flip=True)


def conv_transpose2d_bug_noflip(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
                                output_padding=(0, 0)):
    """Planted bug: the kernel is not flipped."""
    return _zero_insert(x, w, b, strides, pads, dilations, group, output_padding, flip=False)

