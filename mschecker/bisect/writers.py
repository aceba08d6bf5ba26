"""What a deployment takes: the recommendation as ATC files, an mschecker profile, the ATC flags, a patched
ONNX model, as bytes; report.write_outputs writes them into --out with the rest of the set
(fsio.write_file_set).

Recommendation.from_config turns per-node moves into the entries a user writes: a move that covers every
(non-folded) node of an op type, and at least two of them, becomes one op-type entry (`OpType::T` in the
keep_dtype file, `T=high_precision` under [ByOpType]); anything else stays per node name. The two forms select
the same nodes, so the proof re-run, which uses the written form (`profile`), proves what is written.

Files (names in FILES):
  keep_dtype.cfg       ATC --keep_dtype: one node name or OpType::T per line (mschecker.npu.atc.parse_keep_dtype)
  op_precision.ini     ATC --op_precision_mode: [ByOpType] / [ByNodeName] name=high_precision
                       (mschecker.npu.atc.parse_op_precision_ini)
  profile.json         the base profile with the moves folded in (mschecker.npu.load_profile reads it back)
  atc_flags.txt        the ATC command-line fragment that applies the two files
  model_fp16_fixed.onnx  fp16 model (onnxconverter-common's float16 converter, I/O kept fp32) whose recommended
                       nodes stay fp32 inside Cast-delimited islands; ONNX has no implmode, so a high_precision
                       node becomes a one-node fp32 island there. Checked with onnxruntime against the
                       reference and the tolerance (OnnxCheck).
"""
from __future__ import annotations

import io
import json
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from ..compare import ToleranceRule, json_float
from ..npu import NumericsProfile
from ..npu.profile import DEFAULT_IMPLMODE
from .lockstep import Analysis
from .samples import Sample
from .search import FixConfig, op_type_of
from .stats import ErrorStats

FILES = {"keep_dtype": "keep_dtype.cfg", "op_precision": "op_precision.ini", "profile": "profile.json",
         "atc_flags": "atc_flags.txt", "onnx": "model_fp16_fixed.onnx"}
_ATC_SAFE = re.compile(r"^[^\s#=;\[\]]+$")  # what a keep_dtype line / ini key can hold (atc.py's parsers)


@dataclass
class Recommendation:
    keep_dtype: list[str] = field(default_factory=list)          # node names and OpType::T entries
    by_op_type: dict[str, str] = field(default_factory=dict)     # op type -> high_precision
    by_node: dict[str, str] = field(default_factory=dict)        # node name -> high_precision
    config: FixConfig = field(default_factory=FixConfig)

    @classmethod
    def from_config(cls, config: FixConfig, analysis: Analysis) -> "Recommendation":
        by_type: dict[str, list[str]] = {}
        for n in analysis.nodes:
            if not n.folded:
                by_type.setdefault(n.op_type, []).append(n.name)
        rec = cls(config=config)
        for chosen, is_keep in ((config.keep_dtype, True), (config.high_precision, False)):
            for item in sorted(i for i in chosen if op_type_of(i)):  # op-type items as they are
                if is_keep:
                    rec.keep_dtype.append(item)
                else:
                    rec.by_op_type[op_type_of(item)] = "high_precision"
            chosen = {i for i in chosen if not op_type_of(i)}
            covered: set[str] = set()
            for op_type, names in sorted(by_type.items()):
                if len(names) >= 2 and all(x in chosen for x in names):
                    covered.update(names)
                    if is_keep:
                        rec.keep_dtype.append(f"OpType::{op_type}")
                    else:
                        rec.by_op_type[op_type] = "high_precision"
            order = [n.name for n in analysis.nodes]
            for name in sorted(chosen - covered, key=order.index):
                if is_keep:
                    rec.keep_dtype.append(name)
                else:
                    rec.by_node[name] = "high_precision"
        return rec

    @property
    def changes(self) -> int:
        return len(self.keep_dtype) + len(self.by_op_type) + len(self.by_node)

    def profile(self, base: NumericsProfile) -> NumericsProfile:
        """The profile the written files describe (proof runs this)."""
        if not self.changes:
            return base
        return base.replace(keep_dtype=tuple(base.keep_dtype) + tuple(self.keep_dtype),
                            implmode_by_op_type={**base.implmode_by_op_type, **self.by_op_type},
                            implmode_by_node={**base.implmode_by_node, **self.by_node})

    def not_expressible(self) -> list[str]:
        """Entries ATC's file formats cannot carry (whitespace, '#', '=' in a node name); they stay in
        profile.json and are listed in the report."""
        names = self.keep_dtype + list(self.by_op_type) + list(self.by_node)
        return [n for n in names if not _ATC_SAFE.match(n)]

    def to_dict(self) -> dict:
        return {"keep_dtype": self.keep_dtype, "op_precision": {"ByOpType": self.by_op_type,
                                                                "ByNodeName": self.by_node},
                "changes": self.changes, "not_expressible_in_atc_files": self.not_expressible()}


