"""Conv fast paths: the float64 reference against exact arithmetic, the NPU kernel bit for bit against its
definition.

- reference conv2d (im2col + one dgemm per group, chunked over images and output rows) is checked against an
  exactly rounded convolution written independently (explicit index arithmetic on np.pad's padded input, one
  math.fsum per output). Inputs are fp32-exact, so every product is exact in float64 (24 + 24 <= 53 bits) and
  fsum returns the exact sum rounded once; the reference may differ from it by its summation error only:
      |y - exact| <= gamma_{K+1}(2^-53) (|w||x| + |b|) + 2^-53 |exact|      (Higham 3.5; K = C/g*kh*kw)
  Tiny chunk budgets force single-image and single-row chunks (the row-band path of big VAE convs).
- the NPU kernels' fast path (`_direct`: fill_patches into a reused buffer, per-image sgemm, bias in place) gives
  the same bits as the definition (`conv2d_definition`: sliding_window_view patches of the whole batch, one
  batched np.matmul), for fp16, bf16 and fp32 storage, on hypothesis cases and on special values (+-0,
  subnormals, +-inf, NaN, 65504 and sums past it).
- planted bugs the checks must catch: pads read in the wrong order, an off-by-one border in the shared patch
  builder, and the bias added after the output rounding.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given

from mschecker.dtypes import bfloat16, gamma
from mschecker.kernels.entries.conv import conv_cases
from mschecker.optimized_kernels import conv as direct
from mschecker.reference import conv as ref

U64 = 2.0 ** -53


def exact_conv(x, w, b, strides, pads, dilations, group):
    """The exactly rounded convolution (fsum per output), ONNX geometry spelled out index by index."""
    n, c_in, _, _ = x.shape
    c_out, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, c_out, oh, ow))
    cog = c_out // group
    for img in range(n):
        for o in range(c_out):
            g = o // cog
            for p in range(oh):
                for q in range(ow):
                    terms = [xp[img, g * cg + c, p * sh + i * dh, q * sw + j * dw] * w[o, c, i, j]
                             for c in range(cg) for i in range(kh) for j in range(kw)]
                    y[img, o, p, q] = math.fsum(terms + ([b[o]] if b is not None else []))
    return y


GEOMETRIES = [
    dict(),
    dict(pads=(1, 1, 1, 1)),
    dict(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), group=2),
    dict(strides=(3, 2), pads=(2, 2, 0, 1), dilations=(2, 1), group=4),
    dict(strides=(2, 2), pads=(3, 0, 0, 3)),  # a pad wider than the kernel: whole rows of zeros
    dict(dilations=(2, 2), pads=(2, 2, 2, 2)),
]


def _inputs(seed, c_in=4, c_out=8, k=(3, 2), shape=(3, 7, 6), group=1, bias=True):
    rng = np.random.default_rng(seed)
    n, h, wd = shape
    x = rng.standard_normal((n, c_in, h, wd)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((c_out, c_in // group) + k).astype(np.float32).astype(np.float64)
    b = rng.standard_normal(c_out).astype(np.float32).astype(np.float64) if bias else None
    return x, w, b


def _excess(conv, attrs, x, w, b, u=U64):
    """max |conv - exact| / bound (<= 1 passes), bound as in the module docstring, for unit roundoff u (the float64
    reference: 2^-53; an fp32-accumulating kernel with fp32 output: 2^-24)."""
    full = dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1) | attrs
    want = exact_conv(x, w, b, **full)
    got = conv(x, w, b, **attrs)
    if got.shape != want.shape:
        return np.inf
    absb = np.abs(b) if b is not None else None
    abs_ref = exact_conv(np.abs(x), np.abs(w), absb, **full)
    bound = gamma(w[0].size + 1, u) * abs_ref + u * np.abs(want) + 1e-300
    return float(np.max(np.abs(got - want) / bound))


@pytest.mark.parametrize("budget", [ref.PATCH_CHUNK_BYTES, 1])
@pytest.mark.parametrize("attrs", GEOMETRIES)
def test_reference_conv_within_summation_error_of_exact(attrs, budget, monkeypatch):
    monkeypatch.setattr(ref, "PATCH_CHUNK_BYTES", budget)  # 1 byte: one output row per chunk
    x, w, b = _inputs(0, group=attrs.get("group", 1))
    assert _excess(ref.conv2d, attrs, x, w, b) <= 1
    x, w, b = _inputs(1, c_in=8, c_out=8, k=(1, 1), shape=(2, 5, 4), group=attrs.get("group", 1), bias=False)
    assert _excess(ref.conv2d, attrs, x, w, b) <= 1


def test_reference_chunking_by_whole_images(monkeypatch):
    """A budget of two images' patches: chunks of two images side by side, and a last chunk of one."""
    x, w, b = _inputs(2, shape=(5, 6, 6))
    k, oh, ow = w[0].size, 6, 5
    monkeypatch.setattr(ref, "PATCH_CHUNK_BYTES", 2 * k * oh * ow * 8)
    assert [s for s, _ in ref.patch_chunks(5, oh, ow, k, 8, ref.PATCH_CHUNK_BYTES)] == \
        [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert _excess(ref.conv2d, dict(pads=(1, 0, 0, 0)), x, w, b) <= 1


@pytest.mark.parametrize("group", [1, 2])
def test_reference_pointwise_path_within_summation_error_of_exact(group):
    """1x1 convs with >= POINTWISE_MIN_PIXELS outputs: one dgemm per image on the image itself."""
    x, w, b = _inputs(4, c_in=8, c_out=6, k=(1, 1), shape=(2, 16, 17), group=group)
    assert 16 * 17 >= ref.POINTWISE_MIN_PIXELS and ref.is_pointwise(w, (1, 1), (0, 0, 0, 0))
    assert _excess(ref.conv2d, dict(group=group), x, w, b) <= 1


def test_exact_check_catches_planted_geometry_bugs(monkeypatch):
    attrs = dict(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), group=2)
    x, w, b = _inputs(3, group=2)

    def pads_misread(x, w, b, pads, **kw):  # (top, bottom, left, right) instead of ONNX's (top, left, ...)
        return ref.conv2d(x, w, b, pads=(pads[0], pads[2], pads[1], pads[3]), **kw)

    assert _excess(pads_misread, attrs, x, w, b) > 1
    valid = ref._valid_range
    monkeypatch.setattr(ref, "_valid_range", lambda n, size, s, off: (valid(n, size, s, off)[0],
                                                                       max(valid(n, size, s, off)[1] - 1, 0)))
    assert _excess(ref.conv2d, attrs, x, w, b) > 1  # the last in-bounds row/column of each tap dropped


