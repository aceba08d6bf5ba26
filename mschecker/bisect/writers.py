"""What a deployment takes: the recommendation as the ATC files it needs, the one `atc` command line that uses
them, an mschecker profile, a patched ONNX model, as bytes; report.write_outputs writes them into --out with the
rest of the set (fsio.write_file_set).

Recommendation.from_config turns the search's moves into items a user writes: a move that covers every
(non-folded) node of an op type, and at least two of them, becomes one op-type item; a node name an ATC file
cannot carry (npu.atc.atc_expressible) becomes its op type's item, the closest expressible fix, and is reported.
npu.fixes.moved_profile writes the items in ATC's vocabulary; the files are that profile's ATC settings, read
back with mschecker's own ATC readers (read_back) before anything is proven: the proof pass runs the profile the
files give, so what is proven is what is written, bit for bit.

Files (names in FILES; a file is written only when it has entries):
  keep_dtype.cfg         atc --keep_dtype: node names / OpType::T (ops that exist when atc applies the file)
  customize_dtypes.cfg   atc --customize_dtypes: fp32 for ops a fusion created (Name::InputDtype:float32,...)
  op_precision.ini       atc --op_precision_mode: [ByOpType] / [ByNodeName] name=high_precision
  fusion_switch.cfg      atc --fusion_switch_file: PassName:off
  modify_mixlist.json    atc --modify_mixlist: op types moved to the black list (mixed-precision modes)
  atc_flags.txt          the `atc` command line that applies them (and the profile's precision mode)
  profile.json           the base profile with the moves folded in (mschecker.npu.load_profile reads it back)
  model_fp16_fixed.onnx  fp16 model (onnxconverter-common's float16 converter, I/O kept fp32) whose recommended
                         nodes stay fp32 inside Cast-delimited islands; ONNX has no implmode, so a high_precision
                         node becomes a one-node fp32 island there. Checked with onnxruntime against the
                         reference and the tolerance (OnnxCheck).
"""
from __future__ import annotations

import io
import json
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mschecker.compare import ToleranceRule, json_float
from mschecker.npu.profile import DEFAULT_IMPLMODE, NumericsProfile
from mschecker.npu.atc import (AtcFlags, atc_command_text, atc_expressible, customize_dtypes_text, fusion_switch_text,
                       keep_dtype_text, modify_mixlist_text, op_precision_text, parse_atc_command,
                       parse_customize_dtypes, parse_customize_line, parse_keep_dtype, parse_modify_mixlist,
                       parse_op_precision_ini)
from mschecker.npu.fixes import OP_TYPE_PREFIX, OpFacts
from mschecker.bisect.lockstep import Analysis
from mschecker.bisect.samples import Sample
from mschecker.bisect.search import FixConfig, op_type_of
from mschecker.bisect.stats import ErrorStats
from mschecker.npu.fusion import load_switch_file

FILES = {"keep_dtype": "keep_dtype.cfg", "customize_dtypes": "customize_dtypes.cfg",
         "op_precision": "op_precision.ini", "fusion_switch": "fusion_switch.cfg",
         "modify_mixlist": "modify_mixlist.json", "atc_flags": "atc_flags.txt", "profile": "profile.json",
         "onnx": "model_fp16_fixed.onnx"}
#: atc --soc_version written for a chip: one valid part of the family (atc needs one; the user's own card may be
#: another of the family -- `npu-smi info` names it -- and the report says so)
SOC_VERSION = {"ascend910b": "Ascend910B3", "ascend310p": "Ascend310P3"}
#: the atc flag each file is passed with
_FLAG_OF = {"keep_dtype": "keep_dtype", "customize_dtypes": "customize_dtypes", "op_precision": "op_precision_mode",
            "fusion_switch": "fusion_switch_file", "modify_mixlist": "modify_mixlist"}


