"""The fix search: which nodes to move out of the profile's defaults, in the NPU compiler's own vocabulary.

Moves (per node; op-type entries are a rewrite of a set that covers every node of the type, see writers):
  * keep_dtype      the node computes and stores in fp32 (ATC --keep_dtype): an fp32 island, delimited by Cast
                    points where it meets fp16 neighbours; consecutive kept nodes form one island, islands need
                    not be contiguous;
  * high_precision  the node's implmode (ATC --op_precision_mode): fp32 statistics / accumulation / accurate
                    activation, fp16 storage. Cheaper than keep_dtype, so the search prefers it where it suffices.

A configuration passes when, on every input sample, every graph output meets the tolerance rule AND no tensor
inside the graph overflowed (stats.is_overflow: an inf inside is a failure even when the outputs look fine).

Group testing guided by the own-error ranking (candidates: non-folded nodes with nonzero own error or an
overflow, most own error first). With the ranking r_1..r_n and F the culprits found so far:
  1. the profile as given (1 evaluation); passing means nothing to fix;
  2. when the worst candidate's high_precision implmode binds other kernels: every such candidate in
     high_precision (1 evaluation); if that passes, steps 3-4 search among those candidates with that move
     (cheaper than fp32 storage), otherwise this probe costs one evaluation more than the bound below;
     then (unless the probe passed) every candidate kept in fp32 (1 evaluation); failing means no precision
     move fixes it (exit 1);
  3. binary search for the shortest prefix r_1..r_p such that F + r_1..r_p passes; r_p is a culprit (F needs
     it, given the monotonicity "keeping more in fp32 never hurts"), added to F; repeat on r_1..r_{p-1}
     until F alone passes. Each culprit costs at most ceil(log2 n) evaluations, and so does the last search, the
     one that finds F alone passing: 2 + (k+1)*ceil(log2 n) in all. (Round i costs ceil(log2 p) for the previous
     culprit's rank p, so culprits near the top of the order -- the usual case -- cost far less.)
  4. refinement: culprits whose high_precision implmode binds another kernel try it instead of fp32 storage
     (all at once, then one by one if that fails): the cheaper move wins where it passes.
  5. fusion off: for each GE fusion pass whose fused device ops the fix keeps in fp32, the pass switched off
     instead of those moves (one evaluation per pass); kept when it passes with fewer changes (a fused kernel that is
     itself the culprit, while the ops it replaces compute well enough in the profile's precision).
The search is anytime: the last passing configuration is always known, so an exhausted budget still returns
the best fix found (or, with none, the closest configuration and what still fails).

The rule of thumb "a cast point every 5-6 fp16 layers" (an fp32 layer after every five fp16 ones; layers =
MatMul/Gemm/Conv/ConvTranspose nodes, or every candidate when the model has none) is evaluated once and
reported next to the minimal set.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mschecker.compare import ToleranceRule, json_float
from mschecker.graph.executor import Executor
from mschecker.dtypes import is_float
from mschecker.npu.profile import NumericsProfile
from mschecker.npu.fixes import OP_TYPE_PREFIX, moved_profile, op_facts
from mschecker.bisect.lockstep import Analysis
from mschecker.bisect.policy import RecordingNpuPolicy, npu_policy
from mschecker.bisect.samples import Sample
from mschecker.bisect.stats import ErrorStats, Headroom, is_overflow

# the layer ops, by ONNX op type and by the Ascend IR op type a device profile reports them under (device_table)
LAYER_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "BatchMatMulV2", "MatMulV2", "Conv2D", "Conv2DTranspose")
#: More culprits than this in the first prefix search means no few nodes explain the error: it accumulates over
#: many nodes (a deep fp16 chain). Extracting them one by one would cost ceil(log2 n) evaluations each for a set
#: that is large anyway, so the search compares that prefix with one contiguous fp32 island instead.
ACCUMULATION_PREFIX = 8
RULE_OF_THUMB_EVERY = 6  # "a cast point every 5-6 fp16 layers": five fp16 layers, then one in fp32


@dataclass(frozen=True)
class FixConfig:
    """A set of moves on top of the profile as given (items: device op names, or "OpType::T" for every op of IR
    type T); npu.fixes.moved_profile writes them in ATC's vocabulary."""

    keep_dtype: frozenset = frozenset()       # computed and stored in fp32 (keep_dtype / customize_dtypes / mixlist)
    high_precision: frozenset = frozenset()   # implmode high_precision (op_precision_mode)
    fusion_off: frozenset = frozenset()       # GE fusion passes switched off (fusion_switch_file)

    @property
    def changes(self) -> int:
        return len(self.keep_dtype) + len(self.high_precision) + len(self.fusion_off)

    def profile(self, base: NumericsProfile, facts=None) -> NumericsProfile:
        """The profile the moves describe, as atc would read them (`facts`: npu.fixes.op_facts of the graph under
        `base`; None for a generic profile)."""
        return moved_profile(base, facts, fp32=self.keep_dtype, high_precision=self.high_precision,
                             fusion_off=self.fusion_off)

    def describe(self) -> str:
        parts = []
        if self.fusion_off:
            parts.append("fusion off: " + ", ".join(sorted(self.fusion_off)))
        if self.high_precision:
            parts.append(f"high_precision {len(self.high_precision)} item(s)")
        if self.keep_dtype:
            parts.append(f"fp32 {len(self.keep_dtype)} item(s)")
        return " + ".join(parts) or "as given"

    def to_dict(self) -> dict:
        return {"keep_dtype": sorted(self.keep_dtype), "high_precision": sorted(self.high_precision),
                "fusion_off": sorted(self.fusion_off)}


