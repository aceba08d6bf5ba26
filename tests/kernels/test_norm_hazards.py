"""Hazards of the statistics behind LayerNorm/GroupNorm (and the sums they are made of), shown and bounded.

- fp16 statistics: x^2 overflows for |x| >= 256, the output turns inf/NaN or silently wrong where the reference
  is finite; the fp16 contract correctly makes no claim there, and fp32 statistics meet theirs on the same input.
- one-pass E[x^2] - E[x]^2 in fp32 (docs/NUMERICS.md §3, Chan-Golub-LeVeque): catastrophic cancellation when the mean
  dwarfs the spread; two-pass and Welford stay accurate. The planted bug selling it as two-pass is caught.
- fp16 accumulators: a running sum of ones stalls at 2048; gamma_{n-1}(u16) is infinite there, so the contract
  makes no claim (it does not falsely pass a finite bound), and the bug "fp16 accumulation sold as fp32" is caught
  on the same input. Mixed signs near 65504 overflow a partial sum: outside every fp16-accumulator contract.
- the Ascend device kernels (issue 21): the GE-fused GroupNorm's unclamped fp32 one-pass variance goes negative
  on groups with |mean|/std in the thousands (NaN groups, as the device computes them) where the TBE InstanceNorm's
  two-pass statistics stay accurate; the TBE LayerNorm's fp16-rounded variance overflows from 65520 on, and the
  device returns beta there. Both contracts say nothing (inf) on those inputs rather than pass a false bound.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.dtypes import gamma, round_to, unit_roundoff
from mschecker.kernels.check import check_case
from mschecker.kernels.entries.reductions import summation_gamma
from mschecker.optimized_kernels import norms as N
from mschecker.kernels.registry import Case, get_kernel

U16 = unit_roundoff("float16")


def _fp16(a):
    return round_to(a, "float16").astype(np.float64)


def _layer_case(x, axis=-1):
    rng = np.random.default_rng(5)
    shape = x.shape[axis % x.ndim:]
    return Case((x, _fp16(rng.normal(1, 0.5, shape)), _fp16(rng.normal(0, 0.5, shape))),
                {"axis": axis, "epsilon": 1e-5}, "hazard")


@pytest.mark.parametrize("mean,spread", [(300.0, 30.0), (1000.0, 1.0), (-3000.0, 300.0)])
def test_fp16_statistics_overflow_at_256_and_fp32_statistics_fix_it(mean, spread):
    rng = np.random.default_rng(1)
    x = _fp16(mean + spread * rng.standard_normal((4, 64)))
    case = _layer_case(x)
    info = get_kernel("layer_norm")
    ref = info.reference(*case.inputs, **case.params)
    assert np.isfinite(ref).all()
    out16 = info.variant("fp16_fp16stats").fn(*case.cast("float16").inputs, **case.params).astype(np.float64)
    # x^2 and mean^2 overflow fp16: var = inf - inf = NaN, and NaN everywhere downstream.
    assert (~np.isfinite(out16)).all(), "expected the fp16 statistics to give inf/NaN on |x| >= 256"
    r16 = check_case(info, "fp16_fp16stats", case)
    assert r16.passed and np.isinf(r16.bound_at_worst), "the fp16-stats contract must make no claim here"
    r32 = check_case(info, "fp16_fp32stats_twopass", case)
    assert r32.passed and np.isfinite(r32.bound_at_worst), r32.describe()
    assert r32.max_abs_err < 4 * U16 * np.abs(ref).max() + 1e-3


def test_fp16_statistics_are_fine_inside_their_domain():
    x = _fp16(np.random.default_rng(2).standard_normal((4, 64)))
    r = check_case(get_kernel("layer_norm"), "fp16_fp16stats", _layer_case(x))
    assert r.passed and np.isfinite(r.bound_at_worst) and r.max_abs_err < 0.05


def test_group_norm_fp16_statistics_on_vae_like_activations():
    """SD's VAE decoder GroupNorms see activations in the hundreds: fp16 statistics break, fp32 ones do not."""
    rng = np.random.default_rng(3)
    x = _fp16(400 + 100 * rng.standard_normal((1, 8, 6, 6)))
    case = Case((x, _fp16(rng.normal(1, .2, 8)), _fp16(rng.normal(0, .2, 8))), {"num_groups": 4}, "vae-like")
    info = get_kernel("group_norm")
    ref = info.reference(*case.inputs, **case.params)
    out16 = info.variant("fp16_fp16stats").fn(*case.cast("float16").inputs, **case.params).astype(np.float64)
    assert np.isfinite(ref).all() and (~np.isfinite(out16)).all()
    assert check_case(info, "fp16_fp32stats_twopass", case).passed


