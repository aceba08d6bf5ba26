"""The emulated NPU policy: per node, a dtype and registry variants chosen by a NumericsProfile.

Node dtype (node_dtype): a keep_dtype node -> float32; otherwise by precision_mode: force_fp16 -> float16,
force_lowerprecision -> storage_dtype, allow_fp32_to_fp16 / allow_fp32_to_bf16 -> cube ops in float16 / bfloat16
and everything else float32, must_keep_origin_dtype / force_fp32 -> float32 (the models we emulate are fp32
exports; "origin" is fp32). A node's float inputs are rounded to its dtype, its float outputs are stored in it.
Cast to a float type produces the node dtype, except under must_keep_origin_dtype where the graph's Cast is kept.

A profile with a `device` (a chip of the device kernel table, mschecker/npu/device_table.py) models that chip:
transform() first rewrites the graph with GE's fusion passes (mschecker/npu/fusion.py), a node's op type is its
Ascend IR op type (a fused node's own type, or the table's ONNX -> IR map), a fp16 node runs the registry variant
the table's row names for its implmode ("any" for ops that have no implmode: their implmode is "none"), with the
row's bracket alternative where the profile asks for one, and the `<variant>_sat` twin where the overflow mode is
saturation and the kernel has one (per-instruction saturation inside fp16 arithmetic). Nodes the table gives no
variant for (fp32 nodes under keep_dtype, kernels a row does not name) fall back to the rule below.

Variant selection (select_variant), among a kernel's correct (non-bug) variants whose storage is the node dtype:
- an explicit `[variants] kernel = name` in the profile wins;
- cube ops: accumulate == cube_accumulation first, then implmode match;
- vector ops: implmode match first, then accumulation (fp32 for high_precision, the storage dtype for
  high_performance), because implmode is exactly what picks fp16-accumulating / approximate kernels;
- then the plainest name (fewest characters, then alphabetical), so algorithmic variants (blocked, winograd)
  are only used when asked for. No match is a plan-time error naming the kernel and the variants it has.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..dtypes import dtype_name, resolve_dtype
from ..graph.policy import KernelUnavailable, NodeContext, Policy
from ..registry import KernelInfo, Variant, get_kernel
from ..graph.ops import attribute_values
from .device_table import default_implmode, has_implmode, ir_type_of, variant_for
from .fusion import DEVICE_DOMAIN, apply as apply_fusions  # DEVICE_DOMAIN: the fused nodes' domain
from .profile import DEFAULT_IMPLMODE, NumericsProfile, load_profile


def covered_names(node) -> tuple[str, ...]:
    """The node's own name and, for a fused device op, the ONNX nodes it covers: the names a knob may use."""
    if node.domain != DEVICE_DOMAIN:
        return (node.name,)
    for a in node.attribute:
        if a.name == "covers":
            return (node.name,) + tuple(s.decode("utf-8") for s in a.strings)
    return (node.name,)