# ------------------------------------------------------------------------------- NPU fast path, bit for bit
STORAGE = {"fp16": (direct.conv2d_fp16_fp32acc, np.float16, np.uint16),
           "bf16": (direct.conv2d_bf16_fp32acc, bfloat16, np.uint16),
           "fp32": (direct.conv2d_fp32, np.float32, np.uint32)}


def _definition(storage, x, w, b, params):
    full = dict(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1) | params
    return direct.conv2d_definition(x, w, b, full["strides"], full["pads"], full["dilations"], full["group"],
                                    np.float32, STORAGE[storage][1])


def _bits_differ(kernel, storage, inputs, params) -> int:
    """Number of output elements whose bits differ between kernel and the definition (inputs in storage)."""
    _, dtype, view = STORAGE[storage]
    x, w, b = (np.asarray(a).astype(dtype) if a is not None else None for a in (tuple(inputs) + (None,))[:3])
    with np.errstate(all="ignore"):
        got, want = kernel(x, w, b, **params), _definition(storage, x, w, b, params)
    assert got.dtype == want.dtype and got.shape == want.shape
    return int(np.count_nonzero(np.ascontiguousarray(got).view(view) != np.ascontiguousarray(want).view(view)))


@pytest.mark.parametrize("storage", STORAGE)
@given(case=conv_cases(max_cg=8))
def test_npu_fast_path_bits_equal_definition(storage, case):
    assert _bits_differ(STORAGE[storage][0], storage, case.inputs, case.params) == 0


