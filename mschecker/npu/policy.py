"""The emulated NPU policy: per node, a dtype and registry variants chosen by a NumericsProfile.

A profile with a `device` (a chip of the device kernel table, mschecker/npu/device_table.py) models that chip as
ATC compiles for it (docs/ATC.md has each rule's GE source): transform() first rewrites the graph with GE's fusion
passes (mschecker/npu/fusion.py); a node's op type is its Ascend IR op type; its dtype is decided, first match wins:
  1. customize_dtypes: an entry naming the node (its own, post-fusion name), then one naming its IR type: the
     InputDtype it gives is the compute dtype, a narrower OutputDtype rounds the outputs; a cube op given fp16
     inputs and fp32 output computes in fp32 on fp16-rounded operands;
  2. keep_dtype (ignored under must_keep_origin_dtype): ATC marks the nodes of the parsed graph, before fusion,
     so an entry counts for a node that kept its name through fusion (an unfused node; a MatMul that absorbed its
     bias) -- a node a fusion consumed loses it, and the run says so (errors.KnobNote) naming the fused device op;
  3. precision_mode: force_fp16 -> fp16; force_lowerprecision -> storage dtype; force_fp32 == cube_fp16in_fp32out
     -> cube ops fp16 operands into fp32 results, vector ops fp32; allow_fp32_to_fp16 -> cube fp16, vector fp32;
     allow_fp32_to_bf16 and must_keep_origin_dtype -> fp32 (the graph's own dtype: mschecker emulates fp32
     exports); allow_mix_precision(_fp16/_bf16) -> the chip's mixed-precision lists (npu.mixlist, edited by
     modify_mixlist): white ops fp16 (bf16), black fp32, gray ops follow their predecessor.
Its implmode (ops in CANN's all_ops_impl_mode.ini only; "none" for the others): an op_precision_mode ini
(implmode_by_node by the node's own name, then implmode_by_op_type) makes atc ignore op_select_implmode; else
op_select_implmode (`implmode`): "default" (no flag) and high_performance (the closed built-in
high_performance.ini) leave each op on its own default path (device_table.default_implmode); with
optypelist_for_implmode the mode applies to the listed IR types only; *_for_all, and high_precision (whose
built-in ini is closed: modelled as its _for_all list, an assumption docs/ATC.md states), apply it to every op that
implements it. A mode an op does not implement leaves it on its default path, as atc does. The fp16 node runs the
registry variant the table's row names for its implmode, with the row's bracket alternative where the profile asks
for one, and the `<variant>_sat` twin where the overflow mode is saturation and the kernel has one.

Sources of the device rules (hicann/ge@ffdcbc9f7496c17a98c1d12762c61ed608ef3503; line-level citations in
docs/ATC.md): precision modes, keep_dtype and customize_dtypes precedence, implmode precedence --
docs/zh/user_guides/atc_tools/CLI_options/--precision_mode.md, --precision_mode_v2.md, --keep_dtype.md,
--customize_dtypes.md, --op_select_implmode.md, --op_precision_mode.md; keep_dtype on the parsed graph before
fusion -- compiler/api/aclgrph/attr_options/keep_dtype_option.cc and api/atc/main_impl.cc; the ini's precedence
over op_select_implmode -- compiler/engines/nn_engine/utils/common/config_parser/op_impl_mode_config_parser.cc;
the mixed-precision lists and the gray rule -- npu/mixlist.py's sources. Closed or silent, stated as assumptions
with their alternative: the built-in high_*.ini lists (high_performance = each kernel's own default path, the SD
recipe's evidence; high_precision = its _for_all list, pessimistic alternative: no flag), and whether a fusion pass
carries keep_dtype onto the op it creates (modelled: it does not, as customize_dtypes' doc says of fused ops; the
fix writer never relies on it, using customize_dtypes for fused ops).

A generic profile (device "") models no chip: ONNX op types, no fusion; keep_dtype and implmode_by_node also match
by name; force_fp32 is fp32 everywhere and allow_fp32_to_bf16 lowers cube ops to bf16; mixed modes need a device.

Variant selection (select_variant) where the table names no variant (fp32 nodes, generic profiles), among a
kernel's correct (non-bug) variants whose storage is the node dtype:
- an explicit `[variants] kernel = name` in the profile wins;
- cube ops: accumulate == cube_accumulation first, then implmode match;
- vector ops: implmode match first, then accumulation (fp32 for high_precision, the storage dtype for
  high_performance), because implmode is exactly what picks fp16-accumulating / approximate kernels;
- then, within a (dtype, accumulate, implmode) group, the variant the kernel's entry declares its default
  (KernelInfo.defaults), and between groups that miss equally the entry's declaration order: the choice is
  declared, so an algorithmic variant (kblocked, winograd) runs only when asked for and adding a variant never
  changes a run. No match is a plan-time error naming the kernel and the variants it has.

Kernel switches (npu/profile.py's KERNEL_SWITCHES: int8_weight_only, int4_intermediates, winograd) run a registry
kernel besides the ops' own where its entry says (KernelInfo.substitutes, KernelInfo.stores_outputs) and the node's
op allows it (OpSpec.substitutes: the op knows its attributes and operands), so no kernel is named here.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Callable

import numpy as np

from mschecker.dtypes import dtype_name, is_float, resolve_dtype
from mschecker.errors import KnobNote
from mschecker.graph.policy import KernelUnavailable, NodeContext, Policy
from mschecker.kernels.registry import KernelInfo, Variant, get_kernel
from mschecker.graph.ops import attribute_values, lookup
from mschecker.npu.atc import mixlist_updates, parse_customize_line
from mschecker.npu.device_table import default_implmode, has_implmode, ir_type_of, kernel_row, variant_for
from mschecker.npu.fusion import DEVICE_DOMAIN, apply as apply_fusions  # DEVICE_DOMAIN: the fused nodes' domain
from mschecker.npu.profile import DEFAULT_IMPLMODE, KERNEL_SWITCHES, MIXED_MODES, NumericsProfile, load_profile
from mschecker.npu.mixlist import MixState

#: ini modes that change nothing the emulator computes: index bounds checks, fp32 without HF32 (an fp32 node here
#: is plain fp32), a norm op class tag -- the op runs its default path
NO_NUMERIC_EFFECT = ("support_out_of_bound_index", "enable_float_32_execution", "norm_class")


def covered_names(node) -> tuple[str, ...]:
    """The node's own name and, for a fused device op, the ONNX nodes it covers: the names a knob may use."""
    if node.domain != DEVICE_DOMAIN:
        return (node.name,)
    for a in node.attribute:
        if a.name == "covers":
            return (node.name,) + tuple(s.decode("utf-8") for s in a.strings)
    return (node.name,)