def keep_dtype_matches(entries, node, op_type: str | None = None) -> bool:
    """ATC keep_dtype semantics: an entry is a node name (a fused device op answers to its device name and to the
    ONNX nodes it covers), or OpType::TypeName for every node of that type (`op_type`: the node's type in the
    profile's vocabulary, default its ONNX op type)."""
    names = covered_names(node)
    op_type = node.op_type if op_type is None else op_type
    for e in entries:
        if e.startswith("OpType::"):
            if e[len("OpType::"):] == op_type:
                return True
        elif e in names:
            return True
    return False


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
        for flag, kernel in (("int8_weight_only", "int8_weight_gemm"), ("int4_intermediates", "bitpack4")):
            if getattr(p, flag):
                try:
                    get_kernel(kernel)
                except KeyError:
                    raise KernelUnavailable(f"profile {p.name!r} sets {flag}, but the kernel registry has no "
                                            f"{kernel!r} kernel") from None
        if p.winograd:
            info = get_kernel("conv2d_winograd")
            info.variant(p.winograd)  # KeyError names the known variants
        self.chip = p.device or None
        self.fusion_report = None  # what transform()'s fusion passes did, for the device plan

    def transform(self, model):
        """A device profile's graph is the one GE compiles: its fusion passes applied (a generic profile runs the
        graph as given)."""
        if self.chip is None:
            return model
        # the LoadedModel itself, not its proto: a pass whose check reads a constant held in external data needs it
        proto, self.fusion_report = apply_fusions(model, self.chip, dict(self.profile.fusion))
        return dataclasses.replace(model, proto=proto)

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

    def _int8_weight_kernel(self, node, dtype: str, implmode: str):
        """MatMul / Gemm whose weight operand is a 2-D initializer, through the int8 weight-only GEMM kernel
        (x (..., K) @ w (K, N) with per-output-channel int8 weights); None when the node does not qualify."""
        if not self.profile.int8_weight_only or node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2:
            return None
        if len(self.constant_shapes.get(node.input[1], ())) != 2:
            return None
        info = get_kernel("int8_weight_gemm")
        v = select_variant(info, dtype, implmode, cube=True, cube_acc=self.profile.cube_accumulation,
                           override=self.profile.variants.get("int8_weight_gemm"))
        if node.op_type == "MatMul":
            return v, v.fn

        def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, fn=v.fn):
            y = fn(a.T if trans_a else a, b.T if trans_b else b).astype(np.float32) * np.float32(alpha)
            if c is not None:
                y = y + np.float32(beta) * c.astype(np.float32)
            return y  # rounded to the node dtype by the executor, like every output
        return v, gemm

    def node_dtype(self, node, cube: bool) -> np.dtype:
        p = self.profile
        if keep_dtype_matches(p.keep_dtype, node, self.op_type_of(node)):
            return np.dtype(np.float32)
        mode = p.precision_mode
        if mode == "force_fp16":
            return np.dtype(np.float16)
        if mode == "force_lowerprecision":
            return self.storage
        if mode in ("allow_fp32_to_fp16", "allow_fp32_to_bf16"):
            low = np.dtype(np.float16) if mode.endswith("fp16") else resolve_dtype("bfloat16")
            return low if cube else np.dtype(np.float32)
        return np.dtype(np.float32)  # must_keep_origin_dtype, force_fp32

    def implmode_of(self, node) -> str:
        """By node name (a fused op: its device name, then the ONNX nodes it covers), by op type, the default;
        "none" for a device op that has no implmode."""
        p = self.profile
        op_type = self.op_type_of(node)
        if self.chip is not None and not has_implmode(op_type):
            return "none"
        for name in covered_names(node):
            if name in p.implmode_by_node:
                return p.implmode_by_node[name]
        mode = p.implmode_by_op_type.get(op_type) or p.implmode
        if mode == DEFAULT_IMPLMODE:
            return default_implmode(self.chip, op_type)
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

    def _winograd_applies(self, node) -> bool:
        if not self.profile.winograd or node.op_type != "Conv":
            return False
        a = {x.name: list(x.ints) if x.ints else x.i for x in node.attribute}
        return (a.get("kernel_shape") == [3, 3] and a.get("strides", [1, 1]) == [1, 1]
                and a.get("dilations", [1, 1]) == [1, 1] and a.get("group", 1) == 1)

    def bind(self, node, opset, kernel_names, cube, *, foldable=False, operand_kernel=None) -> NodeContext:
        p = self.profile
        # Constant-foldable nodes (shape arithmetic, weight preprocessing) are evaluated by the compiler on the
        # host, in the graph's own fp32, before the device runs: rounding them to fp16 would, e.g., turn a shape
        # computed through floats (4097 -> 4096) into a wrong Reshape. They get fp32 and IEEE overflow.
        dtype = np.dtype(np.float32) if foldable else self.node_dtype(node, cube)
        dname = dtype_name(dtype)
        implmode = self.implmode_of(node)
        kernels, chosen, staged = {}, [], ()
        for k in kernel_names:
            try:
                int8 = self._int8_weight_kernel(node, dname, implmode) if k in ("matmul", "gemm") else None
                if int8 is not None:
                    kernels[k] = int8[1]
                    chosen.append(f"int8_weight_gemm:{int8[0].name}")
                    continue
                device = None if k in p.variants else self._device_variant(node, k, dname, implmode)
                if k == "conv2d" and self._winograd_applies(node) and \
                        get_kernel("conv2d_winograd").variant(p.winograd).dtype == dname:
                    v = get_kernel("conv2d_winograd").variant(p.winograd)
                elif device is not None:
                    v = device
                else:
                    # an op the device has no implmode for ranks as high_precision here (its kernels are the
                    # accurate ones on the device: docs/DEVICE_KERNELS.md)
                    v = select_variant(get_kernel(k), dname, "high_precision" if implmode == "none" else implmode,
                                       cube=cube, cube_acc=p.cube_accumulation, override=p.variants.get(k))
            except KeyError as exc:
                raise KernelUnavailable(str(exc).strip('"')) from None
            kernels[k] = v.fn
            chosen.append(f"{k}:{v.name}")
            if k == operand_kernel:
                staged = v.staged_f32_operands
        compress = None
        if p.int4_intermediates and dtype != np.float32 and not foldable:
            try:
                v4 = select_variant(get_kernel("bitpack4"), dname, implmode, cube=False,
                                    cube_acc=p.cube_accumulation, override=p.variants.get("bitpack4"))
            except KeyError as exc:
                raise KernelUnavailable(str(exc).strip('"')) from None
            compress = v4.fn
            chosen.append(f"bitpack4:{v4.name}")
        keep_casts = p.precision_mode == "must_keep_origin_dtype" or foldable
        return NodeContext(node=node, opset=opset, dtype=dtype, implmode=implmode, kernels=kernels, staged_f32=staged,
                           cast_float=(lambda t: t) if keep_casts else (lambda t, d=dtype: d),
                           saturate=p.overflow_mode == "saturation" and not foldable, compress=compress,
                           description=("host-folded " if foldable else "") + f"{dname} {implmode} " + " ".join(chosen))
