"""One streamed side-by-side pass: the float64 reference and the NPU side walk the same topological order.

For every node, in execution order and for every sample:
  * the reference executes it (Executor.walk) and the NPU side produces the same tensors: the emulator executes
    it too (its own walk), or, with real-device dumps, the dumped tensor of that name is read;
  * own error: the emulator runs the node alone on the *reference's* inputs (Executor.run_node), so the error
    it adds is separated from the error it inherited; with dumps, the reference runs the node on the dumped
    inputs, and the dumped output is compared with that (the same quantity seen from the other side);
  * every float output is compared with the reference value as it appears (ErrorStats) and its headroom taken
    (Headroom); then both sides drop it (the executors free each tensor after its last consumer; nothing here
    keeps a tensor beyond its node, except the graph outputs of the reference, which the fix search needs).
Per-sample stats merge into the worst over the samples (ErrorStats.worst), so results do not depend on sample
order and a problem shows on whichever sample has it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from mschecker.compare import ToleranceRule, json_float
from mschecker.errors import InputError
from mschecker.graph.executor import Executor
from mschecker.dtypes import is_float
from mschecker.graph.policy import ReferencePolicy
from mschecker.devdump.evidence import DeviceDump, DumpCoverage, stats_gap
from mschecker.bisect.policy import RecordingNpuPolicy
from mschecker.bisect.samples import Sample
from mschecker.bisect.stats import LOW_HEADROOM, ErrorStats, Headroom, ReferenceRange, is_overflow

Progress = Callable[[str, int, int | None], None]  # (what, done, total)


class StreamingReference(Executor):
    """The float64 reference as the lockstep pass runs it: float initializers are converted per node, not held
    converted for the executor's life (a float64 copy of every weight would be 2x the fp32 model alone), so the
    pass's memory stays near two plain runs."""

    ROUND_ONCE_MAX_ELEMENTS = -1


def reference_executor(model) -> Executor:
    return StreamingReference(model, ReferencePolicy())


@dataclass
class OutputRecord:
    """One float output of one node, worst over the samples."""

    tensor: str
    shape: tuple
    error: ErrorStats | None = None        # NPU value vs reference (accumulated: own + inherited)
    own: ErrorStats | None = None          # the node's own error (see module docstring)
    headroom: Headroom | None = None
    reference: ReferenceRange = field(default_factory=ReferenceRange)
    stats_bound: float | None = None       # a statistics-only dump: a lower bound on the relative L2 error

    @property
    def overflow(self) -> bool:
        return self.headroom is not None and is_overflow(self.headroom, self.reference)

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "shape": [int(s) for s in self.shape],
                "error": self.error.to_dict() if self.error else None,
                "own_error": self.own.to_dict() if self.own else None,
                "headroom": self.headroom.to_dict() if self.headroom else None,
                "reference_peak": self.reference.peak, "overflow": self.overflow,
                **({"statistics_lower_bound_rel_l2": json_float(self.stats_bound)}
                   if self.stats_bound is not None else {})}


@dataclass
class NodeRecord:
    index: int          # position in execution order
    name: str           # the model's node name ("#i:OpType" when unnamed)
    op_type: str
    npu: str            # what the NPU side bound (dtype, implmode, kernel variants) or "device dump"
    folded: bool        # constant-foldable (shape arithmetic, weight preprocessing): no device precision applies
    outputs: list[OutputRecord] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)   # the float tensors it reads that nodes produce
    inherited: float = 0.0   # worst rel L2 error among those inputs: what the node received, not what it added

    @property
    def label(self) -> str:
        return f"{self.name} ({self.op_type})"

    @property
    def error(self) -> float:
        """Worst relative L2 error of the outputs (a statistics-only dump: the lower bound its statistics give)."""
        return max([o.error.rel_l2 for o in self.outputs if o.error]
                   + [o.stats_bound for o in self.outputs if o.stats_bound is not None], default=0.0)

    @property
    def own_error(self) -> float:
        return max((o.own.rel_l2 for o in self.outputs if o.own), default=0.0)

    @property
    def overflow(self) -> bool:
        return any(o.overflow for o in self.outputs)

    @property
    def passed(self) -> bool:
        return all(o.error.passed for o in self.outputs if o.error)

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "op_type": self.op_type, "npu": self.npu,
                "folded": self.folded, "inherited_rel_l2": json_float(self.inherited),
                "outputs": [o.to_dict() for o in self.outputs]}


