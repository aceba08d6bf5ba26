"""ULP distances and their exact percentiles with bounded memory (the engine's ULP metrics).

Percentile definition, the one every mschecker verdict and report uses (nearest rank): the p-th percentile of n
distances is sorted[ceil(p*n/100) - 1] (numpy's method="inverted_cdf"); `ulp_percentile` applies it to an array.
"""
from __future__ import annotations

import numpy as np

from mschecker import dtypes as _dtypes
from mschecker.dtypes import FloatFormat, float_format, is_float, resolve_dtype

# ULP distances below this are counted in exact bins; larger ones in power-of-two buckets that a later pass
# resolves exactly when a percentile falls there (see _UlpHistogram).
_EXACT_ULP_BINS = 1 << 16


def ulp_format_of(rule, a_dtype, e_dtype) -> FloatFormat | None:
    """The format ULPs are counted in: the rule's, else the coarser (fewer mantissa bits) of the two float dtypes
    (expected's on a tie), else None (integer tensors have no ULP). Counting in the finer format would measure
    the rounding of the coarser side to its own format, not the error."""
    if rule.ulp_format:
        return float_format(resolve_dtype(rule.ulp_format))
    fmts = [float_format(d) for d in (e_dtype, a_dtype) if is_float(d)]
    return min(fmts, key=lambda f: f.mantissa_bits) if fmts else None


def ulp_distances_same_format(a: np.ndarray, e: np.ndarray, fmt: FloatFormat, out: np.ndarray | None = None,
                               sign_mask: np.ndarray | None = None) -> np.ndarray:
    """ulp_distance_exact for two arrays already in fmt's dtype, in fewer passes: for a same-sign pair the
    sign-magnitude ordinals differ exactly by the raw bit patterns' difference (the sign bits cancel and the
    magnitude difference is below 2^(bits-1), so the signed subtraction cannot wrap); opposite-sign pairs
    (errors straddling zero, rare) go through the shared ordinals. out (fmt's signed integer type) and
    sign_mask (bool): optional work buffers of a's size."""
    it = np.dtype(f"int{fmt.bits}")
    ia = np.ascontiguousarray(a).view(it)
    ie = np.ascontiguousarray(e).view(it)
    dist = np.bitwise_xor(ia, ie, out=out)  # negative where the signs differ
    opp = np.flatnonzero(np.less(dist, 0, out=sign_mask))
    np.subtract(ia, ie, out=dist)
    np.abs(dist, out=dist)
    if opp.size:
        dist[opp] = _dtypes.ulp_distance_exact(a[opp], e[opp], fmt).view(it)
    return dist.view(fmt.uint)


def _floor_log2(v: np.ndarray) -> np.ndarray:
    """floor(log2 v) of positive unsigned integers, from the float64 exponent (np.searchsorted over the 48
    power-of-two edges measured ~30 ns per element, this ~1). A uint64 above 2^53 can round up to the next
    power of two when converted, which the last step undoes."""
    k = (v.astype(np.float64).view(np.int64) >> 52) - 1023
    if v.dtype.itemsize == 8:
        np.minimum(k, 63, out=k)
        k -= np.left_shift(np.uint64(1), k.astype(np.uint64)) > v
    return k


