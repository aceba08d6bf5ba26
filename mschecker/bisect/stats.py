"""What one produced tensor looks like next to the float64 reference: error metrics and fp16/bf16 headroom.

ErrorStats wraps mschecker.compare.compare_arrays (the project's one metrics engine) and keeps the numbers the
bisection ranks and reports on: relative L2 error, max abs / max rel error, cosine, ULP p99 (in the coarser
format: the NPU's storage format against float64) and msprobe's thousandth / five-thousandth ratios (share of
elements with relative error below 1e-3 / 5e-3). A NaN or inf where the reference is finite makes rel_l2 inf:
an error metric over the finite pairs alone would call a half-NaN tensor accurate.

Headroom describes the NPU tensor alone: its largest finite |x| as a fraction of the format's max, NaN / inf
counts, elements sitting at +-max (what saturation mode turns an overflow into), overflows a saturation-mode
policy clamped away (counted before the clamp, see policy.RecordingNpuPolicy) and the share of nonzero elements
below the smallest normal (flushed or subnormal: precision loss at the small end).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mschecker.compare import ToleranceRule, compare_arrays, json_float
from mschecker.dtypes import dtype_name, float_format
from mschecker.fastfp16 import fast_fp16


_F16 = np.dtype(np.float16)
BRIEF_CHUNK = 1 << 20  # elements per chunk of ErrorStats.brief (8 MB of float64 per scratch array)


@dataclass
class ErrorStats:
    """Error of one tensor against its reference value (worst over the input samples once merged)."""

    rel_l2: float
    max_abs: float | None
    max_rel: float | None
    cosine: float | None
    ulp_p99: int | None
    ratio_1e3: float | None  # share of elements with relative error < 1e-3 (msprobe's thousandth ratio)
    ratio_5e3: float | None  # share of elements with relative error < 5e-3
    passed: bool             # the tolerance rule (mschecker.compare.ToleranceRule) holds for every element

    @classmethod
    def of(cls, actual: np.ndarray, expected: np.ndarray, rule: ToleranceRule, name: str) -> "ErrorStats":
        c = compare_arrays(actual, expected, rule, name=name, topk=1)
        rel = c.rel_euclidean
        if c.nonfinite_mismatches or rel is None:
            rel = math.inf if (c.nonfinite_mismatches or c.finite_pairs == 0 and c.size) else 0.0
        return cls(rel_l2=float(rel), max_abs=c.max_abs_err, max_rel=c.max_rel_err, cosine=c.cosine,
                   ulp_p99=c.ulp_p99, ratio_1e3=c.frac_rel_lt_1e3, ratio_5e3=c.frac_rel_lt_5e3, passed=c.passed)

    @classmethod
    def brief(cls, actual: np.ndarray, expected: np.ndarray, rule: ToleranceRule) -> "ErrorStats":
        """rel_l2, max_abs, max_rel and the rule's verdict only, in a few float64 passes over chunks of
        BRIEF_CHUNK elements (bounded scratch memory, like compare_arrays): the own-error runs need no more
        (ranking by rel_l2), and the full metrics would double the lockstep pass's comparison time (measured:
        compare_arrays was half of it). Other fields None."""
        a_all = np.asarray(actual).reshape(-1)
        e_all = np.asarray(expected).reshape(-1)
        bad, dd, ee, max_abs, max_rel, ok = 0, 0.0, 0.0, 0.0, 0.0, True
        for lo in range(0, a_all.size, BRIEF_CHUNK):
            a = a_all[lo:lo + BRIEF_CHUNK].astype(np.float64)
            e = e_all[lo:lo + BRIEF_CHUNK].astype(np.float64)
            a_fin, e_fin = np.isfinite(a), np.isfinite(e)
            both = a_fin & e_fin
            if not both.all():
                same = ~a_fin & ~e_fin & ((np.isnan(a) & np.isnan(e)) | (a == e))
                bad += int((~both & ~same).sum())
                a, e = a[both], e[both]
            d = np.abs(a - e)
            dd += float(np.dot(d, d))
            ee += float(np.dot(e, e))
            if d.size:
                max_abs = max(max_abs, float(d.max()))
                ae = np.abs(e)
                with np.errstate(divide="ignore", invalid="ignore"):
                    r = np.where(ae > 0, d / ae, np.where(d == 0, 0.0, np.inf))
                max_rel = max(max_rel, float(r.max()))
                ok = ok and bool(np.all(d <= rule.atol + rule.rtol * ae))
        dist, norm = math.sqrt(dd), math.sqrt(ee)
        rel = math.inf if bad else (dist / norm if norm else (0.0 if dist == 0 else math.inf))
        return cls(rel, max_abs, max_rel, None, None, None, None, ok and not bad)

    def worst(self, other: "ErrorStats | None") -> "ErrorStats":
        """Field by field the worse of two samples' stats (larger errors, smaller cosine and ratios)."""
        if other is None:
            return self

        def hi(a, b):
            return b if a is None else a if b is None else max(a, b)

        def lo(a, b):
            return b if a is None else a if b is None else min(a, b)
        return ErrorStats(max(self.rel_l2, other.rel_l2), hi(self.max_abs, other.max_abs),
                          hi(self.max_rel, other.max_rel), lo(self.cosine, other.cosine),
                          hi(self.ulp_p99, other.ulp_p99), lo(self.ratio_1e3, other.ratio_1e3),
                          lo(self.ratio_5e3, other.ratio_5e3), self.passed and other.passed)

    def to_dict(self) -> dict:
        return {"rel_l2": json_float(self.rel_l2), "max_abs": json_float(self.max_abs), "max_rel": json_float(self.max_rel),
                "cosine": json_float(self.cosine), "ulp_p99": self.ulp_p99, "ratio_1e3": json_float(self.ratio_1e3),
                "ratio_5e3": json_float(self.ratio_5e3), "passed": self.passed}