@dataclass
class Recommendation:
    config: FixConfig                      # the moves as the search found them
    items: FixConfig                       # as written: op-type items where they cover a type, expressible names
    fixed: NumericsProfile | None = None   # the profile the files give (read back), what the proof runs
    rewritten: dict[str, str] = field(default_factory=dict)  # name ATC cannot carry -> the item written instead
    base: NumericsProfile | None = None    # the profile as given

    @classmethod
    def from_config(cls, config: FixConfig, analysis: Analysis, base: NumericsProfile,
                    facts: dict[str, OpFacts] | None = None) -> "Recommendation":
        by_type: dict[str, list[str]] = {}
        type_of = {n.name: n.op_type for n in analysis.nodes}
        for n in analysis.nodes:
            if not n.folded:
                by_type.setdefault(n.op_type, []).append(n.name)
        rewritten: dict[str, str] = {}
        parts = {}
        for kind in ("keep_dtype", "high_precision"):
            chosen = set(getattr(config, kind))
            names = {i for i in chosen if not op_type_of(i)}
            items = {i for i in chosen if op_type_of(i)}
            for op_type, members in by_type.items():
                if len(members) >= 2 and all(x in names for x in members):
                    names -= set(members)
                    items.add(OP_TYPE_PREFIX + op_type)
            fmt = "op_precision" if kind == "high_precision" else \
                "customize_dtypes" if facts is not None else "keep_dtype"
            for name in sorted(names):
                f = facts.get(name) if facts else None
                target = fmt if kind == "high_precision" or (f is not None and f.fused_away) else "keep_dtype"
                if atc_expressible(name, target) is None:
                    items.add(name)
                else:  # the closest expressible fix: every op of its type
                    rewritten[name] = OP_TYPE_PREFIX + (f.ir_type if f else type_of.get(name, "?"))
                    items.add(rewritten[name])
            parts[kind] = frozenset(items)
        return cls(config=config, items=FixConfig(parts["keep_dtype"], parts["high_precision"], config.fusion_off),
                   rewritten=rewritten, base=base)

    # what the fix adds to the profile as given, in ATC's words (the written files hold the base's entries too)
    def _added(self, name: str) -> list:
        if self.fixed is None or self.base is None:
            return []
        had = getattr(self.base, name)
        return [e for e in getattr(self.fixed, name) if e not in had]

    @property
    def keep_dtype(self) -> list[str]:
        return self._added("keep_dtype")

    @property
    def customize_dtypes(self) -> list[str]:
        return self._added("customize_dtypes")

    @property
    def by_op_type(self) -> dict[str, str]:
        got = self.fixed.implmode_by_op_type if self.fixed else {}
        had = self.base.implmode_by_op_type if self.base else {}
        return {k: v for k, v in got.items() if had.get(k) != v}

    @property
    def by_node(self) -> dict[str, str]:
        got = self.fixed.implmode_by_node if self.fixed else {}
        had = self.base.implmode_by_node if self.base else {}
        return {k: v for k, v in got.items() if had.get(k) != v}

    @property
    def mixlist_black(self) -> list[str]:
        def adds(p):
            return list(p.modify_mixlist.get("black-list", {}).get("to-add", [])) if p else []
        return [t for t in adds(self.fixed) if t not in adds(self.base)]

    @property
    def changes(self) -> int:
        return self.items.changes

    def profile(self, base: NumericsProfile, facts=None) -> NumericsProfile:
        """The profile the written files describe (proof runs this: `fixed` once read back)."""
        return self.fixed if self.fixed is not None else self.items.profile(base, facts)

    def to_dict(self) -> dict:
        p = self.fixed
        out = {"moves": self.items.to_dict(), "changes": self.changes, "keep_dtype": self.keep_dtype,
               "customize_dtypes": self.customize_dtypes,
               "op_precision": {"ByOpType": self.by_op_type, "ByNodeName": self.by_node},
               "fusion_off": sorted(self.items.fusion_off), "mixlist_black": self.mixlist_black,
               "not_expressible_in_atc_files": dict(self.rewritten)}
        if p is not None:
            out["atc_files"] = {"keep_dtype": list(p.keep_dtype), "customize_dtypes": list(p.customize_dtypes),
                                "op_precision": {"ByOpType": dict(p.implmode_by_op_type),
                                                 "ByNodeName": dict(p.implmode_by_node)},
                                "fusion_switch": dict(p.fusion), "modify_mixlist": dict(p.modify_mixlist)}
        return out