def op_type_of(item: str) -> str | None:
    """The op type of an "OpType::T" item, None for a node name."""
    return item[len(OP_TYPE_PREFIX):] if item.startswith(OP_TYPE_PREFIX) else None


def members(item: str, analysis: Analysis) -> list[str]:
    """The non-folded node names an item stands for."""
    t = op_type_of(item)
    if t is None:
        return [item]
    return [n.name for n in analysis.nodes if n.op_type == t and not n.folded]


@dataclass
class Evaluation:
    """One model evaluation: the NPU run under a configuration on every sample, judged."""

    purpose: str
    config: FixConfig
    passed: bool
    worst_rel_l2: float
    failing_outputs: list[str]
    overflow_nodes: list[str]
    seconds: float
    per_sample: list[dict[str, ErrorStats]] = field(default_factory=list)
    detail: object = None    # what a specialised evaluator measured besides (the SD check: its stage metrics)

    def to_dict(self) -> dict:
        return {"purpose": self.purpose, "changes": self.config.changes, "config": self.config.to_dict(),
                "passed": self.passed, "worst_rel_l2": json_float(self.worst_rel_l2),
                "failing_outputs": self.failing_outputs, "overflow_nodes": self.overflow_nodes[:20],
                "seconds": round(self.seconds, 4)}


class BudgetExhausted(Exception):
    """The evaluation or time budget ran out; the search returns what it has."""


@dataclass
class Budget:
    evaluations: int | None = None
    seconds: float | None = None


class Evaluator:
    """Counts, budgets and logs evaluations; run() judges one configuration (ModelEvaluator: a model on input
    samples against the analysis' reference; the SD check: a pipeline stage by its image)."""

    def __init__(self, budget: Budget | None = None, progress: Callable[[str, int, int | None], None] | None = None):
        self.budget = budget or Budget()
        self.progress = progress
        self.log: list[Evaluation] = []
        self.count = 0            # counted evaluations (the search's)
        self.started = time.monotonic()

    def __call__(self, config: FixConfig, purpose: str, *, counted: bool = True) -> Evaluation:
        if counted:
            b = self.budget
            if b.evaluations is not None and self.count >= b.evaluations:
                raise BudgetExhausted(f"evaluation budget {b.evaluations} used")
            if b.seconds is not None and time.monotonic() - self.started > b.seconds:
                raise BudgetExhausted(f"time budget {b.seconds:g} s used")
            self.count += 1
        t0 = time.perf_counter()
        result = self.run(config, purpose)
        result.seconds = time.perf_counter() - t0
        self.log.append(result)
        if self.progress is not None:
            self.progress(f"fix search: {purpose}", self.count, self.budget.evaluations)
        return result

    def record(self, done: Evaluation) -> None:
        """Count and log an evaluation made elsewhere (the lockstep pass judged the profile as given)."""
        self.count += 1
        self.log.append(done)

    def run(self, config: FixConfig, purpose: str) -> Evaluation:  # pragma: no cover - interface
        raise NotImplementedError


