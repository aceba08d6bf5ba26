"""Streaming: results over random chunk sizes equal the whole-array result, memmaps and strided views included.

What must be equal and why (mschecker/compare/engine.py module docstring): every per-element quantity is a float64
function of that element alone, so maxima, their indices, counts, the top-k, the histograms and the ULP
percentiles are identical whatever the chunking. Sums (mean |err|, RMSE, cosine, relative Euclidean, SNR, PSNR,
KL) differ only by summation order; for n <= 400 terms each float64 sum moves by at most gamma_n relative to the
sum of |terms| (Higham 3.1), n u <= 400 * 1.1e-16 < 5e-14, so we allow 1e-12 relative (sums of nonnegative terms)
and, for the signed/cancelling ones (cosine, KL), 1e-12 absolute scaled by their conditioning as noted inline.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from mschecker.compare import engine as C
from mschecker.compare import ulp as ulp_module
from mschecker.compare import ToleranceRule, compare_arrays
from mschecker.dtypes import FORMATS, ulp_distance

EXACT_FIELDS = ("size", "finite_pairs", "max_abs_err", "max_abs_index", "max_rel_err", "max_rel_index",
                "psnr_peak", "ulp_format", "ulp_max", "ulp_p50", "ulp_p99", "frac_rel_lt_1e3", "frac_rel_lt_5e3",
                "mismatches", "mismatch_frac", "nonfinite_mismatches", "actual_nonfinite", "expected_nonfinite",
                "abs_err_histogram", "failed_rules", "passed", "kl_note")
SUM_FIELDS = ("mean_abs_err", "rmse", "rel_euclidean")


def _same(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y


def assert_streaming_equal(chunked, whole):
    for f in EXACT_FIELDS:
        assert _same(getattr(chunked, f), getattr(whole, f)), f
    assert [w.index for w in chunked.worst] == [w.index for w in whole.worst]
    assert [w.to_dict() for w in chunked.worst] == [w.to_dict() for w in whole.worst]
    for f in SUM_FIELDS:
        a, b = getattr(chunked, f), getattr(whole, f)
        assert (a is None) == (b is None), f
        if a is not None and math.isfinite(b):
            assert a == pytest.approx(b, rel=1e-12, abs=1e-300), f
        elif a is not None:
            assert _same(a, b), f
    for f, tol in (("cosine", 1e-12), ("snr_db", 1e-9), ("psnr_db", 1e-9), ("kl_div", 1e-12)):
        a, b = getattr(chunked, f), getattr(whole, f)
        assert (a is None) == (b is None), f
        if a is not None and math.isfinite(b):
            # cosine: |a-e|^2 <= |a||e| branch error ~gamma_n*2, else ~2 gamma_n: 1e-12 absolute.
            # dB values: 10/ln(10) * relative error of a ratio of two sums (< 1e-12): 1e-9 absolute is loose.
            # KL: sum(e log(e/a))/sum(e) + log(sum a/sum e); each part is O(1) with error ~gamma_n: 1e-12.
            assert abs(a - b) <= tol * max(1.0, abs(b)), f
        elif a is not None:
            assert _same(a, b), f
        elif a is not None:
            assert a == b, f


def pair_strategy():
    """(actual, expected) of one dtype, with NaN/inf sometimes, spread over many magnitudes and ULP distances."""
    @st.composite
    def build(draw):
        dtype = draw(st.sampled_from(["float16", "bfloat16", "float32", "float64"]))
        fmt = FORMATS[dtype]
        n = draw(st.integers(1, 400))
        seed = draw(st.integers(0, 2 ** 32 - 1))
        rng = np.random.default_rng(seed)
        e = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)
        noise = draw(st.sampled_from([0.0, 1e-7, 1e-3, 1.0]))
        a = e * (1 + noise * rng.standard_normal(n))
        if draw(st.booleans()):  # exact ties of the worst error
            a[: n // 2] = e[: n // 2] + 0.5
        if draw(st.booleans()):
            k = max(1, n // 10)
            for arr in (a, e):
                pos = rng.integers(0, n, k)
                arr[pos] = rng.choice([np.nan, np.inf, -np.inf, 0.0], k)
        with np.errstate(over="ignore"):
            return a.astype(fmt.dtype), e.astype(fmt.dtype)
    return build()


@given(pair_strategy(), st.integers(1, 97), st.integers(0, 12),
       st.sampled_from([ToleranceRule(), ToleranceRule(atol=1e-3, rtol=1e-3, ulp=8, cosine=0.99)]),
       st.integers(1, 3))
def test_chunked_equals_whole(pair, chunk, topk, rule, workers):
    """Any chunking, and chunks spread over 1-3 worker threads whose accumulators merge, equals one chunk."""
    a, e = pair
    whole = compare_arrays(a, e, rule, topk=topk, chunk_elems=a.size, workers=1)
    chunked = compare_arrays(a, e, rule, topk=topk, chunk_elems=chunk, workers=workers)
    assert_streaming_equal(chunked, whole)


@given(pair_strategy())
def test_percentiles_equal_numpy_inverted_cdf(pair):
    """p50/p99 are the nearest-rank percentiles of the ULP distances over finite pairs (numpy 'inverted_cdf')."""
    a, e = pair
    r = compare_arrays(a, e, chunk_elems=13)
    fin = np.isfinite(a.astype(np.float64)) & np.isfinite(e.astype(np.float64))
    if not fin.any():
        assert r.ulp_p50 is None
        return
    d = np.array([int(v) for v in C.ulp_distance_exact(a[fin], e[fin], FORMATS[r.ulp_format])], dtype=object)
    s = sorted(d)
    for p, got in ((50, r.ulp_p50), (99, r.ulp_p99)):
        assert got == s[-(-p * len(s) // 100) - 1]
    if FORMATS[r.ulp_format].bits < 64:
        dd = ulp_distance(a[fin], e[fin])
        assert r.ulp_p99 == int(np.percentile(dd, 99, method="inverted_cdf"))
        assert r.ulp_max == int(dd.max())


def test_refinement_by_subhistogram(monkeypatch):
    """Force the sub-histogram path (no collecting) for distances far above the exact bins, fp32 and fp64."""
    monkeypatch.setattr(ulp_module, "_COLLECT_LIMIT", 0)
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        e = rng.standard_normal(5000).astype(dtype)
        a = (e * (1 + rng.standard_normal(5000) * 0.3)).astype(dtype)
        r = compare_arrays(a, e, chunk_elems=777)
        d = sorted(int(v) for v in C.ulp_distance_exact(a, e, FORMATS[np.dtype(dtype).name]))
        assert r.ulp_p50 == d[2500 - 1] and r.ulp_p99 == d[4950 - 1] and r.ulp_max == d[-1]
        assert r.ulp_p50 >= 2 ** 16  # really above the exact bins


def test_memmap_and_strided_views_equal_in_memory(tmp_path):
    rng = np.random.default_rng(7)
    e = rng.standard_normal((64, 300)).astype(np.float32)
    a = (e + rng.standard_normal(e.shape).astype(np.float32) * 1e-3).astype(np.float32)
    a[5, 7] = np.nan
    pa, pe = tmp_path / "a.bin", tmp_path / "e.bin"
    a.tofile(pa)
    e.tofile(pe)
    ma = np.memmap(pa, dtype=np.float32, mode="r", shape=a.shape)
    me = np.memmap(pe, dtype=np.float32, mode="r", shape=e.shape)
    rule = ToleranceRule.from_args(tolerance=1e-3)
    ref = compare_arrays(a, e, rule, chunk_elems=a.size)
    assert_streaming_equal(compare_arrays(ma, me, rule, chunk_elems=4099), ref)  # pages released after chunks
    # a transposed (non-contiguous) view is walked in its own C order: same as its contiguous copy
    ref_t = compare_arrays(np.ascontiguousarray(a.T), np.ascontiguousarray(e.T), rule, chunk_elems=a.size)
    got_t = compare_arrays(a.T, e.T, rule, chunk_elems=1000)
    assert_streaming_equal(got_t, ref_t)
    assert got_t.max_abs_index == ref_t.max_abs_index and got_t.shape == (300, 64)
    del ma, me


def test_planted_bug_chunk_offset_is_caught(monkeypatch):
    """A chunker that reports each chunk's offset one element late breaks the whole-array index equality."""
    real = C._chunks

    def off_by_one(x, chunk, first, step):
        for off, part in real(x, chunk, first, step):
            yield (off + 1 if off else 0), part

    rng = np.random.default_rng(0)
    e = rng.standard_normal(100)
    a = e + rng.standard_normal(100)
    whole = compare_arrays(a, e, chunk_elems=100)
    monkeypatch.setattr(C, "_chunks", lambda x, chunk, first=0, step=1: off_by_one(x, chunk, first, step))
    chunked = compare_arrays(a, e, chunk_elems=10, workers=1)
    with pytest.raises(AssertionError):
        assert_streaming_equal(chunked, whole)


