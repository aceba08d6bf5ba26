"""The device plan: the ops the emulated Ascend device runs for a model under a profile, in execution order.

`device_plan(model, profile)` applies the profile's policy the way a run does (NpuPolicy.transform: GE's fusion
passes for a device profile, mschecker/npu/fusion.py; then the executor's plan: one bound NodeContext per node),
without computing anything, and lists each device op: its device name, Ascend IR op type, the ONNX nodes it
covers, the dtypes it reads and writes, its implmode ("none" where the IR op has no implmode), what it computes
(the device kernel table's row: algorithm, internal precision, sources) and the registry variant(s) the policy
bound. Nodes the compiler folds on the host (shape arithmetic, constants) are not device ops: they are counted.
`mschecker plan` (mschecker/commands/plan.py) prints it as a table or JSON.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import onnx
from onnx import helper

from mschecker.dtypes import dtype_name, resolve_dtype
from mschecker.npu.fusion import DEVICE_DOMAIN, FusionReport
from mschecker.graph.loader import from_proto, load_model
from mschecker.graph.executor import Executor

PLAN_SCHEMA = "mschecker.device_plan/1"


@dataclass(frozen=True)
class DeviceOp:
    index: int  # position in execution order (0-based, device ops only)
    name: str  # the device's name for it (a fused op: the name GE gives it)
    ir_type: str  # Ascend IR op type
    covers: tuple[str, ...]  # the ONNX nodes it replaces (an unfused op: itself)
    fused_by: str  # the fusion pass that made it ("" for an op the ONNX parser mapped one to one)
    dtypes_in: tuple[str, ...]  # per input ("" for an absent optional input)
    dtypes_out: tuple[str, ...]
    implmode: str  # the implmode the policy bound ("none": the IR op has no implmode)
    variants: Mapping[str, str]  # registry kernel -> bound variant
    algorithm: str = ""
    internal: str = ""
    status: str = ""  # the table row's: "source" | "assumption" ("" when the table has no row)
    assumption: str = ""
    sources: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "ir_type": self.ir_type, "covers": list(self.covers),
                "fused_by": self.fused_by, "dtypes_in": list(self.dtypes_in), "dtypes_out": list(self.dtypes_out),
                "implmode": self.implmode, "variants": dict(self.variants), "algorithm": self.algorithm,
                "internal": self.internal, "status": self.status, "assumption": self.assumption,
                "sources": list(self.sources), "notes": list(self.notes)}


@dataclass
class DevicePlan:
    model: str
    profile: str
    chip: str  # "" for a generic (non-device) profile
    ops: list[DeviceOp] = field(default_factory=list)
    host_folded: int = 0  # ONNX nodes folded to constants at compile time (not device ops)
    fusion: FusionReport | None = None
    # the profile's ATC entries that do nothing on this graph: naming no node (an error for run / check / bisect),
    # or a node a fusion consumed (npu.policy.NpuPolicy.knob_notes)
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Device ops by IR type."""
        return dict(sorted(Counter(op.ir_type for op in self.ops).items()))

    def to_json(self) -> dict:
        return {"schema": PLAN_SCHEMA, "model": self.model, "profile": self.profile, "chip": self.chip,
                "device_ops": len(self.ops), "host_folded": self.host_folded, "counts": self.counts(),
                "ops": [op.to_dict() for op in self.ops],
                "fusion": self.fusion.to_dict() if self.fusion is not None else None, "notes": list(self.notes)}

    def render(self, console, *, limit: int | None = None) -> None:
        """Rich tables: the ops (all, or the first `limit`), the counts by IR type, the fusion passes. Every
        name from the model is printed literally (markup escaped, control characters made visible)."""
        from rich.table import Table

        from mschecker.untrusted import markup  # lazy: start-up (mschecker.untrusted)

        t = Table(title=f"device plan of {markup(self.model)} under {markup(self.profile)}"
                        + (f" ({markup(self.chip)})" if self.chip else ""))
        t.add_column("#", justify="right")
        t.add_column("device op", overflow="fold", min_width=min(80, max((len(o.name) for o in self.ops), default=9)))
        for col in ("IR type", "fused from", "dtype in -> out", "implmode", "variants", "internal precision"):
            t.add_column(col, overflow="fold")
        shown = self.ops if limit is None else self.ops[:limit]
        for op in shown:
            fused = f"{markup(op.fused_by)} ({len(op.covers)} nodes)" if op.fused_by else ""
            dts = f"{','.join(d or '-' for d in op.dtypes_in)} -> {','.join(op.dtypes_out)}"
            variants = ", ".join(f"{markup(k)}:{markup(v)}" for k, v in op.variants.items())
            t.add_row(str(op.index), markup(op.name), markup(op.ir_type), fused, markup(dts), markup(op.implmode),
                      variants, markup(op.internal))
        console.print(t)
        if limit is not None and len(self.ops) > limit:
            console.print(f"... {len(self.ops) - limit} more device ops (--json lists them all)")
        console.print(f"{len(self.ops)} device ops; {self.host_folded} ONNX nodes folded on the host", markup=False,
                      highlight=False)
        c = Table(title="device ops by IR type")
        c.add_column("IR type")
        c.add_column("ops", justify="right")
        for k, v in self.counts().items():
            c.add_row(markup(k), str(v))
        console.print(c)
        if self.fusion is not None:
            f = Table(title="fusion passes")
            for col in ("pass", "on", "fused", "rejected"):
                f.add_column(col)
            rejected = Counter(r.pass_name for r in self.fusion.rejections)
            for name, n in self.fusion.by_pass().items():
                f.add_row(markup(name), "on" if self.fusion.enabled[name] else "off", str(n), str(rejected[name]))
            console.print(f)
        for note in self.notes:
            console.print("note: " + markup(note))


