"""Exact power-of-two rescaling: a precision fix that keeps fp16 (issue 24, part 4).

Where an fp16 activation passes 65504 but every path from it ends in a scale-invariant norm (InstanceNormalization,
LayerNormalization, GroupNormalization, and so the TorchScript GroupNorm pattern), the activations can be divided
by 2^k without changing what the model computes: the linear ops that produce them get their weights and biases
multiplied by 2^-k, every other contributor to a residual sum on the way gets the same factor, and each norm's
epsilon gets 2^-2k (the norm divides by sqrt(var + eps); var scales by 2^-2k). A power of two is exact in binary,
so in float64 the patched model's outputs are expected to be bit-identical -- prove() measures it rather than
assuming it. Anything on a path that is not scale-equivariant (Sigmoid, Softmax, a Mul of two data tensors, a
graph output) makes the region not scale invariant: plan_rescale refuses with one InputError line naming the op.

API: plan_rescale(model, tensors, k) -> RescalePlan; apply_rescale(model, plan) -> patched copy;
plan.report() -> RescaleReport; prove(model, patched, feeds) -> max relative float64 output difference;
suggest_k(peak) -> the smallest k that brings a peak under the fp16 range with headroom; choose_k(model, tensors,
peak) -> suggest_k against the range the region's norms need (sqrt(65504) for the device's LayerNorm variance).
"""
from __future__ import annotations

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mschecker.errors import InputError
from mschecker.graph.executor import Executor
from mschecker.graph.policy import ReferencePolicy

FP16_MAX = 65504.0
# the device's TBE LayerNorm rounds its (fp32) variance through fp16: the stream's RMS must stay below sqrt(65504)
LAYERNORM_LIMIT = 255.0
NORMS = {"InstanceNormalization", "LayerNormalization", "GroupNormalization"}
NORM_EPS_DEFAULT = {"InstanceNormalization": 1e-5, "LayerNormalization": 1e-5, "GroupNormalization": 1e-5}
# read only the shape: a scaled tensor passes through them unchanged in meaning
SHAPE_ONLY = {"Shape", "Size"}
# y(s*x) = s*y(x) in the data input (index 0); the other inputs (shapes, axes, roi) must not be scaled
PASS_THROUGH = {"Reshape", "Transpose", "Resize", "Slice", "Identity", "Relu", "LeakyRelu", "MaxPool", "AveragePool",
                "Squeeze", "Unsqueeze", "Flatten", "Neg", "Expand", "Tile", "Gather", "Split", "Upsample"}
SUMS = {"Add", "Sub", "Sum"}
# produce their output by a linear map with a constant operand: scaling it (and the bias) scales the output
LINEAR = {"Conv", "Gemm", "MatMul"}
# x * c and x / c with a constant c: the constant carries the scale (c * 2^-k, or the divisor c * 2^k)
CONST_SCALED = {"Mul", "Div"}
# what can emit a tensor already scaled: its constant operands take the factor (try_producer)
PRODUCERS = LINEAR | CONST_SCALED


@dataclass(frozen=True)
class InitEdit:
    """Input `index` of node number `node` is a constant to multiply by `factor`, stored under `new_name` (equal to
    `source` when the constant is an initializer nobody else reads, so it is changed in place)."""
    node: int
    index: int
    source: str
    new_name: str
    factor: float


@dataclass(frozen=True)
class AttrEdit:
    """A norm's epsilon: old -> new (= old * 2^-2k, exact in fp32 by the check in the planner)."""
    node: int
    name: str
    old: float
    new: float


@dataclass(frozen=True)
class MulInsert:
    """A Mul by 2^-k inserted on one edge (the input `index` of node number `node`): the contributor to a residual
    sum is a non-linear op's output (or is read elsewhere), so it is scaled for this reader only."""
    node: int
    index: int
    tensor: str
    new_name: str


@dataclass
class RescaleReport:
    """What a rescale changes: every tensor whose value is multiplied (name, factor), every edited or duplicated
    initializer (node, original, written, factor), every edited attribute and every inserted Mul."""
    scaled: list[tuple[str, float]]
    initializers: list[tuple[str, str, str, float]]
    attributes: list[tuple[str, str, float, float]]
    inserted: list[tuple[str, str]]

    def lines(self) -> list[str]:
        out = [f"tensor {t} x{f:g}" for t, f in self.scaled]
        out += [f"initializer {s} -> {n} x{f:g} (read by {node})" for node, s, n, f in self.initializers]
        out += [f"attribute {node}.{a}: {o!r} -> {n!r}" for node, a, o, n in self.attributes]
        return out + [f"inserted Mul before {node}: {t}" for node, t in self.inserted]


