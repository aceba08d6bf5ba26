"""Both sides of every edge of the verdict (docs/TOLERANCE.md): an element exactly on a boundary and the next
representable value past it, for the atol + rtol*|e| clause, the --ulp N clause, +-0, subnormals, NaN payloads
and infinities; and the contract rule (kernels.check.check_output) at |err| = bound and at the overflow threshold.

Every case runs on the numpy route and, where it is built, the compiled one (MSCHECKER_NO_FASTCOMPARE), since
both must draw the edge in the same place. Values are chosen so that the boundary itself is exact in float64
(powers of two), so "on the edge" is really on it.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.compare import ToleranceRule, compare_arrays
from mschecker.kernels.check import check_output


@pytest.fixture(params=["numpy", "compiled"], autouse=True)
def route(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setenv("MSCHECKER_NO_FASTCOMPARE", "1")
    else:
        monkeypatch.delenv("MSCHECKER_NO_FASTCOMPARE", raising=False)
    return request.param


def _mismatches(a, e, **rule) -> int:
    return compare_arrays(np.asarray(a), np.asarray(e), ToleranceRule(**rule)).mismatches


def _next(x, direction, dtype):
    return np.nextafter(np.asarray(x, dtype), np.asarray(direction, dtype))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("e", [1.0, -4.0, 0.5])
def test_atol_plus_rtol_edge(dtype, e):
    """|a - e| = atol + rtol*|e| exactly matches; the next value beyond it does not (both directions)."""
    atol, rtol = 2.0 ** -8, 2.0 ** -7
    bound = atol + rtol * abs(e)
    for sign in (1, -1):
        edge = np.asarray([e + sign * bound], dtype)
        assert float(edge[0]) == e + sign * bound  # the boundary is representable
        past = _next(edge, sign * np.inf, dtype)
        inside = _next(edge, -sign * np.inf, dtype)
        ee = np.asarray([e], dtype)
        assert _mismatches(edge, ee, atol=atol, rtol=rtol) == 0
        assert _mismatches(inside, ee, atol=atol, rtol=rtol) == 0
        assert _mismatches(past, ee, atol=atol, rtol=rtol) == 1


def test_rtol_scales_with_expected_not_actual():
    """numpy.isclose's asymmetry: e = 2, a = 1 is within rtol 0.5 (bound 1); e = 1, a = 2 is not (bound 0.5)."""
    assert _mismatches([1.0], [2.0], atol=0.0, rtol=0.5) == 0
    assert _mismatches([2.0], [1.0], atol=0.0, rtol=0.5) == 1


@pytest.mark.parametrize("n", [0, 1, 3])
@pytest.mark.parametrize("start,direction", [(1.0, np.inf), (1.0, -np.inf), (-2.0, np.inf), (65504.0, -np.inf)])
def test_ulp_edge_fp16(n, start, direction):
    """Exactly N fp16 steps away matches under --ulp N; N + 1 steps does not (a pure ULP rule: atol = rtol = 0),
    also where the steps cross a binade (below 1.0 they are half as wide)."""
    e = np.asarray([start], np.float16)
    a = e.copy()
    for _ in range(n):
        a = _next(a, direction, np.float16)
    assert _mismatches(a, e, atol=0.0, rtol=0.0, ulp=n) == 0
    assert _mismatches(_next(a, direction, np.float16), e, atol=0.0, rtol=0.0, ulp=n) == 1


def test_ulp_counts_in_the_coarser_format():
    """fp32 actual vs fp16 expected: ULPs of fp16 (the coarser). Half an fp16 step away rounds onto e (0 ULP)."""
    e = np.asarray([1.0], np.float16)
    half_step = np.asarray([1.0 + 2.0 ** -11], np.float32)  # a tie: rounds to even, 1.0
    one_step = np.asarray([1.0 + 2.0 ** -10], np.float32)
    assert _mismatches(half_step, e, atol=0.0, rtol=0.0, ulp=0) == 0
    assert _mismatches(one_step, e, atol=0.0, rtol=0.0, ulp=0) == 1
    assert _mismatches(one_step, e, atol=0.0, rtol=0.0, ulp=1) == 0


