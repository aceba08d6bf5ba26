"""The chunked fp32-accumulation MatMul (optimized_kernels/matmul.py `_rounded_fp32_product`) gives the bits of
its definition, the whole-batch `_round(_acc_fp32(a, b), storage)`, for fp16 and bf16 storage: on hypothesis
shapes (2-D weights and paired batches, chunks of one matrix up to the whole batch), on layouts that must take
the whole-batch form (broadcast batch, transposed views, 1-D and 2-D operands), and on special values (+-0,
subnormals, +-inf, NaN, 65504 and sums past it). Planted bug: a K-blocked accumulation (another summation
order of the same contract) must be told apart by the same bit comparison.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mschecker import fastfp16 as H
from mschecker.dtypes import bfloat16
from mschecker.optimized_kernels import matmul as mm

KERNELS = {"fp16": (mm.matmul_fp16_fp32acc, np.float16), "bf16": (mm.matmul_bf16_fp32acc, bfloat16)}


def _definition(a, b, dtype):
    return mm._round(mm._acc_fp32(a, b), np.dtype(dtype))


def _same_bits(got, want) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and \
        np.array_equal(np.ascontiguousarray(got).view(np.uint16), np.ascontiguousarray(want).view(np.uint16))


@st.composite
def operands(draw):
    """Batched a @ b, b a 2-D weight or a matching batch; either operand possibly a transposed view."""
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    m, k, n = (draw(st.integers(1, 12)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    scale = draw(st.sampled_from([1e-3, 1.0, 100.0]))
    b_batch = () if draw(st.booleans()) else batch
    a = rng.standard_normal(batch + (k, m)).swapaxes(-1, -2) if draw(st.booleans()) \
        else rng.standard_normal(batch + (m, k))
    b = rng.standard_normal(b_batch + (n, k)).swapaxes(-1, -2) if draw(st.booleans()) \
        else rng.standard_normal(b_batch + (k, n))
    return a * scale, b


@pytest.mark.parametrize("chunk_bytes", [1, 600, mm.CHUNK_BYTES])
@pytest.mark.parametrize("storage", KERNELS)
@given(ab=operands())
def test_chunked_matmul_bits_equal_whole_batch(storage, chunk_bytes, ab):
    kernel, dtype = KERNELS[storage]
    a, b = (x.astype(dtype) for x in ab)
    old = mm.CHUNK_BYTES
    mm.CHUNK_BYTES = chunk_bytes  # 1: one matrix per chunk; 600: a few; default: usually the whole batch
    try:
        with np.errstate(all="ignore"):
            assert _same_bits(kernel(a, b), _definition(a, b, dtype))
    finally:
        mm.CHUNK_BYTES = old


@pytest.mark.parametrize("storage", KERNELS)
def test_other_layouts_bits_equal_whole_batch(storage):
    kernel, dtype = KERNELS[storage]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3, 5, 4)).astype(dtype)
    cases = [(a, rng.standard_normal((1, 3, 4, 6)).astype(dtype)),  # broadcast batch
             (a, rng.standard_normal((2, 3, 6, 4)).astype(dtype).swapaxes(-1, -2)),  # small transposed view
             (a, rng.standard_normal((4, 6)).astype(dtype)),  # 2-D weight
             (a[0, 0], rng.standard_normal((4, 6)).astype(dtype)),  # 2-D @ 2-D
             (a, rng.standard_normal(4).astype(dtype)),  # 1-D right operand
             (rng.standard_normal(5).astype(dtype), rng.standard_normal((2, 5, 3)).astype(dtype))]
    for x, y in cases:
        assert _same_bits(kernel(x, y), _definition(x, y, dtype))


def test_whole_batch_upcast_layout_assumption():
    """_upcast_is_c_order's premise: fastfp16.to_f32 of a large non-contiguous fp16 array is C-contiguous (the
    chunked path cuts C-order chunks to match it). If fastfp16 changes that, this fails before any bits do."""
    x = np.ones((2, 64, 40), np.float16).swapaxes(-1, -2)
    assert x.size >= mm.ORT_MIN_ELEMS and not x.flags.c_contiguous
    assert mm.to_f32(x).flags.c_contiguous
    assert mm._upcast_is_c_order(x) and not mm._upcast_is_c_order(x[:1, :4])


SPECIALS = np.array([0.0, -0.0, 6e-8, -6e-8, 6.1e-5, 65504.0, -65504.0, np.inf, -np.inf, np.nan, 1.0, -2.5])


@pytest.mark.parametrize("storage", KERNELS)
def test_chunked_matmul_bits_on_special_values(storage, monkeypatch):
    kernel, dtype = KERNELS[storage]
    monkeypatch.setattr(mm, "CHUNK_BYTES", 1)
    rng = np.random.default_rng(5)
    a, b = rng.choice(SPECIALS, size=(3, 2, 6, 7)), rng.choice(SPECIALS, size=(3, 2, 7, 5))
    big = np.full((4, 3, 8), 60000.0)  # sums past 65504: inf in fp16 storage
    tiny = np.full((4, 3, 8), 2.0 ** -12)  # products and sums in fp16's subnormal range
    with np.errstate(all="ignore"):
        for x, y in [(a, b), (a, b[0, 0]), (big, np.ones((8, 2))), (tiny, np.full((8, 3), 2.0 ** -12))]:
            x, y = x.astype(dtype), y.astype(dtype)
            assert _same_bits(kernel(x, y), _definition(x, y, dtype))


def test_bit_check_catches_planted_summation_order_change():
    """Planted bug: K split in blocks of 8 with fp32 partial sums (inside the same error contract, other bits)."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 4, 64, 40)).astype(np.float16), rng.standard_normal((40, 64)).astype(np.float16)
    assert not _same_bits(mm.matmul_fp16_fp32acc_kblocked(a, b, kb=8), _definition(a, b, np.float16))
    assert _same_bits(mm.matmul_fp16_fp32acc(a, b), _definition(a, b, np.float16))