SPECIALS = np.array([0.0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504.0, -65504.0, np.inf, -np.inf, np.nan, 1.0, -2.5])


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("params", [dict(pads=(1, 1, 1, 1)), dict(), dict(strides=(2, 2), pads=(0, 1, 1, 0))])
@pytest.mark.parametrize("k", [(3, 3), (1, 1)])
def test_npu_fast_path_bits_on_special_values(storage, params, k):
    rng = np.random.default_rng(7)
    x = rng.choice(SPECIALS, size=(2, 6, 5, 5))
    w = rng.choice(SPECIALS, size=(4, 6) + k)
    b = rng.choice(SPECIALS, size=4)
    assert _bits_differ(STORAGE[storage][0], storage, (x, w, b), params) == 0
    # sums past 65504 (inf in fp16 storage) and subnormal-sized outputs, no NaN to hide them
    big = np.full((1, 6, 4, 4), 60000.0)
    assert _bits_differ(STORAGE[storage][0], storage, (big, np.ones((2, 6) + k), None), params) == 0
    tiny = np.full((1, 6, 4, 4), 2.0 ** -12)
    assert _bits_differ(STORAGE[storage][0], storage, (tiny, np.full((2, 6) + k, 2.0 ** -12), None), params) == 0


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("shape,pads", [((2, 24, 4, 4), (1, 1, 1, 1)), ((3, 16, 8, 8), (1, 1, 1, 1)),
                                        ((2, 16, 9, 9), (0, 0, 1, 1))])
def test_small_images_share_one_gemm_with_the_definitions_bits(storage, shape, pads):
    """SD's deep layers (8x8, 4x4 images, batch 2): the images side by side in one GEMM per group, in the fast path
    and in the definition alike; the route is really taken, and fast path and definition agree bit for bit."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    w = (rng.standard_normal((8, shape[1] // 2, 3, 3)) / 6).astype(np.float32).astype(np.float64)
    b = rng.standard_normal(8).astype(np.float32).astype(np.float64)
    params = dict(pads=pads, group=2)
    n, _, h, wd = shape
    assert direct._images_share_gemm(n, h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2, 9 * shape[1] // 2,
                                     False)
    assert _bits_differ(STORAGE[storage][0], storage, (x, w, b), params) == 0
    # and the shared GEMM is the convolution (not merely the definition's twin): the fp32 kernel within fp32
    # accumulation's summation bound of the exactly rounded conv
    assert _excess(direct.conv2d_fp32, params, x, w, b, u=2.0 ** -24) <= 1
    assert not direct._images_share_gemm(1, 4, 4, 9, False)  # one image: nothing to share
    assert not direct._images_share_gemm(2, 16, 16, 9, False)  # 256 pixels: the per-image GEMM is wide enough


def test_definition_column_major_patches_are_followed(monkeypatch):
    """Hypothesis found it: x (1,1,4,3) w (1,1,2,3) strides (2,1) makes the definition's patch matrix column-major
    (a view after astype(order='K')), and numpy/BLAS then sum the fp32 products in another order. The fast path
    must detect that layout and take the definition; with the check disabled (planted bug) the bits differ."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 1, 4, 3)), rng.standard_normal((1, 1, 2, 3))
    params = dict(strides=(2, 1))
    assert not direct._definition_patches_are_c_order((1, 1, 4, 3), 2, 3, (2, 1), (0, 0, 0, 0), (1, 1), 1)
    assert _bits_differ(direct.conv2d_fp32, "fp32", (x, w, None), params) == 0
    monkeypatch.setattr(direct, "_definition_patches_are_c_order", lambda *_: True)
    assert _bits_differ(direct.conv2d_fp32, "fp32", (x, w, None), params) > 0


def test_bit_check_catches_planted_bias_after_rounding():
    """Planted bug: bias added in fp16 after the output rounding (two roundings instead of one)."""
    def bias_late(x, w, b, **params):
        y = direct.conv2d_fp16_fp32acc(x, w, None, **params)
        return (y + b.reshape(1, -1, 1, 1)).astype(np.float16)

    rng = np.random.default_rng(8)
    x, w, b = rng.standard_normal((2, 8, 6, 6)), rng.standard_normal((4, 8, 3, 3)), rng.standard_normal(4) * 10
    assert _bits_differ(bias_late, "fp16", (x, w, b), dict(pads=(1, 1, 1, 1))) > 0