def test_variance_algorithms_on_large_mean():
    """docs/NUMERICS.md §3: fp32, n = 4096, mean 1000, std 1. Measured here (seed 0): one-pass 126% relative error
    of the variance, two-pass 1.4e-8, Welford 2.4e-5."""
    x = (1000 + np.random.default_rng(0).standard_normal((1, 4096))).astype(np.float32)
    true_var = x.astype(np.float64).var()
    rel = {f.__name__: abs(float(f(x, np.dtype(np.float32))[1][0, 0]) - true_var) / true_var
           for f in (N.stats_onepass, N.stats_twopass, N.stats_welford)}
    assert rel["stats_onepass"] > 0.5
    assert rel["stats_twopass"] < 1e-6
    assert rel["stats_welford"] < 1e-4
    # The analysis behind the contracts: two-pass ~ n u, Welford ~ n kappa u, one-pass ~ n kappa^2 u.
    u, n = unit_roundoff("float32"), x.size
    kappa = np.sqrt(1 + 1000.0**2 / true_var)
    assert rel["stats_twopass"] <= gamma(n + 4, u)
    assert rel["stats_welford"] <= gamma(4 * n, u) * kappa
    assert rel["stats_onepass"] <= n * kappa**2 * u


@pytest.mark.parametrize("kernel", ["layer_norm", "group_norm"])
def test_naive_onepass_bug_is_caught_where_twopass_passes(kernel):
    rng = np.random.default_rng(4)
    x = _fp16(1000 + 0.5 * rng.standard_normal((2, 8, 4, 4)))
    if kernel == "layer_norm":
        case = _layer_case(x, axis=1)
    else:
        case = Case((x, _fp16(rng.normal(1, .2, 8)), _fp16(rng.normal(0, .2, 8))), {"num_groups": 2}, "offset")
    info = get_kernel(kernel)
    assert check_case(info, "fp32_twopass", case).passed
    assert not check_case(info, "bug_fp32_onepass_as_twopass", case).passed


# --- the sums behind the statistics ------------------------------------------------------------------------------
def test_fp16_running_sum_stalls_at_2048_and_the_bound_says_nothing():
    info = get_kernel("reduce_sum")
    case = Case((np.ones(4096),), {"axis": -1, "keepdims": False}, "4096 ones")
    stalled = info.variant("fp16_fp16acc").fn(np.ones(4096, np.float16))
    assert float(stalled) == 2048.0  # 2048 + 1 rounds back to 2048 (fp16 spacing 2 there)
    assert summation_gamma("recursive", 4096, U16) == np.inf  # gamma_{n-1}(u16): n u >= 1
    r = check_case(info, "fp16_fp16acc", case)
    assert r.passed and np.isinf(r.bound_at_worst)  # no claim, rather than a false finite pass
    # The fp32 accumulator and the fp16 pairwise order get 4096 exactly, within their finite bounds.
    for v in ("fp16_fp32acc", "fp16_fp16acc_pairwise", "fp16_fp16acc_blocked"):
        rv = check_case(info, v, case)
        assert rv.passed and np.isfinite(rv.bound_at_worst) and rv.max_abs_err == 0.0, rv.describe()
    # Kahan in fp16 also gets 4096 exactly, but its 2u + O(n u^2) bound assumes n u small (here n u16 = 2).
    rk = check_case(info, "fp16_fp16acc_kahan", case)
    assert rk.passed and rk.max_abs_err == 0.0 and np.isinf(rk.bound_at_worst)
    # An fp16 running sum sold as fp32 accumulation is caught on the same input.
    assert not check_case(info, "bug_fp16acc_sold_as_fp32acc", case).passed


def test_partial_sum_overflow_with_mixed_signs():
    """60000 + 60000 overflows an fp16 accumulator although the total is 0: the fp16 contract makes no claim
    (sum|x| > 65504), the fp32 accumulator is exact."""
    info = get_kernel("reduce_sum")
    case = Case((np.array([60000.0, 60000.0, -60000.0, -60000.0]),), {"axis": -1, "keepdims": False}, "mixed")
    out = info.variant("fp16_fp16acc").fn(case.inputs[0].astype(np.float16))
    assert not np.isfinite(out)
    r = check_case(info, "fp16_fp16acc", case)
    assert r.passed and np.isinf(r.bound_at_worst)
    assert check_case(info, "fp16_fp32acc", case).max_abs_err == 0.0


@pytest.mark.parametrize("algorithm,n,expected", [
    ("recursive", 1000, 999), ("pairwise", 1000, 10), ("blocked", 1000, 127 + 7), ("pairwise", 1024, 10),
])
def test_summation_gamma_orders(algorithm, n, expected):
    u = unit_roundoff("float32")
    assert summation_gamma(algorithm, n, u) == pytest.approx(gamma(expected, u))


