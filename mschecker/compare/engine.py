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

The tolerance rule (numpy.isclose / torch.testing.assert_close convention) is documented in `ToleranceRule` and
in docs/TOLERANCE.md; the JSON form of the results in docs/REPORT_SCHEMA.md.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from .dtypes import FloatFormat, dtype_name, float_format, is_float, resolve_dtype, ulp_distance_exact
from .errors import InputError
from . import dtypes as _dtypes

try:  # optional one-pass C kernel (setup.py); without it the numpy path below does the same work
    from . import _fastcompare
except ImportError:  # pragma: no cover - depends on whether a C compiler was available at install time
    _fastcompare = None


def _fast_kernel():
    """The C kernel module, or None when it is not built or MSCHECKER_NO_FASTCOMPARE=1 forces the numpy path
    (read per comparison, so tests can compare both paths)."""
    if os.environ.get("MSCHECKER_NO_FASTCOMPARE", "") not in ("", "0"):
        return None
    return _fastcompare

SCHEMA_VERSION = 1

#: Defaults when no elementwise option is given: Polygraphy's defaults (atol = rtol = 1e-5), also torch's fp32
#: atol. A user checking fp16/bf16 outputs should pass a tolerance derived from the format (docs/TOLERANCE.md).
DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-5

#: Thresholds of Ascend's "thousandth ratio" style metrics (NUMERICS.md section 4).
REL_THRESHOLDS = (1e-3, 5e-3)

#: Default streaming chunk, in elements: 128 Ki elements = 1 MiB per float64 buffer; each worker reuses about
#: eight chunk-sized buffers (~8 MB, in L3 cache) whatever the tensor size. Measured (1 worker, 2^24 float32
#: elements, best of 3, interleaved; ns per element for rel. noise 1e-6 / 1e-3): 2^15 11.8 / 17.7, 2^16
#: 10.2-10.6 / 16.0-19.9, 2^17 9.8-10.0 / 18.1-18.3, 2^18 12.6-15.1 / 19.8-20.0: per-call overhead of ~40 numpy
#: calls per chunk below, cache misses above.
DEFAULT_CHUNK_ELEMS = 1 << 17

# ULP distances below this are counted in exact bins; larger ones in power-of-two buckets that a later pass
# resolves exactly when a percentile falls there (see _UlpHistogram).
_EXACT_ULP_BINS = 1 << 16