class ModelEvaluator(Evaluator):
    """Runs the NPU side under a FixConfig on every sample and judges it against the analysis' reference."""

    def __init__(self, model, base: NumericsProfile, samples: list[Sample], analysis: Analysis,
                 rule: ToleranceRule, budget: Budget | None = None,
                 progress: Callable[[str, int, int | None], None] | None = None, facts=None):
        super().__init__(budget, progress)
        self.model, self.base, self.samples, self.analysis, self.rule = model, base, samples, analysis, rule
        # npu.fixes.op_facts of the graph under `base` (None: a generic profile): what the moves are written as
        self.facts = facts if facts is not None or not base.device else op_facts(Executor(model, npu_policy(base)))

    def run(self, config: FixConfig, purpose: str) -> Evaluation:
        policy = npu_policy(config.profile(self.base, self.facts))
        executor = Executor(self.model, policy)
        # the outputs of the nodes of the graph the NPU runs (a device profile's fused ops are not in self.model)
        outputs_of = {n.name: [o for o in n.output if o] for n in executor.model.graph.node}
        ranges = self.analysis.reference_ranges
        overflow: dict[str, None] = {}

        def watch(node, name, value):
            if isinstance(value, np.ndarray) and is_float(value.dtype) and value.size:
                if not np.isfinite(value).all() and is_overflow(Headroom.of(value), ranges.get(name)):
                    overflow[node.name] = None
        per_sample, failing, worst = [], {}, 0.0
        for sample, ref_out in zip(self.samples, self.analysis.reference_outputs):
            out = executor.run(sample.feeds, capture=watch)
            if isinstance(policy, RecordingNpuPolicy):
                for node_name, count in sorted(policy.hidden.items()):
                    head = Headroom("float16", 0.0, 0.0, 0, 0, 0, count, 0.0) if count else None
                    if head and any(is_overflow(head, ranges.get(o)) for o in outputs_of.get(node_name, [])):
                        overflow[node_name] = None
                policy.hidden.clear()
                policy.hidden_nan.clear()
            stats = {}
            for name, ref in ref_out.items():
                s = stats[name] = ErrorStats.of(out[name], ref, self.rule, name)
                worst = max(worst, s.rel_l2)
                if not s.passed:
                    failing[name] = None
            per_sample.append(stats)
            del out
        passed = not failing and not overflow
        return Evaluation(purpose, config, passed, worst, list(failing), list(overflow), 0.0, per_sample)


@dataclass
class SearchResult:
    baseline: Evaluation | None
    recommended: FixConfig | None          # the passing configuration with the fewest changes found
    best: Evaluation | None                # the evaluation of `recommended`, else the closest failing one
    culprits: list[str]                    # in the order the search found them
    candidates: list[str]                  # the candidates in the order searched (bisect.priors)
    evaluations: int
    bound: int                             # 2 + (k+1)*ceil(log2 n) for the k culprits found among n candidates
    exhausted: str | None                  # why the budget stopped the search, if it did
    rule_of_thumb: Evaluation | None = None
    layers: list[str] = field(default_factory=list)
    log: list[Evaluation] = field(default_factory=list)   # every evaluation, in order
    move: str = "keep_dtype"   # the move the group testing applied (high_precision when that alone passed)
    hp_probe: bool | None = None   # every capable candidate in high_precision: passed / failed / not tried
    regime: str = "culprits"   # "culprits": a few nodes to move; "accumulation": error spread over many nodes
    located_in: int = 0        # evaluations until the culprits were located (what `bound` bounds); the rest
                               # tried cheaper moves for them (high_precision instead of fp32)


def rank_candidates(analysis: Analysis, granularity: str = "node") -> list[str]:
    """What a move can change, most own error first (overflowing ones before all; ties in execution order).
    granularity "node": node names; "op_type": "OpType::T" items, each ranked by its worst node (ATC users
    often deploy per op type; the SD check fixes a stage per op type)."""
    nodes = [n for n in analysis.nodes if not n.folded and (n.own_error > 0 or n.overflow)]
    nodes.sort(key=lambda n: (not n.overflow, -n.own_error if not math.isnan(n.own_error) else -math.inf, n.index))
    if granularity == "node":
        return [n.name for n in nodes]
    if granularity != "op_type":
        raise ValueError(f"granularity {granularity!r}: node or op_type")
    return list(dict.fromkeys(OP_TYPE_PREFIX + n.op_type for n in nodes))


