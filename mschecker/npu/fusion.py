"""GE's graph fusion passes applied to an ONNX graph: the graph the Ascend device runs (docs/FUSION.md).

ATC parses an ONNX model into Ascend IR (each ONNX op through its parser plugin), folds what is constant, then
FE's graph fusion passes rewrite op chains into fused device ops: SD's GroupNorm export becomes one `GroupNorm`,
its erf GELU one `Gelu` (a different approximation), a decomposed LayerNorm one `LayerNorm`, a MatMul + bias Add
one MatMul with the bias in the cube epilogue. `apply` does the same to an ONNX ModelProto: each fusion's nodes are
replaced by ONE node in domain `mschecker.device` whose op_type is the Ascend IR op type, whose name is the name
GE gives it (`<Mul name>/GroupNorm`, `<Mul1 name>/Gelu`, `<Add1 name>/LayerNorm`, the MatMul's own name), with an
attribute `covers` (the ONNX nodes it replaces) and the op's attributes; its outputs keep the ONNX tensor names
of the covered region's outputs. mschecker/graph/ops/device.py runs those nodes through registry kernels.

Each pass matches exactly what its source matches, nothing more: the matcher is GE's (PatternFusionBasePassImpl::
MatchFromOutput, `_match` below: a pattern op's inputs are found among a node's input anchors in anchor order,
by op type, in any position; an op with no type matches any node), and each pass's Fusion() checks are the
source's checks in the source's order, with the source's tolerances. A candidate a pass rejects is reported
with the reason (the check that failed). Where the source fuses without checking something that changes the math
(the GroupNorm pass drops InstanceNorm's scale/bias; the Gelu pass does not check that the multiplied tensor is
the Gelu input), the fusion happens, as on the device, and carries a note.

The graph GE matches is the folded graph: initializers, Constant nodes, and nodes whose inputs are all constant
(shape arithmetic, a Shape of a statically shaped tensor: ATC compiles with static --input_shape) are `Const`
nodes; ONNX op types are the Ascend IR types their ONNX plugins register (`_GE_TYPES`).

Sources (full commits, read for this module; each pass's own source is cited in PASSES; docs/FUSION.md has the
per-check table):
- the matcher:
  Ascend/metadef:register/graph_optimizer/graph_fusion/pattern_fusion_base_pass_impl.cc@02aedd2d2f8eef32bde731ff8994a0a4eadb812c
  Ascend/metadef:register/graph_optimizer/graph_fusion/pattern_fusion_base_pass.cc@0e4fc275b0152b6912e09b1f93be9a8f0f9acec7
  (RunOnePattern: all matches, then fusions; GetNodeFromMapping: the first node mapped)
- the ONNX plugins (Div -> RealDiv, Add, Mul, Sub, Pow, Sqrt, Erf, Sigmoid; InstanceNorm with epsilon default
  1e-05; ReduceMean with constant axes, matched as its attribute form ReduceMeanD):
  dengguojie/vue-element-admin:ops/built-in/framework/onnx_plugin/similar_opp_plugins.cc@053f1b39c4c7e6623faae2391f674b4fd30ba231
  dengguojie/vue-element-admin:ops/built-in/framework/onnx_plugin/instancenormalization_plugin.cc@0d71803673a03a610be86013b05fe3027c969d44
  hicann/ops-math:math/reduce_mean/framework/reduce_mean_onnx_plugin.cpp@14f45fcdd4768779d88146e5d020cd0f9f40fc64
- the ATC switch file:
  hicann/ge:docs/zh/user_guides/atc_tools/CLI_options/--fusion_switch_file.md@96b3f3ab754ec56fab453665af963684c9f21f0a
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from mschecker.errors import InputError
from mschecker.graph.ops.table import DEVICE_DOMAIN
from mschecker.npu.device_table import Source as Citation  # repo:path@commit, one definition
from mschecker.fsio import read_text

VIE = "dengguojie/vue-element-admin"
_AI_CORE = "ops/built-in/fusion_pass/graph_fusion/ai_core/"
FLT_EPSILON = float(np.finfo(np.float32).eps)  # std::numeric_limits<float>::epsilon()


@dataclass(frozen=True)
class PassInfo:
    """One fusion pass: its registered name, whether ATC runs it by default, what it does, where it is from."""

    name: str
    default_on: bool
    kind: str  # "GE" (a built-in graph fusion pass of ATC) | "recipe" (an ONNX graph edit done before ATC)
    summary: str
    sources: tuple[Citation, ...]


PASSES: tuple[PassInfo, ...] = (
    PassInfo("FlashAttention", False, "recipe",
             "MatMul(q[*c], kT[*c]) [-> Mul/Div by a constant] -> Softmax(last axis) [-> Cast] -> MatMul(P, v) -> "
             "one FlashAttentionScore (Huawei's SD recipe edits the ONNX graph this way before ATC; off unless asked)",
             (Citation("Ascend/ModelZoo-PyTorch",
                       "ACL_PyTorch/built-in/foundation_models/stable_diffusion/modify_onnx.py",
                       "1968ede7536de6b0ca79dc2a58db9a061abb5c94", "add_flash_attention"),)),
    PassInfo("CastRemoveFusionPass", True, "GE",
             "a Cast whose input dtype equals its output dtype is removed",
             (Citation(VIE, _AI_CORE + "cast_remove_fusion_pass.cc", "5536fcf73dce248f59d0171751e71e3b933e49a6"),)),
    PassInfo("GroupNormFusionPass", True, "GE",
             "Reshape -> InstanceNorm -> Reshape -> Mul -> Add -> one GroupNorm named <Mul name>/GroupNorm, "
             "num_groups = dims[1] of the first Reshape's output, eps = InstanceNorm's epsilon",
             (Citation(VIE, _AI_CORE + "group_norm_fusion_pass.cc", "46ac37abecdc6f72b67720016f5eae9fb0611032"),)),
    PassInfo("SingleInstanceNormFusion", True, "GE",
             "a lone InstanceNorm -> INTrainingReduceV2 + INTrainingUpdateV2, NOT_CHANGED when its input format "
             "is ND (every rank-3 input, e.g. SD's (N, G, H*W)): the InstanceNorm stays",
             (Citation(VIE, _AI_CORE + "single_instance_norm_fusion_pass.cc",
                       "2a8897b93cc4f206f81c9eaed7ca6b6bda78399c"),)),
    PassInfo("GeluONNXFusionPass", True, "GE",
             "RealDiv(x, 1.41421) -> Erf -> Add(1) -> Mul -> Mul (0.5 on either Mul) -> one Gelu named "
             "<Mul1 name>/Gelu",
             (Citation(VIE, _AI_CORE + "gelu_onnx_fusion_pass.cc", "049452c9ce042fbfa25e2dd8590b42a0e859427a"),)),
    PassInfo("LayerNormONNXFusionPass", True, "GE",
             "ReduceMeanD -> Sub -> [Cast] -> Pow(2) -> ReduceMeanD -> Add(eps) -> Sqrt -> RealDiv [-> Mul -> Add] "
             "-> one LayerNorm named <Add1 name>/LayerNorm",
             (Citation(VIE, _AI_CORE + "layer_norm_onnx_fusion_pass.cc", "2a117927fd7b80e28db2c59aeaa7c4975a80c34a"),)),
    PassInfo("LayerNormONNXMULFusionPass", True, "GE",
             "the same with the centring Sub computed twice and the square as Mul or Pow -> one LayerNorm",
             (Citation(VIE, _AI_CORE + "layer_norm_onnx_mul_fusion_pass.cc",
                       "2a8897b93cc4f206f81c9eaed7ca6b6bda78399c"),)),
    PassInfo("MatMulBiasAddFusionPass", True, "GE",
             "MatMul/MatMulV2/BatchMatMul/BatchMatMulV2 -> Add/BiasAdd(1-D bias) -> the MatMul with the bias as its "
             "third input (added inside the cube accumulator), keeping the MatMul's name",
             (Citation(VIE, _AI_CORE + "matmul_biasadd_fusion_pass.cc", "3c7a3d9c27f4431a0cd1d912eaae7532409ab6b9"),)),
    PassInfo("GroupNormSilu", False, "recipe",
             "GroupNorm -> Sigmoid -> Mul (SiLU) -> one GroupNormSilu (no public GE pass produces it from ONNX; "
             "off unless asked)",
             (Citation("hicann/ops-nn", "norm/group_norm_silu/op_kernel/group_norm_silu_b16.h",
                       "e5c3fa9327ea95ba26d06227e746923580d10921", "the fused kernel; no public ONNX fusion pass"),)),
    PassInfo("GeGluV2", False, "recipe",
             "x -> two halves (Split or two Slices on the last axis) -> Gelu(one half) * other half -> one GeGluV2 "
             "(no public GE pass produces it from ONNX; off unless asked)",
             (Citation("hicann/ops-nn", "activation/ge_glu_v2/op_kernel/ge_glu_v2_base.h",
                       "e5c3fa9327ea95ba26d06227e746923580d10921", "the fused kernel; no public ONNX fusion pass"),)),
)
_PASS = {p.name: p for p in PASSES}
SWITCH_VALUES = ("on", "off")


def pass_names() -> list[str]:
    """Every pass a switch may name, in the order they run."""
    return [p.name for p in PASSES]


def pass_info(name: str) -> PassInfo:
    return _PASS[name]


# ------------------------------------------------------------------------------------------------- switches
def resolve_switches(switches: Mapping[str, Any] | None, where: str = "fusion switches") -> dict[str, bool]:
    """Pass name -> on, from ATC-style switches: name -> "on" | "off" (True/False accepted), "ALL" for every GE pass
    (the recipe edits are not ATC's and are never switched by ALL: name them). Unknown names and other values are an
    InputError naming `where` and the passes that exist."""
    on = {p.name: p.default_on for p in PASSES}
    if not switches:
        return on
    items = list(switches.items())
    values = {}
    for name, value in items:
        if isinstance(value, bool):
            value = "on" if value else "off"
        if not isinstance(value, str) or value.strip().lower() not in SWITCH_VALUES:
            raise InputError(f"{where}: {name}: {value!r} is not on or off")
        values[name] = value.strip().lower() == "on"
    unknown = sorted(n for n in values if n != "ALL" and n not in _PASS)
    if unknown:
        raise InputError(f"{where}: unknown fusion pass(es) {', '.join(unknown)} (passes: {', '.join(pass_names())}, "
                         "or ALL)")
    if "ALL" in values:
        for p in PASSES:
            if p.kind == "GE":
                on[p.name] = values["ALL"]
    for name, value in values.items():
        if name != "ALL":
            on[name] = value
    return on


def load_switch_file(path: str | Path) -> dict[str, str]:
    """An ATC --fusion_switch_file: JSON {"Switch": {"GraphFusion": {name: "on"|"off", ...}, "UBFusion": {...}}}
    or lines `name:off` (hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--fusion_switch_file.md). Returns the
    graph-fusion switches (validated: unknown pass, malformed file or a value other than on/off is an InputError
    naming the file). UB fusions are not modelled: a UBFusion table may only say ALL."""
    path = Path(path)
    where = str(path)
    if not path.exists():
        raise InputError(f"{where}: fusion switch file does not exist")
    text = read_text(path, "fusion switch file")
    stripped = text.strip()
    switches: dict[str, str] = {}
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}) "
                             f"(passes: {', '.join(pass_names())})") from None
        if not isinstance(data, dict) or set(data) != {"Switch"} or not isinstance(data["Switch"], dict):
            raise InputError(f"{where}: a JSON fusion switch file is {{\"Switch\": {{\"GraphFusion\": {{name: "
                             f"\"on\"|\"off\"}}, \"UBFusion\": {{...}}}}}} (passes: {', '.join(pass_names())})")
        sw = data["Switch"]
        extra = sorted(set(sw) - {"GraphFusion", "UBFusion"})
        if extra:
            raise InputError(f"{where}: Switch has {', '.join(map(str, extra))}; only GraphFusion and UBFusion exist")
        for table in ("GraphFusion", "UBFusion"):
            if table in sw and not isinstance(sw[table], dict):
                raise InputError(f"{where}: Switch.{table} must be a table of pass name -> \"on\"|\"off\"")
        ub = sw.get("UBFusion", {})
        for name, value in ub.items():
            if name != "ALL":
                raise InputError(f"{where}: UBFusion {name!r}: UB fusions are not modelled (only ALL may be set); "
                                 f"graph fusion passes: {', '.join(pass_names())}")
            if not isinstance(value, str) or value.strip().lower() not in SWITCH_VALUES:
                raise InputError(f"{where}: UBFusion.ALL: {value!r} is not on or off")
        switches = {str(k): v for k, v in sw.get("GraphFusion", {}).items()}
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, value = line.partition(":")
            if not sep or not name.strip():
                raise InputError(f"{where}: line {lineno}: {line[:80]!r} is not `PassName:on|off` "
                                 f"(passes: {', '.join(pass_names())})")
            switches[name.strip()] = value.strip()
    resolve_switches(switches, where)  # validates
    return switches


# ------------------------------------------------------------------------------------------------- the report
@dataclass(frozen=True)
class FusionRecord:
    """One fusion: `covers` (ONNX node names) became the device op `device_name` of IR type `ir_type` (a removal,
    e.g. a no-op Cast, has ir_type "" and device_name "")."""

    pass_name: str
    device_name: str
    ir_type: str
    covers: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"pass": self.pass_name, "device_name": self.device_name, "ir_type": self.ir_type,
                "covers": list(self.covers), "attrs": {k: _jsonable(v) for k, v in self.attrs.items()},
                "notes": list(self.notes)}


@dataclass(frozen=True)
class Rejection:
    """A candidate the pass matched and then left unchanged, with the check that said no."""

    pass_name: str
    nodes: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict:
        return {"pass": self.pass_name, "nodes": list(self.nodes), "reason": self.reason}


@dataclass
class FusionReport:
    chip: str
    enabled: dict[str, bool]
    fusions: list[FusionRecord] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)

    def by_pass(self) -> dict[str, int]:
        counts = {p.name: 0 for p in PASSES}
        for f in self.fusions:
            counts[f.pass_name] += 1
        return counts

    def fusion_of(self, device_name: str) -> FusionRecord | None:
        for f in self.fusions:
            if f.device_name == device_name:
                return f
        return None

    def to_dict(self) -> dict:
        return {"chip": self.chip,
                "passes": [{"name": p.name, "kind": p.kind, "on": self.enabled[p.name], "default": p.default_on,
                            "fused": self.by_pass()[p.name], "sources": [str(s) for s in p.sources]}
                           for p in PASSES],
                "fusions": [f.to_dict() for f in self.fusions],
                "rejections": [r.to_dict() for r in self.rejections]}


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


# ------------------------------------------------------------------------------------------------- graph view
# Ascend IR op types the ONNX plugins register for the ONNX op types the patterns name (the rest keep their name).
_GE_TYPES = {"Div": "RealDiv", "InstanceNormalization": "InstanceNorm", "MatMul": "BatchMatMulV2",
             "Softmax": "SoftmaxV2", "GroupNormalization": "GroupNorm", "LayerNormalization": "LayerNorm"}
_INIT, _INPUT = "init:", "input:"  # keys of the pseudo nodes GE has for initializers (Const) and inputs (Data)


class _Graph:
    """The ONNX graph as GE's fusion passes see it: nodes by index (None once fused away), producers, consumers,
    constant folding, inferred shapes and dtypes, GE op types."""

    def __init__(self, model: onnx.ModelProto, initializers: Mapping[str, np.ndarray] | None):
        self.model = model
        g = model.graph
        self.opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.nodes: list[onnx.NodeProto | None] = list(g.node)
        self.labels = [n.name or f"#{i}:{n.op_type}" for i, n in enumerate(g.node)]
        self.init_names = {t.name for t in g.initializer}
        self._init_protos = {t.name: t for t in g.initializer}
        self._init_values = dict(initializers or {})
        self.inputs = {i.name for i in g.input if i.name not in self.init_names}
        self.graph_outputs = [o.name for o in g.output]
        self._index()
        shapes, dtypes = _infer(model)
        for _ in range(4):
            # ONNX shape inference cannot see through shape arithmetic it does not fold (a Slice whose ends are
            # computed from a Shape); GE folds it first (ATC compiles with static input shapes): fold, write the
            # folded tensors in as constants, infer again, until no more shapes become static.
            self._shapes, self._dtypes = shapes, dtypes
            for t in g.initializer:
                self._shapes[t.name] = tuple(int(d) for d in t.dims)
                self._dtypes[t.name] = int(t.data_type)
            self._values: dict[str, np.ndarray | None] = {}
            self.constant = self._fold()
            folded = self._materialized()
            if folded is None:
                break
            shapes, dtypes = _infer(folded)
            if sum(self.static_shape(t) is None for t in self._shapes) <= \
                    sum(1 for t, s in shapes.items() if s is None or None in s):
                break

    # --- structure
    def _index(self) -> None:
        self.producer: dict[str, tuple[int, int]] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        for i, n in enumerate(self.nodes):
            if n is None:
                continue
            for k, o in enumerate(n.output):
                if o:
                    self.producer[o] = (i, k)
            for k, t in enumerate(n.input):
                if t:
                    self.consumers.setdefault(t, []).append((i, k))
        self._outs = set(self.graph_outputs)

    def _fold(self) -> set[str]:
        """Tensors GE has as constants before the fusion passes: initializers, Constant outputs, outputs of nodes
        whose inputs are all constant, and Shape/Size of a tensor whose inferred shape is static."""
        const = set(self.init_names)
        for i in _topo(self.nodes, self.init_names | self.inputs):
            n = self.nodes[i]
            ins = [t for t in n.input if t]
            static = n.op_type in ("Shape", "Size") and ins and self.static_shape(ins[0]) is not None
            if n.op_type == "Constant" or static or (ins and all(t in const for t in ins)):
                const.update(o for o in n.output if o)
        return const

    def _materialized(self) -> onnx.ModelProto | None:
        """A copy of the model with every small folded tensor written in as a Constant node (None: none to add)."""
        nodes, added = [], 0
        for n in self.nodes:
            if n is None:
                continue
            outs = [o for o in n.output if o]
            if n.op_type != "Constant" and outs and all(o in self.constant for o in outs):
                vals = [self.value(o) for o in outs]
                if all(v is not None and v.size <= (1 << 16) for v in vals):
                    nodes.extend(helper.make_node("Constant", [], [o], value=numpy_helper.from_array(np.asarray(v)))
                                 for o, v in zip(outs, vals))
                    added += 1
                    continue
            nodes.append(n)
        if not added:
            return None
        return _light(self.model, nodes)

    def key_of(self, tensor: str):
        """The GE node that produces `tensor`: a node index, or a pseudo node for an initializer / graph input."""
        if tensor in self.producer:
            return self.producer[tensor][0]
        return (_INIT if tensor in self.init_names else _INPUT) + tensor

    def ge_type(self, key) -> str:
        if isinstance(key, str):
            return "Const" if key.startswith(_INIT) else "Data"
        n = self.nodes[key]
        if n.domain == DEVICE_DOMAIN:
            return n.op_type
        if n.output and all(o in self.constant for o in n.output if o):
            return "Const"
        if n.op_type == "ReduceMean":
            return "ReduceMeanD" if self._reduce_axes(n) is not None else "ReduceMean"
        return _GE_TYPES.get(n.op_type, n.op_type)

    def name_of(self, key) -> str:
        """A GE node's name (CheckEdges compares producer names): the node's label, the tensor for pseudo nodes."""
        return key.split(":", 1)[1] if isinstance(key, str) else self.labels[key]

    def in_anchor_keys(self, key) -> list:
        """The producers of a node's connected input anchors, in anchor order."""
        if isinstance(key, str):
            return []
        return [self.key_of(t) for t in self.nodes[key].input if t]

    def peers(self, i: int, out: int = 0) -> int:
        """GetOutDataAnchor(out)->GetPeerAnchorsSize(): consumer anchors of the output (a graph output is one:
        GE's NetOutput node reads it)."""
        n = self.nodes[i]
        if out >= len(n.output) or not n.output[out]:
            return 0
        t = n.output[out]
        return len(self.consumers.get(t, ())) + self.graph_outputs.count(t)

    def out_data_nodes(self, i: int) -> int:
        """GetOutDataNodes().size(): one per edge leaving any output."""
        return sum(self.peers(i, k) for k in range(len(self.nodes[i].output)))

    def in_data_nodes(self, i: int) -> int:
        """GetInDataNodes().size(): one per connected input anchor."""
        return sum(1 for t in self.nodes[i].input if t)

    # --- values and shapes
    def static_shape(self, tensor: str) -> tuple[int, ...] | None:
        s = self._shapes.get(tensor)
        return s if s is not None and all(isinstance(d, int) and d >= 0 for d in s) else None

    def shape(self, tensor: str) -> tuple | None:
        """Inferred dims (an int, or None where unknown); None when not even the rank is known."""
        return self._shapes.get(tensor)

    def dtype(self, tensor: str) -> int | None:
        return self._dtypes.get(tensor)

    def is_const(self, tensor: str) -> bool:
        return bool(tensor) and tensor in self.constant

    def value(self, tensor: str) -> np.ndarray | None:
        """The value of a constant tensor (None when not constant or not computable here)."""
        if not self.is_const(tensor):
            return None
        if tensor not in self._values:
            self._values[tensor] = self._compute(tensor)
        return self._values[tensor]

    def _compute(self, tensor: str) -> np.ndarray | None:
        if tensor in self.init_names:
            if tensor in self._init_values:
                return np.asarray(self._init_values[tensor])
            t = self._init_protos[tensor]
            if t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return numpy_helper.to_array(t)
        i, k = self.producer[tensor]
        n = self.nodes[i]
        if n.op_type in ("Shape", "Size") and n.domain in ("", "ai.onnx") and not self.is_const(n.input[0]):
            shape = self.static_shape(n.input[0])
            if n.op_type == "Size":
                return np.array(int(np.prod(shape)), dtype=np.int64)
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            start, end = attrs.get("start", 0), attrs.get("end", None)
            return np.array(shape[start:end], dtype=np.int64)
        ins = []
        for t in n.input:
            if not t:
                ins.append(None)
                continue
            v = self.value(t)
            if v is None or v.size > (1 << 20):
                return None
            ins.append(v)
        return _evaluate(n, ins, self.opset, k)

    def scalar(self, tensor: str) -> float | None:
        v = self.value(tensor)
        return None if v is None or v.size != 1 else float(np.asarray(v).reshape(-1)[0])

    def _reduce_axes(self, n) -> list[int] | None:
        """A ReduceMean's axes when constant (attribute before opset 18, a constant input from 18): the form
        GE's passes match as ReduceMeanD; None otherwise."""
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if "axes" in attrs:
            return [int(a) for a in attrs["axes"]]
        if len(n.input) > 1 and n.input[1]:
            v = self.value(n.input[1])
            return None if v is None else [int(a) for a in np.asarray(v).reshape(-1)]
        return [] if self.opset < 18 else None

    # --- edits
    def replace(self, covered: Iterable[int], new: onnx.NodeProto | None, at: int) -> None:
        for i in covered:
            self.nodes[i] = None
        if new is not None:
            self.nodes[at] = new
            self.labels[at] = new.name
        self._index()

    def rename_input(self, old: str, new: str) -> None:
        for i, n in enumerate(self.nodes):
            if n is not None and old in n.input:
                for k, t in enumerate(n.input):
                    if t == old:
                        n.input[k] = new
        self._index()

    def prune(self) -> None:
        """Remove nodes nothing reads (ONNX nodes have no side effects; GE prunes them the same way)."""
        changed = True
        while changed:
            changed = False
            for i, n in enumerate(self.nodes):
                if n is None:
                    continue
                if not any(o and (o in self.consumers or o in self._outs) for o in n.output):
                    self.nodes[i] = None
                    changed = True
            if changed:
                self._index()


def _topo(nodes, available) -> list[int]:
    produced = set(available)
    order, pending = [], [i for i, n in enumerate(nodes) if n is not None]
    while pending:
        rest = []
        for i in pending:
            if all(not t or t in produced for t in nodes[i].input):
                order.append(i)
                produced.update(o for o in nodes[i].output if o)
            else:
                rest.append(i)
        if len(rest) == len(pending):  # a cycle or a missing tensor: the executor reports it; stop here
            break
        pending = rest
    return order


_LIGHT_MAX_ELEMENTS = 1 << 12


def _light(model: onnx.ModelProto, nodes=None) -> onnx.ModelProto:
    """A copy for shape inference: the graph (or `nodes`) with the data of large initializers left out (their dims
    and types are what inference reads; a model with its weights inline may not even serialize past 2 GB)."""
    m = onnx.ModelProto()
    m.ir_version = model.ir_version
    m.opset_import.extend(model.opset_import)
    g = m.graph
    g.name = model.graph.name
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    g.value_info.extend(model.graph.value_info)  # the exporter's own shapes (inference keeps what it cannot redo)
    g.node.extend(model.graph.node if nodes is None else nodes)
    names = {i.name for i in g.input}
    for t in model.graph.initializer:
        size = int(np.prod(t.dims)) if len(t.dims) else 1
        if size <= _LIGHT_MAX_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL:
            g.initializer.append(t)
        elif t.name not in names:  # a typed input: what inference reads of it
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return m


def _infer(model: onnx.ModelProto) -> tuple[dict, dict]:
    shapes: dict[str, tuple | None] = {}
    dtypes: dict[str, int] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(_light(model), data_prop=True)
    except Exception:  # noqa: BLE001 - a model shape inference cannot type still fuses where no shape is needed
        inferred = model
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        dtypes[vi.name] = int(tt.elem_type)
        if tt.HasField("shape"):
            shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
    return shapes, dtypes


def _evaluate(node: onnx.NodeProto, inputs: list, opset: int, out: int) -> np.ndarray | None:
    """One constant node evaluated (GE folds it before the fusion passes)."""
    if node.op_type == "Constant":
        a = node.attribute[0]
        v = helper.get_attribute_value(a)
        if isinstance(v, onnx.TensorProto):
            return numpy_helper.to_array(v)
        return np.asarray(v, dtype=np.float32 if a.name.startswith("value_float") else
                          (np.int64 if a.name.startswith("value_int") else None))
    if node.op_type == "Identity":
        return inputs[0]
    try:
        from onnx.reference import ReferenceEvaluator

        names = [f"i{k}" if x is not None else "" for k, x in enumerate(inputs)]
        outs = [f"o{k}" for k in range(len(node.output))]
        n = helper.make_node(node.op_type, names, outs, domain=node.domain)
        n.attribute.extend(node.attribute)
        g = helper.make_graph([n], "fold", [helper.make_tensor_value_info(nm, onnx.TensorProto.UNDEFINED, None)
                                            for nm in names if nm], [helper.make_tensor_value_info(o, 0, None)
                                                                     for o in outs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        res = ReferenceEvaluator(m).run(None, {nm: x for nm, x in zip(names, inputs) if nm})
        return np.asarray(res[out])
    except Exception:  # noqa: BLE001 - not foldable here: the pass sees a non-readable constant
        return None


# ------------------------------------------------------------------------------------------------- matcher
@dataclass(frozen=True)
class _Pattern:
    ops: Mapping[str, tuple[str, ...] | None]  # pattern op id -> GE op types (None: any node)
    inputs: Mapping[str, tuple[str, ...]]  # op id -> its pattern inputs, in SetInputs order
    output: str


def _match(g: _Graph, out_key: int, pattern: _Pattern) -> dict[str, list] | None:
    """PatternFusionBasePassImpl::MatchFromOutput: breadth first from the output node; for each candidate, its
    connected input anchors in index order each take the first unused pattern input whose types admit the
    producer's GE type (a typeless pattern op admits any); every pattern input must be used. A pattern op may end
    up mapped to several nodes (GetNodeFromMapping then takes the first)."""
    mapping: dict[str, list] = {pattern.output: [out_key]}
    queue = [(out_key, pattern.output)]
    while queue:
        key, pid = queue.pop(0)
        wanted = pattern.inputs.get(pid, ())
        if not wanted:
            continue
        anchors = g.in_anchor_keys(key)
        if not anchors:
            return None
        used = [False] * len(wanted)
        for src in anchors:
            t = g.ge_type(src)
            for j, q in enumerate(wanted):
                types = pattern.ops[q]
                if (types is None or t in types) and not used[j]:
                    if src not in mapping.get(q, []):
                        queue.append((src, q))
                        mapping.setdefault(q, []).append(src)
                    used[j] = True
                    break
        if not all(used):
            return None
    return mapping


def _run_pattern(g: _Graph, pattern: _Pattern, fuse: Callable, report: FusionReport, pass_name: str) -> None:
    """RunOnePattern: every node of the output type is a match root; the mappings are collected first, then each
    is fused in turn (a mapping whose nodes an earlier fusion consumed is skipped)."""
    types = pattern.ops[pattern.output]
    roots = [i for i, n in enumerate(g.nodes) if n is not None and g.ge_type(i) in (types or ())
             and (g.in_data_nodes(i) or g.out_data_nodes(i))]
    mappings = [m for m in (_match(g, r, pattern) for r in roots) if m is not None]
    for mapping in mappings:
        nodes = {q: [k for k in ks] for q, ks in mapping.items()}
        if any(isinstance(k, int) and g.nodes[k] is None for ks in nodes.values() for k in ks):
            continue
        first = {q: ks[0] for q, ks in nodes.items()}
        fuse(g, first, report, pass_name)


def _labels(g: _Graph, keys: Iterable) -> tuple[str, ...]:
    return tuple(g.labels[k] for k in keys if isinstance(k, int))


def _covers_of(g: _Graph, keys: Iterable[int]) -> list[str]:
    """The ONNX node names a set of graph nodes stands for (a device node: the names it covers)."""
    out: list[str] = []
    for k in keys:
        n = g.nodes[k]
        if n.domain == DEVICE_DOMAIN:
            out.extend(_attr(n, "covers", []))
        else:
            out.append(g.labels[k])
    return out


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            if isinstance(v, bytes):
                return v.decode("utf-8")
            if isinstance(v, list) and v and isinstance(v[0], bytes):
                return [s.decode("utf-8") for s in v]
            return v
    return default


def _fused(g: _Graph, report: FusionReport, pass_name: str, ir_type: str, name: str, covered: list[int],
           inputs: list[str], outputs: list[str], attrs: dict, notes: list[str] = ()) -> None:
    covers = _covers_of(g, covered)
    node = helper.make_node(ir_type, inputs, outputs, name=name, domain=DEVICE_DOMAIN, covers=covers, **attrs)
    at = max(covered, key=lambda i: any(o in outputs for o in g.nodes[i].output))
    g.replace(covered, node, at)
    report.fusions.append(FusionRecord(pass_name, name, ir_type, tuple(covers), dict(attrs), tuple(notes)))


def _reject(report: FusionReport, pass_name: str, g: _Graph, keys: Iterable, reason: str) -> None:
    report.rejections.append(Rejection(pass_name, _labels(g, keys), reason))


# ------------------------------------------------------------------------------------------------- scalar checks
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


def _ge_scalar(g: _Graph, node, *, x1: bool = True) -> tuple[float | None, str]:
    """GetScalarFromOp of the Gelu / LayerNorm passes: the constant at input x2 (1), else at x1 (0) when `x1`; its
    shape must be [] or [1] (a known dim); the op's x2 dtype float or float16; the value read as a float.
    Returns (value, "") or (None, reason)."""
    k = 1 if len(node.input) > 1 and g.is_const(node.input[1]) and g.value(node.input[1]) is not None else None
    if k is None and x1 and node.input and g.is_const(node.input[0]) and g.value(node.input[0]) is not None:
        k = 0
    if k is None:
        return None, "no constant input (GetInputConstData of x2" + (" and x1" if x1 else "") + " fails)"
    v = np.asarray(g.value(node.input[k]))
    if v.ndim != 0 and v.shape != (1,):
        return None, f"its constant has shape {list(v.shape)}: it must be a scalar ([] or [1])"
    dt = g.dtype(node.input[1]) if len(node.input) > 1 else None
    if dt is not None and dt not in _FLOAT_TYPES:
        return None, f"its x2 input is {onnx.TensorProto.DataType.Name(dt)}, not float or float16"
    if v.dtype == np.float16:
        return None, ("its constant is float16, which the pass reads through a float* (source: "
                      "reinterpret_cast<const float*>): value undefined")
    return float(np.float32(v.reshape(-1)[0])), ""


# ------------------------------------------------------------------------------------------------- GE passes
def _cast_remove(g: _Graph, report: FusionReport, chip: str) -> None:
    p = _Pattern({"Cast": ("Cast",)}, {}, "Cast")

    def fuse(g, m, report, name):
        i = m["Cast"]
        n = g.nodes[i]
        src, dst = g.dtype(n.input[0]), _attr(n, "to")
        if src is None or int(src) != int(dst):
            return  # NOT_CHANGED: a converting Cast (not a candidate worth reporting)
        if n.output[0] in g.graph_outputs:
            _reject(report, name, g, [i], "its output is a graph output (the ONNX graph keeps that name): "
                                          "not modelled")
            return
        covers = _covers_of(g, [i])
        g.replace([i], None, i)
        g.rename_input(n.output[0], n.input[0])
        report.fusions.append(FusionRecord(name, "", "", tuple(covers), {}, ("same-dtype Cast removed",)))

    _run_pattern(g, p, fuse, report, "CastRemoveFusionPass")


def _group_norm(g: _Graph, report: FusionReport, chip: str) -> None:
    # group_norm_fusion_pass.cc: pattern Reshape_1 -> InstanceNorm -> Reshape_2 -> Mul -> Add (output Add)
    p = _Pattern({"Reshape_1": ("Reshape",), "InstanceNorm": ("InstanceNorm",), "Reshape_2": ("Reshape",),
                  "Mul": ("Mul",), "Add": ("Add",)},
                 {"InstanceNorm": ("Reshape_1",), "Reshape_2": ("InstanceNorm",), "Mul": ("Reshape_2",),
                  "Add": ("Mul",)}, "Add")

    def fuse(g, m, report, name):
        keys = [m["Reshape_1"], m["InstanceNorm"], m["Reshape_2"], m["Mul"], m["Add"]]
        r1, inn, r2, mul, add = (g.nodes[k] for k in keys)
        # "check output link": each of these outputs has exactly one peer (the Add's is not checked)
        for pid, label in (("Reshape_1", "reshape_node"), ("InstanceNorm", "instance_norm_node"),
                           ("Mul", "mul_node"), ("Reshape_2", "second_reshape_node")):
            n_peers = g.peers(m[pid])
            if n_peers != 1:
                return _reject(report, name, g, keys, f"{label} output size is [{n_peers}], which not equal to 1")
        # the fused op takes Mul input 1 as gamma and Add input 1 as beta
        if mul.input[1] == r2.output[0] or add.input[1] == mul.output[0]:
            which = "Mul" if mul.input[1] == r2.output[0] else "Add"
            return _reject(report, name, g, keys,
                           f"{which}'s input 1 is the normalized tensor: the pass wires {which} input 1 as "
                           f"{'gamma' if which == 'Mul' else 'beta'} and removes its producer (a broken graph "
                           "on the device): not modelled")
        dims = g.shape(r1.output[0])
        if dims is None or len(dims) < 2:
            return _reject(report, name, g, keys, "the reshape dims are below 2" if dims is not None else
                           "the first Reshape's output shape is unknown (num_groups = its dims[1])")
        num_groups = dims[1]
        if num_groups is None:
            return _reject(report, name, g, keys, "dims[1] of the first Reshape's output (num_groups) is not static")
        eps = _attr(inn, "epsilon", 1e-5)
        x = r1.input[0]
        xs = g.shape(x)
        channels = xs[1] if xs is not None and len(xs) > 1 else None
        notes = []
        for role, t in (("gamma", mul.input[1]), ("beta", add.input[1])):
            s = g.shape(t)
            size = int(np.prod(s)) if s is not None and all(d is not None for d in s) else None
            if size is not None and channels is not None and size not in (1, channels):
                return _reject(report, name, g, keys, f"{role} ({t}) has {size} elements, not one per channel "
                                                      f"({channels}): the GroupNorm op does not take it "
                                                      "(CheckOpSupported)")
        sc = g.value(inn.input[1]) if len(inn.input) > 1 and inn.input[1] else None
        bi = g.value(inn.input[2]) if len(inn.input) > 2 and inn.input[2] else None
        if sc is None or bi is None or not (np.all(sc == 1) and np.all(bi == 0)):
            notes.append("the InstanceNorm's scale/bias are not all ones/zeros (or not constant): the fused "
                         "GroupNorm drops them, as GE does (the pass never reads them): the math changes")
        _fused(g, report, name, "GroupNorm", f"{g.labels[m['Mul']]}/GroupNorm", keys,
               [x, mul.input[1], add.input[1]], [add.output[0]],
               {"num_groups": int(num_groups), "eps": float(eps)}, notes)

    _run_pattern(g, p, fuse, report, "GroupNormFusionPass")


def _single_instance_norm(g: _Graph, report: FusionReport, chip: str) -> None:
    p = _Pattern({"instanceNorm": ("InstanceNorm",)}, {}, "instanceNorm")

    def fuse(g, m, report, name):
        i = m["instanceNorm"]
        shape = g.shape(g.nodes[i].input[0])
        rank = None if shape is None else len(shape)
        if rank not in (4, 5):
            return _reject(report, name, g, [i], f"input format ND (rank {rank}): the pass returns NOT_CHANGED "
                                                 "(`x_tensor_desc.GetFormat() == FORMAT_ND`), the InstanceNorm stays")
        _reject(report, name, g, [i], f"rank-{rank} input: GE splits it into INTrainingReduceV2 + "
                                      "INTrainingUpdateV2 when the format is NCHW/NCDHW; the format ATC's ONNX "
                                      "parser gives it is not modelled: left as InstanceNorm")

    _run_pattern(g, p, fuse, report, "SingleInstanceNormFusion")


def _gelu(g: _Graph, report: FusionReport, chip: str) -> None:
    ops = {"Input0": None, "FusedNodeDiv0": ("RealDiv",), "FusedNodeErf0": ("Erf",), "FusedNodeAdd0": ("Add",),
           "FusedNodeMul0": ("Mul",), "FusedNodeMul1": ("Mul",)}
    pattern1 = _Pattern(ops, {"FusedNodeErf0": ("FusedNodeDiv0",), "FusedNodeAdd0": ("FusedNodeErf0",),
                              "FusedNodeMul1": ("FusedNodeMul0", "FusedNodeAdd0")}, "FusedNodeMul1")
    pattern2 = _Pattern(ops, {"FusedNodeDiv0": ("Input0",), "FusedNodeErf0": ("FusedNodeDiv0",),
                              "FusedNodeAdd0": ("FusedNodeErf0",), "FusedNodeMul0": ("Input0", "FusedNodeAdd0"),
                              "FusedNodeMul1": ("FusedNodeMul0",)}, "FusedNodeMul1")
    _run_pattern(g, pattern1, _gelu_fuse, report, "GeluONNXFusionPass")
    _run_pattern(g, pattern2, _gelu_fuse, report, "GeluONNXFusionPass")


def _gelu_fuse(g, m, report, name):
    """One GeluONNXFusionPass match: the pass's edge and constant checks, then the Gelu device op."""
    ids = ("FusedNodeDiv0", "FusedNodeErf0", "FusedNodeAdd0", "FusedNodeMul0", "FusedNodeMul1")
    keys = [m[q] for q in ids]
    div0, _, add0, mul0, mul1 = (g.nodes[k] for k in keys)
    why = _gelu_edges(g, m) or _gelu_constants(g, div0, add0, mul0, mul1)
    if why:
        return _reject(report, name, g, keys, why)
    x = div0.input[0]
    notes = []
    if g.is_const(x):
        notes.append("RealDiv's constant is its first input (c / x): the fused Gelu reads it as x: the math "
                     "changes")
    chain = {add0.output[0], mul0.output[0]}
    factors = [t for t in list(mul0.input) + list(mul1.input) if t and t not in chain and not g.is_const(t)]
    if factors != [x]:
        notes.append(f"the product multiplies {factors or 'constants'} where Gelu multiplies its input {x!r}: "
                     "GE does not check this, the fused Gelu changes the math")
    _fused(g, report, name, "Gelu", f"{g.labels[m['FusedNodeMul1']]}/Gelu", keys, [x], [mul1.output[0]],
           {}, notes)


def _gelu_edges(g: _Graph, m) -> str:
    """Each inner node's data inputs and its one consumer. A rejection reason, or ""."""
    for q, n_in in (("FusedNodeDiv0", 2), ("FusedNodeErf0", 1), ("FusedNodeAdd0", 2), ("FusedNodeMul0", 2)):
        label = q[len("FusedNode"):]
        if g.in_data_nodes(m[q]) != n_in:
            return f"Input node of {label} node size is [{g.in_data_nodes(m[q])}], which not equal to {n_in}"
        if g.out_data_nodes(m[q]) != 1:
            return f"Output node of {label} node size is [{g.out_data_nodes(m[q])}], which not equal to 1"
    return ""


def _gelu_constants(g: _Graph, div0, add0, mul0, mul1) -> str:
    """x / 1.41421, erf + 1.0, a 0.5 factor on either Mul, each within the source's tolerance. A rejection reason,
    or ""."""
    v, why = _ge_scalar(g, div0)
    if v is None:
        return f"Div0: {why}"
    if abs(np.float32(v) - np.float32(1.41421)) > np.float32(0.00001):
        return f"the exp of div0 is {v:g}, which should be equal to 1.41421 (tolerance 1e-5)"
    v, why = _ge_scalar(g, add0)
    if v is None:
        return f"Add0: {why}"
    if abs(v - 1.0) > FLT_EPSILON:
        return f"the exp of add0 is {v:g}, which should be equal to 1.0 (tolerance FLT_EPSILON)"
    v0, _ = _ge_scalar(g, mul0)
    if v0 is not None:
        if abs(v0 - 0.5) > FLT_EPSILON:
            return f"the exp of mul0 is {v0:g}, which should be equal to 0.5"
    else:
        v1, why = _ge_scalar(g, mul1)
        if v1 is None:
            return f"Mul1: {why}"
        if abs(v1 - 0.5) > FLT_EPSILON:
            return f"the exp of mul1 is {v1:g}, which should be equal to 0.5"
    return ""


def _layer_norm_inputs(g: _Graph, report, name, keys, div0, mul, add, gamma_pos: int):
    """gamma (Mul input `gamma_pos`), beta (Add input 1), or a rejection where the source would wire a node it
    removes."""
    if mul is None:
        return "", "", None
    gamma, beta = mul.input[gamma_pos], add.input[1]
    if gamma == div0.output[0]:
        return None, None, (f"the pass takes Mul input {gamma_pos} as gamma, which here is the RealDiv's output "
                            "(a removed node: a broken graph on the device): not modelled")
    if beta == mul.output[0]:
        return None, None, ("the pass takes Add input 1 as beta, which here is the Mul's output (a removed node): "
                            "not modelled")
    return gamma, beta, None


def _trailing_note(g: _Graph, x: str, begin: int, axes_sets: list[list[int]]) -> list[str]:
    rank = len(g.shape(x) or ())
    want = list(range(begin, rank)) if rank else None
    notes = []
    for axes in axes_sets:
        norm = sorted(a % rank for a in axes) if rank else axes
        if want is not None and norm != want:
            notes.append(f"a ReduceMean reduces axes {axes}, but LayerNorm normalizes axes {want} "
                         "(begin_norm_axis onwards): the math changes")
    return notes


def _layer_norm(g: _Graph, report: FusionReport, chip: str) -> None:
    for p in _layer_norm_patterns():
        _run_pattern(g, p, _layer_norm_fuse, report, "LayerNormONNXFusionPass")


_LN_NODES = ("FusedNodeReduceMean0", "FusedNodeSub0", "FusedNodeCast0", "FusedNodePow0", "FusedNodeReduceMean1",
             "FusedNodeAdd0", "FusedNodeSqrt0", "FusedNodeDiv0", "FusedNodeMul0", "FusedNodeAdd1")


def _layer_norm_patterns() -> list[_Pattern]:
    """LayerNormONNXFusionPass's four patterns: with or without a Cast before the Pow, each with the affine
    Mul / Add (cases 1, 3) or ending at the RealDiv (cases 2, 4)."""
    R, S, C, P, A, Q, D, M = ("ReduceMeanD",), ("Sub",), ("Cast",), ("Pow",), ("Add",), ("Sqrt",), ("RealDiv",), \
        ("Mul",)
    ops = {"Input0": None, "FusedNodeReduceMean0": R, "FusedNodeSub0": S, "FusedNodeCast0": C, "FusedNodePow0": P,
           "FusedNodeReduceMean1": R, "FusedNodeAdd0": A, "FusedNodeSqrt0": Q, "FusedNodeDiv0": D,
           "FusedNodeMul0": M, "FusedNodeAdd1": A}
    chain = {"FusedNodeReduceMean0": ("Input0",), "FusedNodeSub0": ("Input0", "FusedNodeReduceMean0"),
             "FusedNodeReduceMean1": ("FusedNodePow0",), "FusedNodeAdd0": ("FusedNodeReduceMean1",),
             "FusedNodeSqrt0": ("FusedNodeAdd0",), "FusedNodeDiv0": ("FusedNodeSub0", "FusedNodeSqrt0")}
    affine = {"FusedNodeMul0": ("FusedNodeDiv0",), "FusedNodeAdd1": ("FusedNodeMul0",)}
    patterns = []
    for cast in (False, True):
        pin = {"FusedNodeCast0": ("FusedNodeSub0",), "FusedNodePow0": ("FusedNodeCast0",)} if cast else \
            {"FusedNodePow0": ("FusedNodeSub0",)}
        patterns.append(_Pattern(ops, {**chain, **pin, **affine}, "FusedNodeAdd1"))  # case 1 / 3
        patterns.append(_Pattern(ops, {**chain, **pin}, "FusedNodeDiv0"))  # case 2 / 4
    return patterns


def _layer_norm_fuse(g, m, report, name):
    """One LayerNormONNXFusionPass match: the pass's axis, edge and value checks, then the LayerNorm device op."""
    q = {k: m.get(k) for k in _LN_NODES}
    keys = [k for k in q.values() if k is not None]
    nd = {k: (g.nodes[v] if v is not None else None) for k, v in q.items()}
    mean0, div0 = nd["FusedNodeReduceMean0"], nd["FusedNodeDiv0"]
    x = mean0.input[0]
    with_affine = nd["FusedNodeMul0"] is not None
    axes, why = _layer_norm_axes(g, mean0, x)
    if not why:
        why = _layer_norm_edges(g, q, nd, x, with_affine)
    if not why:
        eps, why = _layer_norm_values(g, nd, x, axes, with_affine)
    if why:
        return _reject(report, name, g, keys, why)
    gamma, beta, why = _layer_norm_inputs(g, report, name, keys, div0, nd["FusedNodeMul0"], nd["FusedNodeAdd1"], 1)
    if why:
        return _reject(report, name, g, keys, why)
    out = (nd["FusedNodeAdd1"] or div0).output[0]
    device_name = (f"{g.labels[q['FusedNodeAdd1']]}/LayerNorm" if with_affine
                   else f"{g.labels[q['FusedNodeDiv0']]}/Mul/Add/LayerNorm")
    begin = axes[0]
    notes = _trailing_note(g, x, begin, [axes, list(g._reduce_axes(nd["FusedNodeReduceMean1"]) or [])])
    _fused(g, report, name, "LayerNorm", device_name, keys, [x, gamma, beta], [out],
           {"begin_norm_axis": int(begin), "begin_params_axis": -1, "epsilon": float(eps)}, notes)


def _layer_norm_axes(g: _Graph, mean0, x: str) -> tuple[list[int], str]:
    """ReduceMean0's axes made positive (axes[0] is begin_norm_axis), or a rejection reason."""
    axes = list(g._reduce_axes(mean0) or [])
    rank = len(g.shape(x) or ())
    if rank < 1:
        return axes, "input shape must be greater than one (rank unknown or 0)"
    if not axes:
        return axes, "ReduceMean0 has no axes: begin_norm_axis = axes[0] is undefined"
    if any(a == 0 for a in axes):
        return axes, ("an axis is 0, which the pass maps to the rank (`axes[i] > 0 ? axes[i] : axes[i] + "
                      "dims_size`): out of range, not modelled")
    return [a if a > 0 else a + rank for a in axes], ""


def _layer_norm_edges(g: _Graph, q: dict, nd: dict, x: str, with_affine: bool) -> str:
    """CheckEdges: producer names; then every output but Sub0's and the out node's has one peer, Sub0's two.
    A rejection reason, or ""."""
    if g.name_of(g.key_of(x)) != g.name_of(g.key_of(nd["FusedNodeSub0"].input[0])):
        return "reducemean0_input and sub0_input are different"
    first = nd["FusedNodeCast0"] or nd["FusedNodePow0"]
    if g.name_of(g.key_of(first.input[0])) != g.name_of(g.key_of(nd["FusedNodeDiv0"].input[0])):
        return "pow0_input0 and div0_input0 are different"
    out_node = "FusedNodeAdd1" if with_affine else "FusedNodeDiv0"
    for pid in sorted(q):  # std::map order
        if q[pid] is None:
            continue
        want = 2 if pid == "FusedNodeSub0" else (None if pid == out_node else 1)
        if want is not None and g.peers(q[pid]) != want:
            return f"The output edge of {pid} is [{g.peers(q[pid])}], which not equal to {want}"
    return ""


def _layer_norm_values(g: _Graph, nd: dict, x: str, axes: list[int], with_affine: bool) -> tuple[float | None, str]:
    """CheckValue: keep_dims, Pow's exponent 2, a small epsilon (returned), the affine constants' shapes, the
    output dtype. (epsilon, "") or (None, a rejection reason)."""
    if not _attr(nd["FusedNodeReduceMean0"], "keepdims", 1):
        return None, "the attr keep_dims in reducemean must be true"
    e, why = _ge_scalar(g, nd["FusedNodePow0"])
    if e is None:
        return None, f"Pow0: {why}"
    if abs(e - 2.0) > FLT_EPSILON:
        return None, f"the exp of pow is {e:g}, which should be equal to 2"
    eps, why = _ge_scalar(g, nd["FusedNodeAdd0"])
    if eps is None:
        return None, f"Add0: {why}"
    if eps > 0.1:
        return None, f"the epsilon of Add0 is {eps:g}, which should be close to 0 (> 0.1)"
    xs = g.shape(x)
    for pid in ("FusedNodeMul0", "FusedNodeAdd1"):
        n = nd[pid]
        if n is None:
            continue
        k = 1 if g.is_const(n.input[1]) else (0 if g.is_const(n.input[0]) else None)
        if k is None:
            return None, f"{pid}: no constant input"
        dims = list(np.shape(g.value(n.input[k]))) if g.value(n.input[k]) is not None else \
            list(g.shape(n.input[k]) or [])
        expect = [xs[a] if a < len(xs) else None for a in axes]
        if len(dims) != len(axes) or dims != expect:
            return None, f"The shape of {pid} is not as expect: const {dims}, the reduced dims {expect}"
    if not with_affine and g.dtype(nd["FusedNodeDiv0"].output[0]) not in _FLOAT_TYPES:
        return None, "Node's dtype is not in (float16, float32)"
    return eps, ""


def _layer_norm_mul(g: _Graph, report: FusionReport, chip: str) -> None:
    for p in _layer_norm_mul_patterns():
        _run_pattern(g, p, _layer_norm_mul_fuse, report, "LayerNormONNXMULFusionPass")


_LN_MUL_OPS = {"FusedNodeMean0": ("ReduceMeanD",), "FusedNodeSub0": ("Sub",), "FusedNodeSub1": ("Sub",),
               "FusedNodeMul0": ("Mul",), "FusedNodePow0": ("Pow",), "FusedNodeMean1": ("ReduceMeanD",),
               "FusedNodeAdd0": ("Add",), "FusedNodeSqrt0": ("Sqrt",), "FusedNodeDIV0": ("RealDiv",),
               "FusedNodeMul1": ("Mul",), "FusedNodeAdd1": ("Add",)}


def _layer_norm_mul_patterns() -> list[_Pattern]:
    """LayerNormONNXMULFusionPass's four patterns: the square as Mul or Pow, each with the affine Mul / Add or
    ending at the RealDiv."""
    patterns = []
    for square in ("FusedNodeMul0", "FusedNodePow0"):
        base = {"FusedNodeSub0": ("FusedNodeMean0",), "FusedNodeSub1": ("FusedNodeMean0",),
                square: ("FusedNodeSub1",), "FusedNodeMean1": (square,), "FusedNodeAdd0": ("FusedNodeMean1",),
                "FusedNodeSqrt0": ("FusedNodeAdd0",), "FusedNodeDIV0": ("FusedNodeSub0", "FusedNodeSqrt0")}
        patterns.append(_Pattern(_LN_MUL_OPS, {**base, "FusedNodeMul1": ("FusedNodeDIV0",),
                                               "FusedNodeAdd1": ("FusedNodeMul1",)}, "FusedNodeAdd1"))
        patterns.append(_Pattern(_LN_MUL_OPS, base, "FusedNodeDIV0"))
    return patterns


def _layer_norm_mul_fuse(g, m, report, name):
    """One LayerNormONNXMULFusionPass match: the pass's edge, axis and value checks, then the LayerNorm device op."""
    q = {k: m.get(k) for k in _LN_MUL_OPS}
    keys = [k for k in q.values() if k is not None]
    nd = {k: (g.nodes[v] if v is not None else None) for k, v in q.items()}
    mean0, sub1, div0 = nd["FusedNodeMean0"], nd["FusedNodeSub1"], nd["FusedNodeDIV0"]
    with_pow = nd["FusedNodePow0"] is not None
    with_affine = nd["FusedNodeMul1"] is not None
    x = mean0.input[0]
    why = _layer_norm_mul_edges(g, q, nd, x, with_pow, with_affine)
    if not why:
        axes0, why = _layer_norm_mul_axes(g, nd, x)
    if not why:
        eps, why = _layer_norm_mul_values(g, nd, with_pow, with_affine)
    if why:
        return _reject(report, name, g, keys, why)
    gamma, beta, why = _layer_norm_inputs(g, report, name, keys, div0, nd["FusedNodeMul1"],
                                          nd["FusedNodeAdd1"], 0)
    if why:
        return _reject(report, name, g, keys, why)
    notes = []
    if not with_pow:
        mul0 = nd["FusedNodeMul0"]
        if list(mul0.input) != [sub1.output[0], sub1.output[0]]:
            notes.append("the square Mul does not multiply the centred tensor by itself; GE does not check "
                         "it: the math changes")
    out = (nd["FusedNodeAdd1"] or div0).output[0]
    device_name = (f"{g.labels[q['FusedNodeAdd1']]}/LayerNorm" if with_affine
                   else f"{g.labels[q['FusedNodeDIV0']]}/Mul/Add/LayerNorm")
    _fused(g, report, name, "LayerNorm", device_name, keys, [x, gamma, beta], [out],
           {"begin_norm_axis": int(axes0[0]), "begin_params_axis": -1, "epsilon": float(eps)}, notes)


def _layer_norm_mul_edges(g: _Graph, q: dict, nd: dict, x: str, with_pow: bool, with_affine: bool) -> str:
    """The pass's edge checks: both Subs read Mean0's input; each node's output peers. A rejection reason, or ""."""
    if g.name_of(g.key_of(x)) != g.name_of(g.key_of(nd["FusedNodeSub0"].input[0])):
        return "mean0_input and sub0_input are not same"
    if g.name_of(g.key_of(x)) != g.name_of(g.key_of(nd["FusedNodeSub1"].input[0])):
        return "mean0_input and sub1_input are not same"
    checks = [("FusedNodeMean0", "mean0_node", 2), ("FusedNodeSub0", "sub0_node", 1)]
    checks += [("FusedNodePow0", "pow0_node", 1), ("FusedNodeSub1", "sub1_node", 1)] if with_pow else \
        [("FusedNodeMul0", "mul0_node", 1), ("FusedNodeSub1", "sub1_node", 2)]
    checks += [("FusedNodeMean1", "mean1_node", 1), ("FusedNodeAdd0", "add0_node", 1),
               ("FusedNodeSqrt0", "rsqrt0_node", 1)]
    if with_affine:
        checks += [("FusedNodeDIV0", "div0_node", 1), ("FusedNodeMul1", "mul1_node", 1)]
    for pid, label, want in checks:
        if g.peers(q[pid]) != want:
            return f"{label} output size is [{g.peers(q[pid])}], which not equal to {want}"
    return ""


def _layer_norm_mul_axes(g: _Graph, nd: dict, x: str) -> tuple[list[int], str]:
    """Mean0's axes, where both means reduce the same single axis, the input's last, with keep_dims; else a
    rejection reason."""
    axes0 = g._reduce_axes(nd["FusedNodeMean0"]) or []
    axes1 = g._reduce_axes(nd["FusedNodeMean1"]) or []
    if len(axes0) != 1 or len(axes1) != 1 or axes0[0] != axes1[0]:
        return axes0, "the axes of mean are not same (each must be one axis)"
    if not _attr(nd["FusedNodeMean0"], "keepdims", 1):  # the source reads Mean0's keep_dims twice (not Mean1's)
        return axes0, "the attr keep_dims of mean is not true"
    shape = g.shape(x)
    if not shape:
        return axes0, "input shape must be greater to one"
    if axes0[0] != -1 and axes0[0] != len(shape) - 1:
        return axes0, "the axes of mean is not the last dim of input"
    return axes0, ""


def _layer_norm_mul_values(g: _Graph, nd: dict, with_pow: bool, with_affine: bool) -> tuple[float | None, str]:
    """Pow's exponent 2, Add0's epsilon (returned), the output dtype. (epsilon, "") or (None, a rejection reason)."""
    if with_pow:
        e, why = _ge_scalar(g, nd["FusedNodePow0"], x1=False)
        if e is None:
            return None, f"Pow0: {why}"
        if abs(e - 2.0) > FLT_EPSILON:
            return None, f"the exp of pow is {e:g}, which should be equal to 2"
    eps, why = _ge_scalar(g, nd["FusedNodeAdd0"])
    if eps is None:
        return None, f"Add0: {why}"
    if not with_affine and g.dtype(nd["FusedNodeDIV0"].output[0]) not in _FLOAT_TYPES:
        return None, "Node's dtype is not in (float16, float32)"
    return eps, ""


_MATMUL_TYPES = ("MatMul", "MatMulV2", "BatchMatMul", "BatchMatMulV2")


def _matmul_bias_add(g: _Graph, report: FusionReport, chip: str) -> None:
    p = _Pattern({"mat_mul": _MATMUL_TYPES, "bias": None, "bias_add": ("BiasAdd", "Add")},
                 {"bias_add": ("mat_mul", "bias")}, "bias_add")

    def fuse(g, m, report, name):
        keys = [m["mat_mul"], m["bias_add"]]
        mm, add = g.nodes[m["mat_mul"]], g.nodes[m["bias_add"]]
        mm_type = g.ge_type(m["mat_mul"])
        bias_key = m["bias"]
        s0, s1 = g.shape(add.input[0]), g.shape(add.input[1])
        if s0 is None or s1 is None:
            return _reject(report, name, g, keys, "the Add's input shapes are unknown")
        if len(s0) != 1 and len(s1) != 1:
            return _reject(report, name, g, keys, f"Add input is not scalar (ranks {len(s0)} and {len(s1)}: "
                                                  "one must be 1-D)")
        two_d = mm_type in ("MatMul", "MatMulV2")
        if len(s1) == 1:
            if two_d and len(s0) != 2:
                return _reject(report, name, g, keys, "Matmul output shape no match")
            bias_dim, input_ndim = s1[0], s0[-1]
        else:
            if two_d and len(s1) != 2:
                return _reject(report, name, g, keys, "Matmul output shape no match")
            bias_dim, input_ndim = s0[0], s1[-1]
        if bias_dim is None or input_ndim is None:
            return _reject(report, name, g, keys, "MatMulBiasAddFusionPass cannot be applied for unknown shape")
        if bias_dim != input_ndim:
            return _reject(report, name, g, keys, f"bias shape {bias_dim}, is not equal to input second dim "
                                                  f"{input_ndim}")
        if g.in_data_nodes(m["mat_mul"]) != 2:
            return _reject(report, name, g, keys, "MatMul node should have 2 inputs")
        if any(g.shape(t) is None for t in mm.input):
            # IsNorange: an unknown shape. ATC compiles with static --input_shape, so a symbolic dim (batch, H, W)
            # is static at compile time; an input whose rank is unknown is not
            return _reject(report, name, g, keys, "MatMul node should have norange (an input's shape is unknown)")
        if g.out_data_nodes(m["mat_mul"]) != 1:
            return _reject(report, name, g, keys, f"MatMul node should only have 1 output, actual "
                                                  f"{g.out_data_nodes(m['mat_mul'])}")
        if len(add.output) != 1:
            return _reject(report, name, g, keys, "BiasAdd node should only have 1 output")
        if isinstance(bias_key, int) and len(g.nodes[bias_key].output) != 1:
            return _reject(report, name, g, keys, "now don't support fusion Bias with over 1 output")
        bias = add.input[1] if add.input[0] == mm.output[0] else add.input[0]
        _fused(g, report, name, mm_type, g.labels[m["mat_mul"]], keys, [mm.input[0], mm.input[1], bias],
               [add.output[0]], {"has_bias": 1})

    _run_pattern(g, p, fuse, report, "MatMulBiasAddFusionPass")


# ------------------------------------------------------------------------------------------------- opt-in edits
def _single_consumer(g: _Graph, tensor: str) -> int | None:
    cons = g.consumers.get(tensor, [])
    if len(cons) != 1 or tensor in g.graph_outputs:
        return None
    return cons[0][0]


def _scaled(g: _Graph, tensor: str, ops=("Mul",)) -> tuple[str, float, int | None]:
    """(the tensor before a Mul/Div by a constant scalar, the factor, that node) or (tensor, 1, None)."""
    if tensor not in g.producer:
        return tensor, 1.0, None
    i = g.producer[tensor][0]
    n = g.nodes[i]
    if n.domain not in ("", "ai.onnx") or n.op_type not in ops or g.out_data_nodes(i) != 1:
        return tensor, 1.0, None
    for k in (1, 0):
        c = g.scalar(n.input[k]) if g.is_const(n.input[k]) else None
        if c is not None and not g.is_const(n.input[1 - k]):
            if n.op_type == "Div":
                if k != 1:
                    return tensor, 1.0, None
                return n.input[0], 1.0 / c, i
            return n.input[1 - k], c, i
    return tensor, 1.0, None


def _onnx_attention(g: _Graph, report: FusionReport, i: int, inner_precise: int) -> None:
    """An ONNX Attention node (opset 23; no ATC parser plugin) as the recipe's edit would write it: 4-D q, k, v
    (B, N, S, D), no mask, cache, causal flag or softcap -> FlashAttentionScore with k as given (BNSD)."""
    name = "FlashAttention"
    n = g.nodes[i]
    ins = list(n.input) + [""] * (6 - len(n.input))
    shapes = [g.shape(t) for t in ins[:3]]
    extra = [t for t in ins[3:] if t] or [o for o in n.output[1:] if o]
    if any(s is None or len(s) != 4 for s in shapes) or extra or _attr(n, "is_causal", 0) or \
            float(_attr(n, "softcap", 0.0)) != 0.0:
        _reject(report, name, g, [i], "Attention with a mask, cache, extra output, causal flag, softcap or 3-D "
                                      "inputs: not edited")
        return
    scale = _attr(n, "scale", None)
    d = shapes[0][-1]
    if scale is None and d is None:
        _reject(report, name, g, [i], "the head size is not static (default scale 1/sqrt(D))")
        return
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(d))
    label = n.name or g.labels[i]
    scope = label.rsplit("/", 1)[0] if "/" in label else label
    _fused(g, report, name, "FlashAttentionScore", f"{scope}/FlashAttentionScore", [i], ins[:3], [n.output[0]],
           {"scale_value": scale, "input_layout": "BNSD", "inner_precise": int(inner_precise)},
           ["an ONNX Attention (opset 23) replaced as the recipe replaces the decomposed attention"])


def _flash_attention(g: _Graph, report: FusionReport, chip: str, inner_precise: int) -> None:
    name = "FlashAttention"
    for i, n in enumerate(list(g.nodes)):
        if n is not None and n.op_type == "Attention" and n.domain in ("", "ai.onnx"):
            _onnx_attention(g, report, i, inner_precise)
    for s_i, s in enumerate(list(g.nodes)):
        if s is None or g.nodes[s_i] is None or s.op_type != "Softmax" or s.domain not in ("", "ai.onnx"):
            continue
        rank = len(g.shape(s.input[0]) or ())
        axis = _attr(s, "axis", -1 if g.opset >= 13 else 1)
        if rank == 0 or axis % rank != rank - 1:
            _reject(report, name, g, [s_i], "Softmax is not over the last axis")
            continue
        scores, scale, scale_node = _scaled(g, s.input[0], ("Mul", "Div"))
        if scores not in g.producer or g.nodes[g.producer[scores][0]].op_type != "MatMul" or \
                g.out_data_nodes(g.producer[scores][0]) != 1:
            _reject(report, name, g, [s_i], "the Softmax input is not a MatMul (optionally scaled by a constant) "
                                            "read only by it")
            continue
        m1_i = g.producer[scores][0]
        m1 = g.nodes[m1_i]
        q, cq, q_node = _scaled(g, m1.input[0])
        kt, ck, k_node = _scaled(g, m1.input[1])
        nxt = _single_consumer(g, s.output[0])
        cast_i = None
        if nxt is not None and g.nodes[nxt].op_type == "Cast" and g.dtype(s.output[0]) == _attr(g.nodes[nxt], "to"):
            cast_i, nxt = nxt, _single_consumer(g, g.nodes[nxt].output[0])
        probs = s.output[0] if cast_i is None else g.nodes[cast_i].output[0]
        if nxt is None or g.nodes[nxt].op_type != "MatMul" or g.nodes[nxt].input[0] != probs:
            _reject(report, name, g, [s_i], "the Softmax output is not read by one MatMul as its first input")
            continue
        m2 = g.nodes[nxt]
        covered = [k for k in (q_node, k_node, m1_i, scale_node, s_i, cast_i, nxt) if k is not None]
        scope = s.name.rsplit("/", 1)[0] if "/" in s.name else g.labels[s_i]
        _fused(g, report, name, "FlashAttentionScore", f"{scope}/FlashAttentionScore", covered,
               [q, kt, m2.input[1]], [m2.output[0]],
               {"scale_value": float(cq * ck * scale), "input_layout": "BNSD_KT", "inner_precise": int(inner_precise)},
               ["the recipe's edit generalized: any MatMul-Softmax-MatMul attention, not only the recipe's node "
                "names (modify_onnx.py add_flash_attention)"])


def _group_norm_silu(g: _Graph, report: FusionReport, chip: str) -> None:
    name = "GroupNormSilu"
    for i, n in enumerate(list(g.nodes)):
        if n is None or g.nodes[i] is None or g.ge_type(i) != "GroupNorm":
            continue
        y = n.output[0]
        cons = [g.nodes[c] for c, _ in g.consumers.get(y, [])]
        sig = [c for c, _ in g.consumers.get(y, []) if g.nodes[c].op_type == "Sigmoid"]
        if len(cons) != 2 or len(sig) != 1 or y in g.graph_outputs:
            continue
        s_i = sig[0]
        mul_i = _single_consumer(g, g.nodes[s_i].output[0])
        if mul_i is None or g.nodes[mul_i].op_type != "Mul" or sorted(g.nodes[mul_i].input) != \
                sorted([y, g.nodes[s_i].output[0]]):
            _reject(report, name, g, [i, s_i], "the GroupNorm's Sigmoid is not multiplied by the GroupNorm output")
            continue
        if n.domain == DEVICE_DOMAIN:
            attrs = {"num_groups": int(_attr(n, "num_groups")), "eps": float(_attr(n, "eps"))}
        else:
            attrs = {"num_groups": int(_attr(n, "num_groups")), "eps": float(_attr(n, "epsilon", 1e-5))}
        label = n.name or g.labels[i]
        _fused(g, report, name, "GroupNormSilu", f"{label}/GroupNormSilu", [i, s_i, mul_i],
               list(n.input[:3]), [g.nodes[mul_i].output[0]], attrs)


def _halves(g: _Graph, a: str, b: str) -> tuple[str, bool, list[int]] | None:
    """(x, gelu-half-is-left, nodes) when `a` (the multiplied half) and `b` (the Gelu half) are the two halves of
    one tensor on its last axis (a Split into two equal outputs, or two Slices [0:n) and [n:2n))."""
    if a not in g.producer or b not in g.producer:
        return None
    (ia, _), (ib, kb) = g.producer[a], g.producer[b]
    na, nb = g.nodes[ia], g.nodes[ib]
    if ia == ib and na.op_type == "Split" and len(na.output) == 2:
        x = na.input[0]
        rank = len(g.shape(x) or ())
        if not rank or _attr(na, "axis", 0) % rank != rank - 1:
            return None
        split = g.value(na.input[1]) if len(na.input) > 1 and na.input[1] else _attr(na, "split")
        if split is not None and len(set(int(v) for v in np.asarray(split).reshape(-1))) != 1:
            return None
        return x, kb == 0, [ia]
    if na.op_type == "Slice" and nb.op_type == "Slice" and na.input[0] == nb.input[0]:
        x = na.input[0]
        shape = g.shape(x)
        if not shape or shape[-1] is None:
            return None
        dim = shape[-1]

        def span(n):
            vals = [g.value(t) if t else None for t in list(n.input[1:5]) + [""] * (5 - len(n.input))]
            st, en, ax, step = vals[0], vals[1], vals[2], vals[3]
            if st is None or en is None or st.size != 1 or (ax is not None and int(ax.reshape(-1)[0]) % len(shape)
                                                            != len(shape) - 1) or \
                    (ax is None and len(shape) != 1) or (step is not None and int(step.reshape(-1)[0]) != 1):
                return None
            return int(st.reshape(-1)[0]), min(int(en.reshape(-1)[0]), dim)

        sa, sb = span(na), span(nb)
        half = dim // 2
        if sa is None or sb is None or dim % 2:
            return None
        if {sa, sb} != {(0, half), (half, dim)}:
            return None
        return x, sb == (0, half), [ia, ib]
    return None


def _gegluv2(g: _Graph, report: FusionReport, chip: str) -> None:
    name = "GeGluV2"
    for i, n in enumerate(list(g.nodes)):
        if n is None or g.nodes[i] is None or n.op_type != "Mul" or n.domain not in ("", "ai.onnx"):
            continue
        for k in (0, 1):
            t = n.input[k]
            if t not in g.producer:
                continue
            gi = g.producer[t][0]
            gn = g.nodes[gi]
            is_gelu = gn.op_type == "Gelu" and (gn.domain == DEVICE_DOMAIN or
                                               (gn.domain in ("", "ai.onnx") and _attr(gn, "approximate", "none")
                                                == "none"))
            if not is_gelu or g.out_data_nodes(gi) != 1:
                continue
            found = _halves(g, n.input[1 - k], gn.input[0])
            if found is None:
                _reject(report, name, g, [gi, i], "the Gelu input and the other factor are not the two halves of "
                                                  "one tensor's last axis")
                break
            x, left, split_nodes = found
            if any(g.out_data_nodes(s) != (2 if len(g.nodes[s].output) == 2 else 1) for s in split_nodes):
                _reject(report, name, g, [gi, i], "a half is read by other nodes too")
                break
            label = n.name or g.labels[i]
            _fused(g, report, name, "GeGluV2", f"{label}/GeGluV2", split_nodes + [gi, i], [x], [n.output[0]],
                   {"dim": -1, "approximate": "none", "activate_left": int(left)})
            break


# ------------------------------------------------------------------------------------------------- apply
_RUNNERS: dict[str, Callable] = {
    "CastRemoveFusionPass": _cast_remove, "GroupNormFusionPass": _group_norm,
    "SingleInstanceNormFusion": _single_instance_norm, "GeluONNXFusionPass": _gelu,
    "LayerNormONNXFusionPass": _layer_norm, "LayerNormONNXMULFusionPass": _layer_norm_mul,
    "MatMulBiasAddFusionPass": _matmul_bias_add, "GroupNormSilu": _group_norm_silu, "GeGluV2": _gegluv2,
}


def apply(model, chip: str = "ascend910b", switches: Mapping[str, Any] | None = None, *,
          initializers: Mapping[str, np.ndarray] | None = None,
          inner_precise: int = 1) -> tuple[onnx.ModelProto, FusionReport]:
    """The graph the device runs: a rewritten copy of `model` (a ModelProto, or a LoadedModel whose initializers
    are used for constant checks) and the FusionReport. `switches`: pass name -> "on"/"off" (ATC's switch file
    semantics, resolve_switches); `initializers`: values of initializers the proto keeps as external data (the
    constant checks read them); `inner_precise`: the FlashAttention edit's innerPrecise attribute (1: the 910B
    default high-performance path of the fused attention kernels; 0: high precision)."""
    if hasattr(model, "proto") and hasattr(model, "initializers"):
        initializers = model.initializers if initializers is None else initializers
        model = model.proto
    enabled = resolve_switches(switches)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    report = FusionReport(chip=chip, enabled=enabled)
    g = _Graph(out, initializers)
    for p in PASSES:
        if not enabled[p.name]:
            continue
        if p.name == "FlashAttention":
            _flash_attention(g, report, chip, inner_precise)
        else:
            _RUNNERS[p.name](g, report, chip)
    g.prune()
    del out.graph.node[:]
    out.graph.node.extend(n for n in g.nodes if n is not None)
    if report.fusions and not any(o.domain == DEVICE_DOMAIN for o in out.opset_import):
        out.opset_import.append(helper.make_opsetid(DEVICE_DOMAIN, 1))
    return out, report