def test_planted_bug_topk_tie_order_is_caught(monkeypatch):
    """A top-k merge that breaks ties by the higher index differs between chunkings once ties cross chunks."""
    def bad_merge(self, key, flat, a, e):
        keys = np.concatenate([self.top_key, key])
        idx = np.concatenate([self.top_idx, flat])
        order = np.lexsort((-idx, -keys))[: self.topk]
        self.top_key, self.top_idx = keys[order], idx[order]
        self.top_a = np.concatenate([self.top_a, a])[order]
        self.top_e = np.concatenate([self.top_e, e])[order]

    e = np.zeros(50)
    a = np.full(50, 0.5)
    whole = compare_arrays(a, e, topk=5, chunk_elems=50)
    monkeypatch.setattr(C._Accumulator, "_merge_top", bad_merge)
    chunked = compare_arrays(a, e, topk=5, chunk_elems=7, workers=1)
    assert [w.index for w in whole.worst] == [(0,), (1,), (2,), (3,), (4,)]
    with pytest.raises(AssertionError):
        assert_streaming_equal(chunked, whole)


def _rss_file_kb() -> int | None:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _memmap_rss_growth_kb(tmp_path, name) -> int:
    n = 1 << 22  # 16 MiB per float32 file
    e = np.arange(n, dtype=np.float32)
    path_e, path_a = tmp_path / f"{name}_e.bin", tmp_path / f"{name}_a.bin"
    e.tofile(path_e)
    (e + np.float32(1)).tofile(path_a)
    del e
    ma = np.memmap(path_a, dtype=np.float32, mode="r")
    me = np.memmap(path_e, dtype=np.float32, mode="r")
    before = _rss_file_kb()
    compare_arrays(ma, me, chunk_elems=1 << 16, workers=1)
    grown = _rss_file_kb() - before
    del ma, me
    return grown


@pytest.mark.skipif(_rss_file_kb() is None, reason="needs Linux /proc/self/status RssFile")
def test_memmap_pages_are_released(tmp_path, monkeypatch):
    """Bounded memory: comparing two 16 MiB memmaps leaves < 4 MiB of them resident (one chunk is 256 KiB per
    file); with page release disabled (planted bug) the whole 32 MiB stays mapped, so the test can fail."""
    assert _memmap_rss_growth_kb(tmp_path, "ok") < 4096
    monkeypatch.setattr(C, "release_file_pages", lambda part: None)
    assert _memmap_rss_growth_kb(tmp_path, "bug") > 16384


def test_planted_bug_merge_tie_order_is_caught(monkeypatch):
    """A worker merge that lets a later worker's equal maximum win moves max_abs_index off the first occurrence."""
    def bad_merge(self, other):
        self.max_abs, self.max_abs_flat = max((self.max_abs, self.max_abs_flat), (other.max_abs, other.max_abs_flat))

    a, e = np.full(40, 1.0), np.zeros(40)
    monkeypatch.setattr(C._Accumulator, "merge", bad_merge)
    assert compare_arrays(a, e, chunk_elems=5, workers=3).max_abs_index != (0,)