# --------------------------------------------------------------------------------------------------------------
# The tolerance rule
# --------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToleranceRule:
    """The pass/fail rule, following the numpy.isclose / torch.testing.assert_close convention.

    Element rule (expected e, actual a; asymmetric: the tolerance scales with the *expected* value):
      * both finite: the element matches when |a - e| <= atol + rtol * |e|, or, when `ulp` is set, when
        a and e rounded to the ULP format are both finite and at most `ulp` representable values apart;
      * NaN matches only NaN (at the same position); +inf matches only +inf and -inf only -inf;
      * a NaN or inf where the other side has a finite value (or the other infinity) is a mismatch.
    Tensor rule: every element matches, and, when `cosine` is set, the cosine similarity over the finite pairs
    is >= `cosine` (a tensor with no finite pair fails a cosine rule: the similarity cannot be computed).

    `ulp_format` names the format ULPs are counted in (fp16, bf16, fp32, fp64); None means the coarser (fewer
    mantissa bits) of the two tensors' float dtypes, the expected one on a tie; integer tensors then have no ULP
    and `ulp` accepts nothing extra there. Unlike Polygraphy (an element fails only when it breaks
    both atol and rtol) the bound here is the sum atol + rtol*|e|, as numpy and torch define it.
    """

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    ulp: int | None = None
    cosine: float | None = None
    ulp_format: str | None = None

    def __post_init__(self):
        for name in ("atol", "rtol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v >= 0):
                raise InputError(f"tolerance: {name} must be a finite number >= 0, got {v!r}")
        if self.ulp is not None and (isinstance(self.ulp, bool) or int(self.ulp) != self.ulp or self.ulp < 0):
            raise InputError(f"tolerance: ulp must be an integer >= 0, got {self.ulp!r}")
        if self.cosine is not None and not (-1.0 <= float(self.cosine) <= 1.0):
            raise InputError(f"tolerance: cosine must lie in [-1, 1], got {self.cosine!r}")
        if self.ulp_format is not None:
            try:
                float_format(resolve_dtype(self.ulp_format))
            except ValueError:
                raise InputError(f"tolerance: ulp format must be fp16, bf16, fp32 or fp64, got {self.ulp_format!r}")

    @classmethod
    def from_args(cls, tolerance=None, atol=None, rtol=None, ulp=None, cosine=None, ulp_format=None):
        """Build the rule from command-line style options.

        * `tolerance=T` alone means atol = rtol = T; an explicit `atol`/`rtol` overrides its half.
        * When any elementwise option (tolerance, atol, rtol, ulp) is given, the unspecified ones are 0 / off:
          `--atol 1e-3` alone is a pure absolute rule and `--ulp 4` alone a pure ULP rule.
        * When none is given: atol = rtol = 1e-5 (DEFAULT_ATOL/DEFAULT_RTOL).
        * `cosine` is a tensor-level rule added on top; it does not change the element rule.
        """
        def num(name, v):
            try:
                return float(v)
            except (TypeError, ValueError):
                raise InputError(f"tolerance: {name} must be a number, got {v!r}") from None

        any_elementwise = any(v is not None for v in (tolerance, atol, rtol, ulp))
        base = num("tolerance", tolerance) if tolerance is not None else (0.0 if any_elementwise else None)
        a = num("atol", atol) if atol is not None else (base if base is not None else DEFAULT_ATOL)
        r = num("rtol", rtol) if rtol is not None else (base if base is not None else DEFAULT_RTOL)
        if ulp is not None:
            u = num("ulp", ulp)
            if not u.is_integer():
                raise InputError(f"tolerance: ulp must be an integer >= 0, got {ulp!r}")
            ulp = int(u)
        c = num("cosine", cosine) if cosine is not None else None
        return cls(atol=a, rtol=r, ulp=ulp, cosine=c, ulp_format=ulp_format)

    def describe(self) -> str:
        """One line that states the rule exactly."""
        parts = [f"|actual - expected| <= {self.atol:g} + {self.rtol:g}*|expected|"]
        if self.ulp is not None:
            fmt = dtype_name(resolve_dtype(self.ulp_format)) if self.ulp_format else "the coarser dtype"
            parts.append(f"or within {self.ulp} ULP of {fmt}")
        text = " ".join(parts) + " (numpy.isclose convention); NaN matches NaN, inf matches same-sign inf"
        if self.cosine is not None:
            text += f"; cosine >= {self.cosine:g}"
        return text

    def to_dict(self) -> dict:
        return {
            "convention": "numpy.isclose",
            "atol": float(self.atol),
            "rtol": float(self.rtol),
            "ulp": self.ulp,
            "ulp_format": dtype_name(resolve_dtype(self.ulp_format)) if self.ulp_format else None,
            "cosine": None if self.cosine is None else float(self.cosine),
            "text": self.describe(),
        }


# --------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------

@dataclass
class NonFiniteStats:
    """NaN / +inf / -inf counts of one tensor and the multi-dimensional index of the first of each (or None)."""

    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    first_nan: tuple | None = None
    first_posinf: tuple | None = None
    first_neginf: tuple | None = None

    @property
    def total(self) -> int:
        return self.nan + self.posinf + self.neginf

    def to_dict(self) -> dict:
        idx = lambda t: None if t is None else [int(i) for i in t]  # noqa: E731
        return {"nan": self.nan, "posinf": self.posinf, "neginf": self.neginf,
                "first_nan": idx(self.first_nan), "first_posinf": idx(self.first_posinf),
                "first_neginf": idx(self.first_neginf)}


@dataclass
class WorstElement:
    """One of the k worst elements: ranked by |actual - expected|, non-finite mismatches first."""

    index: tuple
    actual: float
    expected: float
    abs_err: float
    rel_err: float

    def __iter__(self):  # unpacks as (index, actual, expected, abs_err, rel_err)
        return iter((self.index, self.actual, self.expected, self.abs_err, self.rel_err))

    def to_dict(self) -> dict:
        return {"index": [int(i) for i in self.index], "actual": _json_float(self.actual),
                "expected": _json_float(self.expected), "abs_err": _json_float(self.abs_err),
                "rel_err": _json_float(self.rel_err)}


@dataclass
class TensorComparison:
    """Metrics and verdict for one output tensor. Field meanings: docs/REPORT_SCHEMA.md.

    Error metrics (max/mean abs, relative, RMSE, cosine, relative Euclidean, SNR, PSNR, KL, ULP) are computed
    over the `finite_pairs` elements where both tensors are finite; non-finite values are reported by the
    NaN/inf statistics and are judged by the tolerance rule (they count in `mismatches`). A metric that cannot
    be computed (no finite pair, KL of a signed tensor, ULP of a non-float tensor) is None.
    """

    name: str
    shape: tuple
    dtype: str
    expected_dtype: str
    size: int
    passed: bool = True
    failed_rules: list[str] = field(default_factory=list)
    finite_pairs: int = 0
    max_abs_err: float | None = None
    max_abs_index: tuple | None = None
    max_rel_err: float | None = None
    max_rel_index: tuple | None = None
    rel_err_floor: float = 0.0
    mean_abs_err: float | None = None
    rmse: float | None = None
    cosine: float | None = None
    rel_euclidean: float | None = None
    snr_db: float | None = None
    psnr_db: float | None = None
    psnr_peak: float | None = None
    kl_div: float | None = None
    kl_note: str = ""
    ulp_format: str | None = None
    ulp_max: int | None = None
    ulp_p50: int | None = None
    ulp_p99: int | None = None
    frac_rel_lt_1e3: float | None = None
    frac_rel_lt_5e3: float | None = None
    mismatches: int = 0
    mismatch_frac: float = 0.0
    nonfinite_mismatches: int = 0
    actual_nonfinite: NonFiniteStats = field(default_factory=NonFiniteStats)
    expected_nonfinite: NonFiniteStats = field(default_factory=NonFiniteStats)
    worst: list[WorstElement] = field(default_factory=list)
    abs_err_histogram: list[tuple[str, int]] = field(default_factory=list)

    # Flat aliases named in apis.md ("nan/inf counts and first positions for actual and expected").
    @property
    def actual_nan(self) -> int:
        return self.actual_nonfinite.nan

    @property
    def actual_inf(self) -> int:
        return self.actual_nonfinite.posinf + self.actual_nonfinite.neginf

    @property
    def expected_nan(self) -> int:
        return self.expected_nonfinite.nan

    @property
    def expected_inf(self) -> int:
        return self.expected_nonfinite.posinf + self.expected_nonfinite.neginf

    def to_dict(self) -> dict:
        idx = lambda t: None if t is None else [int(i) for i in t]  # noqa: E731
        return {
            "name": self.name,
            "passed": self.passed,
            "failed_rules": list(self.failed_rules),
            "shape": [int(s) for s in self.shape],
            "dtype": self.dtype,
            "expected_dtype": self.expected_dtype,
            "size": self.size,
            "finite_pairs": self.finite_pairs,
            "mismatches": self.mismatches,
            "mismatch_frac": _json_float(self.mismatch_frac),
            "nonfinite_mismatches": self.nonfinite_mismatches,
            "metrics": {
                "max_abs_err": _json_float(self.max_abs_err),
                "max_abs_index": idx(self.max_abs_index),
                "max_rel_err": _json_float(self.max_rel_err),
                "max_rel_index": idx(self.max_rel_index),
                "rel_err_floor": _json_float(self.rel_err_floor),
                "mean_abs_err": _json_float(self.mean_abs_err),
                "rmse": _json_float(self.rmse),
                "cosine": _json_float(self.cosine),
                "rel_euclidean": _json_float(self.rel_euclidean),
                "snr_db": _json_float(self.snr_db),
                "psnr_db": _json_float(self.psnr_db),
                "psnr_peak": _json_float(self.psnr_peak),
                "kl_div": _json_float(self.kl_div),
                "kl_note": self.kl_note,
                "ulp_format": self.ulp_format,
                "ulp_max": self.ulp_max,
                "ulp_p50": self.ulp_p50,
                "ulp_p99": self.ulp_p99,
                "frac_rel_lt_1e3": _json_float(self.frac_rel_lt_1e3),
                "frac_rel_lt_5e3": _json_float(self.frac_rel_lt_5e3),
            },
            "nonfinite": {"actual": self.actual_nonfinite.to_dict(),
                          "expected": self.expected_nonfinite.to_dict()},
            "worst": [w.to_dict() for w in self.worst],
            "abs_err_histogram": [{"bucket": b, "count": c} for b, c in self.abs_err_histogram],
        }


@dataclass
class CheckReport:
    """A whole check: one TensorComparison per output, the rule, and free-form metadata.

    `meta` holds what the caller knows (model, inputs, golden, runner/device, profile, timings...); it must be
    JSON-serialisable. `passed` is True when every tensor passed (vacuously True for an empty report; the CLI
    treats "nothing compared" as bad input before it gets here).
    """

    tensors: list[TensorComparison]
    rule: ToleranceRule
    meta: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(t.passed for t in self.tensors)

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "mschecker",
            "passed": self.passed,
            "verdict": "PASS" if self.passed else "FAIL",
            "rule": self.rule.to_dict(),
            "summary": {
                "tensors": len(self.tensors),
                "failed": sum(not t.passed for t in self.tensors),
                "failed_names": [t.name for t in self.tensors if not t.passed],
            },
            "meta": _json_safe(self.meta),
            "tensors": [t.to_dict() for t in self.tensors],
        }


