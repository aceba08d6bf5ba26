"""mschecker.kernels.strategies: values are exact in their format, options are honoured, and each adversarial family
really produces the hazard its docstring names (measured on a fixed, derandomized sample of draws).

Hazard thresholds are stated per test; they are properties of the arithmetic (fp16 max 65504, spacing 2 above
2048, u_fp16 = 2^-11), not fitted numbers. Fractions ("at least 80% of draws") apply where a family's
parameters make the hazard likely rather than certain; the measured fraction is in the comment.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.extra import numpy as hnp

from mschecker.kernels import strategies as S
from mschecker.dtypes import bfloat16, float_format, round_to

FP16_MAX = 65504.0


def draws(strategy, n: int = 60) -> list:
    """n draws from the generate phase, derandomized: the same sample on every run."""
    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)

    collect()
    return out


# ---------------------------------------------------------------------------------------------------------------
# values / arrays
# ---------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", S.STORAGE_DTYPES)
def test_values_are_exact_and_within_bounds(dtype):
    xs = np.array(draws(S.values(dtype, min_value=-3.0, max_value=1e-3), 200))
    assert np.array_equal(round_to(xs, dtype).astype(np.float64), xs)
    assert xs.min() >= -3.0 and xs.max() <= 1e-3
    assert np.isfinite(xs).all()


@pytest.mark.parametrize("dtype", S.STORAGE_DTYPES)
def test_values_cover_subnormals_and_specials_only_when_allowed(dtype):
    fmt = float_format(dtype)
    plain = np.array(draws(S.values(dtype), 150))
    tiny = (plain != 0) & (np.abs(plain) < fmt.smallest_normal)
    assert tiny.any()  # uniform over bit patterns: about 1/30 of fp16 values are subnormal
    normal_only = np.array(draws(S.values(dtype, allow_subnormal=False), 150))
    assert not ((normal_only != 0) & (np.abs(normal_only) < fmt.smallest_normal)).any()
    special = np.array(draws(S.values(dtype, allow_nan=True, allow_infinity=True), 100))
    assert np.isnan(special).any() and np.isinf(special).any()


def test_values_empty_range_is_an_error():
    with pytest.raises(ValueError, match="no float16 value"):
        S.values("float16", min_value=1.0001, max_value=1.0002)  # between two neighbouring fp16 values


@pytest.mark.parametrize("dtype,np_dtype", [("float16", np.float16), ("bfloat16", bfloat16), ("float32", np.float32)])
def test_arrays_have_the_storage_dtype_and_take_shape_strategies(dtype, np_dtype):
    for a in draws(S.arrays(dtype, hnp.array_shapes(min_dims=2, max_dims=2, max_side=5), min_value=-10,
                            max_value=10), 30):
        assert a.dtype == np.dtype(np_dtype) and a.ndim == 2
        assert np.all(np.abs(a.astype(np.float64)) <= 10)


def test_values_compose_with_hypothesis_extra_numpy():
    for a in draws(hnp.arrays(np.float64, (3, 4), elements=S.values("bfloat16", min_value=0, max_value=1)), 20):
        assert np.array_equal(a.astype(bfloat16).astype(np.float64), a)


def test_float64_families_are_exact_in_their_format():
    for fam in (S.tensors, S.cancellation, S.near_overflow, S.wide_logits, S.large_norm_inputs, S.sum_near_overflow):
        for dtype in ("float16", "bfloat16"):
            for x in draws(fam(shape=(3, 8), dtype=dtype), 5):
                assert x.dtype == np.float64 and x.shape == (3, 8)
                assert np.array_equal(round_to(x, dtype).astype(np.float64), x), (fam, dtype)


def test_cases_builds_registry_cases():
    (case, *_) = draws(S.cases(S.tensors(shape=(2, 3)), np.ones(3), axis=S.st.integers(0, 1), label="t"), 3)
    assert case.inputs[0].shape == (2, 3) and case.inputs[1].shape == (3,)
    assert case.params["axis"] in (0, 1) and case.label == "t shapes 2x3 3"


# ---------------------------------------------------------------------------------------------------------------
# Hazards
# ---------------------------------------------------------------------------------------------------------------

def test_cancellation_defeats_naive_fp16_variance():
    bad = []
    with np.errstate(all="ignore"):
        for x in draws(S.cancellation(shape=(64,))):
            x16 = x.astype(np.float16)
            naive = float(np.mean(x16 * x16, dtype=np.float16) - np.mean(x16, dtype=np.float16) ** 2)
            true = float(np.var(x))
            bad.append(not np.isfinite(naive) or abs(naive - true) > 0.5 * true)
    assert np.mean(bad) >= 0.8  # measured 0.92 (the rest: the small offsets with the largest spreads)


def test_near_overflow_magnitudes_and_doubling_overflows():
    for x in draws(S.near_overflow()):
        assert np.all((np.abs(x) >= 2.0 ** 15) & (np.abs(x) <= FP16_MAX))
        with np.errstate(over="ignore"):
            assert np.all(np.isinf(x.astype(np.float16) * np.float16(2)))


def test_wide_logits_every_row_spreads_past_fp16_exp_overflow():
    for x in draws(S.wide_logits()):
        if x.shape[-1] >= 2:
            spread = np.ptp(x, axis=-1)
            assert spread.min() >= 11.1  # exp(11.1) > 65504: an unshifted fp16 softmax overflows
            with np.errstate(over="ignore"):
                assert np.isinf(np.exp((x - x.min(axis=-1, keepdims=True)).astype(np.float16))).any()


def test_large_norm_inputs_overflow_fp16_squares():
    with np.errstate(over="ignore"):
        hit = [np.isinf(x.astype(np.float16) ** 2).any() for x in draws(S.large_norm_inputs())]
    assert np.mean(hit) >= 0.9  # measured 1.0: |mean| >= 256 puts most elements past sqrt(65504) = 255.9


def test_long_accumulation_breaks_fp16_running_sums():
    for x in draws(S.long_accumulation(), 20):
        assert len(x) > 2048
        exact = x.sum()
        rel16 = abs(float(np.add.accumulate(x.astype(np.float16), dtype=np.float16)[-1]) - exact) / exact
        rel32 = abs(float(np.add.accumulate(x.astype(np.float32), dtype=np.float32)[-1]) - exact) / exact
        # Past 2048 every fp16 addition of ~1 rounds to a multiple of 2: errors of O(1) per term.
        assert rel16 > 10 * rel32 and rel16 > 2.0 ** -14


def test_sum_near_overflow_rows_total_past_fp16_max():
    for x in draws(S.sum_near_overflow()):
        totals = x.sum(axis=-1) / FP16_MAX
        assert np.all((totals > 0.89) & (totals < 2.01)) and x.max() < FP16_MAX
        with np.errstate(over="ignore"):
            fp16_sum = np.add.accumulate(x.astype(np.float16), axis=-1, dtype=np.float16)[..., -1]
        # A true total past 65520 (max + half a spacing) cannot be held in fp16: the fp16 sum must be inf.
        assert np.all(np.isinf(fp16_sum[x.sum(axis=-1) > 65520.0]))
