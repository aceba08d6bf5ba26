"""Conv2D and ConvTranspose2D in float64, ONNX semantics (NCHW, pads = (top, left, bottom, right)).

conv2d is im2col + one float64 BLAS GEMM per group: the patch matrix (K = C_in/group * kH * kW rows, one column
per output pixel) is built in chunks over images and output rows (`fill_patches`, never more than
PATCH_CHUNK_BYTES), with the images of a chunk side by side as GEMM columns, so that small feature maps (SD's
8x8 and 4x4 stages) still make one wide GEMM instead of one skinny GEMM per image that re-reads the weights
(it replaced a tap-by-tap form: nine dgemms with K = C_in per conv). Per SD layer against onnxruntime:
benchmarks/kernels_bench.py, recorded in benchmarks/results/kernels_bench.json, section sd_layers.

Accuracy: every summation order is the float64 truth up to gamma_K(2^-53)|w||x| (Higham 3.5; K = C_in/group *
kH * kW), ~1e-13 relative, invisible next to any fp16/bf16 kernel's bound; the GEMM's blocked order is one of
them. tests/kernels/test_conv_fastpath.py checks conv2d against an exactly rounded (math.fsum) convolution on
small cases and tests/kernels/test_conv_extra.py against onnxruntime's Conv (an independent implementation of
the ONNX geometry: pads order, dilation, groups), so a slip in `fill_patches`, which the NPU kernel (optimized_kernels/conv.py) shares, cannot hide
behind agreement between the two.

3x3 stride-1 undilated convs with enough tiles and input channels (`takes_winograd`) take a float64 Winograd
F(2x2, 3x3) route instead (`_winograd_gemms`; transforms and their componentwise error bound
gamma_{C_in/g + 20} |A^T|(sum_c |G||g||G^T| o |B^T||d||B|)|A| in reference/winograd64.py): 2.25x fewer GEMM
multiplies (speed per SD layer, direct vs Winograd columns: kernels_bench.json, sd_layers; docs/NUMERICS.md §5
for the accuracy). Its bound term is ~7x (6-14x measured) the direct sum |w||x|; measured against fsum on
SD-like data (C_in = 320, 2000 sampled outputs) its max error is 7.9e-16 of max|y| vs im2col's 5.0e-16.

conv_transpose2d is the scatter form: for each kernel tap a dgemm over the input channels, scattered into place.
"""
from __future__ import annotations

import threading

import numpy as np

from mschecker.reference import winograd64

#: Largest patch-matrix chunk of the float64 reference (bytes): big enough that a chunk is a full SD feature
#: map (K*OH*OW*8 = 2880*2048*8 = 47 MB for a 320-channel 3x3 conv at 32x32, batch 2), small enough that a VAE
#: decoder conv at 512x512 (1152 x 262144 patches = 2.4 GB) never materializes at once.
PATCH_CHUNK_BYTES = 64 << 20

_workspaces = threading.local()


def workspace(role: str, shape, dtype) -> np.ndarray:
    """An uninitialized scratch array for `role`, reused across calls of this thread (up to PATCH_CHUNK_BYTES).

    Why: a fresh array of tens of MB is a fresh mmap, and its first touch costs a page fault per 4 KiB (measured
    here: allocating and filling 59 MB 18.5 ms, refilling it 4.9 ms), which for the float64 patch matrix of a
    320-channel 3x3 conv at 32x32 (47 MB) measured ~7% of the conv (A/B, interleaved). Only kernel-internal scratch (patch matrices,
    GEMM products) goes through here, never an array a kernel returns, and a caller uses one role's array
    until it returns, so reuse cannot alias live data; larger requests are plain allocations, not kept.
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    if size > PATCH_CHUNK_BYTES:
        return np.empty(shape, dtype)
    pool = _workspaces.__dict__.setdefault("pool", {})
    buf = pool.get(role)
    if buf is None or buf.size < size:
        buf = pool[role] = np.empty(max(size, 1 << 16), dtype=np.uint8)
    return buf[:size].view(dtype).reshape(shape)


def conv_output_size(size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> int:
    """ONNX Conv output length along one spatial axis."""
    return (size + pad_begin + pad_end - (dilation * (k - 1) + 1)) // stride + 1


def conv_transpose_output_size(size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                               output_padding: int) -> int:
    """ONNX ConvTranspose output length along one spatial axis (explicit pads, no output_shape)."""
    return stride * (size - 1) + output_padding + dilation * (k - 1) + 1 - pad_begin - pad_end


def check_conv_args(x, w, group: int, *, transpose: bool) -> None:
    """ValueError naming the mismatch when x and w cannot be a (transposed) convolution with `group` groups."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv: x and w must be 4-D NCHW, got x {x.shape} and w {w.shape}")
    c_in = x.shape[1]
    if group < 1 or c_in % group:
        raise ValueError(f"conv: {c_in} input channels are not divisible by group={group}")
    if transpose:
        if w.shape[0] != c_in:
            raise ValueError(f"conv_transpose: w {w.shape} must have C_in={c_in} rows (ONNX layout C_in, C_out/g, kH, kW)")
    elif w.shape[1] * group != c_in or w.shape[0] % group:
        raise ValueError(f"conv: w {w.shape} does not match C_in={c_in} with group={group}")


