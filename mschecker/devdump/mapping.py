"""Map dumped device ops back to the ONNX model: which ONNX tensor each dumped input / output is.

Where the map comes from, in order of authority:
  1. the dump itself: an ACL output's `original_op` (name, output_index), written by GE from the op's
     `_datadump_origin_name` / `_datadump_origin_output_index`;
  2. the graph JSON `atc --mode=1 --om=m.om --json=m.json` writes: per op its `_datadump_original_op_names` (the
     ONNX nodes a fused op covers) and per output desc `_datadump_origin_name` / `_datadump_origin_output_index`
     (the keys msaccucmp's fusion-rule parser reads: Ascend msaccucmp `vector_cmp/fusion_manager/fusion_rule_parser.py`
     and `cmp_utils/constant/const_manager.py`; ops under "graph"[i]["op"], attrs as {"key", "value": {"s" | "i" |
     "list": {"s": [...]}}}, inputs as "producer:index");
  3. without a graph JSON: mschecker's own device plan for the profile (mschecker/npu/plan.py: GE's fusion passes as
     modelled, each fused op's name, covered nodes and output tensors);
  4. a device op named like an ONNX node (ATC keeps the node name for an op it maps one to one).
Names are matched exactly, then with every character outside [A-Za-z0-9] made '_' (dump file names and msprobe
keys cannot hold '/', '.' or ':').
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from mschecker import fsio
from mschecker.errors import InputError
from mschecker.untrusted import plain

_NON_WORD = re.compile(r"[^A-Za-z0-9]")
#: Ops the compiler inserts between the model's ops (layout and dtype conversions): no ONNX node computes them, and
#: msaccucmp treats the same two types apart (cmp_utils/constant/const_manager.py SPECIAL_OPS_TYPE).
COMPILER_INSERTED = ("TransData", "Cast")


def name_key(name: str) -> str:
    return _NON_WORD.sub("_", name)


@dataclass
class DeviceOpMap:
    """One device op in ONNX terms."""

    name: str
    op_type: str
    covers: tuple[str, ...]                       # ONNX node names it computes
    outputs: list[str | None] = field(default_factory=list)   # ONNX tensor per output index
    inputs: list[str | None] = field(default_factory=list)    # ONNX tensor per input index
    source: str = ""                              # "graph JSON", "device plan", "model"


class OpIndex:
    """Device ops by name (exact and normalized), with the ONNX model's nodes for one-to-one fallbacks."""

    def __init__(self, ops: list[DeviceOpMap], model: onnx.ModelProto):
        self.ops = {op.name: op for op in ops}
        self.by_key: dict[str, DeviceOpMap] = {}
        for op in ops:
            self.by_key.setdefault(name_key(op.name), op)
        self.nodes = {n.name: n for n in model.graph.node if n.name}
        self.node_keys = {name_key(n): n for n in self.nodes}
        self.source = ops[0].source if ops else "model"

    def find(self, candidates: list[str]) -> DeviceOpMap | None:
        for c in candidates:
            if c in self.ops:
                return self.ops[c]
        for c in candidates:
            op = self.by_key.get(name_key(c))
            if op is not None:
                return op
        for c in candidates:
            node = self.nodes.get(c) or self.node_keys.get(name_key(c))
            if node is not None:
                return DeviceOpMap(node.name, node.op_type, (node.name,), list(node.output),
                                   [i for i in node.input if i], "model")
        return None

    def tensor_of_origin(self, origin: tuple[str, int]) -> str | None:
        """The ONNX tensor of (original op name, output index), as a dump's original_op records it."""
        node = self.nodes.get(origin[0]) or self.node_keys.get(name_key(origin[0]))
        if node is None or not 0 <= origin[1] < len(node.output):
            return None
        return node.output[origin[1]] or None


def from_plan(npu_model: onnx.ModelProto, op_type_of=None) -> list[DeviceOpMap]:
    """The device ops of mschecker's own plan: the graph the NPU policy runs (fused nodes carry `covers`)."""
    out = []
    for node in npu_model.graph.node:
        covers = next((list(onnx.helper.get_attribute_value(a)) for a in node.attribute if a.name == "covers"), None)
        covers = tuple(c.decode() if isinstance(c, bytes) else c for c in covers) if covers else (node.name,)
        op_type = op_type_of(node) if op_type_of else node.op_type
        # absent optional inputs ("") are not device inputs: a dump numbers the inputs it holds
        out.append(DeviceOpMap(node.name, op_type, covers, list(node.output), [i for i in node.input if i],
                               "device plan"))
    return out