@dataclass
class Headroom:
    """Range use of one NPU tensor in its storage format."""

    dtype: str
    peak: float               # max |finite x|
    fraction_of_max: float    # peak / the format's largest finite value
    nan: int
    inf: int
    saturated: int            # elements at +-max (2-byte formats only: a genuine fp32 value there is vanishingly rare)
    hidden_overflow: int      # inf/NaN a saturation-mode policy clamped to +-max / 0 (counted before the clamp)
    below_normal_share: float  # nonzero elements with |x| < smallest normal, over all elements
    hidden_nan: int = 0       # the NaN among hidden_overflow (clamped to 0)

    @classmethod
    def of(cls, value: np.ndarray, hidden: int = 0, hidden_nan: int = 0) -> "Headroom":
        """Counted over chunks of BRIEF_CHUNK elements (float32 scratch; every format fits float32 exactly); fp16
        from its bits in one compiled pass where mschecker._fastfp16 is built (the same counts, ~15x faster: the SD
        check measures every tensor of the run it judges, 268M-value attention tensors included)."""
        fmt = float_format(value.dtype)
        if value.dtype == _F16:
            fast = fast_fp16()
            counts = fast.half_range(np.ascontiguousarray(value)) if fast is not None else None
            if counts is not None:
                peak_bits, nan, inf, sat, tiny = counts
                peak = float(np.uint16(peak_bits).view(np.float16))
                return cls(dtype_name(value.dtype), peak, peak / fmt.max, nan, inf, sat, int(hidden),
                           tiny / value.size if value.size else 0.0, int(hidden_nan))
        flat = np.asarray(value).reshape(-1)
        two_byte = value.dtype.itemsize <= 2
        peak, nan, inf, sat, tiny = 0.0, 0, 0, 0, 0
        for lo in range(0, flat.size, BRIEF_CHUNK):
            x = flat[lo:lo + BRIEF_CHUNK]
            x = x.astype(np.float32) if two_byte else x
            finite = np.isfinite(x)
            if not finite.all():
                nan += int(np.isnan(x).sum())
                inf += int(np.isinf(x).sum())
                x = x[finite]
            mag = np.abs(x)
            if mag.size:
                peak = max(peak, float(mag.max()))
                if two_byte:
                    sat += int((mag >= fmt.max).sum())
                tiny += int(((mag > 0) & (mag < fmt.smallest_normal)).sum())
        size = flat.size
        return cls(dtype_name(value.dtype), peak, peak / fmt.max, nan, inf, sat, int(hidden),
                   tiny / size if size else 0.0, int(hidden_nan))

    @property
    def overflowed(self) -> bool:
        """Non-finite, clamped or sitting at the format's max: the tensor left the format's range."""
        return bool(self.nan or self.inf or self.saturated or self.hidden_overflow)

    def worst(self, other: "Headroom | None") -> "Headroom":
        if other is None:
            return self
        return Headroom(self.dtype, max(self.peak, other.peak), max(self.fraction_of_max, other.fraction_of_max),
                        max(self.nan, other.nan), max(self.inf, other.inf), max(self.saturated, other.saturated),
                        max(self.hidden_overflow, other.hidden_overflow),
                        max(self.below_normal_share, other.below_normal_share),
                        max(self.hidden_nan, other.hidden_nan))

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "peak": json_float(self.peak), "fraction_of_max": json_float(self.fraction_of_max),
                "nan": self.nan, "inf": self.inf, "saturated": self.saturated,
                "hidden_overflow": self.hidden_overflow, "hidden_nan": self.hidden_nan,
                "below_normal_share": json_float(self.below_normal_share)}


@dataclass
class ReferenceRange:
    """What the reference value of a tensor looked like (over every sample): decides whether an inf on the NPU
    side is an overflow of the computation (the true value fits the format) or a value no fp16 can hold."""

    peak: float = 0.0        # max |finite x|
    nonfinite: bool = False  # the reference itself holds inf/NaN (e.g. a -inf mask)

    def add(self, value: np.ndarray) -> None:
        x = np.asarray(value, dtype=np.float64)
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite = True
            x = np.where(finite, x, 0)
        if x.size:
            self.peak = max(self.peak, float(np.abs(x).max()))


#: Headroom below one binade: a tensor whose largest |x| is at least half the format's max overflows when its
#: values double, which a slightly different input easily does (the report's first_low_headroom).
LOW_HEADROOM = 0.5

#: A reference magnitude at or above this is a sentinel that stands for infinity (attention masks of -1e9 or
#: float32's -3.4e38 in real exports), not an activation: fp16's -inf represents it faithfully. Activations of
#: real networks stay far below it (the SD VAE's overflowing GroupNorm statistics peak near 1e7).
SENTINEL_MAGNITUDE = 1e9


def is_overflow(head: Headroom, ref: ReferenceRange | None) -> bool:
    """An NPU tensor overflowed when it holds inf/NaN (or ones saturation clamped) that the reference does not
    explain: the reference is finite there and below SENTINEL_MAGNITUDE. An inf that stands for a sentinel (a
    -3.4e38 mask in fp16) is shown in the headroom but is no failure; a NaN it causes downstream is one there."""
    if not (head.nan or head.inf or head.hidden_overflow):
        return False
    if ref is None:
        return True
    return not ref.nonfinite and ref.peak < SENTINEL_MAGNITUDE
