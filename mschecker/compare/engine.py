"""Comparison engine: per-tensor error metrics and the pass/fail verdict, streamed chunk by chunk.

`compare_arrays(actual, expected, rule)` walks both tensors in flat C order, `chunk_elems` elements at a time, and
keeps only running sums, maxima, a bounded top-k, and an integer histogram of ULP distances. Nothing larger than a
chunk is ever materialised, so two memory-mapped multi-GiB files compare with bounded memory.

Precision: every elementwise quantity is computed in float64 from the exact float64 value of each element
(fp16/bf16/fp32 convert to float64 exactly), and sums accumulate in float64. Chunked results therefore equal
whole-array results exactly for maxima, their indices, all counts, the top-k and the ULP percentiles (each is a
function of per-element float64 values that do not depend on the chunking), and up to float summation order for
the sum-based metrics (mean abs error, RMSE, cosine, relative Euclidean distance, SNR, PSNR, KL).

Speed: float32 chunks whose pairs are all finite go through an optional one-pass C kernel (_fastcompare.c, see
`_Accumulator._update_fast`) that yields the same exact fields; without it (or with MSCHECKER_NO_FASTCOMPARE=1)
the numpy path does the same work in ~35 vectorised passes.

Which elements pass is the rule's decision (rules.py: an ElementRule, ToleranceRule or BoundRule), asked once per
chunk, and the rule says whether the C kernel can apply it (ElementRule.fast_path_params); the
engine computes every metric the same way whatever the rule, so every verdict of mschecker (CLI, kernels,
plugin, SD, bisection) comes from this one path. Results: results.py; ULP percentiles: ulp.py.
"""
from __future__ import annotations

import math
import os
from typing import Iterator

import numpy as np

from mschecker import native
from mschecker.dtypes import FloatFormat, dtype_name, float_format, is_float, ulp_distance_exact
from mschecker.errors import InputError
from mschecker.fsio import release_file_pages
from mschecker.compare.results import NonFiniteStats, TensorComparison, WorstElement
from mschecker.compare.rules import ChunkView, ElementRule, ToleranceRule
from mschecker.compare.ulp import _EXACT_ULP_BINS, UlpHistogram, ulp_distances_same_format, ulp_format_of, ulp_percentiles

def _fast_kernel():
    """The C kernel module, or None when it is not usable or MSCHECKER_NO_FASTCOMPARE=1 forces the numpy path
    (read per comparison, so tests can compare both paths)."""
    return native.active("_fastcompare")


#: Thresholds of Ascend's "thousandth ratio" style metrics (docs/NUMERICS.md §9).
REL_THRESHOLDS = (1e-3, 5e-3)

#: Default streaming chunk, in elements: 128 Ki elements = 1 MiB per float64 buffer; each worker reuses about
#: eight chunk-sized buffers (~8 MB, in L3 cache) whatever the tensor size. Measured (1 worker, 2^24 float32
#: elements, best of 3, interleaved; ns per element for rel. noise 1e-6 / 1e-3): 2^15 11.8 / 17.7, 2^16
#: 10.2-10.6 / 16.0-19.9, 2^17 9.8-10.0 / 18.1-18.3, 2^18 12.6-15.1 / 19.8-20.0: per-call overhead of ~40 numpy
#: calls per chunk below, cache misses above.
DEFAULT_CHUNK_ELEMS = 1 << 17



# --------------------------------------------------------------------------------------------------------------
# Streaming helpers
# --------------------------------------------------------------------------------------------------------------

