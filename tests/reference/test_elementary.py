"""reference/elementary.py: expm1, log, log1p and tanh from IEEE operations and exp64.

- accuracy against 80-bit long double (np.longdouble: x87 extended, 64-bit significand, so the truth is ~2^11
  times finer than a float64 ulp) over dense samples, held to each function's budget in the module docstring;
- the special values (+-0 with their sign, +-inf, NaN, the domain edges, subnormals);
- the narrow dtypes: float32 rounded once from float64, float16 rounded through float32 as numpy's float16 loops
  do (two fp16 inputs where a direct float64 -> float16 rounding gives another bit pin that), `out=` in place;
- the same bits at every numpy SIMD level: tests/test_cpu_independence.py re-runs the goldens that hold them.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.reference import elementary as em

LD = np.longdouble
HAS_LONG_DOUBLE = np.finfo(LD).nmant >= 63

RNG = np.random.default_rng(20261202)
SAMPLES = np.concatenate([
    RNG.standard_normal(60_000) * 3,
    RNG.uniform(-30, 30, 30_000),
    RNG.uniform(-1, 1, 30_000) * 10.0 ** RNG.integers(-30, 3, 30_000),
    RNG.uniform(-0.75, 0.75, 30_000),  # around expm1's polynomial / exp64 split at 0.7
    RNG.uniform(-745, 709, 20_000),
])


def _max_ulp(got: np.ndarray, want_ld: np.ndarray) -> float:
    ok = np.isfinite(want_ld) & (want_ld != 0) & (np.abs(want_ld) < 1e307) & (np.abs(want_ld) > 1e-300)
    want64 = want_ld[ok].astype(np.float64)
    err = np.abs(got[ok].astype(LD) - want_ld[ok]) / np.spacing(np.abs(want64)).astype(LD)
    return float(err.max())


needs_ld = pytest.mark.skipif(not HAS_LONG_DOUBLE, reason="needs an 80-bit long double as the truth")


@needs_ld
@pytest.mark.parametrize("name,fn,truth,domain,budget", [
    ("expm1", em.expm1_64, np.expm1, lambda x: x, 2.2),
    ("log", em.log_64, np.log, lambda x: np.abs(x) + 1e-300, 1.5),
    ("log1p", em.log1p_64, np.log1p, lambda x: np.where(x > -1, x, -x / (1 - x)), 3.0),
    ("tanh", em.tanh_64, np.tanh, lambda x: x, 3.5),
])
def test_accuracy_within_the_documented_budget(name, fn, truth, domain, budget):
    x = domain(SAMPLES)
    with np.errstate(all="ignore"):
        err = _max_ulp(fn(x), truth(x.astype(LD)))
    assert err <= budget, f"{name}: {err:.2f} ulp > {budget}"


@needs_ld
def test_log_on_subnormals_and_near_one():
    x = np.concatenate([np.ldexp(RNG.uniform(0.5, 1, 5000), RNG.integers(-1074, -1022, 5000)),
                        1 + RNG.uniform(-1e-6, 1e-6, 5000), np.nextafter(1.0, [0.0, 2.0])])
    assert _max_ulp(em.log_64(x), np.log(x.astype(LD))) <= 1.5


@needs_ld
def test_log1p_tiny_arguments_keep_full_precision():
    """Where 1 + x rounds to 1 or nearly, log1p must not lose x's digits (plain log(1 + x) loses them all)."""
    x = np.concatenate([RNG.uniform(-1, 1, 5000) * 1e-9, RNG.uniform(-1, 1, 5000) * 1e-17])
    assert _max_ulp(em.log1p_64(x), np.log1p(x.astype(LD))) <= 3.0


def test_special_values():
    inf, nan = np.inf, np.nan
    x = np.array([0.0, -0.0, inf, -inf, nan, 5e-324, -5e-324, 1e-300, 710.0, -1.0, -2.0])
    with np.errstate(all="ignore"):
        e, l1, t = em.expm1_64(x), em.log1p_64(x), em.tanh_64(x)
        lg = em.log_64(np.array([0.0, -0.0, inf, -inf, nan, -1.0, 5e-324, 1.0]))
    # +-0 keep their sign; tiny arguments come back as themselves
    for y in (e, l1, t):
        assert np.signbit(y[1]) and not np.signbit(y[0]) and y[0] == 0
        assert y[5] == 5e-324 and y[6] == -5e-324 and y[7] == 1e-300
        assert np.isnan(y[4])
    assert e[2] == inf and e[3] == -1.0 and e[8] == inf and e[9] == np.expm1(-1.0)
    assert l1[2] == inf and np.isnan(l1[3]) and l1[9] == -inf and np.isnan(l1[10])
    assert t[2] == 1.0 and t[3] == -1.0 and t[8] == 1.0
    assert lg[0] == -inf and lg[1] == -inf and lg[2] == inf and np.isnan(lg[3]) and np.isnan(lg[4])
    assert np.isnan(lg[5]) and lg[6] == np.log(5e-324) and lg[7] == 0.0 and not np.signbit(lg[7])


def test_tanh_is_odd_and_saturates():
    x = np.abs(SAMPLES)
    assert np.array_equal(em.tanh_64(-x), -em.tanh_64(x))
    assert (em.tanh_64(np.array([22.5, 40.0, 1e300])) == 1.0).all()
    assert (np.abs(em.tanh_64(x)) <= 1.0).all()