def test_signed_zeros_are_one_value():
    for dt in (np.float16, np.float32, np.float64):
        z, nz = np.asarray([0.0], dt), np.asarray([-0.0], dt)
        assert _mismatches(nz, z, atol=0.0, rtol=0.0) == 0
        assert _mismatches(nz, z, atol=0.0, rtol=0.0, ulp=0) == 0


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_subnormal_edges(dtype):
    """The smallest subnormal s against 0: atol = s matches, the largest double below s does not; -s and +s are
    two ULPs apart through zero (+-0 is one value)."""
    s = np.asarray([np.finfo(dtype).smallest_subnormal], dtype)
    zero = np.zeros(1, dtype)
    sv = float(s[0])
    assert _mismatches(s, zero, atol=sv, rtol=0.0) == 0
    assert _mismatches(s, zero, atol=float(np.nextafter(sv, 0.0)), rtol=0.0) == 1
    assert _mismatches(-s, s, atol=0.0, rtol=0.0, ulp=2) == 0
    assert _mismatches(-s, s, atol=0.0, rtol=0.0, ulp=1) == 1
    # a subnormal expected value: rtol alone gives a bound below the spacing; the ULP clause still accepts 1 step
    two_s = s * dtype(2)
    assert _mismatches(two_s, s, atol=0.0, rtol=0.5) == 1
    assert _mismatches(two_s, s, atol=0.0, rtol=1.0) == 0


def _nan(dtype, payload: int, negative=False):
    bits = {np.float16: (np.uint16, 0x7E00, 0x8000), np.float32: (np.uint32, 0x7FC00000, 0x80000000),
            np.float64: (np.uint64, 0x7FF8000000000000, 0x8000000000000000)}[dtype]
    u, quiet, sign = bits
    return np.asarray([quiet | payload | (sign if negative else 0)], u).view(dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_nan_payloads_and_sign_match_any_nan(dtype):
    a, e = _nan(dtype, 1), _nan(dtype, 0, negative=True)
    assert np.isnan(a).all() and np.isnan(e).all() and a.view(np.uint8).tobytes() != e.view(np.uint8).tobytes()
    assert _mismatches(a, e, atol=0.0, rtol=0.0) == 0
    huge = dict(atol=1e300, rtol=1.0, ulp=10 ** 6)
    for finite in (0.0, 1.0):
        assert _mismatches(np.asarray([finite], dtype), e, **huge) == 1
        assert _mismatches(a, np.asarray([finite], dtype), **huge) == 1
    assert _mismatches(a, np.asarray([np.inf], dtype), **huge) == 1


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_infinities(dtype):
    inf, big = np.asarray([np.inf], dtype), np.asarray([np.finfo(dtype).max], dtype)
    huge = dict(atol=1e300, rtol=1.0, ulp=10 ** 6)
    assert _mismatches(inf, inf, atol=0.0, rtol=0.0) == 0
    assert _mismatches(-inf, -inf, atol=0.0, rtol=0.0) == 0
    assert _mismatches(-inf, inf, **huge) == 1
    assert _mismatches(inf, big, **huge) == 1  # one ULP past the largest finite, but inf never matches finite
    assert _mismatches(big, inf, **huge) == 1


# ------------------------------------------------------------------------------ the contract rule (bounds)
def _contract_violations(out, ref, bound, dtype) -> int:
    r = check_output(np.asarray(out), np.asarray(ref, np.float64), bound, dtype)
    return r.violations + r.nonfinite_mismatches


def test_contract_bound_edge():
    ref = np.asarray([1.0])
    out = np.asarray([1.0 + 2.0 ** -10], np.float16)  # |err| = 2^-10 exactly
    assert _contract_violations(out, ref, 2.0 ** -10, "float16") == 0
    assert _contract_violations(out, ref, float(np.nextafter(2.0 ** -10, 0.0)), "float16") == 1
    assert _contract_violations(out, ref, 0.0, "float16") == 1
    assert _contract_violations(np.asarray([1.0], np.float16), ref, 0.0, "float16") == 0


def test_contract_overflow_threshold_edge():
    """A finite reference whose bound reaches fp16's rounding threshold (65520) may come out as inf of its sign;
    just below the threshold it may not, and never with the other sign or as NaN."""
    ref = np.asarray([65504.0])
    inf = np.asarray([np.inf], np.float16)
    assert _contract_violations(inf, ref, 16.0, "float16") == 0
    # |ref| + bound is formed in float64: just below the threshold means below it after that sum, e.g. 2^-30 short
    assert _contract_violations(inf, ref, 16.0 - 2.0 ** -30, "float16") == 1
    assert _contract_violations(-inf, -ref, 16.0, "float16") == 0
    assert _contract_violations(-inf, ref, 1e9, "float16") == 1
    assert _contract_violations(np.asarray([np.nan], np.float16), ref, 1e9, "float16") == 1


def test_contract_nonfinite_reference():
    """Where the reference rounds to inf (true overflow) the kernel must give that inf; NaN must meet NaN."""
    ref = np.asarray([1e6, np.nan])
    assert _contract_violations(np.asarray([np.inf, np.nan], np.float16), ref, 0.0, "float16") == 0
    assert _contract_violations(np.asarray([65504.0, np.nan], np.float16), ref, 1e9, "float16") == 1
    assert _contract_violations(np.asarray([np.inf, 0.0], np.float16), ref, 1e9, "float16") == 1
