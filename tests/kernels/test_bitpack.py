"""8:1 bitpack: exact pack/unpack for every code and any length, and the block-quantization layout.

The lossy block-scaled round trip is a registry kernel (bitpack4, checked by tests/kernels/test_contracts.py);
here: exactness of the packing itself, the documented nibble order, and the planted nibble-order bug.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mschecker.optimized_kernels import bitpack as bp

codes_arrays = hnp.arrays(np.uint8, st.integers(0, 200), elements=st.integers(0, 15))


@given(codes_arrays)
@example(np.arange(16, dtype=np.uint8))  # every code once
@example(np.array([15] * 9, dtype=np.uint8))  # all ones in the top nibble, odd length past a word
@example(np.zeros(0, dtype=np.uint8))
def test_pack_unpack_roundtrip_exact(codes):
    words = bp.pack4(codes)
    assert words.dtype == np.uint32 and words.size == -(-codes.size // 8)
    np.testing.assert_array_equal(bp.unpack4(words, codes.size), codes)


def test_every_code_in_every_slot():
    for slot in range(8):
        for code in range(16):
            c = np.zeros(8, dtype=np.uint8)
            c[slot] = code
            (word,) = bp.pack4(c)
            assert int(word) == code << (4 * slot)  # documented order: code j of a word in bits [4j, 4j+4)
            np.testing.assert_array_equal(bp.unpack4([word], 8), c)


def test_planted_nibble_order_bug_is_caught():
    codes = np.arange(16, dtype=np.uint8)
    assert not np.array_equal(bp.unpack4_bug_nibble_order(bp.pack4(codes), 16), codes)


def test_pack_rejects_out_of_range_codes():
    with pytest.raises(ValueError, match="0..15"):
        bp.pack4(np.array([3, 16]))
    with pytest.raises(ValueError, match="at most 8 codes"):
        bp.unpack4(np.zeros(1, np.uint32), 9)


@pytest.mark.parametrize("mode,levels", [("sym", 7), ("asym", 15)])
def test_block_scale_definitions(mode, levels):
    x = np.array([0.5, -3.5, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 7.0])  # two blocks of 8, the second zero-padded
    s, off = bp.block_scales(x, 8, mode)
    if mode == "sym":
        np.testing.assert_allclose(s, [3.5 / 7, 7.0 / 7])
    else:
        np.testing.assert_allclose(s, [5.5 / 15, 7.0 / 15])
        np.testing.assert_allclose(off, [-3.5, 0.0])
    x_hat = bp.dequantize4(*bp.quantize4(x, 8, mode), x.shape, 8, mode, dtype=np.float64)
    assert np.all(np.abs(x_hat - x) <= np.repeat(s, 8)[: x.size] / 2 + 1e-6)
    assert bp.quantize4(x, 8, mode)[0].nbytes == 8  # 4 bits per element: 16 codes (two blocks) in 2 uint32 words