class UlpHistogram:
    """Exact distribution of ULP distances with bounded memory.

    Distances below 2^16 are counted in exact bins (512 KiB of counters: they stay in L2 cache, which makes the
    per-element bincount 4x faster than with 2^20 bins); larger ones in power-of-two buckets [2^k, 2^(k+1)). A
    percentile that falls into a bucket is resolved exactly by `_ulp_percentiles`, which re-streams the data
    (only then: fp16/bf16 distances always fit the exact bins, and 2^16 fp32 ULPs is a relative error of ~0.4%).

    Percentile definition (nearest rank): the p-th percentile of n distances is the smallest distance d such that
    at least ceil(p * n / 100) distances are <= d, i.e. sorted[ceil(p*n/100) - 1] (numpy's "inverted_cdf").
    """

    def __init__(self):
        self.low = np.zeros(_EXACT_ULP_BINS, dtype=np.int64)
        self.high = np.zeros(64, dtype=np.int64)  # high[k]: count of distances in [2^k, 2^(k+1)), k >= 16
        self.n = 0
        self.max = 0

    def add(self, d: np.ndarray, work: np.ndarray | None = None) -> None:
        """Count distances d (unsigned integers); work: optional intp buffer of at least d's size."""
        if d.size == 0:
            return
        self.n += d.size
        dmax = int(d.max())
        self.max = max(self.max, dmax)
        # An explicit intp copy measured faster than bincount's own conversion of narrower integers.
        if work is None:
            idx = d.astype(np.intp)
        else:
            idx = work[: d.size]
            np.copyto(idx, d, casting="unsafe")
        if dmax >= _EXACT_ULP_BINS:
            # Distances this large are few: they go to the power-of-two buckets, and their slots in idx to one
            # spare bin past the exact ones that is dropped below (cheaper than compressing d without them).
            big = np.flatnonzero(d >= _EXACT_ULP_BINS)
            self.high += np.bincount(_floor_log2(d[big]), minlength=64)
            idx[big] = _EXACT_ULP_BINS
        counts = np.bincount(idx)[:_EXACT_ULP_BINS]
        self.low[: counts.size] += counts

    def rank(self, p: int) -> int:
        """1-based nearest rank for percentile p (integer arithmetic, no float rounding)."""
        return max(1, -(-p * self.n // 100))

    def locate(self, r: int):
        """Exact value for 1-based rank r if it lies in an exact bin, else (lo, width, rank within, count)."""
        # Only bins up to the largest distance can be non-zero: the cumulative sum of 2^16 bins measured ~1 ms,
        # which dominated the comparison of small tensors (a kernel check is mostly small tensors).
        cum_low = np.cumsum(self.low[: min(self.max, _EXACT_ULP_BINS - 1) + 1])
        if r <= cum_low[-1]:
            return int(np.searchsorted(cum_low, r))
        r -= int(cum_low[-1])
        cum_high = np.cumsum(self.high)
        k = int(np.searchsorted(cum_high, r))
        before = int(cum_high[k - 1]) if k else 0
        return (1 << k, 1 << k, r - before, int(self.high[k]))


#: A percentile bucket holding at most this many distances is resolved by collecting them (8 bytes each).
_COLLECT_LIMIT = 1 << 22


def ulp_percentiles(hist: "UlpHistogram", percentiles, rechunk, distances) -> tuple:
    """Exact nearest-rank percentiles. A rank in an exact bin is read off; a rank in a power-of-two bucket is
    resolved by re-streaming (rechunk() yields the chunk pairs again, distances(a, e) gives their ULP distances): the bucket's distances are collected and partitioned when there are at most
    _COLLECT_LIMIT of them, else counted in 2^16 sub-bins and the search narrows (one more pass each time)."""
    results, pending = {}, {}
    for p in percentiles:
        loc = hist.locate(hist.rank(p))
        if isinstance(loc, int):
            results[p] = loc
        else:
            pending[p] = loc
    while pending:
        plans = {}
        for p, (lo, width, r, count) in pending.items():
            shift = max(0, width.bit_length() - 1 - 16)
            collect = count <= _COLLECT_LIMIT
            plans[p] = (lo, width, r, shift, [] if collect else np.zeros(width >> shift, dtype=np.int64))
        for a_c, e_c in rechunk():
            both = np.isfinite(a_c.astype(np.float64)) & np.isfinite(e_c.astype(np.float64))
            if not both.all():
                a_c, e_c = a_c[both], e_c[both]
            d = distances(a_c, e_c).astype(np.uint64)
            for lo, width, r, shift, sink in plans.values():
                inr = d[(d >= np.uint64(lo)) & (d <= np.uint64(lo + width - 1))]  # lo + width may be 2^64
                if not inr.size:
                    continue
                if isinstance(sink, list):
                    sink.append(inr)
                else:
                    sink += np.bincount(((inr - np.uint64(lo)) >> np.uint64(shift)).astype(np.intp),
                                        minlength=sink.size)
        pending = {}
        for p, (lo, width, r, shift, sink) in plans.items():
            if isinstance(sink, list):
                values = np.concatenate(sink)
                results[p] = int(np.partition(values, r - 1)[r - 1])
                continue
            cum = np.cumsum(sink)
            j = int(np.searchsorted(cum, r))
            before = int(cum[j - 1]) if j else 0
            if shift == 0:
                results[p] = lo + j
            else:
                pending[p] = (lo + (j << shift), 1 << shift, r - before, int(sink[j]))
    return tuple(results[p] for p in percentiles)


def ulp_percentile(distances: np.ndarray, p: int) -> int:
    """The nearest-rank p-th percentile of an array of ULP distances (0 for none): the definition above."""
    d = np.asarray(distances).reshape(-1)
    if d.size == 0:
        return 0
    r = max(1, -(-p * d.size // 100))
    return int(np.partition(d, r - 1)[r - 1])
