"""The fast fp16 primitives (mschecker/fastfp16.py) give numpy's own float16 bits, and the kernels that use
them give the bits of their plain-numpy definitions, on both routes (compiled loops and numpy-only).

Coverage: every fp16 bit pattern; float32 patterns sampled every 509th of the 2^32 (8.4M values, every exponent
and sign) plus, for every pair of adjacent fp16 values, the float32 midpoint and its two float32 neighbours (the
only places where a rounding rule can differ), the overflow threshold 65520 and NaN payloads. The planted-bug
tests show that the comparisons would see a truncating cast, a missing per-add rounding, or a missing inf.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from mschecker import fastfp16 as H
from mschecker.optimized_kernels import softmax as S

F16, F32 = np.float16, np.float32
ALL_F16 = np.arange(65536, dtype=np.uint16).view(F16)


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def fp16_route(request, monkeypatch):
    """Every test here runs on both routes: the compiled loops of mschecker/_fastfp16.c (skipped when the
    extension is not built) and the numpy paths that MSCHECKER_NO_FASTFP16=1 forces."""
    if request.param == "numpy":
        monkeypatch.setenv("MSCHECKER_NO_FASTFP16", "1")
    else:
        monkeypatch.delenv("MSCHECKER_NO_FASTFP16", raising=False)
        if H.fast_fp16() is None:
            pytest.skip("the optional C extension mschecker._fastfp16 is not built")
    return request.param


def bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))


def same_or_both_nan(a, b) -> bool:
    """Bit-identical, except that a NaN may carry another payload (numpy's own fp16 NaN payloads depend on the
    memory layout of its SIMD loops, so they are not a function of the element)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan_a, nan_b = np.isnan(a.astype(F32)), np.isnan(b.astype(F32))
    return np.array_equal(nan_a, nan_b) and np.array_equal(bits(a)[~nan_a], bits(b)[~nan_b])


def rounding_boundaries() -> np.ndarray:
    h = np.sort(ALL_F16[np.isfinite(ALL_F16) & (ALL_F16 >= 0)].astype(np.float64))
    mid = ((h[:-1] + h[1:]) / 2).astype(F32)  # exact in float32 (fp16 values have 11 significant bits)
    edge = F32([65504, 65519.996, 65520, 65520.004, 1e30, np.inf, 2.0 ** -25, 2.0 ** -24 * 1.5, 1e-30])
    pos = np.concatenate([mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(0)), h.astype(F32), edge])
    nans = np.array([0x7FC00000, 0x7F800001, 0x7FA5A5A5, 0xFFC00001, 0x7F802000], np.uint32).view(F32)
    return np.concatenate([pos, -pos, nans])


@pytest.fixture(scope="module")
def f32_samples() -> np.ndarray:
    dense = np.arange(0, 2 ** 32, 509, dtype=np.uint64).astype(np.uint32).view(F32)
    return np.concatenate([dense, rounding_boundaries()])


def test_to_f16_is_astype_bit_for_bit(f32_samples):
    with np.errstate(over="ignore"):
        expected = f32_samples.astype(F16)
    assert f32_samples.size > H.ORT_MIN_ELEMS  # the fast route is the one tested
    assert same_bits(H.to_f16(f32_samples), expected)
    assert same_bits(H.to_f16(f32_samples[:100]), expected[:100])  # the small-array route
    x = f32_samples[: 3 * 5000].reshape(3, 5000)[:, ::2]  # non-contiguous input keeps its shape
    assert same_bits(H.to_f16(x), x.astype(F16))


def test_to_f32_is_astype_bit_for_bit():
    h = np.tile(ALL_F16, 2).reshape(2, -1)
    assert same_bits(H.to_f32(h), h.astype(F32))


@pytest.mark.parametrize("chunk", [7, 3000, H.C_CAST_MAX - 1])
def test_small_array_routes_are_astype_bit_for_bit(f32_samples, chunk):
    """C-contiguous arrays take the compiled loop (at every size where the CPU has F16C, below C_CAST_MAX where
    not), numpy's astype otherwise: sampled float32 patterns and every fp16 pattern, NaN payloads included,
    converted in pieces of `chunk` elements."""
    head = np.concatenate([f32_samples[:400_000], rounding_boundaries()])  # boundaries and NaNs: in every piece size
    with np.errstate(over="ignore"):
        expected = head.astype(F16)
    got = np.concatenate([H.to_f16(head[i:i + chunk]) for i in range(0, head.size, chunk)])
    assert same_bits(got, expected)
    h = ALL_F16
    got32 = np.concatenate([H.to_f32(h[i:i + chunk]) for i in range(0, h.size, chunk)])
    assert same_bits(got32, h.astype(F32))
    two_d = head[: 2 * chunk].reshape(2, chunk)  # shape kept
    assert same_bits(H.to_f16(two_d), two_d.astype(F16)) and same_bits(H.to_f32(two_d.astype(F16)), two_d.astype(F16).astype(F32))
    assert same_bits(H.to_f16(head[:0]), head[:0].astype(F16)) and same_bits(H.to_f16(head[5:6].reshape(())), head[5:6].reshape(()).astype(F16))