def _valid_range(out_len: int, size: int, stride: int, offset: int) -> tuple[int, int]:
    """[lo, hi): the outputs r whose input index r*stride + offset lies inside [0, size) (the rest read padding)."""
    lo = min(out_len, max(0, (-offset + stride - 1) // stride))
    hi = min(out_len, (size - 1 - offset) // stride + 1) if size - 1 - offset >= 0 else 0
    return lo, max(lo, hi)


def fill_patches(dst: np.ndarray, x: np.ndarray, kh: int, kw: int, strides, pads, dilations,
                 images: slice, channels: slice, rows: slice) -> np.ndarray:
    """Write the im2col patches of x into dst, shape (C, kh, kw, N, R, OW), and return dst.

    dst[c, i, j, n, r, q] = x_pad[images][n, channels][c, (rows.start + r)*sh + i*dh, q*sw + j*dw] with x_pad the
    zero-padded input: rows (c, i, j) match w.reshape(O, -1), so W (O, C*kh*kw) @ dst.reshape(C*kh*kw, -1) is
    the convolution of those images, channels and output rows. Padding is never materialized: each tap copies
    the block of x it meets and zeroes the border strips that fall outside x, so dst may be reused uninitialized.
    """
    _, _, h, wd = x.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl = pads[0], pads[1]
    r0, ow = rows.start, dst.shape[-1]
    nrows = dst.shape[-2]
    src = x[images, channels].transpose(1, 0, 2, 3)  # (C, N, H, W) view
    for i in range(kh):
        a, b = _valid_range(r0 + nrows, h, sh, i * dh - pt)
        a, b = max(a, r0) - r0, max(b, r0) - r0
        for j in range(kw):
            ca, cb = _valid_range(ow, wd, sw, j * dw - pl)
            tap = dst[:, i, j]
            if a > 0:
                tap[:, :, :a] = 0
            if b < nrows:
                tap[:, :, b:] = 0
            if ca > 0:
                tap[:, :, a:b, :ca] = 0
            if cb < ow:
                tap[:, :, a:b, cb:] = 0
            if a < b and ca < cb:
                y0, x0 = (r0 + a) * sh + i * dh - pt, ca * sw + j * dw - pl
                tap[:, :, a:b, ca:cb] = src[:, :, y0: y0 + (b - a - 1) * sh + 1: sh, x0: x0 + (cb - ca - 1) * sw + 1: sw]
    return dst


def _even_step(total: int, most: int) -> int:
    """The step that covers `total` in as few pieces of at most `most` as possible, the pieces as equal as
    possible (30 + 2 rows make one wide and one skinny GEMM; 16 + 16 two wide ones)."""
    pieces = -(-total // max(most, 1))
    return -(-total // max(pieces, 1))


def patch_chunks(n: int, oh: int, ow: int, k: int, itemsize: int, budget: int):
    """(images, rows) slices covering n images x oh output rows, each chunk's patch matrix (k rows, one column
    per output pixel) within `budget` bytes where possible: whole images side by side when at least one fits,
    else bands of output rows of one image (at least one row); chunks as equal as possible."""
    per_row = k * ow * itemsize
    if per_row * oh <= budget or oh == 0:
        step = _even_step(n, budget // max(per_row * oh, 1))
        for n0 in range(0, n, step):
            yield slice(n0, min(n, n0 + step)), slice(0, oh)
    else:
        step = _even_step(oh, budget // per_row)
        for n0 in range(n):
            for r0 in range(0, oh, step):
                yield slice(n0, n0 + 1), slice(r0, min(oh, r0 + step))


#: A 1x1 conv with at least this many output pixels runs as one GEMM per image on the image itself; smaller
#: maps (SD's 4x4 and 8x8 stages) go through the patch path, whose images side by side make one wider GEMM that
#: reads the weights once instead of once per image.
POINTWISE_MIN_PIXELS = 256


def is_pointwise(w, strides, pads) -> bool:
    """A 1x1, stride-1, unpadded conv: each image (C, H*W) is already its patch matrix (any dilation)."""
    return w.shape[2] == w.shape[3] == 1 and tuple(strides) == (1, 1) and not any(pads)


def _pointwise_gemms(x, wm, y) -> None:
    """y = 1x1 conv of x: per image and group one dgemm on the image itself (no copy in, none out)."""
    group, cog, cg = wm.shape
    xc = np.ascontiguousarray(x)
    for i in range(x.shape[0]):
        for g in range(group):
            np.matmul(wm[g], xc[i, g * cg:(g + 1) * cg].reshape(cg, -1), out=y[i, g * cog:(g + 1) * cog].reshape(cog, -1))


def _patch_gemms(x, wm, y, kernel, strides, pads, dilations) -> None:
    """y = conv of x: per chunk of images/output rows and group, one dgemm over the chunk's patch matrix."""
    group, cog, k = wm.shape
    (kh, kw), cg = kernel, x.shape[1] // group
    n, _, oh, ow = y.shape
    buf = prod = None
    for images, rows in patch_chunks(n, oh, ow, k, 8, PATCH_CHUNK_BYTES):
        nb, nr = images.stop - images.start, rows.stop - rows.start
        if buf is None or buf.shape[3:5] != (nb, nr):
            buf = workspace("reference.patches", (cg, kh, kw, nb, nr, ow), np.float64)
            prod = workspace("reference.product", (cog, nb * nr * ow), np.float64)
        for g in range(group):
            cols = fill_patches(buf, x, kh, kw, strides, pads, dilations, images, slice(g * cg, (g + 1) * cg), rows)
            np.matmul(wm[g], cols.reshape(k, -1), out=prod)  # one dgemm: (Cout/g, K) @ (K, images*rows*OW)
            y[images, g * cog:(g + 1) * cog, rows] = prod.reshape(cog, nb, nr, ow).transpose(1, 0, 2, 3)


#: The Winograd route (3x3, stride 1, dilation 1) saves 20 of 36 multiplies per output tile and channel pair
#: but pays per call a filter transform (~O*C) and per tile input/output transforms (~C + O): it only wins
#: with enough tiles and enough input channels. Measured (one BLAS thread, CPU time, forced routes as in
#: benchmarks/kernels_bench.py --only-sd-layers,
#: Winograd vs im2col): 320->320 @32 batch 2 (512 tiles) 1.41x faster, 640 @16 (128 tiles) 1.28x, 1920->640 @16
#: 1.38x, 640 @16 batch 1 (64 tiles) 1.2x, 1280 @8 batch 4 (64 tiles) 1.15x, but 1280 @8 batch 2 (32 tiles)
#: 0.78x, 1280 @4 0.49x; input channels at 512 tiles: 16 -> 0.35x, 32 -> 0.81x, 64 -> 1.05x, 128 -> 1.24x.
WINOGRAD_MIN_TILES = 64
WINOGRAD_MIN_CHANNELS = 64


def takes_winograd(w, strides, dilations, n: int, oh: int, ow: int) -> bool:
    """A 3x3, stride-1, undilated conv (any pads, any group) with at least WINOGRAD_MIN_TILES 2x2 output tiles
    (images x tile rows x tile columns) and WINOGRAD_MIN_CHANNELS input channels per group."""
    return (w.shape[2] == w.shape[3] == 3 and tuple(strides) == (1, 1) and tuple(dilations) == (1, 1)
            and w.shape[1] >= WINOGRAD_MIN_CHANNELS and n * -(-oh // 2) * -(-ow // 2) >= WINOGRAD_MIN_TILES)


#: Largest block of transformed filters (16 x C_out-block x C_in/g float64) computed at once (a dgemm with
#: K = 9, rebuilt per chunk from w, so the big-map convs that need several chunks never hold U beside x, y and w
#: for long; they recompute it per chunk, a small cost next to a chunk's GEMMs). Large blocks keep the channel
#: GEMMs tall: 1920->640 @16 batch 2 took 669 / 356 / 282 / 239 ms with 2 / 8 / 32 / 128 MiB blocks.
FILTER_BLOCK_BYTES = 128 << 20


def _winograd_gemms(x, w, y, pads, group) -> None:
    """y = 3x3 stride-1 conv of x by float64 Winograd F(2x2, 3x3) (reference/winograd64.py: transforms, bound).

    The 4x4 input tiles (stride 2) are the im2col patches of a 4x4, stride-2 kernel (`fill_patches`, zero
    padding included, so odd output sizes read zeros in their last tile row/column and are cropped), chunked
    over images and tile rows so the tiles, their transform V (16 x C_in/g x tiles each) and the GEMM product M
    (16 x C_out/g x tiles) stay within PATCH_CHUNK_BYTES. Per chunk, group and block of output channels:
    U = G g G^T of the block, then 16 GEMMs (C_out block x C_in/g) @ (C_in/g x tiles) in one batched np.matmul;
    then Y = A^T M A per group.
    """
    w = np.ascontiguousarray(w)
    c_out, cg = w.shape[:2]
    cog = c_out // group
    n, _, oh, ow = y.shape
    th, tw = -(-oh // 2), -(-ow // 2)
    ob = _even_step(cog, max(FILTER_BLOCK_BYTES // (16 * cg * 8), 1))
    for images, rows in patch_chunks(n, th, tw, 16 * max(cg, cog), 8, PATCH_CHUNK_BYTES):
        nb, t0, nr = images.stop - images.start, rows.start, rows.stop - rows.start
        p = nb * nr * tw
        tiles = workspace("reference.winograd.tiles", (cg, 4, 4, nb, nr, tw), np.float64)
        v = workspace("reference.winograd.v", (cg, 16, p), np.float64)
        u = workspace("reference.winograd.u", (16 * ob * cg,), np.float64)
        m = workspace("reference.winograd.m", (16, cog, p), np.float64)
        out = workspace("reference.winograd.out", (2, 2, cog, nb, nr, tw), np.float64)
        p_end = min(oh, 2 * (t0 + nr))
        for g in range(group):
            fill_patches(tiles, x, 4, 4, (2, 2), pads, (1, 1), images, slice(g * cg, (g + 1) * cg), rows)
            vt = winograd64.input_transform(tiles.reshape(cg, 16, p), v).transpose(1, 0, 2)  # (16, C/g, P)
            for o0 in range(0, cog, ob):
                o1 = min(cog, o0 + ob)
                ub = winograd64.filter_transform(w[g * cog + o0: g * cog + o1],
                                                 u[:16 * (o1 - o0) * cg].reshape(16, o1 - o0, cg))
                np.matmul(ub, vt, out=m[:, o0:o1])
            winograd64.output_transform(m, out)
            # out[r, s, o, n, i, j] is y[n, o, 2i + r, 2j + s]: interleave, crop odd sizes' padding tiles
            full = out.transpose(3, 2, 4, 0, 5, 1).reshape(nb, cog, 2 * nr, 2 * tw)
            y[images, g * cog:(g + 1) * cog, 2 * t0:p_end] = full[:, :, :p_end - 2 * t0, :ow]


def conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1) -> np.ndarray:
    """y[n, o, p, q] = b[o] + sum_{c, i, j} x_pad[n, g*Cg + c, p*sh + i*dh, q*sw + j*dw] * w[o, c, i, j]."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    check_conv_args(x, w, group, transpose=False)
    n, c_in, h, wd = x.shape
    c_out, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oh = max(conv_output_size(h, kh, sh, pt, pb, dh), 0)
    ow = max(conv_output_size(wd, kw, sw, pl, pr, dw), 0)
    wm = np.ascontiguousarray(w.reshape(group, c_out // group, cg * kh * kw))
    y = np.empty((n, c_out, oh, ow))
    if is_pointwise(w, strides, pads) and oh * ow >= POINTWISE_MIN_PIXELS:
        _pointwise_gemms(x, wm, y)
    elif takes_winograd(w, strides, dilations, n, oh, ow):
        _winograd_gemms(x, w, y, pads, group)
    else:
        _patch_gemms(x, wm, y, (kh, kw), strides, pads, dilations)
    if b is not None:
        y += np.asarray(b, dtype=np.float64).reshape(1, c_out, 1, 1)
    return y


def conv_transpose2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
                     output_padding=(0, 0)) -> np.ndarray:
    """Scatter form: every input pixel adds x[n, c, p, q] * w[c, o, i, j] at (p*sh + i*dh, q*sw + j*dw), then the
    full result is cropped by pads (ONNX ConvTranspose; output_padding extends the bottom/right edge)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    check_conv_args(x, w, group, transpose=True)
    n, c_in, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oph, opw = output_padding
    full_h = sh * (h - 1) + dh * (kh - 1) + 1 + oph
    full_w = sw * (wd - 1) + dw * (kw - 1) + 1 + opw
    cig = c_in // group
    xg = x.reshape(n, group, cig, h * wd)
    wg = w.reshape(group, cig, cog, kh, kw)
    full = np.zeros((n, group, cog, full_h, full_w))
    for i in range(kh):
        for j in range(kw):
            # (g, Cout/g, Cin/g) @ (n, g, Cin/g, H*W): the tap's contribution by dgemm, scattered into place
            part = np.matmul(np.ascontiguousarray(wg[..., i, j].transpose(0, 2, 1)), xg)
            full[..., i * dh: i * dh + sh * (h - 1) + 1: sh, j * dw: j * dw + sw * (wd - 1) + 1: sw] += \
                part.reshape(n, group, cog, h, wd)
    y = full.reshape(n, group * cog, full_h, full_w)[:, :, pt: full_h - pb, pl: full_w - pr]
    if b is not None:
        y = y + np.asarray(b, dtype=np.float64).reshape(1, -1, 1, 1)
    return y