@dataclass
class RescalePlan:
    """The edits that divide the region's activations by 2^k (factor = 2^-k), node numbers into model.graph.node."""
    k: int
    factor: float
    seeds: list[str]
    scaled: list[str] = field(default_factory=list)
    inits: list[InitEdit] = field(default_factory=list)
    attrs: list[AttrEdit] = field(default_factory=list)
    muls: list[MulInsert] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)

    def report(self) -> RescaleReport:
        names = self.node_names
        return RescaleReport([(t, self.factor) for t in self.scaled],
                             [(names[e.node], e.source, e.new_name, e.factor) for e in self.inits],
                             [(names[e.node], e.name, e.old, e.new) for e in self.attrs],
                             [(names[m.node], m.tensor) for m in self.muls])


# --------------------------------------------------------------------------------------------------- helpers
def _label(node: onnx.NodeProto, i: int) -> str:
    return node.name or f"{node.op_type}#{i}"


def _scaled_exactly(value: np.ndarray, factor: float, what: str) -> np.ndarray:
    """value * factor, refused when it would be subnormal (or zero) in its dtype: a power of two is exact only
    while the result stays normal, and a flushed weight would change the model."""
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.floating):
        raise InputError(f"rescale: {what} is {value.dtype}, not floating point: cannot scale it")
    out = (value * value.dtype.type(factor)).astype(value.dtype)
    tiny = np.finfo(value.dtype).tiny
    bad = (value != 0) & ~(np.abs(out) >= tiny)
    if bad.any():
        smallest = float(np.abs(value[bad]).min())
        raise InputError(f"rescale: {what} would become subnormal in {value.dtype} after x{factor:g} "
                         f"({int(bad.sum())} values, smallest |v| {smallest:g}): use a smaller k")
    return out


def suggest_k(peak: float, limit: float = FP16_MAX, headroom: float = 4.0) -> int:
    """The smallest k >= 1 with peak * 2^-k * headroom <= limit: the headroom leaves room for the fp16 rounding and
    for residual sums downstream that grow past the seed's peak."""
    return max(1, math.ceil(math.log2(peak * headroom / limit)))


def choose_k(model: onnx.ModelProto, tensors: list[str], peak: float, headroom: float = 4.0) -> int:
    """suggest_k against the range the region's norms need: 65504 for the activations, but sqrt(65504) when one
    of the norms is a LayerNormalization (measured: a MatMul+bias -> LayerNorm peak of 3e5 stays broken on
    ascend910b up to k = 9 although the activations fit fp16 from k = 3; the variance overflows)."""
    ops = {model.graph.node[e.node].op_type for e in plan_rescale(model, tensors, 1).attrs}
    return suggest_k(peak, LAYERNORM_LIMIT if "LayerNormalization" in ops else FP16_MAX, headroom)