@pytest.mark.parametrize("shape", [(2, 3, 1, 5), (3, 1, 40, 50), (1, 1, 64, 40), (2, 3, 1, 500), (64, 64),
                                   (2, 2, 2, 2, 300)])
def test_permuted_views_keep_astypes_bits_and_a_fixed_layout(shape):
    """Every axis permutation of a C-contiguous array (what a Transpose node hands on) converts to astype's bits,
    NaN payloads included; the layout is astype's (order K, strides of length-1 axes too) below ORT_MIN_ELEMS and C
    order from there on every route (the onnxruntime route's copy; the compiled route copies to C order first), as
    matmul._upcast_is_c_order relies on: a layout decides which BLAS path, and so which bits, a later matmul takes.
    fastfp16.astype keeps astype's layout at every size. A flipped view (negative strides) and a gapped slice too."""
    n = int(np.prod(shape))
    h = ALL_F16[np.arange(n) * 263 % ALL_F16.size].reshape(shape)  # every 263rd pattern: NaNs and infs among them
    f = np.random.default_rng(n).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f = f.reshape(shape)
    for perm in itertools.permutations(range(len(shape))):
        for x, cast, dst in ((h.transpose(perm), H.to_f32, np.float32), (f.transpose(perm), H.to_f16, np.float16)):
            with np.errstate(all="ignore"):
                got, want = cast(x), x.astype(dst)
            layout = want.strides if n < H.ORT_MIN_ELEMS else np.ascontiguousarray(want).strides
            assert got.strides == layout, (perm, got.strides, layout)
            assert np.array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
            with np.errstate(all="ignore"):
                kept = H.astype(x, dst)  # astype's layout at every size (the attention kernels' upcasts)
            assert kept.strides == want.strides, (perm, kept.strides, want.strides)
            assert np.array_equal(np.ascontiguousarray(kept).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    flipped = h[::-1].transpose(1, 0, *range(2, len(shape)))
    assert np.array_equal(H.to_f32(flipped).view(np.uint32), flipped.astype(np.float32).view(np.uint32))
    for view in (flipped, h[..., ::2]):  # negative strides, a gapped slice: numpy's astype, its layout
        got, want = H.astype(view, np.float32), view.astype(np.float32)
        assert got.strides == want.strides
        assert np.array_equal(np.ascontiguousarray(got).view(np.uint32), np.ascontiguousarray(want).view(np.uint32))


def test_to_f16_into_is_astype_in_place(f32_samples):
    x = f32_samples[:60_000].reshape(3, 20_000)
    with np.errstate(over="ignore"):
        expected = x.astype(F16)
    dst = np.empty((5, 20_000), F16)
    H.to_f16_into(x, dst[1:4])  # a contiguous slice: converted in place
    assert same_bits(dst[1:4], expected)
    strided = np.empty((3, 40_000), F16)[:, ::2]  # not contiguous: through to_f16
    H.to_f16_into(x, strided)
    assert same_bits(strided, expected)


def test_round_f16_is_the_astype_round_trip(f32_samples):
    with np.errstate(over="ignore", invalid="ignore"):
        expected = f32_samples.astype(F16).astype(F32)
        got = H.round_f16(f32_samples)
    assert same_or_both_nan(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("shape,axis", [((600, 300), 1), ((64, 2000), 1), ((3, 700, 5), 1), ((2000, 7), 0),
                                        ((1, 9), -1)])
@pytest.mark.parametrize("kind", ["positive", "signed", "overflowing", "specials", "zeros", "tiny"])
def test_running_sum_is_numpys_fp16_accumulate(shape, axis, kind):
    rng = np.random.default_rng(abs(hash((shape, axis, kind))) % 2 ** 32)
    x = rng.standard_normal(shape)
    x = {"positive": np.abs(x), "signed": x * 100, "overflowing": x * 3000 + 500, "specials": x,
         "zeros": np.where(x > 0, 0.0, -0.0), "tiny": x * 2.0 ** -23}[kind]  # signed zeros; sums rounding to -0
    if kind == "zeros":  # one row of -0 only (sum -0), one of +0 only, the others mixed (sum +0)
        rows = np.moveaxis(x, axis, -1)
        rows[(0,) * (rows.ndim - 1)] = -0.0
        rows[(-1,) * (rows.ndim - 1)] = 0.0
    x = x.astype(F16)
    if kind == "specials":
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.inf, -np.inf, np.nan]
    with np.errstate(over="ignore", invalid="ignore"):
        expected = np.take(np.add.accumulate(x, axis=axis, dtype=F16), [-1], axis=axis)
        got = H.fp16_running_sum(x, axis)
    assert same_or_both_nan(got, expected)
    assert same_or_both_nan(H.fp16_running_sum(x, axis, keepdims=False), np.squeeze(expected, axis))


@pytest.mark.parametrize("ufunc", [np.add, np.subtract, np.multiply, np.divide])
def test_f16_binary_is_numpys_fp16_ufunc(ufunc):
    rng = np.random.default_rng(3)
    a, b = rng.choice(ALL_F16, 200_000), rng.choice(ALL_F16, 200_000)  # every class: subnormal, inf, NaN
    with np.errstate(all="ignore"):
        assert same_or_both_nan(H.f16_binary(ufunc, a, b), ufunc(a, b))  # NaN payloads are not reproduced
        col = rng.choice(ALL_F16, (400, 1))  # broadcasting
        assert same_or_both_nan(H.f16_binary(ufunc, a[:400 * 50].reshape(400, 50), col),
                                ufunc(a[:20000].reshape(400, 50), col))
        finite = ~np.isnan(ufunc(a, b))  # every other bit is numpy's
        assert same_bits(H.f16_binary(ufunc, a[finite], b[finite]), ufunc(a[finite], b[finite]))


def test_lut_unary_is_the_kernel():
    def kernel(x):
        with np.errstate(all="ignore"):
            return (np.exp(-np.abs(x)) * x).astype(x.dtype)

    fast = H.lut_unary(kernel)
    x = np.tile(ALL_F16, 2).reshape(4, -1)[:, ::3]
    assert same_or_both_nan(fast(x), kernel(x))
    small = ALL_F16[[0, 1, 1000, 31744, 64512]]  # every size takes the table, after it exists
    assert same_or_both_nan(fast(small), kernel(small))
    zero_d = np.array(ALL_F16[1000])  # 0-d: the kernel itself (a lookup would give a scalar)
    assert same_bits(np.asarray(fast(zero_d)), np.asarray(kernel(zero_d)))
    x32 = np.linspace(-3, 3, 5000, dtype=F32)  # other dtypes go to the kernel itself
    assert same_bits(fast(x32), kernel(x32))


@pytest.mark.parametrize("shape,axis", [((2, 4, 256, 256), -1), ((2, 4, 64, 77), -1), ((3, 1500, 5), 1)])
@pytest.mark.parametrize("scale", [0.5, 6.0, 40.0])
def test_fast_softmax_fp16acc_is_its_numpy_definition(shape, axis, scale):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * scale).astype(F32)
    for xin in (x, x.astype(F16)):
        assert same_bits(S.softmax_fp16_fp16acc(xin, axis), S.softmax_fp16_fp16acc_numpy(xin, axis))
    x16 = x.astype(F16)
    x16.reshape(-1)[[3, 900]] = -np.inf  # fast path: -inf under a finite row max
    assert same_bits(S.softmax_fp16_fp16acc(x16, axis), S.softmax_fp16_fp16acc_numpy(x16, axis))
    x16.reshape(-1)[[5, 77]] = [np.inf, np.nan]  # fallback path: NaN / +inf in a row
    with np.errstate(invalid="ignore"):
            assert same_or_both_nan(S.softmax_fp16_fp16acc(x16, axis), S.softmax_fp16_fp16acc_numpy(x16, axis))