def fused_away(node) -> bool:
    """Whether a fusion consumed the node's ONNX nodes into a new device op (one whose name none of them had):
    what ATC set on them before fusion (keep_dtype) does not reach it. A fusion that rewrote a node in place (the
    MatMul that absorbed its bias keeps its name) keeps the node's settings."""
    return node.domain == DEVICE_DOMAIN and node.name not in covered_names(node)[1:]


def keep_dtype_matches(entries, node, op_type: str | None = None, *, device: bool = False) -> bool:
    """ATC keep_dtype semantics: an entry is a node name or OpType::TypeName for every node of that type
    (`op_type`: the node's type in the profile's vocabulary, default its ONNX op type). device: ATC applies the
    file to the parsed graph before fusion (hicann/ge compiler/api/aclgrph/attr_options/keep_dtype_option.cc), so
    a fused-away device op matches nothing; a generic profile's fused names (none) and covered names match."""
    if device and fused_away(node):
        return False
    names = (node.name,) if device else covered_names(node)
    op_type = node.op_type if op_type is None else op_type
    for e in entries:
        if e.startswith("OpType::"):
            if e[len("OpType::"):] == op_type:
                return True
        elif e in names:
            return True
    return False


def _rounding_operands(fn, dtype: np.dtype, count: int):
    """fn with its first `count` float array arguments rounded to `dtype` (kept in their own dtype): a cube op's
    fp16 operands into an fp32 result (fp16 x fp16 products are exact in fp32, so fp32 arithmetic on the rounded
    operands is the cube's fp16-in / fp32-out result)."""
    def run(*args, **kwargs):
        args = list(args)
        for k in range(min(count, len(args))):
            x = args[k]
            if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype != dtype:
                args[k] = x.astype(dtype).astype(x.dtype)
        return fn(*args, **kwargs)
    return run


