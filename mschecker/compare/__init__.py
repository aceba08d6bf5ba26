"""Comparison of tensors: the element rules (rules.py), the streaming engine that applies them and computes the
metrics (engine.py), what it returns (results.py) and exact ULP percentiles (ulp.py).

Every verdict mschecker gives goes through `compare_arrays`; see engine.py for the streaming and precision
guarantees, docs/TOLERANCE.md for the rules and docs/REPORT_SCHEMA.md for the JSON form.
"""
from mschecker.compare.engine import DEFAULT_CHUNK_ELEMS, REL_THRESHOLDS, compare_arrays
from mschecker.compare.results import (SCHEMA_VERSION, BoundStats, CheckReport, NonFiniteStats, TensorComparison, WorstElement,
                      json_float, json_safe)
from mschecker.compare.rules import (DEFAULT_ATOL, DEFAULT_RTOL, ELEMENTWISE_KEYS, TOLERANCE_KEYS, BoundRule,
                                     ElementRule, FastPathParams, ToleranceRule, resolve_rule)
from mschecker.compare.ulp import ulp_percentile

__all__ = [
    "DEFAULT_ATOL", "DEFAULT_CHUNK_ELEMS", "DEFAULT_RTOL", "REL_THRESHOLDS", "SCHEMA_VERSION", "BoundRule",
    "ElementRule", "FastPathParams",
    "BoundStats", "CheckReport", "NonFiniteStats", "TensorComparison", "ToleranceRule", "WorstElement", "resolve_rule", "TOLERANCE_KEYS", "ELEMENTWISE_KEYS",
    "compare_arrays", "json_float", "json_safe", "ulp_percentile",
]