def test_kahan_beats_recursive_in_fp16():
    """Compensated summation in fp16 accumulators on 2000 terms near 1: error within 2u + 4nu^2 of sum|x|,
    where the recursive fp16 sum errs by much more."""
    rng = np.random.default_rng(6)
    x = _fp16(1 + 0.1 * rng.standard_normal(2000))
    info = get_kernel("reduce_sum")
    case = Case((x,), {"axis": -1, "keepdims": False}, "near ones")
    rk, rr = check_case(info, "fp16_fp16acc_kahan", case), check_case(info, "fp16_fp16acc", case)
    assert rk.passed and rr.passed
    assert rk.max_abs_err * 20 < rr.max_abs_err


# --- the Ascend device kernels (issue 21) -------------------------------------------------------------------------
def test_ge_group_norm_one_pass_variance_goes_negative_where_tbe_instance_norm_stays_finite():
    """SD UNet-like GroupNorm input (1x320x8x8, 32 groups of 640) at |mean|/std ~ 4400: E[x^2] - mean^2 in fp32
    without a clamp is negative on some groups, var + eps < 0, rsqrt NaN: those groups are NaN (what the TIK kernel
    computes); the two-pass TBE InstanceNorm on the same data is finite and within its finite contract. The GE
    contract makes no claim on the NaN groups (var + eps - dv <= 0)."""
    rng = np.random.default_rng(0)
    x = _fp16(1000 + 0.2 * rng.standard_normal((1, 320, 8, 8)))
    case = Case((x, np.ones(320), np.zeros(320)), {"num_groups": 32, "epsilon": 1e-5}, "|mean|/std ~ 4400")
    info = get_kernel("group_norm")
    ref = info.reference(*case.inputs, **case.params)
    assert np.isfinite(ref).all()
    ge = info.variant("fp16_ge_onepass").fn(*case.cast("float16").inputs, **case.params)
    nan_groups = np.isnan(ge.reshape(32, -1)).all(axis=1)
    assert nan_groups.sum() == 9 and not np.isnan(ge.reshape(32, -1)[~nan_groups]).any()
    mean, var = N.ge_stats(x.reshape(32, -1).astype(np.float32))
    assert ((var[:, 0] + np.float32(1e-5) < 0) == nan_groups).all()  # exactly the groups whose var + eps < 0
    r_ge = check_case(info, "fp16_ge_onepass", case)
    assert r_ge.passed and np.isinf(r_ge.bound_at_worst), r_ge.describe()  # device bits, and no claim there
    r_in = check_case(info, "fp16_tbe_instance", case)
    assert r_in.passed and np.isfinite(r_in.bound_at_worst) and r_in.max_abs_err < 0.5, r_in.describe()


def test_tbe_layer_norm_fp16_variance_overflow_returns_beta():
    """TBE LayerNorm casts the fp32 variance to fp16: var ~ 160000 >= 65520 becomes inf, rstd = 1/sqrt(inf) = 0
    (hperf: exp(-0.5 log inf) = 0), so y = gamma * 0 + beta = beta exactly: finite and wrong. Its contract says
    nothing there; the fp32-statistics kernel meets its finite one on the same input."""
    x = _fp16(400 * np.random.default_rng(21).standard_normal((2, 64)))
    case = _layer_case(x)
    info = get_kernel("layer_norm")
    beta = case.inputs[2].astype(np.float16)
    for name in ("fp16_tbe_hprec", "fp16_tbe_hperf"):
        y = info.variant(name).fn(*case.cast("float16").inputs, **case.params)
        assert (y == np.broadcast_to(beta, y.shape)).all(), name
        r = check_case(info, name, case)
        assert r.passed and np.isinf(r.bound_at_worst), r.describe()
    r32 = check_case(info, "fp16_fp32stats_twopass", case)
    assert r32.passed and np.isfinite(r32.bound_at_worst) and r32.max_abs_err < 4 * U16 * 8


def test_tbe_layer_norm_fp16_mean_costs_u16_mean_over_std():
    """The fp16 rounding of the mean moves every x - mean by up to u16 |mean|: at mean 1000, std 1 that is 0.24 of
    a standard deviation (measured 0.21 here, where the fp32-statistics kernel errs by 9e-4), within the TBE
    contract's u16 |mu| term (unit gamma, zero beta)."""
    x = _fp16(1000 + np.random.default_rng(7).standard_normal((4, 256)))
    case = Case((x, np.ones(256), np.zeros(256)), {"axis": -1, "epsilon": 1e-5}, "mean 1000, std 1")
    info = get_kernel("layer_norm")
    r = check_case(info, "fp16_tbe_hprec", case)
    r32 = check_case(info, "fp16_fp32stats_twopass", case)
    assert r.passed and r32.passed
    half_spacing = 0.25  # fp16's spacing at 1000 is 0.5: the mean moves by up to 0.25
    assert 0.5 * half_spacing < r.max_abs_err < half_spacing / x.std(axis=1).min() + 4 * U16 * 4
    assert r32.max_abs_err < 4e-3