# The ATC files hold the whole configuration the proof ran (the base profile's own entries and the fix's): ATC
# takes one file of each kind, so a file with the fix's entries alone would drop the base's.

def keep_dtype_text(fixed: NumericsProfile) -> str:
    lines = ["# ATC --keep_dtype: these nodes compute and store in fp32 (written by mschecker bisect)"]
    lines += [e for e in dict.fromkeys(fixed.keep_dtype) if _ATC_SAFE.match(e)]
    return "\n".join(lines) + "\n"


def op_precision_text(fixed: NumericsProfile) -> str:
    lines = ["# ATC --op_precision_mode (written by mschecker bisect)", "[ByOpType]"]
    lines += [f"{k}={v}" for k, v in fixed.implmode_by_op_type.items() if _ATC_SAFE.match(k)]
    lines.append("[ByNodeName]")
    lines += [f"{k}={v}" for k, v in fixed.implmode_by_node.items() if _ATC_SAFE.match(k)]
    return "\n".join(lines) + "\n"


def atc_flags_text(fixed: NumericsProfile, model: str) -> str:
    flags = [f"--model={model}", "--framework=5", f"--precision_mode={fixed.precision_mode}"]
    if fixed.implmode != DEFAULT_IMPLMODE:  # "default" (a device profile): no flag, each op on its own default path
        flags.append(f"--op_select_implmode={fixed.implmode}")
    if fixed.keep_dtype:
        flags.append(f"--keep_dtype={FILES['keep_dtype']}")
    if fixed.implmode_by_op_type or fixed.implmode_by_node:
        flags.append(f"--op_precision_mode={FILES['op_precision']}")
    return " ".join(flags) + "\n"


