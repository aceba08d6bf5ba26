"""What a fix costs on the device, and the accuracy-cost frontier between the profile as given and all-fp32.

`Coster` prices a FixConfig: the model planned under the configuration as atc would compile it (npu.fixes: the
moves in ATC's words, fusion switches included; nothing is computed) and priced by npu.cost.CostModel from the
lockstep pass's tensor shapes. The search keeps every evaluation it made (`SearchResult.log`); `frontier` turns
them into points (estimated cost, worst output error over every input set, pass/fail) and marks the Pareto-optimal
ones -- no other point is both cheaper and more accurate -- so an engineer can pick a point knowingly; `cheapest`
is the passing configuration of least estimated cost (the count-minimal fix is reported beside it).
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

from mschecker.compare import json_float
from mschecker.bisect.search import Evaluation, FixConfig
from mschecker.bisect.policy import npu_policy


class Coster:
    """FixConfig -> estimated device seconds (cached per configuration)."""

    def __init__(self, model, base, facts, shapes: dict, cost_model):
        self.model, self.base, self.facts, self.shapes, self.cost_model = model, base, facts, shapes, cost_model
        self._cache: dict[FixConfig, object] = {}

    def cost(self, config: FixConfig):
        """The configuration's npu.cost.Cost (per op and per Cast)."""
        if config not in self._cache:
            from mschecker.npu.plan import _PlanOnly  # lazy: start-up (mschecker.npu)
            executor = _PlanOnly(self.model, npu_policy(config.profile(self.base, self.facts)))
            self._cache[config] = self.cost_model.configuration_cost(executor, self.shapes)
        return self._cache[config]

    def __call__(self, config: FixConfig) -> float:
        return self.cost(config).seconds

    def cast_seconds(self, tensor: str) -> float:
        """One fp16 -> fp32 Cast of `tensor` (an island border)."""
        return self.cost_model.cast_cost(tensor, "float16", "float32", self.shapes).seconds


@dataclass
class FrontierPoint:
    purpose: str
    config: FixConfig
    changes: int
    seconds: float
    worst_rel_l2: float
    passed: bool
    pareto: bool = False

    def to_dict(self) -> dict:
        return {"purpose": self.purpose, "config": self.config.to_dict(), "changes": self.changes,
                "estimated_seconds": json_float(self.seconds), "worst_rel_l2": json_float(self.worst_rel_l2),
                "passed": self.passed, "pareto": self.pareto}


@dataclass
class Frontier:
    points: list[FrontierPoint] = field(default_factory=list)   # one per distinct configuration, by cost
    baseline_seconds: float = math.nan                          # the profile as given

    @property
    def pareto(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.pareto]

    def to_dict(self) -> dict:
        return {"baseline_estimated_seconds": json_float(self.baseline_seconds),
                "points": [p.to_dict() for p in self.points]}


def frontier(log: list[Evaluation], coster: Coster) -> Frontier:
    """The evaluated configurations priced, one point per configuration (the first evaluation of it), sorted by
    cost, Pareto-optimal points marked (lower cost and lower worst error: neither is dominated)."""
    seen: dict[FixConfig, FrontierPoint] = {}
    for ev in log:
        if ev.config in seen:
            continue
        seen[ev.config] = FrontierPoint(ev.purpose, ev.config, ev.config.changes, coster(ev.config),
                                        ev.worst_rel_l2, ev.passed)
    points = sorted(seen.values(), key=lambda p: (p.seconds, p.worst_rel_l2))
    best_error = math.inf
    for p in points:  # by cost ascending: a point is on the front when it is more accurate than every cheaper one
        err = p.worst_rel_l2 if not math.isnan(p.worst_rel_l2) else math.inf
        if err < best_error:
            p.pareto, best_error = True, err
    return Frontier(points, coster(FixConfig()))


def cheapest(front: Frontier) -> FrontierPoint | None:
    """The passing configuration of least estimated cost (ties: fewer changes)."""
    passing = [p for p in front.points if p.passed]
    return min(passing, key=lambda p: (p.seconds, p.changes)) if passing else None


def frontier_png(front: Frontier, chosen: FrontierPoint | None = None) -> bytes:
    """Worst output error against estimated cost, the Pareto front joined, passing points filled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    base = front.baseline_seconds if front.baseline_seconds > 0 else 1.0
    xs = [p.seconds / base for p in front.points]
    ys = [max(p.worst_rel_l2, 1e-12) if math.isfinite(p.worst_rel_l2) else 1e3 for p in front.points]
    ax.scatter([x for x, p in zip(xs, front.points) if p.passed], [y for y, p in zip(ys, front.points) if p.passed],
               c="tab:green", label="passes", zorder=3)
    ax.scatter([x for x, p in zip(xs, front.points) if not p.passed],
               [y for y, p in zip(ys, front.points) if not p.passed], facecolors="none", edgecolors="tab:red",
               label="fails", zorder=3)
    par = [(x, y) for x, y, p in zip(xs, ys, front.points) if p.pareto]
    if par:
        ax.step([x for x, _ in par], [y for _, y in par], where="post", color="grey", lw=1, label="Pareto front")
    if chosen is not None:
        ax.scatter([chosen.seconds / base], [max(chosen.worst_rel_l2, 1e-12)], marker="*", s=160, c="black",
                   label="cheapest passing", zorder=4)
    ax.set_xlabel("estimated device time / profile as given")
    ax.set_ylabel("worst output rel L2 (all input sets)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