@dataclass
class Analysis:
    """The lockstep pass over every sample: per-node records and the graph outputs' verdicts."""

    nodes: list[NodeRecord]
    outputs: dict[str, ErrorStats]                       # graph output -> worst over samples
    per_sample: list[dict[str, ErrorStats]]              # sample -> graph output -> stats
    reference_outputs: list[dict[str, np.ndarray]]       # kept for the fix search's evaluations
    reference_ranges: dict[str, ReferenceRange]          # every float tensor's reference range
    dump: DumpCoverage | None = None
    judgeable: list[str] = field(default_factory=list)   # graph outputs the reference produced with a value to
                                                         # judge (non-empty float ones, and integer / bool ones)

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.outputs.values()) and not any(n.overflow for n in self.nodes)

    @property
    def unjudged_outputs(self) -> list[str]:
        """Graph outputs with a value to judge that the NPU side never gave (a device dump missing or misshaped;
        the emulator always gives them): the verdict has no evidence about them."""
        return [n for n in self.judgeable if n not in self.outputs]

    def first_crossing(self, threshold: float) -> NodeRecord | None:
        """The first node (execution order) whose output overflows or whose relative L2 error exceeds
        `threshold` (the tolerance). Inner tensors are judged by relative L2, not by the outputs' elementwise
        rule: an absolute tolerance means nothing at an inner tensor's own scale."""
        return next((n for n in self.nodes if not n.folded and (n.error > threshold or n.overflow)), None)

    def first_low_headroom(self, fraction: float = LOW_HEADROOM) -> NodeRecord | None:
        """The first non-folded node with a 2-byte float output whose max |x| reaches `fraction` of the format's
        max (or beyond: overflow), the early warning before an overflow."""
        return next((n for n in self.nodes if not n.folded and any(
            o.headroom is not None and o.headroom.dtype in ("float16", "bfloat16")
            and (o.headroom.fraction_of_max >= fraction or o.overflow) for o in n.outputs)), None)

    def node(self, name: str) -> NodeRecord:
        return next(n for n in self.nodes if n.name == name)


def _float_outputs(produced: dict) -> Iterator[tuple[str, np.ndarray]]:
    for name, v in produced.items():
        if isinstance(v, np.ndarray) and is_float(v.dtype) and v.size:
            yield name, v


def analyse(reference: Executor, npu: Executor | None, samples: list[Sample], rule: ToleranceRule, *,
            dump: DeviceDump | None = None, own_error: bool = True,
            progress: Progress | None = None, label: str = "lockstep pass") -> Analysis:
    """The lockstep pass (module docstring). `npu` is the emulator's executor, or None with `dump` (one sample)."""
    lockstep = _Lockstep(reference, npu, dump, rule, own_error)
    per_sample: list[dict[str, ErrorStats]] = []
    ref_outputs: list[dict[str, np.ndarray]] = []
    node_count = len(reference.steps)
    total = node_count * len(samples)
    for si, sample in enumerate(samples):
        def tick(k: int, done: int = si * node_count) -> None:  # `done`: the nodes of the samples before
            if progress is not None:
                progress(label, done + k + 1, total)
        sample_out, kept = lockstep.walk(sample, tick)
        per_sample.append(sample_out)
        ref_outputs.append({n: kept[n] for n in reference.output_names if n in kept})
    lockstep.set_inherited()
    return Analysis(lockstep.records, lockstep.outputs, per_sample, ref_outputs, lockstep.ranges,
                    dump.coverage if dump is not None else None,
                    [n for n in reference.output_names if n in lockstep.judgeable])


def _node_records(reference: Executor, npu: Executor | None, dump: DeviceDump | None) -> list[NodeRecord]:
    """One empty record per node in execution order: what the NPU side bound, whether it is host-folded, and the
    float tensors it reads that nodes produce."""
    steps = reference.steps
    op_type = getattr(npu.policy, "op_type_of", None) if npu is not None else None
    records = [NodeRecord(st.index, st.label, op_type(st.node) if op_type else st.node.op_type,
                          _dump_label(dump, st) if npu is None else npu.steps[k].ctx.description,
                          (st.folded is not None or st.ctx.description.startswith("host-folded")) if npu is None else
                          npu.steps[k].ctx.description.startswith("host-folded"))
               for k, st in enumerate(steps)]
    produced = {o for st in steps for o in st.outputs if o}
    for record, st in zip(records, steps):
        record.inputs = [i for i in dict.fromkeys(st.inputs) if i in produced]
    return records


