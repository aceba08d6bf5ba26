"""A precision fix in the device's vocabulary: per-op moves turned into the ATC settings a deployment takes.

The fix search (mschecker.bisect) chooses moves per device op (`mschecker plan` names them) or per Ascend IR op
type; `moved_profile` writes them the way atc accepts them, and the result is what every evaluation and the proof
run, so what is proven is what is written (docs/ATC.md):
  * fp32 for a device op: `--keep_dtype` where the op exists when atc applies that file (an op the ONNX parser
    mapped one to one, or one a fusion rewrote in place keeping its name); `--customize_dtypes`
    `Name::InputDtype:float32,...,OutputDtype:float32` for an op a fusion created (keep_dtype never reaches it:
    atc marks the parsed graph before fusion). For an op type: `OpType::T` in keep_dtype, or in customize_dtypes
    when T is a fused type; under a mixed-precision mode, the op type moved to the black list (`--modify_mixlist`),
    the mode's own vocabulary.
  * high_precision for an op or IR type that has an implmode (`--op_precision_mode` ini). atc ignores
    --op_select_implmode and --optypelist_for_implmode once an ini is given, so the base profile's own
    op_select_implmode is written into the ini as its op-type entries (explicit_implmodes).
  * a fusion pass switched off (`--fusion_switch_file`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from mschecker.npu.atc import CustomDtype
from mschecker.npu.device_table import IMPLMODE_INI
from mschecker.npu.profile import DEFAULT_IMPLMODE, MIXED_MODES, NumericsProfile

OP_TYPE_PREFIX = "OpType::"
_FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class OpFacts:
    """What the writers need to know about one device op."""

    name: str
    ir_type: str
    fused_by: str                 # the pass that created it ("" when unfused)
    covers: tuple[str, ...]       # the ONNX nodes it replaces
    float_inputs: tuple[bool, ...]

    @property
    def fused_away(self) -> bool:
        """Created by a fusion under a new name: atc's keep_dtype (applied before fusion) cannot name it."""
        return bool(self.fused_by) and self.name not in self.covers


def op_facts(executor) -> dict[str, OpFacts] | None:
    """OpFacts per device op of an Executor planned under a device NpuPolicy (None for a generic profile)."""
    from mschecker.npu.plan import _onnx_dtypes  # lazy: start-up (google.protobuf, onnx, mschecker._fastfp16)
    from mschecker.npu.policy import covered_names

    policy = executor.policy
    if getattr(policy, "chip", None) is None:
        return None
    report = policy.fusion_report
    made_by = {f.device_name: f.pass_name for f in report.fusions if f.device_name} if report else {}
    dtypes = _onnx_dtypes(executor.model.proto)
    facts = {}
    for st in executor.steps:
        node = st.node
        covers = covered_names(node)[1:] or (st.label,)
        # a tensor shape inference cannot type (a fused op's output: its domain is mschecker's) is a float
        # activation: what fused ops pass each other
        floats = tuple(bool(n) and (dtypes.get(n, "float32") in _FLOAT_NAMES if n not in executor.initializers
                                    else executor.initializers[n].dtype.kind == "f") for n in node.input)
        facts[st.label] = OpFacts(st.label, policy.op_type_of(node), made_by.get(node.name, ""), covers, floats)
    return facts


def fp32_customize(name: str, is_type: bool, float_inputs: tuple[bool, ...]) -> str:
    """The customize_dtypes line that computes an op (or every op of a type) in fp32: float32 for each float
    input, nothing (atc: leave as is) for the others, fp32 output."""
    inputs = tuple("float32" if f else None for f in float_inputs) or ("float32",)
    return CustomDtype(name, is_type, inputs, ("float32",)).text()


def explicit_implmodes(profile: NumericsProfile, types: Iterable[str] = ()) -> dict[str, str]:
    """The profile's --op_select_implmode (and optypelist) as [ByOpType] entries, for an ini that atc will read
    instead of it: {} for the default path ("default", plain high_performance); `types` restricts *_for_all and
    high_precision to those IR types (the graph's), every implmode op otherwise."""
    mode = profile.implmode
    if mode == DEFAULT_IMPLMODE:
        return {}
    base = mode.removesuffix("_for_all")
    if profile.optypelist_for_implmode:
        pool = profile.optypelist_for_implmode
    elif mode.endswith("_for_all") or base == "high_precision":
        pool = sorted(set(types) & set(IMPLMODE_INI)) if types else sorted(IMPLMODE_INI)
    else:
        return {}
    return {t: base for t in pool if base in IMPLMODE_INI.get(t, ())}


def moved_profile(base: NumericsProfile, facts: Mapping[str, OpFacts] | None, *, fp32: Iterable[str] = (),
                  high_precision: Iterable[str] = (), fusion_off: Iterable[str] = ()) -> NumericsProfile:
    """`base` with the moves (node names or "OpType::T" items) written as ATC settings (module docstring).
    `facts`: the device ops of the graph under `base` (None for a generic profile: keep_dtype and the ini only)."""
    fp32, high_precision, fusion_off = sorted(set(fp32)), sorted(set(high_precision)), sorted(set(fusion_off))
    if not (fp32 or high_precision or fusion_off):
        return base
    keep, custom, black = list(base.keep_dtype), [], []
    for item in fp32:
        t = item[len(OP_TYPE_PREFIX):] if item.startswith(OP_TYPE_PREFIX) else None
        if facts is None:
            keep.append(item)
        elif t is None:
            f = facts.get(item)
            if f is not None and f.fused_away:
                custom.append(fp32_customize(item, False, f.float_inputs))
            else:
                keep.append(item)
        else:
            of_type = [f for f in facts.values() if f.ir_type == t]
            if of_type and all(f.fused_away for f in of_type):
                custom.append(fp32_customize(t, True, of_type[0].float_inputs))
            elif base.precision_mode in MIXED_MODES:
                black.append(t)
            else:
                keep.append(item)
    changes: dict = {}
    if keep != list(base.keep_dtype):
        changes["keep_dtype"] = tuple(dict.fromkeys(keep))
    if custom:
        changes["customize_dtypes"] = tuple(custom) + tuple(base.customize_dtypes)
    if black:
        mix = {k: {u: list(v) for u, v in t.items()} for k, t in base.modify_mixlist.items()}
        adds = mix.setdefault("black-list", {}).setdefault("to-add", [])
        adds.extend(t for t in black if t not in adds)
        changes["modify_mixlist"] = mix
    if high_precision:
        by_type, by_node = dict(base.implmode_by_op_type), dict(base.implmode_by_node)
        if not (by_type or by_node) and base.device:  # atc will read the ini instead of op_select_implmode
            types = {f.ir_type for f in facts.values()} if facts else ()
            by_type = explicit_implmodes(base, types)
        for item in high_precision:
            if item.startswith(OP_TYPE_PREFIX):
                by_type[item[len(OP_TYPE_PREFIX):]] = "high_precision"
            else:
                by_node[item] = "high_precision"
        changes.update(implmode_by_op_type=by_type, implmode_by_node=by_node)
        if base.device:  # the ini replaces them for atc (and for the emulator): written once, in the ini
            changes.update(implmode=DEFAULT_IMPLMODE, optypelist_for_implmode=())
    if fusion_off:
        changes["fusion"] = {**base.fusion, **{p: "off" for p in fusion_off}}
    return base.replace(**changes)