def _attrs(obj) -> dict:
    return {a.get("key"): a.get("value", {}) for a in obj.get("attr", []) if isinstance(a, dict)}


def _strings(value) -> list[str]:
    lst = value.get("list", {}) if isinstance(value, dict) else {}
    s = lst.get("s", []) if isinstance(lst, dict) else []
    return [x for x in s if isinstance(x, str)]


def from_graph_json(path, model: onnx.ModelProto) -> list[DeviceOpMap]:
    """The device ops of an `atc --mode=1 --json` graph JSON (module docstring), mapped to the model's tensors.
    InputError (one line naming the file) when it is not such a file."""
    text = fsio.read_text(path, "--graph-json")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--graph-json {plain(path)}: not JSON ({exc.msg}, line {exc.lineno})") from None
    graphs = doc.get("graph") if isinstance(doc, dict) else None
    if not isinstance(graphs, list) or not all(isinstance(g, dict) and isinstance(g.get("op"), list) for g in graphs):
        raise InputError(f"--graph-json {plain(path)}: no \"graph\": [{{\"op\": [...]}}] list (expected the JSON "
                         "`atc --mode=1 --om=m.om --json=m.json` writes)")
    nodes = {n.name: n for n in model.graph.node if n.name}
    ops: list[DeviceOpMap] = []
    producers: dict[str, DeviceOpMap] = {}
    raw_inputs: dict[str, list[str]] = {}
    for g in graphs:
        for o in g["op"]:
            if not isinstance(o, dict) or not isinstance(o.get("name"), str) or not isinstance(o.get("type"), str):
                raise InputError(f"--graph-json {plain(path)}: an op without a string \"name\" and \"type\"")
            op = _json_op(o, nodes)
            ops.append(op)
            producers[op.name] = op
            raw_inputs[op.name] = [i for i in o.get("input", []) if isinstance(i, str) and i and not i.endswith(":-1")]
    graph_inputs = {i.name for i in model.graph.input}
    for op in ops:
        op.inputs = [_input_tensor(i, producers, graph_inputs) for i in raw_inputs[op.name]]
    return [op for op in ops if op.op_type not in ("Data", "NetOutput", "Const", "Constant")]


def _json_op(o: dict, nodes: dict) -> DeviceOpMap:
    attrs = _attrs(o)
    originals = _strings(attrs["_datadump_original_op_names"]) if "_datadump_original_op_names" in attrs \
        else [o["name"]]
    originals = [n for n in originals if n] or [o["name"]]
    outputs: list[str | None] = []
    for i, desc in enumerate(o.get("output_desc", []) if isinstance(o.get("output_desc"), list) else []):
        d = _attrs(desc) if isinstance(desc, dict) else {}
        origin = d.get("_datadump_origin_name", {}).get("s") if isinstance(d.get("_datadump_origin_name"), dict) else None
        index = d.get("_datadump_origin_output_index", {}).get("i") \
            if isinstance(d.get("_datadump_origin_output_index"), dict) else None
        name = origin or (originals[-1] if len(originals) == 1 else None)
        index = index if isinstance(index, int) else i
        node = nodes.get(name) if name else None
        outputs.append(node.output[index] if node is not None and 0 <= index < len(node.output) else None)
    return DeviceOpMap(o["name"], o["type"], tuple(originals), outputs, [], "graph JSON")


def _input_tensor(ref: str, producers: dict, graph_inputs: set) -> str | None:
    name, _, index = ref.rpartition(":")
    if not name or not index.lstrip("-").isdigit():
        name, index = ref, "0"
    op = producers.get(name)
    if op is None:
        return name if name in graph_inputs else None
    if op.op_type == "Data":
        return op.name if op.name in graph_inputs else (op.covers[0] if op.covers[0] in graph_inputs else None)
    k = int(index)
    return op.outputs[k] if 0 <= k < len(op.outputs) else None
