"""bisect_model: localize precision loss in an ONNX model, find the smallest fix, prove it (library entry).

Phases (each one module): the lockstep pass (lockstep.analyse) gives every node's accumulated and own error
and headroom on every sample; the culprit ranking orders candidates by own error; the fix search
(search.search) finds the smallest passing set of moves with group testing; the written form of that set
(writers.Recommendation) is proven by a second lockstep pass under it on every sample, and the patched ONNX
model is checked with onnxruntime. Nothing here writes a file: report.write_outputs does, after the run.

Verdicts and exit codes: PASS (0) the model meets the tolerance as given; FIXED (0) a fix was found and its
proof re-run passed on every sample; FAIL (1) no configuration within the budget passes (or, with device dumps,
the dumped outputs miss the tolerance: dumps localize, they cannot test a fix). With device dumps a PASS needs
every graph output's dump: a folder that gives no usable dump of any graph output (missing, misshaped), or
misses one while everything dumped passes, is bad input (InputError, exit 2: no evidence for a verdict).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import onnx

from mschecker.compare import ToleranceRule, json_float, resolve_rule
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.graph.executor import Executor, node_label
from mschecker.graph.loader import LoadedModel, from_proto, load_model
from mschecker.graph.policy import KernelUnavailable
from mschecker.npu.knobs import apply_knobs
from mschecker.npu.profile import NumericsProfile
from mschecker.npu.fixes import OP_TYPE_PREFIX, op_facts
from mschecker.bisect.lockstep import Analysis, NodeRecord, analyse, reference_executor
from mschecker.bisect.policy import npu_policy
from mschecker.bisect.priors import ORDERS, Ordering, move_seconds, node_priors, order_candidates
from mschecker.bisect.samples import Sample, check_same_shapes
from mschecker.bisect.search import LAYER_OPS, Budget, BudgetExhausted, Evaluation, Evaluator, FixConfig, ModelEvaluator, \
    SearchResult, high_precision_capable, members, op_type_of, rank_candidates, search
from mschecker.bisect.writers import (OnnxCheck, Recommendation, check_with_onnxruntime, patched_onnx, serialize,
                                      written_profile)
from mschecker.bisect.stats import ErrorStats
from mschecker.devdump.evidence import DeviceDump
from mschecker.devdump.mapping import from_plan
from mschecker.npu.policy import covered_names

Progress = Callable[[str, int, int | None], None]
EXIT_CODES = {"PASS": 0, "FIXED": 0, "FAIL": 1}


def tolerance_rule(tolerance) -> ToleranceRule:
    """atol = rtol = tolerance (the project's --tolerance convention, mschecker.compare.resolve_rule); bisect needs a
    positive finite number (a zero tolerance leaves nothing to search for)."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        raise InputError(f"--tolerance: expected a positive number, got {tolerance!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--tolerance: expected a positive number, got {tolerance!r}")
    return resolve_rule({"tolerance": value})[0]


@dataclass
class Attribution:
    """Effect of one move of the fix on the outputs: the worst output error with that move left out."""

    node: str
    without_rel_l2: float
    passes_without: bool


@dataclass
class BisectResult:
    model: str
    profile: NumericsProfile
    rule: ToleranceRule
    samples: list[Sample]
    analysis: Analysis
    ranking: list[NodeRecord]                       # candidates by own error (the culprit ranking)
    search: SearchResult | None = None
    recommendation: Recommendation | None = None
    proof: Analysis | None = None                   # the lockstep pass under the recommendation
    onnx_check: OnnxCheck | None = None
    onnx_bytes: bytes | None = None
    attribution: list[Attribution] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    npu_side: str = "emulator"
    frontier: object = None                         # frontier.Frontier: every evaluated configuration priced
    rescale: object = None                          # RescaleOutcome: the exact power-of-two rescale, when tried
    cost_of_fewest: float | None = None             # estimated seconds of the count-minimal passing configuration
    ordering: Ordering | None = None                # the order the search tried the candidates in (bisect.priors)
    analysis_before_rescale: Analysis | None = None  # the original model's lockstep pass, when the search ran on
                                                     # the rescaled model (RescaleOutcome.combined)

    @property
    def verdict(self) -> str:
        if self.rescale is not None and self.rescale.passed:
            return "FIXED"
        if self.npu_side == "dump" or self.search is None:
            # a graph output nobody compared is no evidence of a pass (bisect_model refuses such a dump folder)
            return "PASS" if self.analysis.passed and not self.analysis.unjudged_outputs else "FAIL"
        if self.search.baseline is not None and self.search.baseline.passed and self.analysis.passed:
            return "PASS"
        if self.recommendation is not None and self.proof is not None and self.proof.passed:
            return "FIXED"
        return "FAIL"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def culprits(self) -> list[NodeRecord]:
        """The nodes the fix moves, in ranking order (empty without a fix)."""
        if self.recommendation is None:
            return []
        chosen = {m for item in self.recommendation.config.keep_dtype | self.recommendation.config.high_precision
                  for m in members(item, self.analysis)}
        return [n for n in self.ranking if n.name in chosen]


def _load(model: str | Path | LoadedModel) -> LoadedModel:
    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    name_unnamed(loaded.graph)
    return loaded


def name_unnamed(graph: onnx.GraphProto) -> None:
    """Give every unnamed node the label the executor reports it under ("#index:OpType"), so a per-node move
    (keep_dtype, implmode by node name) can select it; ATC's files cannot carry such a name (the report lists
    it), the profile and the patched model can."""
    for i, node in enumerate(graph.node):
        if not node.name:
            node.name = node_label(node, i)


def _plan(model: LoadedModel, profile: NumericsProfile) -> tuple[Executor, Executor]:
    try:
        npu = Executor(model, npu_policy(profile))
    except KernelUnavailable as exc:
        raise InputError(f"profile {profile.name}: {exc}") from None
    # the reference runs the graph the NPU runs (a device profile's fused ops in float64: the same math, node for
    # node), so that the lockstep pass pairs each device op with its own reference
    return reference_executor(npu.model), npu


def bisect_model(model: str | Path | LoadedModel, samples: Sequence[Sample], *, profile="ascend910b",
                 tolerance=1e-2, budget: Budget | None = None, npu_dump: str | Path | None = None,
                 check_onnx: bool = True, granularity: str = "node",
                 progress: Progress | None = None, cost: str | Path | None = None,
                 frontier: bool = False, choose: str = "moves", rescale: bool = True,
                 order: str | None = None, graph_json: str | Path | None = None) -> BisectResult:
    """The whole bisection (module docstring). `samples`: input sets (samples.read_samples); `profile`: a preset
    name, profile file or NumericsProfile; `npu_dump`: a folder of device dumps replacing the emulator;
    `granularity`: moves per "node" or per "op_type" (search.rank_candidates); `cost`: a CSV of measured per-op
    times (npu.cost.load_cost_file) replacing the cost model's estimates; `frontier`: evaluate the ranked prefixes
    too (uncounted), so the accuracy-cost frontier spans the profile as given to all-fp32; `choose`: the fix is the
    passing configuration with the fewest moves ("moves") or the least estimated device time ("cost"). Any of
    cost / frontier / choose="cost" on a device profile prices every evaluated configuration (result.frontier).
    `rescale`: before the search, where activations exceed fp16's range, try the exact power-of-two rescale
    (bisect.rescale; free on the device); when it passes on every input set it is the fix and no search runs;
    when it is exact but not enough alone, the search runs on the rescaled model (the fix is both, when that
    passes; else the search runs on the model as given).
    `order`: the order the search tries candidates in (bisect.priors: error, priors, cost; default "cost" with
    choose="cost", else "error"). `graph_json`: with `npu_dump`, the graph JSON `atc --mode=1 --json` wrote for
    the model the device ran: it maps the device's ops to ONNX nodes (else the dump's own origins and mschecker's
    device plan do); with a dump the reference runs the ONNX graph as given (mschecker.devdump)."""
    order, rule = _checked_options(choose, order, tolerance, samples)
    base = apply_knobs(profile) if not isinstance(profile, NumericsProfile) else profile
    loaded = _load(model)
    reference, npu = _plan(loaded, base)
    if hasattr(npu.policy, "emit_notes"):
        npu.policy.emit_notes()
    priced = cost is not None or frontier or choose == "cost" or order == "cost"
    cost_model = _cost_model(base, cost, npu) if priced else None  # a bad cost file: exit 2 before any work
    dump = None
    if npu_dump is not None:
        if len(samples) != 1:
            raise InputError(f"--npu-dump {npu_dump}: a dump folder holds one run; give exactly one input set "
                             f"(got {len(samples)})")
        dump, reference = _device_dump(npu_dump, graph_json, loaded, npu)
    result = _lockstep(loaded, base, rule, samples, reference, None if dump else npu, dump, progress)
    if dump is not None:
        _check_dump_evidence(npu_dump, result.analysis)
        return result
    if rescale:
        def search_rescaled(rescaled: LoadedModel) -> BisectResult:
            return bisect_model(rescaled, samples, profile=base, tolerance=tolerance, budget=budget,
                                check_onnx=check_onnx, granularity=granularity, progress=progress, cost=cost,
                                frontier=frontier, choose=choose, rescale=False, order=order)
        done = _rescale_first(result, loaded, search_rescaled)
        if done is not None:
            return done
    return _search_and_prove(result, loaded, reference, npu, cost_model, budget=budget, progress=progress,
                             granularity=granularity, order=order, frontier=frontier, choose=choose,
                             check_onnx=check_onnx)


def _checked_options(choose: str, order: str | None, tolerance,
                     samples: Sequence[Sample]) -> tuple[str, ToleranceRule]:
    """The options checked before any work (InputError: exit 2): the search order (its default follows
    `choose`) and the tolerance rule."""
    if choose not in ("moves", "cost"):
        raise InputError(f"--choose {choose!r}: moves or cost")
    order = order or ("cost" if choose == "cost" else "error")
    if order not in ORDERS:
        raise InputError(f"--order {order!r}: one of {', '.join(ORDERS)}")
    rule = tolerance_rule(tolerance)
    if not samples:
        raise InputError("--input: no input set given")
    check_same_shapes(samples)
    return order, rule


def _lockstep(loaded: LoadedModel, base: NumericsProfile, rule: ToleranceRule, samples: Sequence[Sample],
              reference: Executor, npu: Executor | None, dump, progress: Progress | None) -> BisectResult:
    """The lockstep pass and the culprit ranking: the result every verdict starts from."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    analysis = analyse(reference, npu, list(samples), rule, dump=dump, progress=progress)
    timings["lockstep_pass"] = time.perf_counter() - t0
    records = {n.name: n for n in analysis.nodes}
    ranking = [records[name] for name in rank_candidates(analysis)]
    return BisectResult(str(loaded.path), base, rule, list(samples), analysis, ranking, timings=timings,
                        npu_side="dump" if dump else "emulator")


def _rescale_first(result: BisectResult, loaded: LoadedModel,
                   search_rescaled: Callable[[LoadedModel], BisectResult]) -> BisectResult | None:
    """The exact rescale, tried before the search (try_rescale): the result to return when the rescale alone
    passes, or when the moves `search_rescaled` finds on the rescaled model pass with it (the combined fix);
    None when the moves are to be searched on the model as given."""
    t0 = time.perf_counter()
    result.rescale = try_rescale(loaded, result.analysis, result.profile, list(result.samples), result.rule)
    result.timings["rescale"] = time.perf_counter() - t0
    if result.rescale.passed:
        return result
    if result.rescale.model is None or result.rescale.refused:
        return None
    # exact, yet not enough alone: the moves are searched on the rescaled model, what atc will compile

    inner = search_rescaled(from_proto(result.rescale.model, loaded.path.parent))
    if inner.verdict != "FIXED":
        return None  # no move passes on the rescaled model: the moves alone, on the model as given
    result.rescale.combined = True
    inner.rescale, inner.model, inner.analysis_before_rescale = result.rescale, result.model, result.analysis
    inner.timings = {**result.timings, **{k: v for k, v in inner.timings.items() if k != "lockstep_pass"},
                     "lockstep_pass_rescaled": inner.timings.get("lockstep_pass", 0.0)}
    return inner


def _search_and_prove(result: BisectResult, loaded: LoadedModel, reference: Executor, npu: Executor, cost_model,
                      *, budget: Budget | None, progress: Progress | None, granularity: str, order: str,
                      frontier: bool, choose: str, check_onnx: bool) -> BisectResult:
    """The fix search on the emulator, then, for a fix with changes, its proof pass, the leave-one-out
    attribution (up to 16 changes) and the patched ONNX model's check."""
    analysis, base, timings = result.analysis, result.profile, result.timings
    t0 = time.perf_counter()
    facts = op_facts(npu)
    coster = None
    if cost_model is not None:
        from mschecker.npu.cost import shapes_of  # lazy: start-up (mschecker.npu)
        from mschecker.bisect.frontier import Coster

        coster = Coster(loaded, base, facts, shapes_of(analysis, npu, result.samples[0].feeds), cost_model)
    evaluator = ModelEvaluator(loaded, base, list(result.samples), analysis, result.rule, budget, progress,
                               facts=facts)
    _run_search(result, evaluator, npu, facts, coster, granularity, order, frontier)
    timings["fix_search"] = time.perf_counter() - t0
    config = _chosen_config(result, coster, choose)
    if config is None or not config.changes:
        return result
    _prove(result, config, loaded, reference, facts, progress)
    if config.changes <= 16:
        t0 = time.perf_counter()
        result.attribution = _attribute(evaluator, config)
        timings["attribution"] = time.perf_counter() - t0
    if check_onnx and result.proof.passed:
        _check_onnx(result, config, loaded, npu)
    return result


def _run_search(result: BisectResult, evaluator: Evaluator, npu: Executor, facts, coster, granularity: str,
                order: str, frontier: bool) -> None:
    """The candidates ordered (result.ordering) and searched (result.search); with `frontier`, the ranked
    prefixes evaluated too."""
    analysis = result.analysis
    result.ordering = _ordering(rank_candidates(analysis, granularity), order, analysis, npu, result.samples, coster)
    names = result.ordering.items
    layers = [n.name for n in analysis.nodes if n.op_type in LAYER_OPS and not n.folded] or \
        [n.name for n in result.ranking]
    position = {n.name: n.index for n in analysis.nodes}
    position.update({item: min(position[m] for m in members(item, analysis)) for item in names
                     if op_type_of(item)})
    result.search = search(evaluator, names, high_precision_capable(npu, result.profile, names), layers, position,
                           baseline=_as_given(analysis, result.timings["lockstep_pass"]), fusion_of=fusion_of(facts))
    if frontier:
        _frontier_points(evaluator, names)


def _chosen_config(result: BisectResult, coster, choose: str) -> FixConfig | None:
    """The configuration to prove: the search's (fewest changes), or with `choose` "cost" the cheapest passing
    one; pricing every evaluated configuration fills result.frontier either way."""
    config = result.search.recommended
    if coster is not None and result.search.log:  # every evaluated configuration priced: the cheapest passes
        t0 = time.perf_counter()
        cheapest_config = _by_cost(result, coster)
        if choose == "cost" and cheapest_config is not None:
            config = cheapest_config
        result.timings["cost"] = time.perf_counter() - t0
    return config


def _prove(result: BisectResult, config: FixConfig, loaded: LoadedModel, reference: Executor, facts,
           progress: Progress | None) -> None:
    """The recommendation written as ATC files (result.recommendation) and the lockstep pass under it
    (result.proof)."""
    base = result.profile
    rec = Recommendation.from_config(config, result.analysis, base, facts)
    # the proof runs what the ATC files give when read back (writers.written_profile), not the search's object
    rec.fixed, _ = written_profile(rec.items.profile(base, facts), str(loaded.path))
    result.recommendation = rec
    t0 = time.perf_counter()
    fixed_npu = Executor(loaded, npu_policy(rec.fixed))
    result.proof = analyse(reference, fixed_npu, list(result.samples), result.rule, own_error=False,
                           progress=progress, label="proof pass")
    result.timings["proof"] = time.perf_counter() - t0


def _check_onnx(result: BisectResult, config: FixConfig, loaded: LoadedModel, npu: Executor) -> None:
    """The patched fp16 ONNX model of a proven fix, checked on onnxruntime (result.onnx_check, onnx_bytes); not
    built for a profile that does not store fp16."""
    base = result.profile
    if base.storage_dtype != "float16":
        result.onnx_check = OnnxCheck(False, False, error=f"not built: the patched model is fp16 and profile "
                                                         f"{base.name} stores {base.storage_dtype}")
        return
    t0 = time.perf_counter()
    result.onnx_check, result.onnx_bytes = _patched_check(loaded, config, list(result.samples), result.analysis,
                                                          result.rule, [n.name for n in result.ranking],
                                                          _onnx_names(npu))
    result.timings["onnx_check"] = time.perf_counter() - t0


@dataclass
class RescaleOutcome:
    """The exact rescale bisect tried: the tensors beyond fp16's range, k, the plan's report, the float64 proof,
    and the emulated device's verdict on the rescaled model; `refused`: why no plan exists."""

    tensors: list[str]
    k: int = 0
    refused: str = ""
    float64_rel_diff: float | None = None
    passed: bool = False
    worst_rel_l2: float | None = None
    report: object = None
    model: onnx.ModelProto | None = None
    combined: bool = False     # exact but not enough alone: the fix is the rescaled model plus the moves found on it

    @property
    def used(self) -> bool:
        """The rescaled model is (part of) the fix: it is what atc compiles."""
        return self.passed or self.combined

    def to_dict(self) -> dict:
        rep = self.report
        return {"tensors": self.tensors, "k": self.k, "factor": 2.0 ** -self.k if self.k else None,
                "refused": self.refused, "float64_rel_diff": json_float(self.float64_rel_diff),
                "passed": self.passed, "combined_with_moves": self.combined,
                "worst_rel_l2": json_float(self.worst_rel_l2),
                "changes": rep.lines() if rep is not None else []}


def try_rescale(loaded: LoadedModel, analysis: Analysis, base: NumericsProfile, samples: list[Sample],
                rule: ToleranceRule) -> RescaleOutcome:
    """The rescale of every tensor whose reference values exceed fp16's range (the activations the format cannot
    hold): planned (bisect.rescale), proven equal on the float64 reference, run on the emulated device on every
    input set and judged like any configuration."""
    # lazy: start-up (mschecker.bisect.rescale)
    from mschecker.bisect.rescale import apply_rescale, choose_k, plan_rescale, prove
    limit = float(np.finfo(np.float16).max)
    big = {o.tensor: o.reference.peak for n in analysis.nodes for o in n.outputs if o.reference.peak > limit}
    out = RescaleOutcome(sorted(big))
    if not big:
        out.refused = "no activation exceeds fp16's range: nothing to rescale"
        return out
    try:
        out.k = choose_k(loaded.proto, out.tensors, max(big.values()))
        plan = plan_rescale(loaded.proto, out.tensors, out.k)
    except InputError as exc:
        out.refused = str(exc)
        return out
    out.report, out.model = plan.report(), apply_rescale(loaded.proto, plan)
    out.float64_rel_diff = max(prove(loaded.proto, out.model, s.feeds) for s in samples)
    if not out.float64_rel_diff <= 1e-12:
        out.refused = f"the rescaled float64 model differs by {out.float64_rel_diff:.3g} (relative): not exact"
        return out
    npu = Executor(out.model, npu_policy(base))
    worst, ok = 0.0, True
    for sample, ref in zip(samples, analysis.reference_outputs):
        got = npu.run(sample.feeds)
        for name, r in ref.items():
            st = ErrorStats.of(got[name], r, rule, name)
            worst = max(worst, st.rel_l2)
            ok = ok and st.passed
    out.passed, out.worst_rel_l2 = ok, worst
    return out


def _frontier_points(evaluator: Evaluator, ranked: list[str]) -> None:
    """The ranked prefixes 1, 2, 4, ... in fp32 (uncounted evaluations): the frontier's spine."""
    p = 1
    while p < len(ranked):
        try:
            evaluator(FixConfig(keep_dtype=frozenset(ranked[:p])), f"frontier: top {p} in fp32", counted=False)
        except BudgetExhausted:  # pragma: no cover - uncounted evaluations never exhaust
            return
        p *= 2


def _cost_model(base, cost_file, npu: Executor):
    """The chip's cost model (npu.cost), with measured per-op times from `cost_file` when given (checked against
    the device ops); a generic profile has no chip to price: InputError."""
    if not base.device:
        raise InputError(f"profile {base.name} models no chip: pricing a fix (--cost, --frontier, --choose cost) "
                         "needs a device profile (ascend910b, ascend310p)")
    from mschecker.npu.cost import CostModel, load_cost_file  # lazy: start-up (mschecker.npu)

    measured = load_cost_file(cost_file) if cost_file is not None else None
    model = CostModel(base.device, measured=measured)
    if measured is not None:
        model.check_measured(npu)
    return model


def _ordering(ranked: list[str], order: str, analysis: Analysis, npu: Executor, samples, coster) -> Ordering:
    """The candidates in the search's order (bisect.priors): the priors read from the reference ranges and the
    graph's constants; order "cost" prices each item's move alone against the all-fp32 plan (two plans)."""
    if order == "error":
        return order_candidates(ranked, analysis, order)
    nodes = {st.label: st.node for st in npu.steps}
    priors = node_priors(analysis, nodes, getattr(npu, "constants", npu.initializers), samples[0].feeds)
    seconds = None
    if order == "cost":
        seconds = move_seconds(ranked, analysis, coster.cost(FixConfig()),
                               coster.cost(FixConfig(keep_dtype=frozenset(ranked))), coster.cast_seconds)
    return order_candidates(ranked, analysis, order, priors, seconds)


def _by_cost(result: BisectResult, coster) -> FixConfig | None:
    """Every evaluated configuration priced (frontier.Frontier into result.frontier); the cheapest passing one,
    or None when none passed. The count-minimal fix's cost is kept for the report."""
    from mschecker.bisect.frontier import cheapest, frontier  # lazy: start-up (mschecker.bisect.frontier)

    result.frontier = frontier(result.search.log, coster)
    if result.search.recommended is not None:
        result.cost_of_fewest = coster(result.search.recommended)
    pick = cheapest(result.frontier)
    return pick.config if pick is not None else None


def fusion_of(facts) -> dict[str, str] | None:
    """Item -> the fusion pass that created it (device ops a fusion created, and op types only fusions make)."""
    if not facts:
        return None
    out = {name: f.fused_by for name, f in facts.items() if f.fused_away}
    for t in {f.ir_type for f in facts.values()}:
        of_type = [f for f in facts.values() if f.ir_type == t]
        if all(f.fused_away for f in of_type) and len({f.fused_by for f in of_type}) == 1:
            out[OP_TYPE_PREFIX + t] = of_type[0].fused_by
    return out


def _device_dump(folder, graph_json, loaded: LoadedModel, npu: Executor):
    """The dump folder read and mapped (devdump.DeviceDump), and the reference executor the pass compares it with:
    the ONNX graph as given, so that every tensor a device op can write exists whatever the device fused (its
    fusion is read from atc's graph JSON, from the dump's own origins, else assumed as mschecker's plan models it);
    a fused device op is then compared against the reference's outputs of the nodes it covers."""
    plan = None if graph_json is not None else from_plan(npu.model.proto, getattr(npu.policy, "op_type_of", None))
    return DeviceDump(folder, loaded.proto, device_ops=plan, graph_json=graph_json), reference_executor(loaded)


def _check_dump_evidence(folder, analysis: Analysis) -> None:
    """InputError when the dumps cannot support a verdict: no graph output was compared at all, or one was not
    while everything compared passes (a PASS on part of the outputs is no pass; a FAIL found on the dumped part
    stands, the unjudged outputs listed in the report)."""
    unjudged = analysis.unjudged_outputs
    if not unjudged or (analysis.outputs and not analysis.passed):
        return
    coverage = analysis.dump
    why = []
    for name in unjudged:
        note = next((m for m in coverage.misshaped if m.startswith(f"{name}: ")), None) if coverage else None
        stats = coverage is not None and name in coverage.statistics_only
        why.append(plain(name) + " " + (f"misshaped ({plain(note[len(name) + 2:])})" if note else
                                        "statistics only (they show no error above the tolerance; a pass needs "
                                        "the tensor)" if stats else "missing"))
    head = "no dumped graph output to judge" if not analysis.outputs else \
        "the dumped outputs pass, but not every graph output was dumped"
    raise InputError(f"--npu-dump {plain(folder)}: {head}: {'; '.join(why)} (a verdict needs a "
                     f"<output name>.npy of every graph output's shape)")


def _as_given(analysis: Analysis, seconds: float) -> Evaluation:
    """The lockstep pass as the search's first evaluation: it ran the profile as given on every sample and
    judged it by the same rule (outputs within tolerance, no overflow inside)."""
    failing = [name for name, st in analysis.outputs.items() if not st.passed]
    overflow = [n.name for n in analysis.nodes if n.overflow]
    worst = max((st.rel_l2 for st in analysis.outputs.values()), default=0.0)
    return Evaluation("profile as given (the lockstep pass)", FixConfig(), not failing and not overflow, worst,
                      failing, overflow, seconds, list(analysis.per_sample))


def _attribute(evaluator: Evaluator, config: FixConfig) -> list[Attribution]:
    """Leave-one-out over the fix's moves: how much each one matters for the outputs (uncounted evaluations)."""
    out = []
    for name in sorted(config.keep_dtype | config.high_precision):
        trial = FixConfig(config.keep_dtype - {name}, config.high_precision - {name})
        ev: Evaluation = evaluator(trial, f"attribution: without {name}", counted=False)
        out.append(Attribution(name, ev.worst_rel_l2, ev.passed))
    return out


def _onnx_names(npu: Executor) -> dict[str, tuple[str, ...]]:
    """Node name in the graph the NPU runs -> the ONNX nodes it stands for: a fused device op (a device
    profile's graph, npu.fusion) covers several ONNX nodes under a name the ONNX model does not have."""
    return {st.label: covered_names(st.node) for st in npu.steps}


def _patched_check(loaded: LoadedModel, config: FixConfig, samples, analysis, rule, ranking: list[str],
                   onnx_names: dict[str, tuple[str, ...]] | None = None):
    """The patched fp16 model and its onnxruntime check. onnxruntime's fp16 kernels are not the NPU's (its CPU
    kernels may accumulate or convert differently), so when the fix alone misses the tolerance there, the
    smallest prefix of the own-error ranking that onnxruntime also needs in fp32 is added (binary search, at most
    ceil(log2 n) + 1 more runs) and listed as `extra_fp32`: the file meets the tolerance where it will be run.
    `onnx_names`: the ONNX nodes each analysed node stands for (_onnx_names; a name maps to itself by default)."""
    def in_onnx(names) -> set[str]:
        return {o for n in names for o in (onnx_names or {}).get(n, (n,))}

    try:
        full = onnx.load(str(loaded.path))
        name_unnamed(full.graph)
    except Exception as exc:  # noqa: BLE001 - an in-memory model has no file to patch
        return OnnxCheck(False, False, error=f"cannot load {loaded.path}: {type(exc).__name__}: {exc}"), None
    # host-folded nodes (shape arithmetic) stay fp32 as the NPU compiler folds them in fp32 (NpuPolicy.bind);
    # it also keeps the converter off int -> float Casts, which it mistypes
    base = {m for item in config.keep_dtype | config.high_precision for m in members(item, analysis)}
    base |= {n.name for n in analysis.nodes if n.folded}
    extra = [n for n in ranking if n not in base]

    def attempt(k: int):
        try:
            proto = patched_onnx(full, in_onnx(base | set(extra[:k])))
        except Exception as exc:  # noqa: BLE001 - a converter failure is reported; the emulator's proof stands
            return OnnxCheck(False, False, error=f"fp16 conversion failed: {type(exc).__name__}: {exc}"), None
        check = check_with_onnxruntime(proto, samples, analysis, rule)
        check.extra_fp32 = extra[:k]
        return check, proto

    check, proto = attempt(0)
    if check.ran and not check.passed and extra:
        last, last_proto = attempt(len(extra))
        if last.passed:
            low, high, best = 0, len(extra), (last, last_proto)
            while high - low > 1:
                mid = (low + high) // 2
                trial = attempt(mid)
                if trial[0].passed:
                    high, best = mid, trial
                else:
                    low = mid
            check, proto = best
        check.attempts = 2 + max(0, (len(extra) - 1).bit_length()) if last.passed else 2
    if proto is None:
        return check, None
    return check, serialize(proto)