# --------------------------------------------------------------------------------------------------- planner
class _Planner:
    """Walks forward from the scaled tensors (every reader must be equivariant or a norm) and backward to the
    producers (linear ops scaled, other sum contributors scaled per edge) until nothing new is scaled."""

    def __init__(self, model: onnx.ModelProto, k: int):
        g = model.graph
        self.nodes = list(g.node)
        self.labels = [_label(n, i) for i, n in enumerate(self.nodes)]
        self.inits = {t.name: t for t in g.initializer}
        self.consts = {n.output[0]: i for i, n in enumerate(self.nodes) if n.op_type == "Constant" and n.output}
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.readers: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, n in enumerate(self.nodes):
            for j, t in enumerate(n.input):
                if t:
                    self.readers[t].append((i, j))
        self.outputs = {o.name for o in g.output}
        self.plan = RescalePlan(k, 2.0 ** -k, [], node_names=self.labels)
        self.scaled: set[str] = set()
        self.edges: set[tuple[int, int]] = set()   # (node, index) scaled on that edge only (const or Mul)
        self.mode: dict[int, str] = {}              # node -> "producer" (weights scaled) / "forward" / "norm"
        self.queue: deque[str] = deque()

    # --- constants
    def is_const(self, t: str) -> bool:
        return t in self.inits or t in self.consts

    def const_value(self, t: str) -> np.ndarray:
        if t in self.inits:
            return numpy_helper.to_array(self.inits[t])
        node = self.nodes[self.consts[t]]
        attr = next((a for a in node.attribute if a.name == "value"), None)
        if attr is None:
            raise InputError(f"rescale: Constant {_label(node, self.consts[t])} has no tensor value to scale")
        return numpy_helper.to_array(attr.t)

    def scale_const(self, i: int, j: int, factor: float | None = None) -> None:
        """Scale the constant input j of node i by `factor` (default the plan's 2^-k), for this reader only:
        duplicated when others read it too."""
        if (i, j) in self.edges:
            return
        factor = self.plan.factor if factor is None else factor
        src = self.nodes[i].input[j]
        _scaled_exactly(self.const_value(src), factor, f"constant {src} (input {j} of {self.labels[i]})")
        sole = src in self.inits and len(self.readers[src]) == 1 and src not in self.outputs
        new = src if sole else f"{src}/rescale_x{factor:g}@{self.labels[i]}#{j}"
        self.plan.inits.append(InitEdit(i, j, src, new, factor))
        self.edges.add((i, j))

    # --- marking
    def mark(self, t: str) -> None:
        if t in self.scaled:
            return
        if t in self.outputs:
            raise InputError(f"rescale: tensor {t} would be scaled but is a graph output: the region is not scale "
                             "invariant")
        self.scaled.add(t)
        self.plan.scaled.append(t)
        self.queue.append(t)
        # a Mul inserted earlier for one reader of t (t was then a contributor read elsewhere too) would now scale
        # that reader's operand twice: t itself carries the scale from here on
        dropped = {(m.node, m.index) for m in self.plan.muls if m.tensor == t}
        if dropped:
            self.plan.muls = [m for m in self.plan.muls if m.tensor != t]
            self.edges -= dropped

    def operand_scaled(self, i: int, j: int) -> bool:
        return self.nodes[i].input[j] in self.scaled or (i, j) in self.edges

    def refuse(self, i: int, why: str) -> InputError:
        n = self.nodes[i]
        return InputError(f"rescale: {self.labels[i]} ({n.op_type}) breaks scale invariance: {why}")

    # --- backward
    def make_scaled(self, t: str) -> None:
        """A seed (or a tensor whose producer must emit it scaled for every reader)."""
        if t in self.scaled:
            return
        if t not in self.producer:
            raise InputError(f"rescale: tensor {t} has no producing node (a graph input or constant): cannot scale it "
                             "at its source")
        i = self.producer[t]
        op = self.nodes[i].op_type
        if op in PRODUCERS and self.try_producer(i):
            return
        if op in SUMS:
            self.scale_sum(i)
            return
        if op in PASS_THROUGH and self.nodes[i].input:
            self.make_scaled(self.nodes[i].input[0])
            self.mark(t)
            return
        raise self.refuse(i, f"it produces {t}, and it is not a linear op whose weights can carry the scale")

    def scale_sum(self, i: int) -> None:
        n = self.nodes[i]
        self.mode[i] = "forward"
        for j in range(len(n.input)):
            self.scale_operand(i, j)
        self.mark(n.output[0])

    def try_producer(self, i: int) -> bool:
        """Scale a linear node's constant weight and bias so that its output is scaled; False if it has none."""
        n = self.nodes[i]
        if self.mode.get(i) == "forward":
            return False
        if n.op_type in CONST_SCALED:
            return self.try_const_factor(i)
        if n.op_type == "MatMul":
            w = [j for j in (1, 0) if self.is_const(n.input[j])]
            idx = w[:1]
        else:
            if not self.is_const(n.input[1]) or (len(n.input) > 2 and n.input[2] and not self.is_const(n.input[2])):
                return False
            idx = [j for j in (1, 2) if j < len(n.input) and n.input[j]]
        if not idx:
            return False
        if any(self.operand_scaled(i, j) for j in range(len(n.input)) if j not in idx):
            raise self.refuse(i, "its input is scaled already, so scaling its weights too would scale it twice")
        self.mode[i] = "producer"
        for j in idx:
            self.scale_const(i, j)
        self.mark(n.output[0])
        return True

    def try_const_factor(self, i: int) -> bool:
        """x * c (either side) or x / c: the constant c takes the factor (a divisor its inverse); False when no
        operand is a constant."""
        n = self.nodes[i]
        sides = (0, 1) if n.op_type == "Mul" else (1,)
        const = next((j for j in sides if j < len(n.input) and self.is_const(n.input[j])), None)
        if const is None or len(n.input) != 2:
            return False
        if self.operand_scaled(i, 1 - const):
            raise self.refuse(i, "its input is scaled already, so scaling its constant too would scale it twice")
        self.mode[i] = "producer"
        self.scale_const(i, const, self.plan.factor if n.op_type == "Mul" else 1.0 / self.plan.factor)
        self.mark(n.output[0])
        return True

    def scale_operand(self, i: int, j: int) -> None:
        """Make input j of node i (a contributor to a scaled sum) scaled: a constant is scaled for this reader; a
        linear op or a sum read by nobody else is scaled at its source; anything else gets a Mul on this edge."""
        t = self.nodes[i].input[j]
        if not t or self.operand_scaled(i, j):
            return
        if self.is_const(t):
            self.scale_const(i, j)
            return
        p = self.producer.get(t)
        others = {r for r, _ in self.readers[t] if r != i and self.nodes[r].op_type not in SHAPE_ONLY}
        if p is not None and not others and t not in self.outputs and p not in self.mode:
            op = self.nodes[p].op_type
            if op in PRODUCERS and self.try_producer(p):
                return
            if op in SUMS:
                self.scale_sum(p)
                return
        new = f"{t}/rescale_2^-{self.plan.k}@{self.labels[i]}#{j}"
        self.plan.muls.append(MulInsert(i, j, t, new))
        self.edges.add((i, j))

    # --- forward
    def visit(self, i: int, j: int) -> None:
        """Node i reads a scaled tensor at input j: it must carry the scale on, or normalise it away."""
        n, op = self.nodes[i], self.nodes[i].op_type
        if op in SHAPE_ONLY:
            return
        if op in NORMS:
            self.visit_norm(i, j)
        elif op in PASS_THROUGH:
            if j != 0:
                raise self.refuse(i, f"it reads the scaled tensor {n.input[j]} as a parameter (input {j})")
            for o in n.output:
                self.mark(o)
        elif op in SUMS or op == "Concat":
            self.visit_sum(i)
        elif op in ("Mul", "Div"):
            self.visit_mul(i, j)
        elif op in LINEAR:
            self.visit_linear(i, j)
        else:
            raise self.refuse(i, f"it reads the scaled tensor {n.input[j]} and is not scale-equivariant")

    def visit_norm(self, i: int, j: int) -> None:
        n = self.nodes[i]
        if j != 0:
            raise self.refuse(i, f"it reads the scaled tensor {n.input[j]} as its scale or bias")
        if self.mode.get(i) == "norm":
            return
        self.mode[i] = "norm"
        extra = [o for o in n.output[1:] if o and self.readers.get(o)]
        if extra:  # LayerNormalization's Mean / InvStdDev scale with the input: they are not invariant
            raise self.refuse(i, f"its statistics output {extra[0]} is read, and it scales with the input")
        attr = next((a for a in n.attribute if a.name == "epsilon"), None)
        old = float(attr.f) if attr is not None else NORM_EPS_DEFAULT[n.op_type]
        new = float(_scaled_exactly(np.float32(old), self.plan.factor ** 2, f"the epsilon of {self.labels[i]}"))
        self.plan.attrs.append(AttrEdit(i, "epsilon", old, new))

    def visit_sum(self, i: int) -> None:
        if self.mode.get(i) == "forward":
            return
        self.scale_sum(i)

    def visit_mul(self, i: int, j: int) -> None:
        n = self.nodes[i]
        other = 1 - j
        if n.op_type == "Div" and j != 0:
            raise self.refuse(i, f"it divides by the scaled tensor {n.input[j]}")
        if other >= len(n.input) or not self.is_const(n.input[other]):
            raise self.refuse(i, f"it multiplies the scaled tensor {n.input[j]} by a non-constant "
                              f"{n.input[other] if other < len(n.input) else ''}".rstrip())
        self.mode[i] = "forward"
        self.mark(n.output[0])

    def visit_linear(self, i: int, j: int) -> None:
        """A Conv/Gemm reading the scaled tensor as its data: its bias takes the scale; a MatMul needs nothing."""
        n = self.nodes[i]
        if self.mode.get(i) == "producer":
            raise self.refuse(i, "its weights are scaled already and now its input is too (scaled twice)")
        if self.mode.get(i) == "forward":
            return
        data = {"MatMul": (0, 1)}.get(n.op_type, (0,))
        if j not in data:
            raise self.refuse(i, f"it reads the scaled tensor {n.input[j]} as its weight or bias")
        if n.op_type == "MatMul" and self.operand_scaled(i, 1 - j):
            raise self.refuse(i, "both of its operands are scaled (the product would be scaled twice)")
        self.mode[i] = "forward"
        if n.op_type != "MatMul" and len(n.input) > 2 and n.input[2]:
            if not self.is_const(n.input[2]):
                raise self.refuse(i, f"its bias {n.input[2]} is not a constant")
            self.scale_const(i, 2)
        self.mark(n.output[0])

    def run(self, seeds: list[str]) -> RescalePlan:
        for t in seeds:
            self.make_scaled(t)
            self.drain()
        self.plan.seeds = list(seeds)
        return self.plan

    def drain(self) -> None:
        while self.queue:
            t = self.queue.popleft()
            for i, j in list(self.readers[t]):
                self.visit(i, j)
            if t in self.outputs:
                raise InputError(f"rescale: tensor {t} is a graph output: the region is not scale invariant")


