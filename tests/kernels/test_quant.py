"""int8 weight-only quantizer unit tests (the GEMM kernel itself is checked by tests/kernels/test_contracts.py).

- codes lie in [-127, 127] and the per-channel scales are max|w_n| / 127 (minmax);
- round trip |dequantize(quantize(w)) - w| <= s/2 elementwise (+ 2 u32 |w| for the fp32 divide and multiply),
  and for KL thresholds <= max(s/2, |w| - 127 s) (the clipped distance);
- the KL calibration clips a heavy-tailed tensor below its max and leaves a uniform one (almost) unclipped;
- planted bugs: truncating rounding breaks the s/2 round-trip bound; a per-tensor scale breaks it per channel.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.optimized_kernels import quant as q

U32 = 2.0**-24


def weights():
    return st.tuples(st.integers(1, 64), st.integers(1, 16)).flatmap(
        lambda kn: S.tensors(shape=kn, dtype="float16"))


def _roundtrip_excess(w, quantize, calibration="minmax"):
    s = q.scales_from_thresholds(q.CALIBRATIONS[calibration](w))
    codes = quantize(w, s)
    err = np.abs(q.dequantize(codes, s).astype(np.float64) - w)
    allowed = np.maximum(s / 2.0, np.abs(w) - 127.0 * s) + 2 * U32 * np.abs(w)
    return codes, s, err - allowed


@given(weights())
@example(np.array([[1.0, 0.0], [-1.0, 0.0], [0.5 / 127, 0.0]]))  # a tie at half a step; an all-zero channel
def test_minmax_codes_and_roundtrip_bound(w):
    codes, s, excess = _roundtrip_excess(w, q.quantize)
    assert codes.dtype == np.int8 and codes.min() >= -127 and codes.max() <= 127
    np.testing.assert_array_equal(s, np.where(np.abs(w).max(0) > 0, np.float32(np.abs(w).max(0)) / np.float32(127), 1))
    assert np.all(excess <= 0)


@given(weights())
def test_kl_roundtrip_bound_includes_clipping(w):
    codes, s, excess = _roundtrip_excess(w, q.quantize, "kl")
    assert codes.min() >= -127 and codes.max() <= 127
    assert np.all(excess <= 0)


def test_kl_clips_heavy_tails_only():
    rng = np.random.default_rng(0)
    heavy = rng.standard_normal((512, 32))
    heavy[7, 3] = 60.0  # one outlier far beyond the bulk (max of the bulk ~4.5)
    t = q.kl_threshold(heavy)
    assert 3.0 < t < 30.0
    uniform = rng.uniform(-1, 1, (512, 32))
    assert q.kl_threshold(uniform) > 0.9  # nothing worth clipping in a uniform distribution


def test_planted_truncation_breaks_roundtrip_bound():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 8)).astype(np.float16).astype(np.float64)
    _, _, excess = _roundtrip_excess(w, q.quantize_bug_truncate)
    assert np.any(excess > 0)


def test_planted_per_tensor_scale_breaks_per_channel_bound():
    rng = np.random.default_rng(2)
    w = (rng.standard_normal((64, 4)) * [1.0, 1e-2, 1e-3, 1.0]).astype(np.float16).astype(np.float64)
    x = np.ones((1, 64))
    y = x @ w
    s = q.scales_from_thresholds(q.minmax_thresholds(w)).astype(np.float64)
    allowed = (s / 2) * np.abs(x).sum() * 1.01 + 2**-11 * np.abs(y)
    good = np.abs(q.int8_gemm_fp16_fp32acc_minmax(x, w).astype(np.float64) - y)
    bad = np.abs(q.int8_gemm_bug_per_tensor(x, w).astype(np.float64) - y)
    assert np.all(good <= allowed + 2**-11 * (np.abs(x) @ np.abs(w)))
    assert np.any(bad > allowed + 2**-11 * (np.abs(x) @ np.abs(w)))


@pytest.mark.parametrize("calibration", ["minmax", "kl"])
def test_quantize_weights_shapes(calibration):
    w = np.random.default_rng(3).standard_normal((10, 3))
    codes, s = q.quantize_weights(w, calibration)
    assert codes.shape == (10, 3) and codes.dtype == np.int8 and s.shape == (3,) and s.dtype == np.float32
