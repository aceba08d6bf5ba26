"""The order the fix search tries its candidates in: measured own error, weighed by AutoCast-style priors, and
optionally per unit of device cost (issue 24, part 2).

Why it matters: group testing (search.search) returns, for each culprit, the last element of the shortest passing
prefix of the ranked list, so the order decides which passing set is found -- not how many evaluations it takes
(the bound 2 + (k+1)*ceil(log2 n) holds for any order). Own error (lockstep) measures what a node adds to its own
output on exact inputs; it does not see how much the rest of the graph amplifies that error, nor what the move
costs on the device. Orders (`bisect --order`):

  error   overflowing nodes first, then own error, descending (the ranking as measured; the default with
          --choose moves)
  priors  overflowing nodes first, then own error x PRIOR_WEIGHT for each prior that holds (AutoCast's node rules,
          NVIDIA TensorRT Model Optimizer, modelopt.onnx.autocast.nodeclassifier, and torch.autocast's op lists):
            range  a float input or output of the node reaches |x| > DATA_MAX on the float64 reference
                   (AutoCast IORangeRule, default data_max = 512: at 512 fp16's spacing is 0.5, so an absolute
                   error that a later subtraction or normalisation exposes is already large)
            init   a constant operand holds |w| > INIT_MAX, beyond fp16's range (AutoCast InitializerRangeRule,
                   default init_max = 65504)
            class  the op is one torch.autocast runs in float32 (OP_CLASS_FP32: exp, log, pow, reciprocal, rsqrt,
                   softmax, the norms, sum, cumsum, ...; pytorch docs, amp.html, "CUDA Ops that can autocast to
                   float32"): ops whose relative error is amplified by their own math or that reduce over many
                   elements
          AutoCast's third rule, depth of reduction (MatMul/Conv K beyond a threshold), is off by default there and
          not used here: Ascend's cube unit accumulates in fp32 (L0C), so K does not grow the fp16 error.
  cost    as priors, divided by the move's marginal device cost (npu.cost: the op in fp32 minus as given, plus a
          Cast of each float input and output at the island's border): error removed per second spent; the
          default with --choose cost. Needs a device profile (a chip to price on).

PRIOR_WEIGHT = 2 is a nudge, not a rule: a prior reorders two nodes only when their own errors are within a factor
of 2 per prior, so a measured order-of-magnitude difference always wins. benchmarks/bisect_cost.py measures the
three orders on the bundled and real exports (fix size, estimated cost, evaluations).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from mschecker.compare import json_float
from mschecker.npu.fixes import OP_TYPE_PREFIX

ORDERS = ("error", "priors", "cost")
DATA_MAX = 512.0
INIT_MAX = 65504.0
PRIOR_WEIGHT = 2.0
#: torch.autocast's float32 list in ONNX and Ascend IR op types (exp, expm1, log*, pow, reciprocal, rsqrt, softmax,
#: log_softmax, softplus, group_norm, layer_norm, norm / normalize, sum, prod, cumsum, cumprod, acos, asin, cosh,
#: sinh, tan, erfinv)
OP_CLASS_FP32 = frozenset({
    "Exp", "Log", "Pow", "Reciprocal", "Rsqrt", "Softmax", "LogSoftmax", "SoftmaxV2", "Softplus",
    "LayerNormalization", "GroupNormalization", "InstanceNormalization", "LayerNorm", "GroupNorm", "InstanceNorm",
    "INInferV2", "GroupNormSilu", "LpNormalization", "ReduceL1", "ReduceL2", "ReduceSum", "ReduceSumSquare",
    "ReduceProd", "ReduceLogSum", "ReduceLogSumExp", "CumSum", "Acos", "Asin", "Cosh", "Sinh", "Tan",
})


@dataclass(frozen=True)
class Prior:
    """What the priors say about one candidate item (a node, or every node of an op type)."""

    range: bool = False
    init: bool = False
    op_class: bool = False
    peak: float = 0.0                       # largest |x| among the node's float inputs and outputs (reference)

    @property
    def weight(self) -> float:
        return PRIOR_WEIGHT ** (int(self.range) + int(self.init) + int(self.op_class))

    def flags(self) -> list[str]:
        return [name for name, on in (("range", self.range), ("init", self.init), ("class", self.op_class)) if on]


@dataclass
class Ordering:
    """The order the search used, and per item its prior, score and (order "cost") marginal device seconds."""

    order: str
    items: list[str]
    priors: dict[str, Prior] = field(default_factory=dict)
    score: dict[str, float] = field(default_factory=dict)
    move_seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self, top: int = 20) -> dict:
        rows = []
        for item in self.items[:top]:
            p = self.priors.get(item, Prior())
            rows.append({"item": item, "priors": p.flags(), "peak": json_float(p.peak),
                         "score": json_float(self.score.get(item)),
                         "move_seconds": json_float(self.move_seconds.get(item))})
        return {"order": self.order, "top": rows}


def node_priors(analysis, nodes: Mapping[str, object], constants: Mapping[str, np.ndarray],
                feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, Prior]:
    """Prior per non-folded node of the analysis. `nodes`: node name -> NodeProto of the graph the analysis ran
    (the device graph for a device profile); `constants`: initializers and plan-time constants; `feeds`: one
    input set, for the graph inputs' ranges."""
    peaks = {name: r.peak for name, r in analysis.reference_ranges.items()}
    for name, arr in (feeds or {}).items():
        a = np.asarray(arr)
        if a.size and np.issubdtype(a.dtype, np.floating):
            finite = a[np.isfinite(a)]
            peaks.setdefault(name, float(np.abs(finite).max()) if finite.size else 0.0)
    init_peak: dict[str, float] = {}
    out: dict[str, Prior] = {}
    for rec in analysis.nodes:
        if rec.folded:
            continue
        node = nodes.get(rec.name)
        io = [o.tensor for o in rec.outputs] + (list(node.input) if node is not None else list(rec.inputs))
        peak = max((peaks.get(t, 0.0) for t in io if t and t not in constants), default=0.0)
        big_init = False
        for t in (node.input if node is not None else ()):
            if t in constants:
                if t not in init_peak:
                    c = np.asarray(constants[t])
                    ok = c.size and np.issubdtype(c.dtype, np.floating)
                    init_peak[t] = float(np.abs(c[np.isfinite(c)]).max(initial=0.0)) if ok else 0.0
                big_init = big_init or init_peak[t] > INIT_MAX
        out[rec.name] = Prior(range=peak > DATA_MAX, init=big_init, op_class=rec.op_type in OP_CLASS_FP32,
                              peak=peak)
    return out