def high_precision_capable(executor: Executor, base: NumericsProfile, items: list[str]) -> set[str]:
    """Items whose high_precision implmode binds other kernels than the profile as given for some node (for the
    others the move changes nothing, so only fp32 storage can help them)."""
    if not items:
        return set()
    types = {op_type_of(i) for i in items if op_type_of(i)}
    kind = getattr(executor.policy, "op_type_of", lambda node: node.op_type)  # the profile's op-type vocabulary
    names = [i for i in items if not op_type_of(i)] + [st.label for st in executor.steps if kind(st.node) in types]
    node_capable = _hp_capable_nodes(executor, base, names)
    by_type = {kind(st.node) for st in executor.steps if st.label in node_capable}
    return {i for i in items if (op_type_of(i) in by_type if op_type_of(i) else i in node_capable)}


def _hp_capable_nodes(executor: Executor, base: NumericsProfile, names: list[str]) -> set[str]:
    if not names:
        return set()
    probe = npu_policy(base.replace(implmode_by_node={**base.implmode_by_node,
                                                      **{n: "high_precision" for n in names}}))
    wanted = set(names)
    out = set()
    # every step bound in graph order, as a plan does (a mixed-precision mode decides a node's dtype from its
    # producers'), on the graph already transformed
    probe.prepare(executor.initializers)
    for st in executor.steps:
        kernels = list(st.spec.kernel_names(st.attrs, executor.model.opset))
        folded = st.ctx.description.startswith("host-folded")
        ctx = probe.bind(st.node, executor.model.opset, kernels, st.spec.cube, foldable=folded)
        if st.label in wanted and st.ctx.implmode != "high_precision" and _bound(ctx) != _bound(st.ctx):
            out.add(st.label)
    return out


def _bound(ctx) -> tuple:
    """What a node computes with: dtype and the kernel:variant choices the policy bound, its operand and output
    roundings included (NpuPolicy.bind's description; the implmode name itself changes nothing: a Reshape or an
    op whose kernel has one variant per dtype binds the same code under either implmode)."""
    return ctx.dtype, tuple(sorted(t for t in ctx.description.split() if ":" in t))


def _accumulation(evaluate: Evaluator, note, prefix: list[str], order: list[str]) -> list[str]:
    """Error spread over many nodes: the passing ranked prefix, or the shortest fp32 island at the end of the
    graph (one binary search over where the cast point goes, in execution order), whichever is smaller. An
    island at the end keeps every rounding after its cast point away; roundings before it are the ones the
    output tolerates."""
    low, high = 0, len(order)   # no island fails (the baseline); everything kept passes
    while high - low > 1:
        mid = (low + high) // 2
        if note(evaluate(FixConfig(keep_dtype=frozenset(order[-mid:])), f"fp32 island: last {mid} nodes")).passed:
            high = mid
        else:
            low = mid
    tail = order[-high:]
    return tail if len(tail) < len(prefix) else list(prefix)


def _fusion_off_trials(evaluate: Evaluator, note, config: FixConfig, fusion_of: dict[str, str]) -> None:
    """Step 5: for each fusion pass whose fused ops the fix moves, the pass switched off instead of those moves
    (the unfused ops keep the profile's precision): a fused kernel that is itself the culprit, e.g. GE's one-pass
    GroupNorm, while the ops it replaces compute well enough. Kept where it passes with fewer changes."""
    current = config
    by_pass: dict[str, list[str]] = {}
    for item in sorted(current.keep_dtype):  # an implmode move is cheaper than losing a fusion: left as it is
        if item in fusion_of:
            by_pass.setdefault(fusion_of[item], []).append(item)
    for pass_name, items in sorted(by_pass.items()):
        trial = FixConfig(keep_dtype=current.keep_dtype - set(items), high_precision=current.high_precision,
                          fusion_off=current.fusion_off | {pass_name})
        if note(evaluate(trial, f"{pass_name} off instead of {len(items)} move(s) on the ops it fuses")).passed:
            current = trial