def atc_texts(fixed: NumericsProfile, model_path: str, prefix: str = "") -> dict[str, str]:
    """kind -> text of every ATC file `fixed` needs, and the atc command line that uses them (the files named
    `prefix` + FILES[kind], next to it)."""
    texts: dict[str, str] = {}
    if fixed.keep_dtype:
        texts["keep_dtype"] = keep_dtype_text(fixed.keep_dtype)
    if fixed.customize_dtypes:
        texts["customize_dtypes"] = customize_dtypes_text(
            [parse_customize_line(line, "profile customize_dtypes") for line in fixed.customize_dtypes])
    if fixed.implmode_by_op_type or fixed.implmode_by_node:
        texts["op_precision"] = op_precision_text(dict(fixed.implmode_by_op_type), dict(fixed.implmode_by_node))
    if fixed.fusion:
        texts["fusion_switch"] = fusion_switch_text(dict(fixed.fusion))
    if fixed.modify_mixlist:
        texts["modify_mixlist"] = modify_mixlist_text(fixed.modify_mixlist)
    texts["atc_flags"] = atc_command_text(atc_flags_of(fixed, model_path, set(texts), prefix)) + "\n"
    return texts


def atc_flags_of(fixed: NumericsProfile, model_path: str, kinds, prefix: str = "") -> AtcFlags:
    """The atc flags of a profile whose ATC files (`kinds`, FILES' keys, named `prefix` + FILES[kind]) sit next
    to the flags file."""
    stem = prefix.rstrip(".") or Path(model_path).stem or "model"
    ini = "op_precision" in kinds
    select = None if ini or fixed.implmode == DEFAULT_IMPLMODE else fixed.implmode
    return AtcFlags(model=str(model_path), framework="5", other={"output": f"{stem}_fixed"},
                    soc_version=SOC_VERSION.get(fixed.device),
                    precision_mode=None if fixed.precision_mode_v2 else fixed.precision_mode,
                    precision_mode_v2=fixed.precision_mode_v2 or None, op_select_implmode=select,
                    optypelist_for_implmode=tuple(fixed.optypelist_for_implmode) if select else (),
                    **{_FLAG_OF[k]: prefix + FILES[k] for k in kinds if k in _FLAG_OF})


def read_back(base: NumericsProfile, texts: dict[str, str]) -> NumericsProfile:
    """The profile the written ATC files and flags give when mschecker's ATC readers read them: the base's
    non-ATC settings (chip, overflow mode, bracket, ...) with every ATC setting replaced by the files'."""
    with tempfile.TemporaryDirectory(prefix="mschecker-atc-") as tmp:
        paths = {}
        for kind, text in texts.items():
            paths[kind] = Path(tmp) / FILES[kind]
            paths[kind].write_text(text, encoding="utf-8")
        flags = parse_atc_command(texts["atc_flags"], FILES["atc_flags"])
        by_type, by_node = parse_op_precision_ini(paths["op_precision"]) if "op_precision" in paths else ({}, {})
        customize = parse_customize_dtypes(paths["customize_dtypes"]) if "customize_dtypes" in paths else []
        changes = dict(
            keep_dtype=tuple(parse_keep_dtype(paths["keep_dtype"])) if "keep_dtype" in paths else (),
            customize_dtypes=tuple(e.text() for e in customize),
            implmode_by_op_type=by_type, implmode_by_node=by_node,
            implmode=flags.op_select_implmode or (base.implmode if by_type or by_node else DEFAULT_IMPLMODE),
            optypelist_for_implmode=tuple(flags.optypelist_for_implmode),
            fusion=load_switch_file(paths["fusion_switch"]) if "fusion_switch" in paths else {},
            modify_mixlist=parse_modify_mixlist(paths["modify_mixlist"]) if "modify_mixlist" in paths else {})
        if flags.precision_mode_v2:
            changes.update(precision_mode_v2=flags.precision_mode_v2)
        else:
            changes.update(precision_mode=flags.precision_mode or "force_fp16", precision_mode_v2="")
    return base.replace(**changes)