def plan_rescale(model: onnx.ModelProto, tensors: list[str], k: int) -> RescalePlan:
    """Plan dividing `tensors` (the overflowing activations) by 2^k; InputError (one line, naming the op) when the
    region they lie in is not closed under scaling by norms."""
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise InputError(f"rescale: k must be a positive integer, got {k!r}")
    if not tensors:
        raise InputError("rescale: no tensors to rescale")
    known = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    missing = [t for t in tensors if t not in known]
    if missing:
        raise InputError(f"rescale: tensor {missing[0]} is not in the model")
    return _Planner(model, int(k)).run(list(tensors))


# --------------------------------------------------------------------------------------------------- apply
def _const_array(model: onnx.ModelProto, name: str) -> np.ndarray:
    for t in model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output and n.output[0] == name:
            return numpy_helper.to_array(next(a.t for a in n.attribute if a.name == "value"))
    raise InputError(f"rescale: constant {name} is not in the model")


def _apply_inits(out: onnx.ModelProto, plan: RescalePlan) -> None:
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    for e in plan.inits:
        value = _scaled_exactly(_const_array(out, e.source), e.factor, f"constant {e.source}")
        tensor = numpy_helper.from_array(value, e.new_name)
        if e.new_name in inits:
            inits[e.new_name].CopyFrom(tensor)
        else:
            g.initializer.append(tensor)
            inits[e.new_name] = g.initializer[-1]
        g.node[e.node].input[e.index] = e.new_name