def _variants(description: str) -> dict[str, str]:
    """kernel -> variant from NodeContext.description ("[host-folded ]<dtype> <implmode> kernel:variant ...")."""
    out = {}
    for token in description.split():
        k, sep, v = token.partition(":")
        if sep and k and v:
            out[k] = v
    return out


def _row(chip: str, ir_type: str):
    """The device table's row (None for a generic profile, which models no device, or an op with no row)."""
    if not chip:
        return None
    try:
        from mschecker.npu import device_table  # lazy: optional (a build without the device tables plans too)

        return device_table.kernel_row(chip, ir_type)
    except (ImportError, KeyError):
        return None


def _ir_type(policy, node) -> str:
    if node.domain == DEVICE_DOMAIN:
        return node.op_type
    if hasattr(policy, "op_type_of"):
        return policy.op_type_of(node)
    try:
        # lazy: optional (a build without the device tables plans with the ONNX op types)
        from mschecker.graph.ops import attribute_values
        from mschecker.npu.device_table import ir_type_of

        return ir_type_of(node.op_type, attribute_values(node)) or node.op_type
    except ImportError:
        return node.op_type


def _attr_strings(node, name) -> tuple[str, ...]:
    for a in node.attribute:
        if a.name == name:
            return tuple(s.decode("utf-8") for s in a.strings)
    return ()


def onnx_dtype_name(elem_type: int) -> str:
    """An ONNX TensorProto data type as mschecker's dtype name (float16, bfloat16, int64, bool, ...)."""
    try:
        return dtype_name(np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type))))
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(int(elem_type)).lower()


_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _onnx_dtypes(proto: onnx.ModelProto) -> dict[str, str]:
    """Tensor name -> dtype name, from ONNX shape inference on the model as given (fused nodes keep its tensor
    names, so their types come from here too)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001
        inferred = proto
    out = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = onnx_dtype_name(vi.type.tensor_type.elem_type)
    for t in g.initializer:
        out[t.name] = onnx_dtype_name(t.data_type)
    return out


def device_plan(model, profile_or_policy="ascend910b", *, fusion: Mapping[str, Any] | None = None) -> DevicePlan:
    """The device plan of `model` (a path, ModelProto or LoadedModel) under a profile (preset name, file,
    NumericsProfile) or an NpuPolicy. `fusion`: pass switches merged over the profile's [fusion] table."""
    policy = _plan_policy(profile_or_policy, fusion)
    loaded = _loaded(model)
    dtypes = _onnx_dtypes(loaded.proto)
    ex = _PlanOnly(loaded, policy)
    report = getattr(policy, "fusion_report", None)
    fused_by = _fused_by(report)
    from mschecker.npu.entries import unmatched_entries  # lazy: start-up (mschecker.npu.entries)

    notes = unmatched_entries(policy.profile, ex.model.graph, op_type_of=policy.op_type_of,
                              names_of=policy.names_of) + list(getattr(policy, "notes", []))
    graph_inputs = {i.name for i in ex.input_infos}
    data = set(graph_inputs)
    plan = DevicePlan(model=str(getattr(loaded, "path", "") or "<in-memory model>"),
                      profile=policy.profile.name, chip=getattr(policy, "chip", None) or "", fusion=report,
                      notes=notes)
    for step in ex.steps:
        node = step.node
        foldable = node.op_type in ("Shape", "Size") or not any(n in data for n in node.input if n)
        if foldable:
            plan.host_folded += 1
            continue
        data.update(o for o in node.output if o)
        plan.ops.append(_device_op(plan, step, policy, dtypes, fused_by))
    return plan