def item_prior(item: str, analysis, priors: Mapping[str, Prior]) -> Prior:
    """An "OpType::T" item holds a prior when any of its nodes does (the move covers them all)."""
    if not item.startswith(OP_TYPE_PREFIX):
        return priors.get(item, Prior())
    t = item[len(OP_TYPE_PREFIX):]
    ps = [priors[n.name] for n in analysis.nodes if n.op_type == t and n.name in priors]
    return Prior(any(p.range for p in ps), any(p.init for p in ps), any(p.op_class for p in ps),
                 max((p.peak for p in ps), default=0.0))


def _own_error(item: str, analysis) -> float:
    if item.startswith(OP_TYPE_PREFIX):
        t = item[len(OP_TYPE_PREFIX):]
        errs = [n.own_error for n in analysis.nodes if n.op_type == t and not n.folded]
    else:
        errs = [n.own_error for n in analysis.nodes if n.name == item]
    errs = [e if not math.isnan(e) else math.inf for e in errs]
    return max(errs, default=0.0)


def _overflows(item: str, analysis) -> bool:
    if item.startswith(OP_TYPE_PREFIX):
        t = item[len(OP_TYPE_PREFIX):]
        return any(n.overflow for n in analysis.nodes if n.op_type == t and not n.folded)
    return any(n.overflow for n in analysis.nodes if n.name == item)


def order_candidates(items: list[str], analysis, order: str, priors: Mapping[str, Prior] | None = None,
                     move_seconds: Mapping[str, float] | None = None) -> Ordering:
    """`items` (search.rank_candidates' ranking: overflow first, own error descending) re-ordered by `order`
    (module docstring). Overflowing items stay first in every order (nothing but a move fixes an inf); the sort is
    stable, so ties keep the measured ranking."""
    if order not in ORDERS:
        raise ValueError(f"order {order!r}: one of {', '.join(ORDERS)}")
    result = Ordering(order, list(items))
    if order == "error":
        return result
    if priors is None:
        raise ValueError(f"order {order!r} needs the node priors")
    if order == "cost" and move_seconds is None:
        raise ValueError("order 'cost' needs each item's move cost")
    for item in items:
        p = item_prior(item, analysis, priors)
        result.priors[item] = p
        score = _own_error(item, analysis) * p.weight
        if order == "cost":
            seconds = move_seconds[item]
            result.move_seconds[item] = seconds
            score = score / seconds if seconds > 0 else math.inf
        result.score[item] = score
    rank = {item: i for i, item in enumerate(items)}
    result.items = sorted(items, key=lambda i: (not _overflows(i, analysis), -result.score[i], rank[i]))
    return result


def move_seconds(items: list[str], analysis, as_given, all_fp32, cast_seconds) -> dict[str, float]:
    """Each item's marginal device seconds when kept in fp32 alone: its ops' time in the all-fp32 plan minus as
    given (npu.cost.Cost of each plan), plus one Cast of every float input and output it reads or writes
    (`cast_seconds(tensor)`: the fp16 -> fp32 Cast of that tensor), the border of a one-node island."""
    base, fp32 = as_given.by_op, all_fp32.by_op
    out: dict[str, float] = {}
    for item in items:
        if item.startswith(OP_TYPE_PREFIX):
            t = item[len(OP_TYPE_PREFIX):]
            recs = [n for n in analysis.nodes if n.op_type == t and not n.folded]
        else:
            recs = [n for n in analysis.nodes if n.name == item]
        seconds = 0.0
        for rec in recs:
            seconds += max(fp32.get(rec.name, 0.0) - base.get(rec.name, 0.0), 0.0)
            seconds += sum(cast_seconds(t) for t in list(rec.inputs) + [o.tensor for o in rec.outputs])
        out[item] = seconds
    return out