def test_nan_payload_is_kept():
    payload = np.array([0x7FF8000000000123], dtype=np.uint64).view(np.float64)
    for fn in (em.expm1_64, em.log_64, em.log1p_64, em.tanh_64):
        assert fn(payload).view(np.uint64)[0] == payload.view(np.uint64)[0], fn.__name__


# ------------------------------------------------------------------------------------------ narrow dtypes
@pytest.mark.parametrize("fn,fn64", [(em.exp, em.exp64), (em.expm1, em.expm1_64), (em.log, em.log_64),
                                     (em.log1p, em.log1p_64), (em.tanh, em.tanh_64)])
def test_float32_is_the_float64_value_rounded_once(fn, fn64):
    x = SAMPLES.astype(np.float32)
    if fn in (em.log, em.log1p):
        x = np.abs(x)
    with np.errstate(all="ignore"):
        got, want = fn(x), fn64(x.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fn,x", [
    # float64 -> float32 -> float16 (numpy's float16 semantics) and a direct float64 -> float16 rounding give
    # other bits on these inputs: the float32 value lands on an fp16 midpoint.
    (em.exp, 0.007298), (em.exp, 0.02269), (em.expm1, 0.0006905), (em.log, 0.00534), (em.log1p, 0.00587),
    (em.log1p, -0.005848)])
def test_float16_rounds_through_float32(fn, x):
    h = np.array([x], dtype=np.float16)
    fn64 = {em.exp: em.exp64, em.expm1: em.expm1_64, em.log: em.log_64, em.log1p: em.log1p_64}[fn]
    y64 = fn64(h.astype(np.float64))
    via32, direct = y64.astype(np.float32).astype(np.float16), y64.astype(np.float16)
    assert via32.view(np.uint16)[0] != direct.view(np.uint16)[0], "not a double-rounding input any more"
    got = fn(h)
    assert got.dtype == np.float16 and got.view(np.uint16)[0] == via32.view(np.uint16)[0]


def test_out_in_place_and_non_contiguous_and_blocks():
    x = RNG.standard_normal((3, 70_001)).astype(np.float32)  # more than one BLOCK per row
    want = em.exp(x.copy())
    y = x.copy()
    assert em.exp(y, out=y) is y and np.array_equal(y, want)
    t = x.T  # a non-contiguous input and out
    out = np.empty_like(x).T
    assert em.exp(t, out=out) is out and np.array_equal(out, want.T)
    assert em.exp(np.float32(1.5)).shape == () and em.exp(np.zeros((0, 3), np.float16)).shape == (0, 3)


def test_bfloat16_rounds_from_float32():
    from mschecker.dtypes import bfloat16

    x = RNG.standard_normal(1000).astype(bfloat16)
    got = em.tanh(x)
    assert got.dtype == bfloat16
    want = em.tanh_64(x.astype(np.float64)).astype(np.float32).astype(bfloat16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("in_place", [False, True])
def test_exp_float32_c_route_gives_the_numpy_routes_bits(monkeypatch, in_place):
    """_fastref.exp64_f32 (a float32 x, C-contiguous) against exp64 of the widened values, rounded by numpy:
    every fp16 pattern widened, the clamp edges, NaN payloads, and random fp32 values in and out of range."""
    from mschecker import native

    if native.active("_fastref") is None:
        pytest.skip("_fastref not built")
    x = np.concatenate([np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
                        np.array([-746.0, 710.0, 88.72, 88.73, -103.98, -87.33, np.inf, -np.inf], np.float32),
                        np.array([0x7FC01234, 0xFFA00001], np.uint32).view(np.float32),
                        (RNG.standard_normal(100_003) * 60).astype(np.float32)])
    with np.errstate(invalid="ignore", over="ignore"):  # a NaN payload's and a huge value's narrowing
        want = em.exp64(x.astype(np.float64)).astype(np.float32)
    got = x.copy() if in_place else np.empty_like(x)
    src = got if in_place else x
    assert em.exp(src, out=got) is got
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")  # the numpy route, same bits
    assert np.array_equal(em.exp(x).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("in_place", [False, True])
def test_log_float32_c_route_gives_the_numpy_routes_bits(monkeypatch, in_place):
    """_fastref.log64_f32 against log_64 of the widened values, rounded by numpy: every fp16 pattern widened,
    fp32 subnormals, the sqrt(1/2) edge of the reduction, zeros, negatives, infinities, NaN payloads and random
    fp32 values over the whole exponent range (the TBE LayerNorm's high_performance rstd calls it per row)."""
    from mschecker import native

    if native.active("_fastref") is None:
        pytest.skip("_fastref not built")
    x = np.concatenate([np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
                        np.array([0.0, -0.0, -1.0, 1.0, 2.0, 0.70710677, 0.7071068, 1.4e-45, 1.1754942e-38,
                                  3.4028235e38, np.inf, -np.inf], np.float32),
                        np.array([0x7FC01234, 0xFFA00001, 0x00000001, 0x007FFFFF], np.uint32).view(np.float32),
                        np.ldexp(RNG.random(100_003), RNG.integers(-149, 128, 100_003)).astype(np.float32)])
    with np.errstate(all="ignore"):
        want = em.log_64(x.astype(np.float64)).astype(np.float32)
    got = x.copy() if in_place else np.empty_like(x)
    src = got if in_place else x
    with np.errstate(all="ignore"):
        assert em.log(src, out=got) is got
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")  # the numpy route, same bits
    with np.errstate(all="ignore"):
        assert np.array_equal(em.log(x).view(np.uint32), want.view(np.uint32))