def _then_rounded(compress, dtype: np.dtype):
    """The output storage: `compress` (or nothing), then the values rounded to `dtype`, kept in their own dtype."""
    def store(value):
        if compress is not None:
            value = compress(value)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.dtype.itemsize > dtype.itemsize:
            value = value.astype(dtype).astype(value.dtype)
        return value
    return store


def select_variant(info: KernelInfo, dtype: str, implmode: str, *, cube: bool, cube_acc: str,
                   override: str | None = None) -> Variant:
    pool = [v for v in info.correct_variants if v.dtype == dtype]
    if override:
        chosen = info.variants.get(override)
        if chosen is None:
            raise KernelUnavailable(f"profile asks for variant {override!r} of kernel {info.name!r}, which has "
                                    f"{sorted(info.variants)}")
        if chosen.dtype == dtype:
            return chosen
    if not pool:
        raise KernelUnavailable(f"kernel {info.name!r} has no {dtype} variant (variants: "
                                f"{', '.join(f'{v.name}[{v.dtype}]' for v in info.correct_variants)})")
    want_acc = cube_acc if cube else ("float32" if implmode == "high_precision" else dtype)
    order = {v.name: i for i, v in enumerate(info.variants.values())}

    def rank(v: Variant):
        # Exact (accumulate, implmode) match first; cube ops care about the accumulator first, vector ops about
        # the implmode. Within one (dtype, accumulate, implmode) group the declared default wins (registry
        # checks there is one); between groups that miss equally, the entry's declaration order decides.
        acc_miss = v.accumulate != want_acc
        mode_miss = v.implmode != implmode
        first, second = (acc_miss, mode_miss) if cube else (mode_miss, acc_miss)
        return (first, second, v.name not in info.defaults, order[v.name])

    return min(pool, key=rank)