def _json_float(v):
    """JSON has no NaN/inf: encode them as the strings "nan", "inf", "-inf"; None (N/A) stays null."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _json_float(obj)
    if obj is None or isinstance(obj, str):
        return obj
    return str(obj)


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
                _release_pages(part)
    else:
        for start in starts:
            yield start, np.asarray(x.flat[start:start + chunk])


_LIBC = None
_PAGE = 4096


def _release_pages(part: np.ndarray) -> None:
    """madvise(MADV_DONTNEED) the whole pages of a read-only file mapping (Linux; a no-op elsewhere)."""
    global _LIBC, _PAGE
    if _LIBC is None:
        try:
            import ctypes
            import mmap
            import sys

            _LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else False
            _PAGE = mmap.PAGESIZE
        except OSError:
            _LIBC = False
    if not _LIBC or part.nbytes < _PAGE:
        return
    import ctypes

    addr = part.ctypes.data
    start = -(-addr // _PAGE) * _PAGE
    end = (addr + part.nbytes) // _PAGE * _PAGE
    if end > start:
        _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), 4)  # 4 = MADV_DONTNEED


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


def _to_f64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float64, copy=False)


# Exact ULP distance in the format's own integer width (dtypes.ulp_distance_exact); named here for the tests.
_ulp_distances = ulp_distance_exact


def _ulp_format(rule: ToleranceRule, a_dtype, e_dtype) -> FloatFormat | None:
    """The format ULPs are counted in: the rule's, else the coarser (fewer mantissa bits) of the two float dtypes
    (expected's on a tie), else None (integer tensors have no ULP). Counting in the finer format would measure
    the rounding of the coarser side to its own format, not the error."""
    if rule.ulp_format:
        return float_format(resolve_dtype(rule.ulp_format))
    fmts = [float_format(d) for d in (e_dtype, a_dtype) if is_float(d)]
    return min(fmts, key=lambda f: f.mantissa_bits) if fmts else None


def _ulp_distances_same_format(a: np.ndarray, e: np.ndarray, fmt: FloatFormat, out: np.ndarray | None = None,
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


_NATIVE_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _max_abs_value(x: np.ndarray) -> float:
    """max |x| of a non-empty finite array without an |x| pass: max(max x, -min x) (negation is exact)."""
    return max(float(x.max()), -float(x.min()))


# |err| histogram: bucket 0 holds exact zeros, 1 holds (0, 1e-12), then one bucket per decade up to [1e1, 1e2),
# and the last holds [1e2, inf]. Edges are the float64 values 1e-12 ... 1e2 (counted by _Accumulator._histogram).
_DECADE_EDGES = 10.0 ** np.arange(-12, 3)
_DECADE_LABELS = ["0", "<1e-12"] + [f"[1e{k},1e{k + 1})" for k in range(-12, 2)] + ["≥1e2"]


def _floor_log2(v: np.ndarray) -> np.ndarray:
    """floor(log2 v) of positive unsigned integers, from the float64 exponent (np.searchsorted over the 48
    power-of-two edges measured ~30 ns per element, this ~1). A uint64 above 2^53 can round up to the next
    power of two when converted, which the last step undoes."""
    k = (v.astype(np.float64).view(np.int64) >> 52) - 1023
    if v.dtype.itemsize == 8:
        np.minimum(k, 63, out=k)
        k -= np.left_shift(np.uint64(1), k.astype(np.uint64)) > v
    return k


class _UlpHistogram:
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
        cum_low = np.cumsum(self.low)
        if r <= cum_low[-1]:
            return int(np.searchsorted(cum_low, r))
        r -= int(cum_low[-1])
        cum_high = np.cumsum(self.high)
        k = int(np.searchsorted(cum_high, r))
        before = int(cum_high[k - 1]) if k else 0
        return (1 << k, 1 << k, r - before, int(self.high[k]))


# --------------------------------------------------------------------------------------------------------------
# The accumulator
# --------------------------------------------------------------------------------------------------------------

class _Accumulator:
    """Running state of one comparison; `update` takes matching chunks, `finish` builds the TensorComparison."""

    def __init__(self, name, shape, a_dtype, e_dtype, rule: ToleranceRule, topk: int):
        self.name, self.shape, self.rule, self.topk = name, tuple(shape), rule, max(0, int(topk))
        self.a_dtype, self.e_dtype = a_dtype, e_dtype
        self.fmt: FloatFormat | None = _ulp_format(rule, a_dtype, e_dtype)
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
        self.ulp = _UlpHistogram() if self.fmt is not None else None
        # Top-k: keys (sort by key desc, flat index asc), flat indices, actual, expected.
        self.top_key = np.empty(0)
        self.top_idx = np.empty(0, dtype=np.int64)
        self.top_a = np.empty(0)
        self.top_e = np.empty(0)
        self.hist = np.zeros(len(_DECADE_LABELS), dtype=np.int64)
        self._bufs: dict[str, np.ndarray] = {}
        # The C kernel covers the hot case: float32 on both sides, ULPs counted in fp32 (see _update_fast).
        f32 = np.dtype(np.float32)
        self._kernel = _fast_kernel() if (np.dtype(a_dtype) == f32 and np.dtype(e_dtype) == f32
                                          and self.fmt is not None and self.fmt.dtype == f32) else None

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
        # Element rule |d| <= atol + rtol*|e|: the bound is >= atol for every element (rtol*|e| >= 0 and float64
        # rounding is monotone), so a chunk whose largest |d| is <= atol has no mismatch and needs no bound.
        if chunk_max_abs > self.rule.atol:
            self.mismatches += self._count_mismatches(ad, e64, ulp_d)
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
        out = self._kernel.finite_f32(a, e, float(self.rule.atol), float(self.rule.rtol), float(self.tiny),
                                      *map(float, REL_THRESHOLDS),
                                      -1 if self.rule.ulp is None else int(self.rule.ulp), _DECADE_EDGES,
                                      self.ulp.low, self.ulp.high, self.hist, thr, cand)
        if out is None:
            return False
        (sdd, saa, see, sae, sabs, max_abs, max_abs_i, peak, max_rel, max_rel_i, rel0, rel1, mism, ulp_max,
         ncand, min_a, min_e) = out
        self.finite += m
        self.sum_dd += sdd
        self.sum_aa += saa
        self.sum_ee += see
        self.sum_ae += sae
        self.sum_abs += sabs
        if max_abs > self.max_abs:
            self.max_abs, self.max_abs_flat = max_abs, offset + max_abs_i
        self.peak = max(self.peak, peak)
        if max_rel > self.max_rel:
            self.max_rel, self.max_rel_flat = max_rel, offset + max_rel_i
        self.rel_counts[0] += rel0
        self.rel_counts[1] += rel1
        self.mismatches += mism
        self.ulp.n += m
        self.ulp.max = max(self.ulp.max, ulp_max)
        if self.kl_ok:
            if min_a < 0 or min_e < 0:
                self.kl_ok, self.kl_note = False, "N/A: tensor has negative values"
            else:
                self._kl(self._f64("a64", a), self._f64("e64", e))
        if ncand:
            c = cand[:ncand]
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

    def _count_mismatches(self, ad, e64, ulp_d) -> int:
        """Elements outside the element rule: |d| > atol + rtol*|e| and, when the rule has a ULP clause, not
        within `ulp` ULPs with both sides finite in the ULP format."""
        bound = np.abs(e64, out=self._scratch("bound", ad.size))
        bound *= self.rule.rtol
        bound += self.rule.atol
        over = np.greater(ad, bound, out=self._scratch("over", ad.size, np.bool_))
        if ulp_d is not None and self.rule.ulp is not None and over.any():
            dist, fin_fmt = ulp_d
            # Outside the ULP clause as well: more than `ulp` apart, or not both finite in the ULP format.
            far = np.greater(dist, self.rule.ulp, out=self._scratch("far", ad.size, np.bool_))
            if fin_fmt is not None:
                far |= ~fin_fmt
            over &= far
        return int(np.count_nonzero(over))

    def _ulps(self, a, e):
        """ULP distances of finite pairs after rounding to the ULP format; plus a mask 'both still finite there'
        when rounding could overflow (None when it cannot)."""
        fdt = self.fmt.dtype
        if a.dtype == fdt and e.dtype == fdt:
            out = self._scratch("ulp", a.size, np.dtype(f"int{self.fmt.bits}"))
            return _ulp_distances_same_format(a, e, self.fmt, out, self._scratch("mask", a.size, np.bool_)), None
        with np.errstate(over="ignore", invalid="ignore"):
            ar = a if a.dtype == fdt else a.astype(fdt)
            er = e if e.dtype == fdt else e.astype(fdt)
        fin = np.isfinite(ar.astype(np.float64)) & np.isfinite(er.astype(np.float64))
        return _ulp_distances(ar, er, self.fmt), fin

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
        """Pairs where at least one side is NaN/inf: NaN matches NaN, inf matches same-sign inf, else mismatch."""
        sel = np.flatnonzero(mask)
        a = a64[sel]
        e = e64[sel]
        match = (np.isnan(a) & np.isnan(e)) | (a == e)
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
            r.ulp_p50, r.ulp_p99 = _ulp_percentiles(self.ulp, (50, 99), rechunk, self)
        r.worst = [WorstElement(unravel(int(i)), float(a), float(e), float(abs(a - e)), _rel(a, e, self.tiny))
                   for key, i, a, e in zip(self.top_key, self.top_idx, self.top_a, self.top_e) if key > 0]
        r.abs_err_histogram = [(lab, int(c)) for lab, c in zip(_DECADE_LABELS, self.hist)]
        # Verdict.
        finite_mism = self.mismatches - self.nonfinite_mismatches
        if finite_mism:
            r.failed_rules.append("elementwise")
        if self.nonfinite_mismatches:
            r.failed_rules.append("nonfinite")
        if self.rule.cosine is not None and self.n and (r.cosine is None or r.cosine < self.rule.cosine):
            r.failed_rules.append("cosine")
        r.passed = not r.failed_rules
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


#: A percentile bucket holding at most this many distances is resolved by collecting them (8 bytes each).
_COLLECT_LIMIT = 1 << 22


def _ulp_percentiles(hist: _UlpHistogram, percentiles, rechunk, acc: "_Accumulator") -> tuple:
    """Exact nearest-rank percentiles. A rank in an exact bin is read off; a rank in a power-of-two bucket is
    resolved by re-streaming: the bucket's distances are collected and partitioned when there are at most
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
            a64, e64 = _to_f64(a_c), _to_f64(e_c)
            both = np.isfinite(a64) & np.isfinite(e64)
            if not both.all():
                a_c, e_c = a_c[both], e_c[both]
            d = acc._ulps(a_c, e_c)[0].astype(np.uint64)
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


# --------------------------------------------------------------------------------------------------------------
# Public entry point
# --------------------------------------------------------------------------------------------------------------

def _default_workers(nchunks: int) -> int:
    """Threads for a comparison: one per CPU up to 8, but only for tensors of at least 8 chunks (numpy releases
    the GIL inside each per-chunk operation, so chunks of one tensor compare in parallel)."""
    return 1 if nchunks < 8 else max(1, min(8, os.cpu_count() or 1, nchunks))


def compare_arrays(actual, expected, rule: ToleranceRule | None = None, *, name: str = "output", topk: int = 10,
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