# ------------------------------------------------------------------ planted bugs: the comparisons can fail
def test_planted_truncating_cast_is_caught(f32_samples):
    def truncating_to_f16(x):  # round toward zero: drop the low 13 significand bits before converting
        t = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(F32)
        with np.errstate(over="ignore"):
            return t.astype(F16)

    with np.errstate(over="ignore"):
        assert not same_bits(truncating_to_f16(f32_samples), f32_samples.astype(F16))


def test_planted_sum_without_per_add_rounding_is_caught():
    x = np.abs(np.random.default_rng(5).standard_normal((600, 300))).astype(F16)
    expected = np.take(np.add.accumulate(x, axis=1, dtype=F16), [-1], axis=1)
    fp32_sum = np.add.reduce(x.astype(F32), axis=1, keepdims=True).astype(F16)  # rounds once, at the end
    assert not same_bits(fp32_sum, expected)


def test_planted_missing_overflow_is_caught(f32_samples):
    def no_inf(x):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.clip(x, -65504, 65504).astype(F16).astype(F32)

    with np.errstate(over="ignore", invalid="ignore"):
        assert not same_or_both_nan(no_inf(f32_samples), f32_samples.astype(F16).astype(F32))


def test_without_an_onnxruntime_cast_numpy_converts(monkeypatch, f32_samples):
    def broken(src, dst):
        raise RuntimeError("no Cast kernel in this build")

    monkeypatch.setattr(H, "_sessions", {})
    monkeypatch.setattr(H, "_make_cast_session", broken)
    x = f32_samples[:50_000]
    with np.errstate(over="ignore"):
        assert same_bits(H.to_f16(x), x.astype(F16))
    assert same_bits(H.to_f32(np.tile(ALL_F16, 2)), np.tile(ALL_F16, 2).astype(F32))