class NpuPolicy(Policy):
    """Emulated NPU numerics from a NumericsProfile (a preset name, a file path or a profile object)."""

    def __init__(self, profile: NumericsProfile | str = "ascend910b"):
        self.profile = load_profile(profile)
        self.name = f"npu:{self.profile.name}"
        p = self.profile
        self.storage = np.dtype(resolve_dtype(p.storage_dtype))
        self.constant_shapes: dict[str, tuple] = {}
        for flag, kernel in KERNEL_SWITCHES.items():
            value = getattr(p, flag)
            if isinstance(value, str) and value:
                get_kernel(kernel).variant(value)  # KeyError names the known variants
            elif value:
                try:
                    get_kernel(kernel)
                except KeyError:
                    raise KernelUnavailable(f"profile {p.name!r} sets {flag}, but the kernel registry has no "
                                            f"{kernel!r} kernel") from None
        self.chip = p.device or None
        self.fusion_report = None  # what transform()'s fusion passes did, for the device plan
        self.notes: list[str] = []  # knob_notes of the graph last transformed
        self.parsed_types: set[str] = set()  # its op types before fusion (what atc's keep_dtype OpType:: sees)
        if p.precision_mode in MIXED_MODES and self.chip is None:
            raise KernelUnavailable(f"profile {p.name!r}: precision_mode {p.precision_mode} follows a chip's "
                                    "mixed-precision lists; give the profile a device (ascend910b, ascend310p)")
        # customize_dtypes: ATC keeps the first entry of a repeated name or type
        self.custom_by_name: dict[str, object] = {}
        self.custom_by_type: dict[str, object] = {}
        for k, line in enumerate(p.customize_dtypes):
            e = parse_customize_line(line, f"profile {p.name!r}: customize_dtypes[{k}]")
            table = self.custom_by_type if e.is_type else self.custom_by_name
            table.setdefault(e.name, e)
        self._mix = None  # the mixed-precision decisions of the graph being planned (prepare)

    def transform(self, model):
        """A device profile's graph is the one GE compiles: its fusion passes applied (a generic profile runs the
        graph as given)."""
        if self.chip is None:
            return model
        # the LoadedModel itself, not its proto: a pass whose check reads a constant held in external data needs it
        proto, self.fusion_report = apply_fusions(model, self.chip, dict(self.profile.fusion))
        self.notes = self.knob_notes(model.proto.graph, proto.graph)
        self.parsed_types = {self.op_type_of(n) for n in model.proto.graph.node}
        return dataclasses.replace(model, proto=proto)

    def emit_notes(self) -> None:
        """The notes of the graph last transformed, as KnobNote warnings (the CLI prints each once); commands
        call it once the entries are known to match the model (modelcheck), so a note never precedes an error."""
        for note in self.notes:
            warnings.warn(note, KnobNote, stacklevel=2)

    def knob_notes(self, parsed, device) -> list[str]:
        """Which of the profile's ATC entries does nothing on this graph, where atc would only log it: an entry
        naming a node a fusion consumed, or a device op that only exists after atc applied keep_dtype (naming the
        setting to write instead); a type whose every op was fused. Entries that match no node at all are
        modelcheck.unmatched_entries' errors. `parsed`: the ONNX graph, `device`: the graph after fusion."""
        p = self.profile
        own = {n.name for n in device.node}
        into = {c: n for n in device.node if fused_away(n) for c in covered_names(n)[1:]}
        before = {self.op_type_of(n) for n in parsed.node}
        after = {self.op_type_of(n) for n in device.node}
        unfused_after = {self.op_type_of(n) for n in device.node if not fused_away(n)}
        notes = []

        def by_name(kind: str, name: str, post_fusion: bool) -> None:
            if name in into:
                d = into[name]
                notes.append(f"{kind} {name!r}: node fused into device op {d.name!r} ({d.op_type}); atc does not "
                             f"apply the entry to it -- write customize_dtypes {d.name}::InputDtype:float32,... "
                             "to set the fused op's dtype")
            elif name in own and not post_fusion and fused_away(next(n for n in device.node if n.name == name)):
                notes.append(f"{kind} {name!r}: {name!r} is a device op that fusion creates, after atc applies "
                             f"keep_dtype -- write customize_dtypes {name}::InputDtype:float32,... instead")

        def by_type(kind: str, ir: str, types: set) -> None:
            if ir not in types and ir in before:
                notes.append(f"{kind} OpType::{ir}: every {ir} was fused into another device op, which the entry "
                             "does not reach (`mschecker plan` lists the device ops)")
            elif ir not in types and ir in after:
                notes.append(f"{kind} OpType::{ir}: every {ir} is made by a GE fusion, after atc applies "
                             f"keep_dtype -- write customize_dtypes OpType::{ir}:InputDtype:float32,... instead")

        if p.precision_mode != "must_keep_origin_dtype":
            for e in p.keep_dtype:
                if e.startswith("OpType::"):
                    by_type("keep_dtype", e[len("OpType::"):], unfused_after)
                else:
                    by_name("keep_dtype", e, post_fusion=False)
        for name in self.custom_by_name:
            by_name("customize_dtypes", name, post_fusion=True)
        for ir in self.custom_by_type:
            by_type("customize_dtypes", ir, after)
        for name in p.implmode_by_node:
            by_name("op_precision_mode [ByNodeName]", name, post_fusion=True)
        return notes

    def names_of(self, node) -> tuple[str, ...]:
        """The names a knob may give the node (its own; a fused device op's covered ONNX nodes too)."""
        return covered_names(node)

    def device_graph(self, model):
        """The graph this policy runs for an ONNX ModelProto (weights may be absent: a fusion check that needs a
        constant it cannot read leaves the nodes unfused), for naming checks before a run."""
        if self.chip is None:
            return model.graph
        return apply_fusions(model, self.chip, dict(self.profile.fusion))[0].graph

    def op_type_of(self, node) -> str:
        """The node's op type in the profile's vocabulary: its Ascend IR op type under a device profile."""
        if self.chip is None:
            return node.op_type
        if node.domain == DEVICE_DOMAIN:
            return node.op_type
        return ir_type_of(node.op_type, attribute_values(node)) or node.op_type

    def prepare(self, initializers) -> None:
        self.constant_shapes = {k: tuple(v.shape) for k, v in initializers.items()}
        if self.profile.precision_mode in MIXED_MODES:
            low = "bf16" if self.profile.precision_mode.endswith("bf16") else "fp16"
            self._mix = MixState(self.chip, low=low, updates=mixlist_updates(self.profile.modify_mixlist))
            for name, value in initializers.items():
                if is_float(value.dtype):
                    self._mix.constant(name, dtype_name(value.dtype))

    def node_dtype(self, node, cube: bool) -> np.dtype:
        """The node's compute and storage dtype (dtypes_of's first element)."""
        return self.dtypes_of(node, cube)[0]

    def dtypes_of(self, node, cube: bool) -> tuple[np.dtype, np.dtype | None, np.dtype | None]:
        """(compute dtype, dtype the operands are first rounded to or None, dtype the outputs are rounded to or
        None), first match wins: customize_dtypes, keep_dtype, precision_mode (module docstring)."""
        p = self.profile
        op_type = self.op_type_of(node)
        entry = self.custom_by_name.get(node.name) or self.custom_by_type.get(op_type)
        kept = p.precision_mode != "must_keep_origin_dtype" and \
            keep_dtype_matches(p.keep_dtype, node, op_type, device=self.chip is not None)
        lowered = False
        if self._mix is not None:  # every planned node, in graph order, so that gray ops follow their producers
            for name in node.input:
                if name and name not in self._mix.tensors:  # neither produced nor constant: a graph input
                    self._mix.graph_input(name)
            lowered = self._mix.decide(node.name, op_type, list(node.input), [o for o in node.output if o],
                                       keep_dtype=kept or entry is not None)
        if entry is not None:
            got = self._customized(entry, node, cube, lowered)
            if got is not None:
                return got
        if kept:
            return np.dtype(np.float32), None, None
        return self._mode_dtypes(cube, lowered)

    def _mode_dtypes(self, cube: bool, lowered: bool) -> tuple[np.dtype, np.dtype | None, None]:
        """precision_mode's dtypes for a node (module docstring)."""
        f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
        mode, device = self.profile.precision_mode, self.chip is not None
        if mode == "force_fp16":
            return f16, None, None
        if mode == "force_lowerprecision":
            return self.storage, None, None
        if mode == "cube_fp16in_fp32out" or (mode == "force_fp32" and device):
            return (f32, f16, None) if cube else (f32, None, None)
        if mode == "allow_fp32_to_fp16":
            return (f16 if cube else f32), None, None
        if mode == "allow_fp32_to_bf16" and cube and not device:
            return resolve_dtype("bfloat16"), None, None
        if mode in MIXED_MODES:
            low = resolve_dtype("bfloat16") if mode.endswith("bf16") else f16
            return (low if lowered else f32), None, None
        return f32, None, None  # must_keep_origin_dtype, force_fp32 (generic), allow_fp32_to_bf16 (vector / device)

    def _customized(self, entry, node, cube: bool, lowered: bool):
        """A customize_dtypes entry's dtypes for the node; None when it sets no float dtype the node has."""
        ins = [entry.input_dtype(k) for k in range(min(len(entry.inputs), len([i for i in node.input if i])))]
        in_d = next((resolve_dtype(d) for d in ins if d), None)
        out_d = entry.output_dtype(0) if entry.outputs else None
        out_d = resolve_dtype(out_d) if out_d else None
        if in_d is None and out_d is None:
            return None
        if in_d is None:
            compute, operands, _ = self._mode_dtypes(cube, lowered)
        else:
            compute, operands = np.dtype(in_d), None
            if cube and compute.itemsize == 2 and out_d == np.float32:  # fp16 in, fp32 out: the cube's fp32 result
                return np.dtype(np.float32), compute, None
        narrower = out_d is not None and np.dtype(out_d).itemsize < compute.itemsize
        return compute, operands, (np.dtype(out_d) if narrower else None)

    def implmode_of(self, node) -> str:
        """The node's implmode (module docstring); "none" for a device op that has no implmode."""
        p = self.profile
        op_type = self.op_type_of(node)
        if self.chip is None:
            for name in covered_names(node):
                if name in p.implmode_by_node:
                    return p.implmode_by_node[name]
            return p.implmode_by_op_type.get(op_type) or p.implmode
        if not has_implmode(op_type):
            return "none"
        default = default_implmode(self.chip, op_type)
        if p.implmode_by_node or p.implmode_by_op_type:  # an op_precision_mode ini: atc ignores op_select_implmode
            mode = p.implmode_by_node.get(node.name) or p.implmode_by_op_type.get(op_type)
        else:
            select = p.implmode
            base = select.removesuffix("_for_all")
            if select == DEFAULT_IMPLMODE:
                mode = None
            elif p.optypelist_for_implmode:
                mode = base if op_type in p.optypelist_for_implmode else None
            elif select.endswith("_for_all") or base == "high_precision":
                mode = base
            else:  # high_performance: the closed built-in high_performance.ini, which default_implmode models
                mode = None
        if mode is None or mode in NO_NUMERIC_EFFECT or mode not in kernel_row(self.chip, op_type).implmodes:
            return default  # an op that does not implement the mode runs the one it has (atc's rule)
        return mode

    def _device_variant(self, node, kernel: str, dname: str, implmode: str) -> Variant | None:
        """The variant the device table's row names for this node's fp16 path (module docstring); None where
        the table names none."""
        if self.chip is None or dname != "float16":
            return None
        try:
            name = variant_for(self.chip, self.op_type_of(node), kernel, implmode, self.profile.bracket)
        except KeyError:
            return None
        if name is None:
            return None
        info = get_kernel(kernel)
        if self.profile.overflow_mode == "saturation" and f"{name}_sat" in info.variants:
            name = f"{name}_sat"
        return info.variant(name)

    def input_dtype(self, dtype) -> np.dtype:
        if self.profile.precision_mode == "force_fp16":
            return np.dtype(np.float16)
        if self.profile.precision_mode == "force_lowerprecision":
            return self.storage
        return np.dtype(np.float32)

    def bind(self, node, opset, kernel_names, cube, *, foldable=False, operand_kernel=None) -> NodeContext:
        p = self.profile
        # Constant-foldable nodes (shape arithmetic, weight preprocessing) are evaluated by the compiler on the
        # host, in the graph's own fp32, before the device runs: rounding them to fp16 would, e.g., turn a shape
        # computed through floats (4097 -> 4096) into a wrong Reshape. They get fp32 and IEEE overflow.
        dtype, operands, out_round = (np.dtype(np.float32), None, None) if foldable else self.dtypes_of(node, cube)
        if foldable and self._mix is not None:  # folded on the host: a constant for the mixed-precision rule
            for o in node.output:
                if o:
                    self._mix.constant(o)
        dname = dtype_name(dtype)
        implmode = self.implmode_of(node)
        kernels, chosen, staged = {}, [], ()
        for k in kernel_names:
            try:
                label, v, fn = self._kernel_choice(node, k, dname, implmode, cube)
                if operands is not None:  # the matrix unit's fp16 operands (KernelInfo.cube_operands)
                    fn = _rounding_operands(fn, operands, get_kernel(k).cube_operands)
            except KeyError as exc:
                raise KernelUnavailable(str(exc).strip('"')) from None
            kernels[k] = fn
            chosen.append(f"{label}:{v.name}")
            if k == operand_kernel:
                staged = v.staged_f32_operands
        compress = None if dtype == np.float32 or foldable else self._output_storage(dname, implmode, chosen)
        if operands is not None:  # a cube op's fp16 operands into its fp32 result (cube_fp16in_fp32out)
            chosen.append(f"operands:{dtype_name(operands)}")
        if out_round is not None:  # customize_dtypes OutputDtype narrower than the compute dtype
            compress = _then_rounded(compress, out_round)
            chosen.append(f"output:{dtype_name(out_round)}")
        keep_casts = p.precision_mode == "must_keep_origin_dtype" or foldable
        return NodeContext(node=node, opset=opset, dtype=dtype, implmode=implmode, kernels=kernels, staged_f32=staged,
                           cast_float=(lambda t: t) if keep_casts else (lambda t, d=dtype: d),
                           saturate=p.overflow_mode == "saturation" and not foldable, compress=compress,
                           description=("host-folded " if foldable else "") + f"{dname} {implmode} " + " ".join(chosen))

    def _switched(self, names_variant: bool):
        """The profile's kernel switches that are on (KERNEL_SWITCHES), as (value, kernel entry): those whose value
        names a variant (names_variant), or those that leave the choice to the selection rule."""
        for flag, kernel in KERNEL_SWITCHES.items():
            value = getattr(self.profile, flag)
            if value and isinstance(value, str) == names_variant:
                yield value, get_kernel(kernel)

    def _substitutes(self, node, kernel: str, names_variant: bool):
        """The switched-on kernels that may serve `kernel`'s call on this node (KernelInfo.substitutes, the op's
        OpSpec.substitutes), as (value, kernel entry, adapter)."""
        spec = lookup(node.op_type, node.domain)
        for value, info in self._switched(names_variant):
            domain = spec.substitutes.get(info.name) if spec is not None and kernel in info.substitutes else None
            adapt = domain(node, self.constant_shapes) if domain is not None else None
            if adapt is not None:
                yield value, info, adapt

    def _kernel_choice(self, node, kernel: str, dname: str, implmode: str,
                       cube: bool) -> tuple[str, Variant, Callable]:
        """(the kernel name the plan shows, the variant, the callable the op calls) for one of the node's kernels,
        first match wins: a substitute a switch turns on, under its own name (int8_weight_only); a variant a switch
        names, as `kernel`'s own where its dtype is the node's (winograd: conv2d's function on a smaller domain);
        the device table's row; the selection rule (module docstring)."""
        p = self.profile
        for _, info, adapt in self._substitutes(node, kernel, names_variant=False):
            v = self._select(info, dname, implmode, cube)
            return info.name, v, adapt(v.fn)
        device = None if kernel in p.variants else self._device_variant(node, kernel, dname, implmode)
        for value, info, adapt in self._substitutes(node, kernel, names_variant=True):
            v = info.variant(value)
            if v.dtype == dname:
                return kernel, v, adapt(v.fn)
        v = device if device is not None else self._select(get_kernel(kernel), dname, implmode, cube)
        return kernel, v, v.fn

    def _select(self, info: KernelInfo, dname: str, implmode: str, cube: bool) -> Variant:
        """select_variant under the profile; an op the device has no implmode for ranks as high_precision here (its
        kernels are the accurate ones on the device: docs/DEVICE_KERNELS.md)."""
        return select_variant(info, dname, "high_precision" if implmode == "none" else implmode, cube=cube,
                              cube_acc=self.profile.cube_accumulation, override=self.profile.variants.get(info.name))

    def _output_storage(self, dname: str, implmode: str, chosen: list[str]):
        """The lossy storage a switch puts a low-precision node's float outputs through (KernelInfo.stores_outputs,
        int4_intermediates), its choice appended to `chosen`; None when no such switch is on."""
        compress = None
        try:
            for _, info in self._switched(names_variant=False):
                if info.stores_outputs:  # a vector pass over the output, whatever the node
                    v = select_variant(info, dname, implmode, cube=False, cube_acc=self.profile.cube_accumulation,
                                       override=self.profile.variants.get(info.name))
                    compress = v.fn
                    chosen.append(f"{info.name}:{v.name}")
        except KeyError as exc:
            raise KernelUnavailable(str(exc).strip('"')) from None
        return compress
