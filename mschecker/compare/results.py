"""What a comparison returns: per-tensor metrics and verdict (TensorComparison), a whole check (CheckReport), and
the JSON encoding every mschecker report shares (NaN/inf as strings; docs/REPORT_SCHEMA.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

SCHEMA_VERSION = 1


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
        return {"index": [int(i) for i in self.index], "actual": json_float(self.actual),
                "expected": json_float(self.expected), "abs_err": json_float(self.abs_err),
                "rel_err": json_float(self.rel_err)}


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
    #: a BoundRule's worst err/bound and where (None under a ToleranceRule)
    bound: BoundStats | None = None

    # NaN and inf counts of the actual tensor (the SD check's per-stage summary reads them).
    @property
    def actual_nan(self) -> int:
        return self.actual_nonfinite.nan

    @property
    def actual_inf(self) -> int:
        return self.actual_nonfinite.posinf + self.actual_nonfinite.neginf

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
            "mismatch_frac": json_float(self.mismatch_frac),
            "nonfinite_mismatches": self.nonfinite_mismatches,
            "metrics": {
                "max_abs_err": json_float(self.max_abs_err),
                "max_abs_index": idx(self.max_abs_index),
                "max_rel_err": json_float(self.max_rel_err),
                "max_rel_index": idx(self.max_rel_index),
                "rel_err_floor": json_float(self.rel_err_floor),
                "mean_abs_err": json_float(self.mean_abs_err),
                "rmse": json_float(self.rmse),
                "cosine": json_float(self.cosine),
                "rel_euclidean": json_float(self.rel_euclidean),
                "snr_db": json_float(self.snr_db),
                "psnr_db": json_float(self.psnr_db),
                "psnr_peak": json_float(self.psnr_peak),
                "kl_div": json_float(self.kl_div),
                "kl_note": self.kl_note,
                "ulp_format": self.ulp_format,
                "ulp_max": self.ulp_max,
                "ulp_p50": self.ulp_p50,
                "ulp_p99": self.ulp_p99,
                "frac_rel_lt_1e3": json_float(self.frac_rel_lt_1e3),
                "frac_rel_lt_5e3": json_float(self.frac_rel_lt_5e3),
            },
            "nonfinite": {"actual": self.actual_nonfinite.to_dict(),
                          "expected": self.expected_nonfinite.to_dict()},
            "worst": [w.to_dict() for w in self.worst],
            "abs_err_histogram": [{"bucket": b, "count": c} for b, c in self.abs_err_histogram],
            **({"bound": self.bound.to_dict()} if self.bound is not None else {}),
        }


@dataclass
class CheckReport:
    """A whole check: one TensorComparison per output, the rule, and free-form metadata.

    `meta` holds what the caller knows (model, inputs, golden, runner/device, profile, timings...); it must be
    JSON-serialisable. `passed` is True when every tensor passed (vacuously True for an empty report; the CLI
    treats "nothing compared" as bad input before it gets here).
    """

    tensors: list[TensorComparison]
    rule: "ElementRule"  # compare.rules (which imports this module, not the other way round)
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
            "meta": json_safe(self.meta),
            "tensors": [t.to_dict() for t in self.tensors],
        }


@dataclass
class BoundStats:
    """A BoundRule's own results: the largest err/bound over the elements (inf where a finite value was promised
    and a NaN/inf came), where it is (the first element when every error is 0; None for an empty tensor), the bound there, and how many elements whose
    expected value is NaN/inf got another value."""

    worst_ratio: float
    worst_index: tuple | None
    bound_at_worst: float
    expected_nonfinite_mismatches: int

    def to_dict(self) -> dict:
        return {"worst_ratio": json_float(self.worst_ratio),
                "worst_index": None if self.worst_index is None else list(self.worst_index),
                "bound_at_worst": json_float(self.bound_at_worst),
                "expected_nonfinite_mismatches": self.expected_nonfinite_mismatches}


def json_float(v):
    """JSON has no NaN/inf: encode them as the strings "nan", "inf", "-inf"; None (N/A) stays null."""
    if v is None:
        return None
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def json_safe(obj):
    """obj with numpy scalars as Python numbers, tuples as lists, non-finite floats as json_float strings and
    anything else as str: what json.dumps(..., allow_nan=False) accepts."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return json_float(obj)
    if obj is None or isinstance(obj, str):
        return obj
    return str(obj)