@dataclass
class _SearchState:
    """What the search has reached so far. The steps update it in place rather than return it: the budget can
    stop any of them (BudgetExhausted), and the anytime result is built from whatever they had reached."""

    candidates: list[str]                  # the pool the group testing searches (the capable ones after the probe)
    best_pass: Evaluation | None = None    # the passing evaluation with the fewest changes so far
    closest: Evaluation | None = None      # the evaluation nearest to passing (fewest overflows, then least error)
    culprits: list[str] = field(default_factory=list)
    regime: str = "culprits"   # or "accumulation" (SearchResult.regime)
    move: str = "keep_dtype"   # the move the group testing applies: keep_dtype, or high_precision (module docstring)
    hp_tried: bool = False     # the high_precision probe ran (the worst candidate is capable)
    probed: int = 0            # 1 when the high_precision probe ran and failed (it costs one evaluation)
    located: int | None = None  # evaluations until the culprits were located

    def note(self, ev: Evaluation) -> Evaluation:
        bp = self.best_pass
        if ev.passed and (bp is None or ev.config.changes < bp.config.changes):
            self.best_pass = ev
        cl = self.closest
        if cl is None or (len(ev.overflow_nodes), ev.worst_rel_l2) < (len(cl.overflow_nodes), cl.worst_rel_l2):
            self.closest = ev
        return ev

    def config(self, items) -> FixConfig:
        """`items` under the move the group testing applies."""
        return FixConfig(**{self.move: frozenset(items)})


def search(evaluate: Evaluator, candidates: list[str], hp_capable: set[str], layers: list[str],
           position: dict[str, int], baseline: Evaluation | None = None,
           fusion_of: dict[str, str] | None = None) -> SearchResult:
    """The group testing described in the module docstring; `position`: node name -> execution index;
    `baseline`: the profile as given, already judged (the lockstep pass is that evaluation), else evaluated;
    `fusion_of`: item -> the fusion pass that created it (step 5; None: no fusion-off moves)."""
    state = _SearchState(candidates)
    exhausted = None
    order = sorted(candidates, key=position.__getitem__)
    try:
        baseline = _judge_as_given(evaluate, state, baseline)
        if baseline.passed:
            return SearchResult(baseline, FixConfig(), baseline, [], candidates, evaluate.count, 1, None,
                                log=list(evaluate.log), located_in=evaluate.count)
        everything = _probe_everything(evaluate, state, hp_capable)
        if state.candidates and everything.passed:
            _locate_culprits(evaluate, state, order)
            state.located = evaluate.count
            _prefer_high_precision(evaluate, state, hp_capable)
            if fusion_of and state.best_pass is not None:
                _fusion_off_trials(evaluate, state.note, state.best_pass.config, fusion_of)
    except BudgetExhausted as exc:
        exhausted = str(exc)
    best_pass = _cheapest_move_at_equal_size(evaluate.log, state.best_pass)
    thumb = _rule_of_thumb(evaluate, layers) if layers and exhausted is None else None
    return SearchResult(baseline, best_pass.config if best_pass else None, best_pass or state.closest,
                        state.culprits, state.candidates, evaluate.count,
                        _evaluation_bound(state, _ceil_log2(len(state.candidates))), exhausted, thumb, layers,
                        list(evaluate.log), regime=state.regime,
                        located_in=state.located if state.located is not None else evaluate.count, move=state.move,
                        hp_probe=None if not state.hp_tried else not state.probed)


def _judge_as_given(evaluate: Evaluator, state: _SearchState, baseline: Evaluation | None) -> Evaluation:
    """Step 1: the profile as given, evaluated unless the lockstep pass already judged it (then only counted)."""
    if baseline is None:
        baseline = evaluate(FixConfig(), "profile as given")
    else:
        evaluate.record(baseline)
    return state.note(baseline)


def _probe_everything(evaluate: Evaluator, state: _SearchState, hp_capable: set[str]) -> Evaluation | None:
    """Step 2: every candidate moved at once, which decides whether any fix exists and with which move. When the
    worst candidate's implmode binds other kernels, every capable candidate in high_precision first (passing: the
    group testing searches those with that move); else, or when that fails, every candidate in fp32. None
    without candidates."""
    everything = None
    hp_pool = [c for c in state.candidates if c in hp_capable]
    state.hp_tried = bool(state.candidates) and state.candidates[0] in hp_capable
    if state.hp_tried:  # the worst node's implmode binds other kernels: the cheap move first
        everything = state.note(evaluate(FixConfig(high_precision=frozenset(hp_pool)),
                                         f"all {len(hp_pool)} high_precision-capable candidates in high_precision"))
        if everything.passed:
            state.move, state.candidates = "high_precision", hp_pool
            return everything
        state.probed = 1
    if state.candidates:
        everything = state.note(evaluate(FixConfig(keep_dtype=frozenset(state.candidates)),
                                         f"all {len(state.candidates)} candidates in fp32"))
    return everything