def _plan_policy(profile_or_policy, fusion: Mapping[str, Any] | None):
    """The NpuPolicy to plan with: the one given, or one for the profile given, its fusion switches merged."""
    from mschecker.npu.policy import NpuPolicy  # lazy: start-up (mschecker.kernels)
    from mschecker.npu.profile import load_profile

    if isinstance(profile_or_policy, NpuPolicy):
        policy = profile_or_policy
        if fusion:
            policy = NpuPolicy(policy.profile.replace(fusion={**policy.profile.fusion, **dict(fusion)}))
        return policy
    prof = load_profile(profile_or_policy)
    if fusion:
        prof = prof.replace(fusion={**getattr(prof, "fusion", {}), **dict(fusion)})
    return NpuPolicy(prof)


def _loaded(model):
    """A LoadedModel from a path, a ModelProto or a LoadedModel."""
    if isinstance(model, onnx.ModelProto):
        return from_proto(model)
    if hasattr(model, "proto"):
        return model
    return load_model(model)


def _fused_by(report) -> dict:
    """Device op name -> (the fusion pass that made it, its notes)."""
    fused_by = {}
    if report is not None:
        for f in report.fusions:
            if f.device_name:
                fused_by[f.device_name] = (f.pass_name, f.notes)
    return fused_by


def _device_op(plan: DevicePlan, step, policy, dtypes: Mapping[str, str], fused_by: Mapping) -> DeviceOp:
    """One planned step as the device runs it: IR type, dtypes, variants and the device table's row."""
    node, ctx = step.node, step.ctx
    ir = _ir_type(policy, node)
    ins, outs = _io_dtypes(step, dtypes, dtype_name(ctx.dtype))
    row = _row(plan.chip, ir)
    covers = _attr_strings(node, "covers") if node.domain == DEVICE_DOMAIN else (step.label,)
    pass_name, notes = fused_by.get(node.name, ("", ()))
    return DeviceOp(
        index=len(plan.ops), name=step.label, ir_type=ir, covers=covers or (step.label,), fused_by=pass_name,
        dtypes_in=tuple(ins), dtypes_out=tuple(outs), implmode=ctx.implmode, variants=_variants(ctx.description),
        algorithm=row.algorithm if row else ("not in the device table" if plan.chip else ""),
        internal=getattr(row, "internal", "") if row else "",
        status=getattr(row, "status", "") if row else "", assumption=getattr(row, "assumption", "") if row else "",
        sources=tuple(str(s) for s in getattr(row, "sources", ())) if row else (), notes=tuple(notes))


def _io_dtypes(step, dtypes: Mapping[str, str], dname: str) -> tuple[list[str], list[str]]:
    """The dtypes a step's inputs and outputs have on the device: float tensors the op converts take the node's
    dtype, a Cast's output its target under the policy's cast rule, the rest their ONNX dtype."""
    node, ctx = step.node, step.ctx
    ins = []
    for k, t in enumerate(node.input):
        if not t:
            ins.append("")
            continue
        d = dtypes.get(t, "")
        converted = step.spec.convert_inputs and k not in step.spec.exact_inputs
        ins.append(dname if converted and (d in _FLOATS or d == "") else d)
    outs = []
    for t in node.output:
        d = dtypes.get(t, "")
        if node.op_type == "Cast" and step.spec.keeps_output_dtype:
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            target = onnx_dtype_name(to) if to is not None else d
            d = dtype_name(ctx.cast_target(resolve_dtype(target))) if target in _FLOATS else target
        elif d in _FLOATS or d == "":
            d = dname
        outs.append(d)
    return ins, outs


def _plan_only_executor():
    class PlanOnly(Executor):
        """The executor's plan with nothing computed: no constant rounded, staged or folded."""

        ROUND_ONCE_MAX_ELEMENTS = -1
        STAGE_F32 = False
        FOLD_MAX_BYTES = 0

    return PlanOnly


def _PlanOnly(model, policy):
    return _plan_only_executor()(model, policy)