def patched_onnx(model: onnx.ModelProto, fp32_nodes: set[str]) -> onnx.ModelProto:
    """The model in fp16 with `fp32_nodes` kept fp32 between Casts (onnxconverter-common's converter; I/O stay
    fp32 so the same input files feed it). Values are rounded, not clamped: the converter's default clamps
    weights to [1e-7, 1e4], which would change the model; the bounds here are fp16's own (smallest subnormal,
    max)."""
    from onnxconverter_common import float16

    model = _unshare_initializers(model, fp32_nodes)
    original = {t.name: t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    half = np.finfo(np.float16)
    with warnings.catch_warnings():  # it warns per clamped constant (a -3.4e38 mask becomes -65504): expected
        warnings.simplefilter("ignore")
        converted = float16.convert_float_to_float16(onnx.ModelProto.FromString(model.SerializeToString()),
                                                     min_positive_val=float(half.smallest_subnormal),
                                                     max_finite_val=float(half.max), keep_io_types=True,
                                                     node_block_list=sorted(fp32_nodes))
    fixed = _fuse_round_trips(_restore_fp32_weights(_retarget_casts(converted), original), fp32_nodes)
    return _fp32_outputs(fixed, {o.name for o in model.graph.output
                                 if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT})


def _fp32_outputs(model: onnx.ModelProto, fp32_outputs: set[str]) -> onnx.ModelProto:
    """keep_io_types misses a graph output produced by a kept node (it leaves that node's fp16 Cast in front of
    the output, typed fp16): such an output is cast to fp32 instead, as the input files and goldens expect."""
    producer = {o: n for n in model.graph.node for o in n.output}
    for out in model.graph.output:
        node = producer.get(out.name)
        if out.name in fp32_outputs and out.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 and \
                node is not None and node.op_type == "Cast":
            for attr in node.attribute:
                if attr.name == "to":
                    attr.i = onnx.TensorProto.FLOAT
            out.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return model


def _restore_fp32_weights(model: onnx.ModelProto, original: dict) -> onnx.ModelProto:
    """The converter inserts a kept node's input Casts before it decides which initializers to convert, so a
    kept node's weight is rounded to fp16 and cast back. Such a Cast(-> fp32) of a converted initializer reads
    the original fp32 weight instead (a second initializer; the fp16 one stays for any fp16 reader)."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    restored: dict[str, str] = {}
    rename: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Cast" or not node.input or node.input[0] not in original:
            continue
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        src = inits.get(node.input[0])
        if to != onnx.TensorProto.FLOAT or src is None or src.data_type != onnx.TensorProto.FLOAT16:
            continue
        name = restored.get(src.name)
        if name is None:
            name = restored[src.name] = f"{src.name}__fp32_weight"
            copy = onnx.TensorProto()
            copy.CopyFrom(original[src.name])
            copy.name = name
            graph.initializer.append(copy)
        rename[node.output[0]] = name
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        for k, n in enumerate(node.input):
            if n in rename and n not in outputs:
                node.input[k] = rename[n]
    return _drop_dead_casts(model)


def _drop_dead_casts(model: onnx.ModelProto) -> onnx.ModelProto:
    """Casts nobody reads any more (a chain of them dies from its end: repeat until none is left), then
    initializers nobody reads."""
    graph = model.graph
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        keep = [n for n in graph.node if not (n.op_type == "Cast" and n.output[0] not in read)]
        if len(keep) == len(graph.node):
            break
        del graph.node[:]
        graph.node.extend(keep)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    unused = [t for t in graph.initializer if t.name not in used]
    for t in unused:
        graph.initializer.remove(t)
    return model


def _unshare_initializers(model: onnx.ModelProto, fp32_nodes: set[str]) -> onnx.ModelProto:
    """A copy prepared for the converter: float Constant nodes become initializers (_constants_to_initializers),
    and every float initializer read both by an fp32 node and by an fp16 node gets a second copy for the fp32 readers (the converter converts a shared initializer once, and one reader
    then gets the wrong type: onnxruntime's "Type parameter (T) ... bound to different types")."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    _constants_to_initializers(graph)
    inits = {t.name: t for t in graph.initializer}
    readers: dict[str, set[bool]] = {}
    for node in graph.node:
        for name in node.input:
            if name in inits:
                readers.setdefault(name, set()).add(node.name in fp32_nodes)
    shared = {n for n, kinds in readers.items() if len(kinds) == 2
              and inits[n].data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)}
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    renamed = {}
    for name in sorted(shared):
        new = f"{name}__fp32"
        while new in taken:
            new += "_"
        taken.add(new)
        copy = onnx.TensorProto()
        copy.CopyFrom(inits[name])
        copy.name = new
        graph.initializer.append(copy)
        renamed[name] = new
    for node in graph.node:
        if node.name in fp32_nodes:
            for k, name in enumerate(node.input):
                if name in renamed:
                    node.input[k] = renamed[name]
    return model


def _fuse_round_trips(model: onnx.ModelProto, fp32_nodes: set[str]) -> onnx.ModelProto:
    """The converter stores every tensor in fp16, also one that passes between two kept nodes (it casts the fp32
    result to fp16 and back: fp32 compute, fp16 storage). A keep_dtype island stores in fp32: every
    Cast(fp32 -> fp16) -> Cast(-> fp32) round trip on an fp32 tensor is removed, its readers read the fp32
    tensor directly; the fp16 Cast stays where an fp16 node or a graph output still reads it."""
    graph = model.graph
    # fp32 tensors: outputs of kept nodes (the converter's value_info may still say fp16 for them), fp32 graph
    # inputs and initializers
    fp32 = {o for n in graph.node if n.name in fp32_nodes and n.op_type != "Cast" for o in n.output}
    fp32 |= {i.name for i in graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    fp32 |= {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    producer = {o: n for n in graph.node for o in n.output}

    def cast_to(node):
        return next((a.i for a in node.attribute if a.name == "to"), None) if node.op_type == "Cast" else None
    rename: dict[str, str] = {}
    for node in graph.node:
        down = producer.get(node.input[0]) if node.op_type == "Cast" and node.input else None
        if cast_to(node) == onnx.TensorProto.FLOAT and down is not None and \
                cast_to(down) == onnx.TensorProto.FLOAT16 and down.input[0] in fp32:
            rename[node.output[0]] = down.input[0]
    if not rename:
        return model
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type == "Cast" and node.output[0] in outputs and node.output[0] in rename:
            node.input[0] = rename[node.output[0]]  # a graph output keeps its name: fp32 -> fp32 Cast
    rename = {k: v for k, v in rename.items() if k not in outputs}
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
    return _drop_dead_casts(model)


def _constants_to_initializers(graph: onnx.GraphProto) -> None:
    """Float Constant nodes become initializers: the converter rounds a Constant's value to fp16 even when every
    reader is kept fp32 (a TorchScript UNet's time-embedding frequencies then lose 2e-3), while it leaves an
    initializer of fp32 readers alone. The NPU folds constants on the host in fp32 (NpuPolicy.bind)."""
    keep = []
    for node in graph.node:
        value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                     None) if node.op_type == "Constant" and node.domain in ("", "ai.onnx") else None
        if value is not None and value.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            init = onnx.TensorProto()
            init.CopyFrom(value)
            init.name = node.output[0]
            graph.initializer.append(init)
        else:
            keep.append(node)
    if len(keep) != len(graph.node):
        del graph.node[:]
        graph.node.extend(keep)


def _retarget_casts(model: onnx.ModelProto) -> onnx.ModelProto:
    """After the converter: a Cast whose output it typed fp16 but whose `to` it left at FLOAT casts to fp16."""
    f16 = {v.name for v in model.graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in f16:
            for attr in node.attribute:
                if attr.name == "to" and attr.i == onnx.TensorProto.FLOAT:
                    attr.i = onnx.TensorProto.FLOAT16
    return model


@dataclass
class OnnxCheck:
    """The patched model run by onnxruntime against the float64 reference."""

    ran: bool
    passed: bool
    worst_rel_l2: float | None = None
    failing_outputs: list[str] = field(default_factory=list)
    error: str = ""
    extra_fp32: list[str] = field(default_factory=list)  # nodes onnxruntime needs in fp32 beyond the NPU fix
    attempts: int = 1                                    # conversions + onnxruntime runs spent

    def to_dict(self) -> dict:
        return {"ran": self.ran, "passed": self.passed, "worst_rel_l2": json_float(self.worst_rel_l2),
                "failing_outputs": self.failing_outputs, "error": self.error, "extra_fp32": self.extra_fp32,
                "attempts": self.attempts}


def check_with_onnxruntime(proto: onnx.ModelProto, samples: list[Sample], analysis: Analysis,
                           rule: ToleranceRule) -> OnnxCheck:
    import onnxruntime as ort

    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        worst, failing = 0.0, {}
        for sample, ref_out in zip(samples, analysis.reference_outputs):
            feeds = {i.name: np.asarray(sample.feeds[i.name]) for i in sess.get_inputs()}
            got = dict(zip(names, sess.run(names, feeds)))
            for name, ref in ref_out.items():
                s = ErrorStats.of(np.asarray(got[name]), ref, rule, name)
                worst = max(worst, s.rel_l2)
                if not s.passed:
                    failing[name] = None
        return OnnxCheck(True, not failing, worst, list(failing))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's failures are reported, the emulator's proof stands
        return OnnxCheck(False, False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def profile_json(profile: NumericsProfile, name: str) -> str:
    data = profile.replace(name=name, description=f"{profile.description} + mschecker bisect fix").to_dict()
    return json.dumps(data, indent=1) + "\n"


def fix_files(base: NumericsProfile, fixed: NumericsProfile, model_path: str,
              onnx_bytes: bytes | None) -> dict[str, bytes]:
    """Every deployment file of a proven fix: kind (FILES' keys) -> bytes; report.write_outputs writes them
    with the rest of the output set (write_file_set)."""
    texts = {"keep_dtype": keep_dtype_text(fixed), "op_precision": op_precision_text(fixed),
             "profile": profile_json(fixed, f"{base.name}_bisect_fix"),
             "atc_flags": atc_flags_text(fixed, Path(model_path).name)}
    files = {kind: text.encode("utf-8") for kind, text in texts.items()}
    if onnx_bytes is not None:
        files["onnx"] = onnx_bytes
    return files


def serialize(proto: onnx.ModelProto) -> bytes:
    buf = io.BytesIO()
    onnx.save_model(proto, buf)
    return buf.getvalue()