class _Lockstep:
    """One pass's fixed inputs, and what it accumulates over every node and sample: per-tensor records (worst over
    the samples), every float tensor's reference range, the graph outputs' verdicts, and which graph outputs have
    a value to judge. Per-sample values (tensors, the sample's output stats) live in walk() and die with it."""

    def __init__(self, reference: Executor, npu: Executor | None, dump: DeviceDump | None, rule: ToleranceRule,
                 own_error: bool):
        self.reference, self.npu, self.dump, self.rule, self.own_error = reference, npu, dump, rule, own_error
        self.records = _node_records(reference, npu, dump)
        self.graph_outputs = set(reference.output_names)
        self.recording = npu.policy if npu is not None and isinstance(npu.policy, RecordingNpuPolicy) else None
        self.by_tensor: dict[str, OutputRecord] = {}
        self.ranges: dict[str, ReferenceRange] = {}
        self.outputs: dict[str, ErrorStats] = {}
        self.judgeable: dict[str, None] = {}

    def walk(self, sample: Sample, tick: Callable[[int], None]) -> tuple[dict[str, ErrorStats],
                                                                            dict[str, np.ndarray]]:
        """Both sides through one sample, node by node (`tick(k)` after node k): the sample's graph-output stats
        and the reference's graph outputs (the only tensors kept beyond their node)."""
        sample_out: dict[str, ErrorStats] = {}
        kept: dict[str, np.ndarray] = {}
        chain = _Chain(self.reference.steps) if self.npu is None else None
        ref_walk = self.reference.walk(sample.feeds)
        npu_walk = self.npu.walk(sample.feeds) if self.npu is not None else None
        for k, (rstep, rargs, rout) in enumerate(ref_walk):
            if npu_walk is not None:
                nout, own_out, hidden = self._emulated(k, rstep, rargs, npu_walk)
            else:
                (nout, own_out), hidden = self._dumped(k, rstep, rargs, rout, chain), (0, 0)
            self._compare_floats(self.records[k], rout, nout, own_out, hidden, sample_out)
            self._compare_graph_outputs(rout, nout, sample_out, kept)
            del rargs, rout, nout, own_out
            tick(k)
        return sample_out, kept

    def _emulated(self, k: int, rstep, rargs, npu_walk) -> tuple[dict, dict | None, tuple]:
        """The emulator's node k: its outputs, its own run on the reference's inputs (own error), and the
        overflows its kernels clamped (hidden)."""
        recording = self.recording
        nstep, _nargs, nout = next(npu_walk)
        del _nargs
        hidden = recording.take_hidden(nstep.node.name) if recording else (0, 0)
        ref_inputs = {n: a for n, a in zip(rstep.inputs, rargs) if n and n not in self.reference.initializers}
        own_out = self.npu.run_node(k, ref_inputs) if self.own_error and not self.records[k].folded else None
        if recording:  # the own run's clamps are not the pass's tensors: forget them
            recording.take_hidden(nstep.node.name)
        return nout, own_out, hidden

    def _dumped(self, k: int, rstep, rargs, rout: dict, chain: _Chain) -> tuple[dict, dict | None]:
        """The device dump's tensors of node k, and the reference run on its dumped inputs (own error)."""
        dump, folded = self.dump, self.records[k].folded
        # a host-folded node (a constant, shape arithmetic) is no device op: nothing to dump, nothing missing
        nout = {} if folded else {name: dump.load(name, np.shape(v)) for name, v in rout.items()
                                  if isinstance(v, np.ndarray) and is_float(v.dtype)}
        own_out = _reference_on_dumps(self.reference, k, rstep, rargs, dump, chain) \
            if self.own_error and not folded else None
        return nout, own_out

    def _compare_floats(self, record: NodeRecord, rout: dict, nout: dict, own_out: dict | None, hidden: tuple,
                        sample_out: dict[str, ErrorStats]) -> None:
        """Every float output of a node against the reference: accumulated and own error, headroom, the
        reference's range; a graph output's stats also into the sample's and the worst over samples."""
        npu, rule, graph_outputs = self.npu, self.rule, self.graph_outputs
        for name, ref in _float_outputs(rout):
            rng = self.ranges.setdefault(name, ReferenceRange())
            rng.add(ref)
            actual = nout.get(name)
            rec = self.by_tensor.get(name)
            if rec is None:
                rec = self.by_tensor[name] = OutputRecord(name, tuple(ref.shape), reference=rng)
                record.outputs.append(rec)
            if name in graph_outputs:
                self.judgeable[name] = None
            if actual is None and npu is None:
                _statistics_only(self.dump, name, ref, rec, rule, self.outputs if name in graph_outputs else None)
            if actual is None or not is_float(actual.dtype):
                continue
            where = f"{record.label} output {name!r}"
            err = ErrorStats.of(actual, ref, rule, where)
            rec.error = err.worst(rec.error)
            rec.headroom = Headroom.of(actual, *hidden).worst(rec.headroom)
            if own_out is not None and own_out.get(name) is not None:
                if npu is not None:
                    own = ErrorStats.brief(own_out[name], ref, rule)
                else:  # device dump vs the reference run on the dumped inputs
                    own = ErrorStats.brief(actual, own_out[name], rule)
                rec.own = own.worst(rec.own)
            elif npu is None and self.own_error:  # no dumped input: everything this output carries is its own
                rec.own = err.worst(rec.own)
            if name in graph_outputs:
                sample_out[name] = err
                self.outputs[name] = err.worst(self.outputs.get(name))

    def _compare_graph_outputs(self, rout: dict, nout: dict, sample_out: dict[str, ErrorStats],
                               kept: dict[str, np.ndarray]) -> None:
        """The node's graph outputs kept for the fix search; the integer / bool ones judged here (the float ones
        were, by _compare_floats)."""
        for name in self.graph_outputs.intersection(rout):
            kept[name] = rout[name]
            actual = nout.get(name)
            if not is_float(np.asarray(rout[name]).dtype):
                self.judgeable[name] = None
            if not is_float(np.asarray(rout[name]).dtype) and actual is not None:
                # an integer / bool graph output (labels, indices): judged exactly like the float ones
                err = ErrorStats.of(np.asarray(actual), np.asarray(rout[name]), self.rule, f"output {name!r}")
                sample_out[name] = err
                self.outputs[name] = err.worst(self.outputs.get(name))

    def set_inherited(self) -> None:
        """Each node's inherited error: the worst accumulated error among the tensors it reads (every sample)."""
        by_tensor = self.by_tensor
        for record in self.records:
            errors = [by_tensor[i].error.rel_l2 for i in record.inputs if i in by_tensor and by_tensor[i].error]
            record.inherited = max(errors, default=0.0)