_ATC_FIELDS = ("precision_mode", "precision_mode_v2", "keep_dtype", "customize_dtypes", "implmode_by_op_type",
               "implmode_by_node", "optypelist_for_implmode", "fusion", "modify_mixlist")


def written_profile(fixed: NumericsProfile, model_path: str,
                    prefix: str = "") -> tuple[NumericsProfile, dict[str, str]]:
    """(the profile the files give, kind -> text): the files of `fixed` written and read back; an ATC setting that
    does not survive the round trip is a bug in a writer or reader (RuntimeError: an internal error, exit 3)."""
    back = read_back(fixed, atc_texts(fixed, model_path))
    texts = atc_texts(fixed, model_path, prefix) if prefix else atc_texts(fixed, model_path)
    lost = [f for f in _ATC_FIELDS if _norm(getattr(back, f)) != _norm(getattr(fixed, f))]
    if lost:
        raise RuntimeError(f"the ATC files do not give back the proven configuration: {', '.join(lost)} "
                           f"({', '.join(f'{getattr(fixed, f)!r} -> {getattr(back, f)!r}' for f in lost)})")
    return back, texts


def _norm(value):
    if isinstance(value, (tuple, list)):
        return tuple(value)
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _norm(v) for k, v in dict(value).items()}
    return value


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
    return _inner_readers_before_output_casts(_fp32_outputs(fixed, {
        o.name for o in model.graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}), fp32_nodes)


def _inner_readers_before_output_casts(proto: onnx.ModelProto, fp32_nodes: set[str]) -> onnx.ModelProto:
    """A graph output that nodes inside the graph also read (golden/default's Softmax reads the output "logits")
    is fp32 for the files while its fp16 readers need fp16: keep_io_types leaves them reading the fp32 name and
    onnxruntime refuses the model ("Type (tensor(float16)) of output arg ... does not match expected type
    (tensor(float))"). Such readers read the fp16 value the output is cast from, or, when a node kept in fp32
    produces it, a Cast of it to fp16; nodes kept in fp32 (`fp32_nodes`) go on reading the fp32 output."""
    graph = proto.graph
    fp32_outputs = {o.name for o in graph.output if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    fp16 = {v.name for v in graph.value_info if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    producer = {o: n for n in graph.node for o in n.output}
    readers = [n for n in graph.node if n.name not in fp32_nodes]
    source: dict[str, str] = {}
    for name in fp32_outputs:
        if not any(name in n.input for n in readers):
            continue
        cast = producer.get(name)
        to = next((a.i for a in cast.attribute if a.name == "to"), None) if cast is not None else None
        if cast is not None and cast.op_type == "Cast" and to == onnx.TensorProto.FLOAT and cast.input[0] in fp16:
            source[name] = cast.input[0]
        elif cast is not None:
            source[name] = f"{name}__fp16"
            graph.node.insert(list(graph.node).index(cast) + 1, onnx.helper.make_node(
                "Cast", [name], [source[name]], name=f"{name}__to_fp16", to=onnx.TensorProto.FLOAT16))
    for n in readers:
        for i, name in enumerate(n.input):
            if name in source:
                n.input[i] = source[name]
    return proto


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
    _, texts = written_profile(fixed, model_path)
    texts["profile"] = profile_json(fixed, f"{base.name}_bisect_fix")
    files = {kind: text.encode("utf-8") for kind, text in texts.items()}
    if onnx_bytes is not None:
        files["onnx"] = onnx_bytes
    return files


def serialize(proto: onnx.ModelProto) -> bytes:
    buf = io.BytesIO()
    onnx.save_model(proto, buf)
    return buf.getvalue()