def _locate_culprits(evaluate: Evaluator, state: _SearchState, order: list[str]) -> None:
    """Step 3: culprit after culprit, each the last item of the shortest ranked prefix that passes with the
    culprits found before it, until they pass alone. More than ACCUMULATION_PREFIX items in the first prefix
    switch to the accumulation regime (the error is spread over many nodes)."""
    pool, low, high = list(state.candidates), 0, len(state.candidates)  # prefix `low` fails (baseline), `high` passes
    while True:
        high = _shortest_passing_prefix(evaluate, state, pool, low, high)
        if high == 0:
            return
        if not state.culprits and high > ACCUMULATION_PREFIX:
            state.regime = "accumulation"
            state.culprits = _accumulation(evaluate, state.note, pool[:high], order) if state.move == "keep_dtype" \
                else list(pool[:high])  # implmodes: the passing prefix (an island means storage)
            return
        state.culprits.append(pool[high - 1])
        pool = pool[:high - 1]
        low, high = -1, len(pool)  # F + the whole remaining prefix passes; F alone is untested


def _shortest_passing_prefix(evaluate: Evaluator, state: _SearchState, pool: list[str], low: int, high: int) -> int:
    """Binary search between a failing prefix length `low` and a passing one `high` of `pool`, each prefix tried
    together with the culprits found so far: the shortest passing length."""
    while high - low > 1:
        mid = (low + high) // 2
        cfg = state.config(state.culprits + pool[:mid])
        if state.note(evaluate(cfg, f"{len(state.culprits)} culprit(s) + top {mid} of {len(pool)}")).passed:
            high = mid
        else:
            low = mid
    return high


def _prefer_high_precision(evaluate: Evaluator, state: _SearchState, hp_capable: set[str]) -> None:
    """Step 4: the culprits kept in fp32 whose high_precision implmode binds other kernels try that cheaper move
    instead, all at once, then (when that fails) one by one. Only for culprits the fp32 move located."""
    culprits = state.culprits
    hp = [c for c in culprits if c in hp_capable] if state.regime == "culprits" and state.move == "keep_dtype" \
        else []
    if not hp:
        return
    keep = [c for c in culprits if c not in hp_capable]
    cfg = FixConfig(keep_dtype=frozenset(keep), high_precision=frozenset(hp))
    if state.note(evaluate(cfg, f"high_precision instead of fp32 for {len(hp)} culprit(s)")).passed or len(hp) <= 1:
        return
    chosen: set[str] = set()
    for c in hp:
        trial = FixConfig(keep_dtype=frozenset(set(culprits) - chosen - {c}), high_precision=frozenset(chosen | {c}))
        if state.note(evaluate(trial, f"high_precision instead of fp32 for {c}")).passed:
            chosen.add(c)


def _cheapest_move_at_equal_size(log: list[Evaluation], best_pass: Evaluation | None) -> Evaluation | None:
    """Among the passing evaluations as small as `best_pass`, the one with the cheapest moves: the refinement's
    configuration (most high_precision, fewest fusion passes off) when it passed."""
    if best_pass is None:
        return None
    ties = [e for e in log if e.passed and e.config.changes == best_pass.config.changes]
    return max(ties, key=lambda e: (len(e.config.high_precision), -len(e.config.fusion_off)))


def _rule_of_thumb(evaluate: Evaluator, layers: list[str]) -> Evaluation | None:
    """The rule of thumb's configuration, an uncounted evaluation reported next to the minimal set (module
    docstring); None when the model has too few layers for it."""
    every = layers[RULE_OF_THUMB_EVERY - 1::RULE_OF_THUMB_EVERY]
    if not every:
        return None
    try:
        return evaluate(FixConfig(keep_dtype=frozenset(every)),
                        f"rule of thumb: fp32 every {RULE_OF_THUMB_EVERY}th layer", counted=False)
    except BudgetExhausted:  # pragma: no cover - uncounted evaluations never exhaust
        return None


def _ceil_log2(n: int) -> int:
    """ceil(log2 n), at least 1: the evaluations one binary search over n candidates takes."""
    return max(1, math.ceil(math.log2(n))) if n > 1 else 1


def _evaluation_bound(state: _SearchState, log2n: int) -> int:
    """The bound on the evaluations that locate the culprits (module docstring, step 3): 2 + (k+1)*ceil(log2 n),
    plus the failed high_precision probe; the accumulation regime costs one search (two with the island's)."""
    return 2 + state.probed + (2 if state.regime == "accumulation" and state.move == "keep_dtype" else
                               1 if state.regime == "accumulation" else len(state.culprits) + 1) * log2n