class _Chain:
    """The reference re-anchored on the device's dumps: for a tensor with no dump of its own (inside a fused
    device op, or simply not dumped), the reference's value computed from the nearest dumped tensors upstream. A
    fused op's own error is then its dumped output against the reference run from its dumped inputs through the
    ONNX nodes it covers, not against a value that already carries the error it inherited. Tensors are dropped
    after their last reader, as the executors do."""

    def __init__(self, steps):
        self.values: dict[str, np.ndarray] = {}
        last_use: dict[str, int] = {}
        for k, st in enumerate(steps):
            for n in st.inputs:
                if n:
                    last_use[n] = k
        self.last_use = last_use
        self.frees: dict[int, list[str]] = {}
        for n, k in last_use.items():
            self.frees.setdefault(k, []).append(n)

    def keep(self, k: int, own: dict | None, dumped: set) -> None:
        """After node k: keep its reference outputs that have no dump and a later reader; drop what k read last."""
        for name, v in (own or {}).items():
            if name not in dumped and isinstance(v, np.ndarray) and self.last_use.get(name, -1) > k:
                self.values[name] = v
        for name in self.frees.get(k, ()):
            self.values.pop(name, None)


def _reference_on_dumps(reference: Executor, k: int, step, rargs, dump: DeviceDump, chain: _Chain) -> dict | None:
    """The reference's value of node k computed from what the device read: each input's dump (the consumer's
    own dumped input first), else the chained reference value (_Chain), else the reference's; None when nothing
    upstream was dumped (then the whole error is the node's own)."""
    inputs, any_dumped = {}, False
    for n, a in zip(step.inputs, rargs):
        if not n or n in reference.initializers:
            continue
        d = dump.load_input(n, np.shape(a)) if isinstance(a, np.ndarray) and is_float(a.dtype) else None
        if d is None and n in chain.values:
            d = chain.values[n]
        any_dumped |= d is not None
        inputs[n] = d if d is not None else a
    own = reference.run_node(k, inputs) if any_dumped else None
    chain.keep(k, own, {o for o in step.outputs if o and o in dump.outputs})
    return own


def _dump_label(dump: DeviceDump | None, step) -> str:
    op = dump.device_op(step.node.name) if dump is not None else None
    return f"device dump: {op}" if op and op != step.node.name else "device dump"


def _statistics_only(dump: DeviceDump, name: str, ref: np.ndarray, rec: OutputRecord, rule,
                     outputs: dict | None) -> None:
    """A tensor the dump holds only statistics of: their lower bound on the error (evidence.stats_gap) is
    recorded as a relative L2 bound. For a graph output it is a proven FAIL when the gap exceeds
    ||atol + rtol |r|||_2: were every element within atol + rtol |r_i|, ||x - r|| could not be larger."""
    stats = dump.stats(name)
    gap = stats_gap(stats, ref) if stats is not None else None
    if gap is None:
        return
    r = np.asarray(ref, dtype=np.float64)
    norm = float(np.sqrt(np.sum(r * r)))
    bound = gap / norm if norm > 0 else (0.0 if gap == 0 else math.inf)
    rec.stats_bound = max(rec.stats_bound or 0.0, bound)
    if outputs is None or rule.ulp is not None or rule.cosine is not None:
        return
    limit = float(np.sqrt(np.sum((rule.atol + rule.rtol * np.abs(r)) ** 2)))
    if gap > limit:
        outputs.setdefault(name, ErrorStats(bound, None, None, None, None, None, None, False))
