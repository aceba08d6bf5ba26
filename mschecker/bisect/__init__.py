"""Layer bisection: where an ONNX model loses precision on an NPU, the smallest fix, its proof, its files.

Library entry: `bisect_model` (engine.py); the command `mschecker bisect` (mschecker/commands/bisect.py) only
parses and renders. Modules: samples (input sets), stats (per-tensor metrics and headroom), policy (saturation
clamps recorded), lockstep (the streamed side-by-side pass), search (moves and group testing), islands (fp32
islands and Cast points), writers (ATC files, profile, patched ONNX), report (table, plot, JSON, HTML).
Documentation and the JSON schema: docs/BISECT.md.
"""
from mschecker.bisect.engine import BisectResult, bisect_model, tolerance_rule
from mschecker.bisect.samples import Sample, read_samples
from mschecker.bisect.search import Budget, FixConfig

__all__ = ["BisectResult", "Budget", "FixConfig", "Sample", "bisect_model", "read_samples", "tolerance_rule"]
