"""The op table itself: OpSpec, the OPS dict keyed by op type, and the `register` decorator the op modules use
(a leaf module, so that the op modules never import the package that imports them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import onnx
from onnx import helper, numpy_helper

OpFn = Callable[..., Any]
# (node, constant shapes by name) -> how the op calls a substitute kernel (its callable -> the callable that takes
# the replaced kernel's arguments), or None where the node is outside the substitute's domain (OpSpec.substitutes)
SubstituteFn = Callable[[onnx.NodeProto, Mapping[str, tuple]], Optional[Callable[[OpFn], OpFn]]]
# The domain of the fused device ops (Ascend IR op types) that mschecker.npu.fusion writes into a graph.
DEVICE_DOMAIN = "mschecker.device"


@dataclass(frozen=True)
class OpSpec:
    """How the executor runs one op type."""

    op_type: str
    fn: OpFn
    # Registry kernels the node calls: a tuple, or a function of (attrs, opset) for attribute-dependent choices.
    kernels: tuple[str, ...] | Callable[[Mapping[str, Any], int], tuple[str, ...]] = ()
    cube: bool = False  # a matrix-unit op (MatMul, Gemm, Conv, ConvTranspose, Attention, Einsum)
    exact_inputs: tuple[int, ...] = ()  # float inputs that are shape-like (Resize scales): never rounded
    # The kernel that receives node input k as its positional operand k (so that kernel variant's
    # staged_f32_operands name node input positions the executor may stage in fp32 at plan time).
    operands_in_node_order: str | None = None
    convert_inputs: bool = True  # False: inputs reach the op untouched (Shape, Cast, Identity-like ops)
    keeps_output_dtype: bool = False  # the op decides its float output dtype itself (Cast, CastLike)
    # fn also takes `out=`, one of its input arrays (that object): the executor offers it only when that input dies
    # at this node and no other name or array can see its memory, and fn may return its result in it (in place)
    reuses_input: bool = False
    # Returns a reason string when an attribute combination is not supported (checked before running).
    check: Callable[[Mapping[str, Any], onnx.NodeProto, int], str | None] | None = None
    min_opset: int = 1
    # Registry kernels a policy may run in place of one of the op's own (KernelInfo.substitutes names which one):
    # substitute kernel name -> SubstituteFn. The op knows its attributes and operands; the policy only asks.
    substitutes: Mapping[str, SubstituteFn] = field(default_factory=dict)

    def kernel_names(self, attrs: Mapping[str, Any], opset: int) -> tuple[str, ...]:
        return tuple(self.kernels(attrs, opset)) if callable(self.kernels) else tuple(self.kernels)


OPS: dict[str, OpSpec] = {}


def same_call(fn: OpFn) -> OpFn:
    """A substitute called exactly as the kernel it replaces (OpSpec.substitutes)."""
    return fn


def register(op_type: str, **options) -> Callable[[OpFn], OpFn]:
    """Decorator: register `fn` as the implementation of `op_type` (several names may share one fn)."""

    def deco(fn: OpFn) -> OpFn:
        if op_type in OPS:
            raise ValueError(f"op {op_type!r} is registered twice")
        OPS[op_type] = OpSpec(op_type, fn, **options)
        return fn

    return deco


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """Node attributes as python values (strings decoded, tensors as numpy arrays)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.ref_attr_name:
            continue
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8")
        elif isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [s.decode("utf-8") for s in v]
        out[a.name] = v
    return out