@pytest.mark.parametrize("chunk_bytes", [1, 400_000])  # one matrix per chunk; under the 688 KB whole batch
@pytest.mark.parametrize("transposed", ["none", "a", "b", "both"])
@pytest.mark.parametrize("shapes", [((1, 2, 256, 40), (1, 2, 40, 256)), ((1, 2, 256, 256), (1, 2, 256, 40))])
def test_chunked_matmul_bits_on_attention_sized_operands(shapes, transposed, chunk_bytes, monkeypatch):
    """Attention-like operands past fastfp16's ORT_MIN_ELEMS (the chunks take the onnxruntime cast route), as
    the SD graph has them: q and k^T are transposed views, the softmax output is contiguous."""
    monkeypatch.setattr(mm, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal(s[:-2] + s[-2:][::-1]).astype(np.float16).swapaxes(-1, -2)
            if transposed in (name, "both") else rng.standard_normal(s).astype(np.float16)
            for s, name in zip(shapes, "ab"))
    whole_batch = mm._acc_fp32
    monkeypatch.setattr(mm, "_acc_fp32", lambda *_: pytest.fail("took the whole-batch form, not the chunks"))
    got = mm.matmul_fp16_fp32acc(a, b)
    monkeypatch.setattr(mm, "_acc_fp32", whole_batch)
    assert _same_bits(got, _definition(a, b, np.float16))


def test_compiled_matmul_round_is_the_whole_batch_route():
    """_fastfp16.matmul_round (the small fp16 MatMul in one C call: upcast, numpy's matmul, rounding) gives the
    bits of _round(_acc_fp32(a, b, F16), F16) for fp16 operands and float32 staged ones (used as they are), with
    specials in both; it declines (None) what it does not take: gapped views, other dtypes, staged views, a
    non-array result."""
    fast = pytest.importorskip("mschecker._fastfp16")
    if not fast.F16C:
        pytest.skip("the compiled MatMul route needs F16C")
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 5, 7)) * 300).astype(np.float16)
    a.flat[[0, 9, 20]] = [np.inf, np.nan, 65504]
    w16 = (rng.standard_normal((7, 4)) * 0.5).astype(np.float16)
    staged = w16.astype(np.float32)  # what the executor stages for a weight: float32 holding fp16 values
    f16, c_order_from = np.dtype(np.float16), H.ORT_MIN_ELEMS
    with np.errstate(all="ignore"):
        for x, y in ((a, w16), (a, staged), (a[0], w16), (a, a.swapaxes(-1, -2).copy()), (a[0, 0], w16),
                     (a.swapaxes(-1, -2), a), (a, a.swapaxes(-1, -2))):
            got = fast.matmul_round(x, y, np.matmul, c_order_from)
            assert _same_bits(got, mm._round(mm._acc_fp32(x, y, f16), f16))
    assert fast.matmul_round(a[:, :, ::2], w16[::2], np.matmul, c_order_from) is None  # gapped: not one dense block
    assert fast.matmul_round(a, staged.T.copy().T, np.matmul, c_order_from) is None  # staged, F order
    assert fast.matmul_round(a.astype(np.float64), w16, np.matmul, c_order_from) is None
    assert fast.matmul_round(a, w16, lambda p, q: (p @ q).tolist(), c_order_from) is None
    with pytest.raises(ValueError):
        fast.matmul_round(a, a, np.matmul, c_order_from)  # numpy's own error for mismatched shapes


@pytest.mark.parametrize("case", ["q_kt", "p_v", "permuted", "large_view", "large_both"])
def test_compiled_matmul_round_upcasts_in_the_python_routes_layout(case):
    """The float32 operands the compiled route hands np.matmul have the strides fastfp16.as_f32 gives the Python
    route (BLAS may sum in another order for another layout): a small transposed view stays transposed (astype's
    order K), one of ORT_MIN_ELEMS elements or more is copied to C order (to_f32's route for large arrays)."""
    fast = pytest.importorskip("mschecker._fastfp16")
    if not fast.F16C:
        pytest.skip("the compiled MatMul route needs F16C")
    rng = np.random.default_rng(8)

    def f16(*shape):
        return rng.standard_normal(shape).astype(np.float16)
    x, y = {"q_kt": (f16(2, 4, 16, 8), f16(2, 4, 16, 8).swapaxes(-1, -2)),
            "p_v": (f16(2, 4, 16, 16), f16(2, 16, 4, 8).transpose(0, 2, 1, 3)),
            "permuted": (f16(8, 3, 2, 5).transpose(2, 1, 3, 0), f16(3, 8, 4)),
            "large_view": (f16(2, 64, 40).swapaxes(-1, -2), f16(2, 64, 24)),
            "large_both": (f16(2, 64, 40).swapaxes(-1, -2), f16(2, 40, 64).swapaxes(-1, -2))}[case]
    seen = []

    def spy(p, q):
        seen.append((p.shape, p.strides, q.shape, q.strides))
        return np.matmul(p, q)
    got = fast.matmul_round(x, y, spy, H.ORT_MIN_ELEMS)
    f16dt = np.dtype(np.float16)
    px, py = H.as_f32(x, f16dt), H.as_f32(y, f16dt)
    assert seen == [(px.shape, px.strides, py.shape, py.strides)]
    if case == "permuted":  # np.matmul's product of this layout is not C-contiguous: the caller's route rounds it
        assert got is None
    else:
        assert _same_bits(got, mm._round(mm._acc_fp32(x, y, f16dt), f16dt))