def _chunks(x: np.ndarray, chunk: int, first: int = 0, step: int = 1) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (flat offset, 1-D chunk) in C order, chunks first, first+step, ... (a worker's share); views for
    C-contiguous arrays (memmaps), O(chunk) copies for strided ones.

    Pages of a read-only np.memmap are released after each chunk (madvise DONTNEED: the kernel's page cache
    keeps the file, the process stops holding it), so the resident set stays O(chunk) for any file size.
    """
    n = x.size
    starts = range(first * chunk, n, step * chunk)
    if x.flags.c_contiguous:
        flat = x.reshape(-1)
        release = isinstance(x, np.memmap) and not x.flags.writeable
        for start in starts:
            part = flat[start:start + chunk]
            yield start, part
            if release:
                release_file_pages(part)
    else:
        for start in starts:
            yield start, np.asarray(x.flat[start:start + chunk])


#: Elements per dot-product block: OpenBLAS runs ddot on several threads above 10000 elements, which measured
#: 10-100x slower than single-threaded on a busy 2-core machine (threads spinning against other processes and
#: against our own worker threads); below it, a single-threaded ddot measured ~2x faster than einsum's loop.
_DOT_BLOCK = 8192


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """float64 dot product of two contiguous 1-D arrays, as row-wise dots of _DOT_BLOCK-element blocks
    (np.vecdot, one C loop over the rows) plus the tail; numpy < 2 falls back to einsum. Any summation order
    keeps the gamma_n error bound the sum-based metrics state."""
    if _vecdot is None:
        return float(np.einsum("i,i->", x, y))
    m = x.size
    k = m - m % _DOT_BLOCK
    total = float(_vecdot(x[:k].reshape(-1, _DOT_BLOCK), y[:k].reshape(-1, _DOT_BLOCK)).sum()) if k else 0.0
    return total + float(_vecdot(x[k:], y[k:])) if k < m else total


_vecdot = getattr(np, "vecdot", None)



_NATIVE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _max_abs_value(x: np.ndarray) -> float:
    """max |x| of a non-empty finite array without an |x| pass: max(max x, -min x) (negation is exact)."""
    return max(float(x.max()), -float(x.min()))


# |err| histogram: bucket 0 holds exact zeros, 1 holds (0, 1e-12), then one bucket per decade up to [1e1, 1e2),
# and the last holds [1e2, inf]. Edges are the float64 values 1e-12 ... 1e2 (counted by _Accumulator._histogram).
_DECADE_EDGES = 10.0 ** np.arange(-12, 3)
_DECADE_LABELS = ["0", "<1e-12"] + [f"[1e{k},1e{k + 1})" for k in range(-12, 2)] + ["≥1e2"]
#: Optional one-pass C kernel (mschecker/_fastcompare.c, loaded by mschecker/native.py), checked at import against
#: the sizes the numpy path allocates; without it the numpy path does the same work.
#: The named fields of the kernel's result (a PyStructSequence, FiniteTotals), in the kernel's order; each is
#: what _Accumulator._finite_pairs adds to the field of the same role on the numpy path (_update_fast folds them).
_FAST_FIELDS = ("sum_dd", "sum_aa", "sum_ee", "sum_ae", "sum_abs", "max_abs", "max_abs_i", "peak", "max_rel",
                "max_rel_i", "rel_lt_1e3", "rel_lt_5e3", "mismatches", "ulp_max", "ncand", "min_a", "min_e")
_fastcompare = native.load("_fastcompare", EXACT_BINS=_EXACT_ULP_BINS, NEDGES=_DECADE_EDGES.size,
                           TOTALS_FIELDS=_FAST_FIELDS)


# --------------------------------------------------------------------------------------------------------------
# The accumulator
# --------------------------------------------------------------------------------------------------------------

class _Accumulator:
    """Running state of one comparison; `update` takes matching chunks, `finish` builds the TensorComparison."""

    def __init__(self, name, shape, a_dtype, e_dtype, rule: ElementRule, topk: int):
        self.name, self.shape, self.rule, self.topk = name, tuple(shape), rule, max(0, int(topk))
        self.a_dtype, self.e_dtype = a_dtype, e_dtype
        self.fmt: FloatFormat | None = ulp_format_of(rule, a_dtype, e_dtype)
        # Relative-error floor: below the smallest normal of the format the expected value has no relative
        # precision left, so the relative error is measured against max(|e|, smallest normal).
        self.tiny = (self.fmt or float_format(np.float64)).smallest_normal
        self.n = 0
        self.finite = 0
        self.sum_abs = 0.0
        self.sum_dd = 0.0
        self.sum_aa = 0.0
        self.sum_ee = 0.0
        self.sum_ae = 0.0
        self.max_abs = -1.0
        self.max_abs_flat = None
        self.max_rel = -1.0
        self.max_rel_flat = None
        self.peak = 0.0
        self.rel_counts = [0 for _ in REL_THRESHOLDS]
        self.mismatches = 0
        self.nonfinite_mismatches = 0
        self.nf = {"a": [0, 0, 0, None, None, None], "e": [0, 0, 0, None, None, None]}
        # KL divergence: eligible while every value seen is finite and >= 0.
        self.kl_ok = True
        self.kl_note = ""
        self.sum_a = 0.0
        self.sum_e = 0.0
        self.sum_elog = 0.0
        self.ulp = UlpHistogram() if self.fmt is not None else None
        # Top-k: keys (sort by key desc, flat index asc), flat indices, actual, expected.
        self.top_key = np.empty(0)
        self.top_idx = np.empty(0, dtype=np.int64)
        self.top_a = np.empty(0)
        self.top_e = np.empty(0)
        self.hist = np.zeros(len(_DECADE_LABELS), dtype=np.int64)
        self._bufs: dict[str, np.ndarray] = {}
        self.rule_state = rule.begin(self.shape)
        # The C kernel covers the hot case: a rule it implements (fast_path_params), float32 on both sides, ULPs
        # counted in fp32 (see _update_fast).
        f32 = np.dtype(np.float32)
        self._fast_params = rule.fast_path_params()
        self._kernel = _fast_kernel() if (self._fast_params is not None and np.dtype(a_dtype) == f32
                                          and np.dtype(e_dtype) == f32 and self.fmt is not None
                                          and self.fmt.dtype == f32) else None

    # -- per chunk ------------------------------------------------------------------------------------------
    def _scratch(self, key: str, m: int, dtype=np.float64) -> np.ndarray:
        """A reusable work buffer of m elements: chunk-sized temporaries are allocated once per accumulator, not
        once per chunk (a fresh 2 MiB array is a fresh mmap whose page faults cost about as much as the pass)."""
        buf = self._bufs.get(key)
        if buf is None or buf.size < m or buf.dtype != dtype:
            buf = self._bufs[key] = np.empty(m, dtype=dtype)
        return buf[:m]

    def _f64(self, key: str, x: np.ndarray) -> np.ndarray:
        """x as float64 (exact for fp16/bf16/fp32), in a reused buffer; float64 input is used as is."""
        if x.dtype == np.float64:
            return x
        out = self._scratch(key, x.size)
        np.copyto(out, x, casting="unsafe")
        return out

    def update(self, a: np.ndarray, e: np.ndarray, offset: int) -> None:
        n = a.size
        self.n += n
        if self._kernel is not None and n and self._update_fast(a, e, offset):
            return
        a64 = self._f64("a64", a)
        e64 = self._f64("e64", e)
        d = np.subtract(a64, e64, out=self._scratch("d", n))
        dd = _dot(d, d)
        if math.isfinite(dd):
            # Fast path: no NaN/inf in either chunk (a NaN/inf anywhere makes d, hence dd, non-finite).
            self._finite_pairs(a, e, a64, e64, d, dd, None, offset)
            return
        fa = np.isfinite(a64)
        fe = np.isfinite(e64)
        self._nonfinite_stats("a", a64, fa, offset)
        self._nonfinite_stats("e", e64, fe, offset)
        both = fa & fe
        if both.all():  # only the float64 sum of squares overflowed
            self._finite_pairs(a, e, a64, e64, d, dd, None, offset)
            return
        self.kl_ok, self.kl_note = False, "N/A: tensor has NaN/inf"
        sel = np.flatnonzero(both)
        if sel.size:
            d_sel = d[sel]
            self._finite_pairs(a[sel], e[sel], a64[sel], e64[sel], d_sel, _dot(d_sel, d_sel), sel, offset)
        self._nonfinite_pairs(a64, e64, ~both, offset)

    def _finite_pairs(self, a, e, a64, e64, d, dd, sel, offset) -> None:
        """Accumulate metrics over pairs that are both finite. sel: their positions within the chunk (None=all).

        Every quantity is the exact float64 one of the definition; the shortcuts below only skip work whose
        result is known without it (each says why), so they change no result, only the number of passes."""
        m = d.size
        if m == 0:
            return
        self.finite += m
        self.sum_dd += dd
        self.sum_aa += _dot(a64, a64)
        self.sum_ee += _dot(e64, e64)
        self.sum_ae += _dot(a64, e64)
        ad = np.abs(d, out=d)
        self.sum_abs += float(ad.sum())
        pos = lambda i: offset + (int(i) if sel is None else int(sel[i]))  # noqa: E731
        i = int(np.argmax(ad))
        chunk_max_abs = float(ad[i])
        if chunk_max_abs > self.max_abs:
            self.max_abs, self.max_abs_flat = chunk_max_abs, pos(i)
        self.peak = max(self.peak, _max_abs_value(e if e.dtype in _NATIVE_FLOATS else e64))
        rel, j = self._max_rel(ad, e64)
        if rel > self.max_rel:
            self.max_rel, self.max_rel_flat = rel, pos(j)
        rel_arr = None
        for t, thr in enumerate(REL_THRESHOLDS):
            if rel < thr:  # every element's relative error is <= the chunk maximum, hence below thr
                self.rel_counts[t] += m
                continue
            if rel_arr is None:
                rel_arr = self._rel_errors(ad, e64)
            below = np.less(rel_arr, thr, out=self._scratch("mask", m, np.bool_))
            self.rel_counts[t] += int(np.count_nonzero(below))
        ulp_d = None
        if self.ulp is not None:
            ulp_d = self._ulps(a, e)
            self.ulp.add(ulp_d[0], self._scratch("ulp_idx", m, np.intp))
        self.mismatches += self.rule.count_finite_mismatches(
            self.rule_state, ChunkView(ad, e64, ulp_d, offset, sel, self._scratch, chunk_max_abs))
        self._histogram(ad, chunk_max_abs)
        if self.kl_ok:
            self._kl(a64, e64)
        self._top(ad, a64, e64, sel, offset)

    def _update_fast(self, a: np.ndarray, e: np.ndarray, offset: int) -> bool:
        """_finite_pairs of a whole float32 chunk in one C pass (mschecker/_fastcompare.c); False, with nothing
        changed, when a pair is not finite (the numpy path then takes the chunk).

        Every per-element value is the same IEEE float64 operation as in the numpy path, so maxima, indices,
        counts, histograms and the top-k are identical; the five float64 sums add in another order (within the
        gamma_n bound the sum-based metrics state, like the chunk/thread merge). KL of nonnegative tensors is
        left to numpy (_kl; one log per element); the kernel returns the minima that rule it out."""
        a = np.ascontiguousarray(a)
        e = np.ascontiguousarray(e)
        m = a.size
        k = self.topk
        thr = float(self.top_key[-1]) if k and self.top_key.size >= k else (-1.0 if k else math.inf)
        cand = self._scratch("cand", m, np.int64)
        p = self._fast_params
        t = self._kernel.finite_f32(a, e, p.atol, p.rtol, float(self.tiny), *map(float, REL_THRESHOLDS),
                                    p.ulp_tol, _DECADE_EDGES, self.ulp.low, self.ulp.high, self.hist, thr, cand)
        if t is None:
            return False
        self.finite += m
        self.sum_dd += t.sum_dd
        self.sum_aa += t.sum_aa
        self.sum_ee += t.sum_ee
        self.sum_ae += t.sum_ae
        self.sum_abs += t.sum_abs
        if t.max_abs > self.max_abs:
            self.max_abs, self.max_abs_flat = t.max_abs, offset + t.max_abs_i
        self.peak = max(self.peak, t.peak)
        if t.max_rel > self.max_rel:
            self.max_rel, self.max_rel_flat = t.max_rel, offset + t.max_rel_i
        self.rel_counts[0] += t.rel_lt_1e3
        self.rel_counts[1] += t.rel_lt_5e3
        self.mismatches += t.mismatches
        self.ulp.n += m
        self.ulp.max = max(self.ulp.max, t.ulp_max)
        if self.kl_ok:
            if t.min_a < 0 or t.min_e < 0:
                self.kl_ok, self.kl_note = False, "N/A: tensor has negative values"
            else:
                self._kl(self._f64("a64", a), self._f64("e64", e))
        if t.ncand:
            c = cand[:t.ncand]
            key = np.abs(a[c].astype(np.float64) - e[c].astype(np.float64))
            self._select_top(key, c, a[c].astype(np.float64), e[c].astype(np.float64), None, offset)
        return True

    def _max_rel(self, ad, e64) -> tuple[float, int]:
        """Largest relative error |d| / max(|e|, floor) of the chunk and its first index.

        Pass-saving form: q = |d| / e, whose largest magnitude sits at argmax(q) or argmin(q) (first occurrence
        each; the lower index wins a tie of magnitudes). It equals the definition wherever |e| >= floor (division
        is sign-symmetric); where |e| < floor, |q| can only be larger than the definition (inf or NaN for e = 0),
        so when the winner has |e| >= floor no such element can exceed it, and otherwise the exact form is used."""
        with np.errstate(divide="ignore", invalid="ignore"):  # e = 0: inf or NaN, handled below
            q = np.divide(ad, e64, out=self._scratch("q", ad.size))
        j1, j2 = int(np.argmax(q)), int(np.argmin(q))
        r1, r2 = abs(float(q[j1])), abs(float(q[j2]))
        j, r = (j1, r1) if (r1 > r2 or (r1 == r2 and j1 < j2)) else (j2, r2)
        if abs(float(e64[j])) >= self.tiny and not math.isnan(r):
            return r, j
        rel = self._rel_errors(ad, e64)
        j = int(np.argmax(rel))
        return float(rel[j]), j

    def _rel_errors(self, ad, e64) -> np.ndarray:
        """|d| / max(|e|, floor) elementwise (the definition), in the q buffer."""
        den = np.abs(e64, out=self._scratch("q", ad.size))
        np.maximum(den, self.tiny, out=den)
        return np.divide(ad, den, out=den)

    def _ulps(self, a, e):
        """ULP distances of finite pairs after rounding to the ULP format; plus a mask 'both still finite there'
        when rounding could overflow (None when it cannot)."""
        fdt = self.fmt.dtype
        if a.dtype == fdt and e.dtype == fdt:
            out = self._scratch("ulp", a.size, np.dtype(f"int{self.fmt.bits}"))
            return ulp_distances_same_format(a, e, self.fmt, out, self._scratch("mask", a.size, np.bool_)), None
        with np.errstate(over="ignore", invalid="ignore"):
            ar = a if a.dtype == fdt else a.astype(fdt)
            er = e if e.dtype == fdt else e.astype(fdt)
        fin = np.isfinite(ar.astype(np.float64)) & np.isfinite(er.astype(np.float64))
        return ulp_distance_exact(ar, er, self.fmt), fin

    def _histogram(self, ad, chunk_max: float) -> None:
        """Decade histogram of |d| from counts c_k = #(|d| >= edge_k): one comparison pass per edge that can
        split the chunk, i.e. from the largest edge <= max |d| downwards until every nonzero |d| is >= the
        edge (lower edges then have the same count). A table lookup per element (np.take) measured 5-10x the
        cost of the 5-10 comparison passes real error distributions need."""
        m = ad.size
        mask = self._scratch("mask", m, np.bool_)
        nonzero = int(np.count_nonzero(np.greater(ad, 0.0, out=mask)))  # count_nonzero(float) is not SIMD
        counts = np.zeros(_DECADE_EDGES.size, dtype=np.int64)  # counts[k] = #(|d| >= _DECADE_EDGES[k])
        top = int(np.searchsorted(_DECADE_EDGES, chunk_max, side="right"))  # edges [0, top) are <= max |d|
        for k in range(top - 1, -1, -1):
            c = int(np.count_nonzero(np.greater_equal(ad, _DECADE_EDGES[k], out=mask)))
            counts[k] = c
            if c == nonzero:
                counts[:k] = nonzero
                break
        h = self.hist
        h[0] += m - nonzero
        h[1] += nonzero - counts[0]
        h[2:-1] += counts[:-1] - counts[1:]
        h[-1] += counts[-1]

    def _kl(self, a64, e64) -> None:
        """Running sums of the KL divergence of nonnegative tensors: sum a, sum e and sum e*log(e/a) over e > 0.

        One log per element of the ratio e/a (a float64 log costs ~9 ns per element here, the division 0.4).
        The ratio leaves the float64 range only for float64 tensors whose elements are > ~1e308 apart; such
        elements (found because they make the sum non-finite) use log(e) - log(a) instead, which also gives
        a = +-0 where e > 0 the defined +inf."""
        emin = float(e64.min())
        if float(a64.min()) < 0 or emin < 0:
            self.kl_ok, self.kl_note = False, "N/A: tensor has negative values"
            return
        self.sum_a += float(a64.sum())
        self.sum_e += float(e64.sum())
        if emin > 0:
            ep, ap = e64, a64
        else:
            pos = np.flatnonzero(e64 > 0)
            ep, ap = e64[pos], a64[pos]
        with np.errstate(divide="ignore", over="ignore", under="ignore"):
            logr = np.divide(ep, ap, out=self._scratch("kl", ep.size))
            np.log(logr, out=logr)
            total = _dot(ep, logr)
            if not math.isfinite(total):  # |a| since a may be -0.0 (e/-0.0 = -inf, whose log is NaN)
                bad = np.flatnonzero(~np.isfinite(logr))
                logr[bad] = np.log(ep[bad]) - np.log(np.abs(ap[bad]))
                total = _dot(ep, logr)
        self.sum_elog += total

    def _top(self, key, a64, e64, sel, offset) -> None:
        """Keep the k largest keys across chunks; ties go to the lower flat index (chunks arrive in flat order,
        so a later element never displaces an equal earlier one)."""
        k = self.topk
        if k == 0:
            return
        if self.top_key.size >= k:
            cand = np.flatnonzero(np.greater(key, self.top_key[-1], out=self._scratch("mask", key.size, np.bool_)))
        else:
            cand = np.arange(key.size)
        self._select_top(key[cand], cand, a64[cand], e64[cand], sel, offset)

    def _select_top(self, key, cand, a64, e64, sel, offset) -> None:
        """Merge candidates (key, chunk index cand ascending, values) into the top-k: only the k largest keys,
        the lowest indices among equal k-th keys, can make it."""
        k = self.topk
        if cand.size > k:
            kth = np.partition(key, cand.size - k)[cand.size - k]  # k-th largest candidate key
            keep = np.flatnonzero(key > kth)
            keep = np.concatenate([keep, np.flatnonzero(key == kth)[: k - keep.size]])
            key, cand, a64, e64 = key[keep], cand[keep], a64[keep], e64[keep]
        if cand.size == 0:
            return
        flat = offset + (cand if sel is None else sel[cand])
        self._merge_top(key, flat.astype(np.int64), a64, e64)

    def _merge_top(self, key, flat, a, e) -> None:
        keys = np.concatenate([self.top_key, key])
        idx = np.concatenate([self.top_idx, flat])
        order = np.lexsort((idx, -keys))[: self.topk]
        self.top_key = keys[order]
        self.top_idx = idx[order]
        self.top_a = np.concatenate([self.top_a, a])[order]
        self.top_e = np.concatenate([self.top_e, e])[order]

    def _nonfinite_stats(self, side, x64, finite, offset) -> None:
        st = self.nf[side]
        if finite.all():
            return
        for slot, mask in enumerate((np.isnan(x64), np.isposinf(x64), np.isneginf(x64))):
            hits = np.flatnonzero(mask)
            if hits.size:
                st[slot] += int(hits.size)
                if st[slot + 3] is None:
                    st[slot + 3] = offset + int(hits[0])

    def _nonfinite_pairs(self, a64, e64, mask, offset) -> None:
        """Pairs where at least one side is NaN/inf, judged by the rule (NaN matches NaN, inf same-sign inf)."""
        sel = np.flatnonzero(mask)
        a = a64[sel]
        e = e64[sel]
        match = self.rule.nonfinite_matches(self.rule_state, a, e, offset + sel)
        nmatch = int(np.count_nonzero(match))
        for t in range(len(REL_THRESHOLDS)):
            self.rel_counts[t] += nmatch  # equal non-finite values count as relative error 0
        bad = ~match
        nbad = int(np.count_nonzero(bad))
        self.mismatches += nbad
        self.nonfinite_mismatches += nbad
        if nbad and self.topk:
            # Non-finite mismatches rank first (key +inf); only the k lowest indices of this chunk can make it.
            first = np.flatnonzero(bad)[: self.topk]
            self._merge_top(np.full(first.size, np.inf), (offset + sel[first]).astype(np.int64), a[first], e[first])

    # -- merging workers ------------------------------------------------------------------------------------
    def merge(self, other: "_Accumulator") -> None:
        """Fold another accumulator (disjoint chunks of the same tensors) into this one, exactly as if one
        accumulator had seen all chunks: maxima keep the lowest flat index on ties, first NaN/inf positions the
        lowest, the top-k is re-ranked by (key desc, index asc); only float sums change order."""
        for f in ("n", "finite", "sum_abs", "sum_dd", "sum_aa", "sum_ee", "sum_ae", "rel_counts", "mismatches",
                  "nonfinite_mismatches", "sum_a", "sum_e", "sum_elog"):
            v = getattr(self, f)
            setattr(self, f, [x + y for x, y in zip(v, getattr(other, f))] if isinstance(v, list)
                    else v + getattr(other, f))
        for val, flat in (("max_abs", "max_abs_flat"), ("max_rel", "max_rel_flat")):
            mine, theirs = (getattr(self, val), getattr(self, flat)), (getattr(other, val), getattr(other, flat))
            if theirs[1] is not None and (mine[1] is None or theirs[0] > mine[0]
                                          or (theirs[0] == mine[0] and theirs[1] < mine[1])):
                setattr(self, val, theirs[0])
                setattr(self, flat, theirs[1])
        self.peak = max(self.peak, other.peak)
        for side in ("a", "e"):
            mine, theirs = self.nf[side], other.nf[side]
            for slot in range(3):
                mine[slot] += theirs[slot]
                firsts = [f for f in (mine[slot + 3], theirs[slot + 3]) if f is not None]
                mine[slot + 3] = min(firsts) if firsts else None
        notes = (self.kl_note, other.kl_note)
        if not (self.kl_ok and other.kl_ok):
            self.kl_ok = False
            self.kl_note = next((n for n in notes if "NaN" in n), None) or next(n for n in notes if n)
        if self.ulp is not None:
            self.ulp.low += other.ulp.low
            self.ulp.high += other.ulp.high
            self.ulp.n += other.ulp.n
            self.ulp.max = max(self.ulp.max, other.ulp.max)
        self.hist += other.hist
        self.rule.merge(self.rule_state, other.rule_state)
        if self.topk and other.top_key.size:
            self._merge_top(other.top_key, other.top_idx, other.top_a, other.top_e)

    # -- final ----------------------------------------------------------------------------------------------
    def finish(self, rechunk) -> TensorComparison:
        r = TensorComparison(name=self.name, shape=self.shape, dtype=dtype_name(self.a_dtype),
                             expected_dtype=dtype_name(self.e_dtype), size=self.n, finite_pairs=self.finite,
                             rel_err_floor=self.tiny, ulp_format=self.fmt.name if self.fmt else None)
        unravel = lambda f: None if f is None else tuple(int(i) for i in np.unravel_index(f, self.shape))  # noqa
        if self.n:
            r.frac_rel_lt_1e3 = self.rel_counts[0] / self.n
            r.frac_rel_lt_5e3 = self.rel_counts[1] / self.n
        r.mismatches = self.mismatches
        r.mismatch_frac = self.mismatches / self.n if self.n else 0.0
        r.nonfinite_mismatches = self.nonfinite_mismatches
        for side, target in (("a", "actual_nonfinite"), ("e", "expected_nonfinite")):
            s = self.nf[side]
            setattr(r, target, NonFiniteStats(s[0], s[1], s[2], unravel(s[3]), unravel(s[4]), unravel(s[5])))
        if self.finite:
            m = self.finite
            r.max_abs_err, r.max_abs_index = self.max_abs, unravel(self.max_abs_flat)
            r.max_rel_err, r.max_rel_index = self.max_rel, unravel(self.max_rel_flat)
            r.mean_abs_err = self.sum_abs / m
            r.rmse = math.sqrt(self.sum_dd / m)
            r.cosine = _cosine(self.sum_aa, self.sum_ee, self.sum_dd, self.sum_ae)
            r.rel_euclidean = _ratio_sqrt(self.sum_dd, self.sum_ee)
            r.snr_db = _db(self.sum_ee, self.sum_dd)
            r.psnr_peak = self.peak
            r.psnr_db = _psnr_db(self.peak, self.sum_dd / m)
        if self.kl_ok and self.finite:
            if self.sum_e <= 0 or self.sum_a <= 0:
                self.kl_note = "N/A: a tensor sums to 0"
            else:
                r.kl_div = max(0.0, self.sum_elog / self.sum_e + math.log(self.sum_a / self.sum_e))
                self.kl_note = "nonnegative tensors normalized to sum 1"
        elif self.kl_ok:
            self.kl_note = "N/A: no finite elements"
        r.kl_note = self.kl_note
        if self.ulp is not None and self.ulp.n:
            r.ulp_max = self.ulp.max
            r.ulp_p50, r.ulp_p99 = ulp_percentiles(self.ulp, (50, 99), rechunk, lambda a, e: self._ulps(a, e)[0])
        r.worst = [WorstElement(unravel(int(i)), float(a), float(e), float(abs(a - e)), _rel(a, e, self.tiny))
                   for key, i, a, e in zip(self.top_key, self.top_idx, self.top_a, self.top_e) if key > 0]
        r.abs_err_histogram = [(lab, int(c)) for lab, c in zip(_DECADE_LABELS, self.hist)]
        # Verdict.
        finite_mism = self.mismatches - self.nonfinite_mismatches
        if finite_mism:
            r.failed_rules.append(self.rule.finite_rule_name)
        if self.nonfinite_mismatches:
            r.failed_rules.append("nonfinite")
        if self.rule.cosine is not None and self.n and (r.cosine is None or r.cosine < self.rule.cosine):
            r.failed_rules.append("cosine")
        r.passed = not r.failed_rules
        self.rule.finish(self.rule_state, r)
        return r


def _rel(a: float, e: float, tiny: float) -> float:
    with np.errstate(all="ignore"):
        if np.isnan(a) and np.isnan(e) or (a == e):
            return 0.0
        return float(abs(a - e) / max(abs(e), tiny)) if np.isfinite(e) else float("inf")


def _cosine(aa: float, ee: float, dd: float, ae: float) -> float:
    """Cosine similarity a.e/(|a||e|) from the accumulated sums, by whichever formula has the smaller error bound.

    Each float64 sum of n terms carries a relative error up to gamma_n (Higham 3.1). The direct formula
    a.e/(|a||e|) then has an absolute error ~2 gamma_n. The equivalent 1 - (|a-e|^2 - (|a|-|e|)^2)/(2|a||e|) has
    one ~gamma_n (|a-e|^2 + (|a|-|e|)^2)/(|a||e|), far smaller for close tensors (where the direct formula
    loses 1 - cos to cancellation) and exactly 1 for identical ones; it is used when |a-e|^2 <= |a||e|.
    Both zero: 1 (identical); exactly one zero: 0."""
    na, ne = math.sqrt(aa), math.sqrt(ee)
    if na == 0 and ne == 0:
        return 1.0
    if na == 0 or ne == 0:
        return 0.0
    if not (math.isfinite(na) and math.isfinite(ne) and math.isfinite(dd)):
        return float("nan")
    if dd <= na * ne:
        c = 1.0 - (dd - (na - ne) ** 2) / (2.0 * na * ne)
    else:
        c = ae / (na * ne)
    return min(1.0, max(-1.0, c))


def _ratio_sqrt(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return math.sqrt(num / den)


def _db(signal: float, noise: float) -> float:
    """10*log10(signal/noise); +inf without noise, -inf for zero signal with noise."""
    if noise == 0:
        return float("inf")
    if signal == 0:
        return float("-inf")
    ratio = signal / noise  # float64 sums that overflowed: inf/inf is NaN (unknown), x/inf is 0 (-inf dB)
    if ratio == 0 or math.isnan(ratio):
        return float("-inf") if ratio == 0 else float("nan")
    return 10.0 * math.log10(ratio)


def _psnr_db(peak: float, mse: float) -> float:
    """10*log10(peak^2/mse); peak^2 overflows float64 for peak > ~1.3e154 (float64 tensors), where the
    equivalent 20*log10(peak) - 10*log10(mse) is used."""
    square = peak * peak
    if math.isinf(square) and mse != 0:
        return 20.0 * math.log10(peak) - 10.0 * math.log10(mse)
    return _db(square, mse)


# --------------------------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------------------------

def _default_workers(nchunks: int) -> int:
    """Threads for a comparison: one per CPU up to 8, but only for tensors of at least 8 chunks (numpy releases
    the GIL inside each per-chunk operation, so chunks of one tensor compare in parallel)."""
    return 1 if nchunks < 8 else max(1, min(8, os.cpu_count() or 1, nchunks))


def compare_arrays(actual, expected, rule: ElementRule | None = None, *, name: str = "output", topk: int = 10,
                   chunk_elems: int | None = None, workers: int | None = None) -> TensorComparison:
    """Compare one tensor with its expected value under `rule`, streaming `chunk_elems` elements at a time.

    Works on ndarrays and np.memmap alike (memmaps are read chunk by chunk, never loaded whole). Shapes must be
    equal (no broadcasting: a golden of another shape is a bad input); dtypes may differ. Raises InputError
    naming the tensor when shapes differ or a dtype is not numeric.

    workers: threads, each taking every workers-th chunk into its own accumulator; the accumulators merge
    exactly (see _Accumulator.merge), so the result does not depend on it beyond float summation order.
    None: _default_workers. Memory is O(workers * chunk).
    """
    rule = rule or ToleranceRule()
    a = actual if isinstance(actual, np.ndarray) else np.asarray(actual)
    e = expected if isinstance(expected, np.ndarray) else np.asarray(expected)
    if a.shape != e.shape:
        raise InputError(f"tensor {name!r}: actual shape {tuple(a.shape)} does not match expected shape "
                         f"{tuple(e.shape)}")
    for label, x in (("actual", a), ("expected", e)):
        if not (is_float(x.dtype) or np.issubdtype(x.dtype, np.integer) or x.dtype == np.bool_):
            raise InputError(f"tensor {name!r}: {label} dtype {x.dtype} cannot be compared numerically")
    chunk = int(chunk_elems or DEFAULT_CHUNK_ELEMS)
    if chunk <= 0:
        raise InputError(f"chunk_elems must be positive, got {chunk_elems!r}")
    nchunks = -(-a.size // chunk)
    workers = _default_workers(nchunks) if workers is None else max(1, min(int(workers), max(1, nchunks)))
    accs = [_Accumulator(name, a.shape, a.dtype, e.dtype, rule, topk) for _ in range(workers)]

    def work(i: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # errstate is per thread in numpy 2
            for (off, ac), (_, ec) in zip(_chunks(a, chunk, i, workers), _chunks(e, chunk, i, workers)):
                accs[i].update(ac, ec, off)

    if workers == 1:
        work(0)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(workers, thread_name_prefix="mschecker-compare") as pool:
            list(pool.map(work, range(workers)))  # list() re-raises a worker's exception here
    acc = accs[0]
    for other in accs[1:]:
        acc.merge(other)

    def rechunk():
        for (_, ac), (_, ec) in zip(_chunks(a, chunk), _chunks(e, chunk)):
            yield ac, ec

    with np.errstate(over="ignore", invalid="ignore"):
        return acc.finish(rechunk)