def _apply_attrs(out: onnx.ModelProto, plan: RescalePlan) -> None:
    for e in plan.attrs:
        node = out.graph.node[e.node]
        kept = [a for a in node.attribute if a.name != e.name]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute(e.name, e.new)])


def _apply_muls(out: onnx.ModelProto, plan: RescalePlan) -> None:
    """Insert each Mul right before its reader (so the node order stays topological), from the back."""
    if not plan.muls:
        return
    g = out.graph
    c = f"rescale/2^-{plan.k}"
    g.initializer.append(numpy_helper.from_array(np.float32(plan.factor), c))
    for m in sorted(plan.muls, key=lambda m: (m.node, m.index), reverse=True):
        g.node[m.node].input[m.index] = m.new_name
        mul = helper.make_node("Mul", [m.tensor, c], [m.new_name], name=f"{m.new_name}/Mul")
        g.node.insert(m.node, mul)


def apply_rescale(model: onnx.ModelProto, plan: RescalePlan) -> onnx.ModelProto:
    """A patched copy: constants scaled (duplicated where others read them), epsilons scaled, Muls inserted. The
    node numbers of the plan refer to `model`; the Muls go in last since they shift them."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if len(out.graph.node) != len(plan.node_names):
        raise InputError("rescale: the plan was made for another model (node count differs)")
    _apply_inits(out, plan)
    _apply_attrs(out, plan)
    _apply_muls(out, plan)
    return out


# --------------------------------------------------------------------------------------------------- proof
def _reference_outputs(model: onnx.ModelProto, feeds) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, np.float64) for k, v in Executor(model, ReferencePolicy()).run(feeds).items()}


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |a| (norm-wise: elementwise ratios blow up where the output crosses zero); identical
    values, inf and NaN included, count as 0, a NaN against a number as inf."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if same.all():
        return 0.0
    diff = np.abs(np.where(same, 0.0, a - b))
    if not np.isfinite(diff).all():
        return math.inf
    scale = float(np.max(np.abs(a[np.isfinite(a)]), initial=0.0))
    return float(diff.max() / scale) if scale > 0 else math.inf


def prove(model: onnx.ModelProto, patched: onnx.ModelProto, feeds) -> float:
    """The largest relative difference between the float64 reference outputs of the two models (0.0 expected for
    a pure power-of-two rescale; the caller asserts <= 1e-12)."""
    ref, new = _reference_outputs(model, feeds), _reference_outputs(patched, feeds)
    if set(ref) != set(new):
        raise InputError(f"rescale: the patched model's outputs {sorted(new)} differ from {sorted(ref)}")
    return max((relative_difference(ref[k], new[k]) for k in ref), default=0.0)
