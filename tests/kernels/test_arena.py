"""Buffer arena: correct views for every rank 0..6 and dtype, alignment, no stale data, allocation count."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mschecker.optimized_kernels.arena import BufferArena

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_, np.complex64,
          ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn]


@given(st.lists(st.tuples(hnp.array_shapes(min_dims=0, max_dims=6, min_side=0, max_side=5),
                          st.sampled_from(DTYPES)), min_size=1, max_size=20))
def test_views_have_requested_shape_dtype_and_alignment(requests):
    arena = BufferArena(alignment=64)
    for shape, dtype in requests:
        a = arena.request(shape, dtype)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable
        assert a.ndim == len(shape)
        if a.size:
            assert a.ctypes.data % 64 == 0
            assert not np.any(a.reshape(-1).view(np.uint8))  # zero-filled
            a.reshape(-1)[-1] = np.ones((), dtype=dtype)  # the whole extent is writable
            assert np.shares_memory(a, arena._raw)


def test_no_stale_data_leaks_into_smaller_request():
    arena = BufferArena()
    big = arena.request((4, 256), np.float32)
    big.view(np.uint8)[...] = 0xAB  # poison every byte
    arena._raw[...] = 0xAB  # and the padding around it
    small = arena.request((3, 5, 7), np.float16)
    assert np.shares_memory(small, big)  # reused, not reallocated
    assert arena.allocations == 1
    assert not np.any(small.view(np.uint8))
    unzeroed = arena.request((3, 5, 7), np.float16, zero=False)  # documented: contents unspecified
    assert unzeroed.shape == (3, 5, 7)


def test_allocation_count_is_logarithmic():
    rng = np.random.default_rng(0)
    arena = BufferArena()
    min_bytes, max_bytes = 4 * 16, 4 * 100_000
    arena.request((16,), np.float32)  # the smallest request first: the worst case for growth
    sizes = rng.integers(16, 100_001, 999)
    for n in np.sort(sizes):  # increasing sizes: every growth happens
        a = arena.request((int(n),), np.float32)
        assert a.size == n
    bound = BufferArena.max_allocations(min_bytes, max_bytes)
    assert arena.allocations <= bound == math.ceil(math.log2(max_bytes / min_bytes)) + 1
    print(f"1000 requests from {min_bytes} to {max_bytes} bytes: {arena.allocations} allocations (bound {bound})")
    before = arena.allocations
    for n in rng.permutation(sizes):  # anything at or below the high-water mark: no allocation at all
        arena.request((int(n),), np.float32)
    assert arena.allocations == before


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="power of two"):
        BufferArena(alignment=48)
    with pytest.raises(ValueError, match="negative"):
        BufferArena().request((2, -1), np.float32)
