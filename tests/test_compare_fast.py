"""The optional C kernel (mschecker/_fastcompare.c) against the numpy path it replaces.

The kernel computes every per-element quantity with the same IEEE float64 operations as the numpy path, so every
exact field (maxima and their indices, counts, histograms, ULP percentiles, top-k) must be IDENTICAL; only the
five float64 sums add in another order. The tolerance for those is the one justified in
tests/test_compare_streaming.py (assert_streaming_equal: gamma_n for n <= 400 terms per sum, plus the chunk/thread
merge which already reorders sums), reused here rather than restated. Inputs are kept to n <= 400 for that bound.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mschecker.compare import engine as C
from mschecker.compare import BoundRule, FastPathParams, ToleranceRule, compare_arrays


from tests.test_compare_streaming import assert_streaming_equal

pytestmark = pytest.mark.skipif(C._fastcompare is None,
                                reason="mschecker._fastcompare not built (no C compiler at install time)")


def both_paths(a, e, rule, **kw):
    """(fast, numpy) results of the same comparison; asserts the fast one really used the kernel."""
    calls = []
    real = C._Accumulator._update_fast

    def counting(self, *args):
        done = real(self, *args)
        calls.append(done)
        return done

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(C._Accumulator, "_update_fast", counting)
        mp.delenv("MSCHECKER_NO_FASTCOMPARE", raising=False)
        fast = compare_arrays(a, e, rule, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MSCHECKER_NO_FASTCOMPARE", "1")
        slow = compare_arrays(a, e, rule, **kw)
    return fast, slow, calls


@st.composite
def f32_pairs(draw):
    """float32 pairs: magnitudes over 10^-40..10^6 (subnormal and tiny expected values), errors from 0 to huge
    ULP distances and sign flips, exact ties of |d| (argmax/top-k tie rule), sometimes a NaN/inf chunk."""
    n = draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    e = rng.standard_normal(n) * 10.0 ** rng.integers(draw(st.sampled_from([-40, -3])), 7, n)
    noise = draw(st.sampled_from([0.0, 1e-7, 1e-3, 1e-1, 3.0]))
    a = e * (1 + noise * rng.standard_normal(n))
    if draw(st.booleans()):  # exact ties of the worst error, in several chunks
        a[::3] = e[::3] + 0.5
    if draw(st.booleans()):  # zeros and signed zeros on either side
        k = max(1, n // 8)
        a[rng.integers(0, n, k)] = 0.0
        e[rng.integers(0, n, k)] = -0.0
    if draw(st.booleans()):
        pos = rng.integers(0, n, max(1, n // 20))
        a[pos] = rng.choice([np.nan, np.inf, -np.inf], pos.size)
    if draw(st.booleans()):  # nonnegative tensors: the KL divergence is computed
        a, e = np.abs(a), np.abs(e)
    return a.astype(np.float32), e.astype(np.float32)


RULES = [ToleranceRule(), ToleranceRule(atol=1e-3, rtol=1e-3, ulp=8, cosine=0.99), ToleranceRule(ulp=0, atol=0,
         rtol=0), ToleranceRule(atol=0.0, rtol=1e-2), ToleranceRule(atol=1e-2, rtol=0.0, ulp=100000)]


# At least 100 examples (about 2 s) even under the 25-example `ci` profile: this is the kernel's only broad check.
@settings(max_examples=max(100, settings.default.max_examples))
@given(pair=f32_pairs(), chunk=st.integers(1, 450), topk=st.sampled_from([0, 1, 3, 10]),
       rule=st.sampled_from(RULES), workers=st.sampled_from([1, 2]))
def test_fast_equals_numpy(pair, chunk, topk, rule, workers):
    a, e = pair
    fast, slow, calls = both_paths(a, e, rule, chunk_elems=chunk, topk=topk, workers=workers)
    assert calls, "the kernel was not called"
    if np.isfinite(a).all() and np.isfinite(e).all():
        assert all(calls), "the kernel declined an all-finite float32 chunk"
    assert_streaming_equal(fast, slow)


def test_kernel_skips_nonfinite_chunk_untouched(monkeypatch):
    """A chunk with a NaN returns None before any counter is incremented (the numpy path then takes it)."""
    a = np.ones(8, np.float32)
    a[5] = np.nan
    e = np.zeros(8, np.float32)
    low, high, hist, cand = (np.zeros(s, np.int64) for s in (1 << 16, 64, 17, 8))
    assert C._fastcompare.finite_f32(a, e, 0.0, 0.0, 1e-38, 1e-3, 5e-3, -1, C._DECADE_EDGES, low, high, hist, -1.0,
                                     cand) is None
    assert not (low.any() or high.any() or hist.any())


def test_not_used_for_other_dtypes_or_ulp_formats(monkeypatch):
    """Scope: float32 on both sides with ULPs in fp32; everything else stays on the numpy path."""
    x = np.ones(4, np.float32)
    cases = [(x, x.astype(np.float64), ToleranceRule()), (x.astype(np.float16), x, ToleranceRule()),
             (x, x, ToleranceRule(ulp=1, ulp_format="fp16"))]
    for a, e, rule in cases:
        _, _, calls = both_paths(a, e, rule)
        assert not calls
    _, _, calls = both_paths(x, x, ToleranceRule())
    assert calls == [True]


def test_rule_declares_the_fast_path():
    """The engine asks the rule (fast_path_params), not its type: a rule with no parameters for the kernel
    (a contract, a ToleranceRule subclass with its own element rule) stays on the numpy path, while the
    kernel applies the parameters a rule declares."""
    x = np.ones(4, np.float32)

    class Strict(ToleranceRule):
        def count_finite_mismatches(self, state, chunk):
            return int(np.count_nonzero(chunk.ad))

    for rule in (BoundRule(bound=np.ones(4), dtype="float32", ulp_format="fp32"), Strict()):
        assert rule.fast_path_params() is None
        _, _, calls = both_paths(x, x, rule)
        assert not calls
    assert ToleranceRule(atol=1e-3, rtol=0.0, ulp=2).fast_path_params() == FastPathParams(1e-3, 0.0, 2)
    assert ToleranceRule(ulp=None).fast_path_params().ulp_tol == -1

    class Declared(Strict):  # the exact rule, which the kernel computes as atol = rtol = 0 without ULP clause
        def fast_path_params(self):
            return FastPathParams(0.0, 0.0, -1)

    a = x + np.float32([0.0, 1e-6, 0.0, 1.0])
    fast, slow, calls = both_paths(a, x, Declared())
    assert calls == [True] and fast.mismatches == slow.mismatches == 2


def test_kernel_result_has_the_engines_field_names():
    """The kernel returns named fields (FiniteTotals) in the order engine._FAST_FIELDS lists; native.load checks
    TOTALS_FIELDS at import, so a field added on one side only disables a stale build (an error under
    MSCHECKER_REQUIRE_NATIVE)."""
    assert tuple(C._fastcompare.TOTALS_FIELDS) == C._FAST_FIELDS
    a = np.float32([1.0, 2.0, 3.0])
    low, high, hist, cand = (np.zeros(s, np.int64) for s in (1 << 16, 64, 17, 3))
    t = C._fastcompare.finite_f32(a, a + np.float32(0.5), 0.0, 0.0, 1e-38, 1e-3, 5e-3, -1, C._DECADE_EDGES, low,
                                  high, hist, -1.0, cand)
    assert isinstance(t, C._fastcompare.FiniteTotals) and len(t) == len(C._FAST_FIELDS)
    assert (t.max_abs, t.max_abs_i, t.mismatches, t.ncand, t.sum_abs) == (0.5, 0, 3, 3, 1.5)


def test_big_ulp_distances_and_ties(monkeypatch):
    """Distances above the exact bins (power-of-two buckets, refinement pass), sign flips and tied maxima."""
    rng = np.random.default_rng(1)
    e = rng.standard_normal(3000).astype(np.float32)
    a = e.copy()
    a[::7] = -a[::7]                  # opposite signs: ~2^31 ULPs
    a[1::5] = e[1::5] * np.float32(1.01)  # ~2^17 ULPs
    a[[10, 20, 2990]] = e[[10, 20, 2990]] + np.float32(64.0)  # ties of the largest |d|... up to rounding
    fast, slow, calls = both_paths(a, e, ToleranceRule(atol=1e-3, rtol=1e-3, ulp=4096), chunk_elems=256)
    assert all(calls)
    assert_streaming_equal(fast, slow)
    assert fast.ulp_p99 > 1 << 16


def test_planted_bug_tie_rule_is_caught(monkeypatch):
    """A kernel whose max |d| keeps the LAST index of a tie (>= instead of >) must fail the differential check."""
    e = np.zeros(64, np.float32)
    a = np.zeros(64, np.float32)
    a[[3, 40]] = 1.0  # tie of max |d| at 3 and 40: numpy argmax says 3
    real = C._fastcompare.finite_f32

    def last_index(*args):
        out = real(*args)
        arr_a = np.frombuffer(args[0], np.float32)
        arr_e = np.frombuffer(args[1], np.float32)
        ad = np.abs(arr_a.astype(np.float64) - arr_e.astype(np.float64))
        fields = list(out)
        fields[C._FAST_FIELDS.index("max_abs_i")] = int(np.flatnonzero(ad == out.max_abs)[-1])  # the planted bug
        return type(out)(fields)

    monkeypatch.setattr(C._fastcompare, "finite_f32", last_index)
    fast, slow, _ = both_paths(a, e, ToleranceRule())
    with pytest.raises(AssertionError):
        assert_streaming_equal(fast, slow)
    assert fast.max_abs_index == (40,) and slow.max_abs_index == (3,)
