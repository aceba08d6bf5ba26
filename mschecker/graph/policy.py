"""Policies: per node, which implementation and which dtype. The executor asks; the policy answers.

The executor is one loop; a policy turns it into a float64 reference run (ReferencePolicy, here) or an emulated
NPU run (mschecker.npu.policy.NpuPolicy). A policy binds every node once, before running, to a NodeContext:
the float dtype the node computes and stores in, and the kernel callables it uses. Binding is where a missing
kernel or variant is found, so a run never starts with a hole in it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx

from mschecker.dtypes import float_format, is_float
from mschecker.fastfp16 import to_f16, to_f32

_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


def convert_float(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """x.astype(dtype), bit for bit; fp32 <-> fp16 through the fast conversions of fastfp16."""
    if dtype == _F16 and x.dtype == _F32:
        return to_f16(x)
    if dtype == _F32 and x.dtype == _F16:
        return to_f32(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dtype)


class KernelUnavailable(Exception):
    """A node needs a registry kernel (or variant) that does not exist: reported with the node at plan time."""


@dataclass
class NodeContext:
    """What an op implementation needs from the policy for one node."""

    node: onnx.NodeProto
    opset: int
    dtype: np.dtype  # float dtype of the node's float inputs, arithmetic and float outputs
    implmode: str = "high_precision"
    kernels: dict[str, Callable] = field(default_factory=dict)
    # Cast: the dtype a Cast to float type `t` produces (the policy's rule, see cast_float_target).
    cast_float: Callable[[np.dtype], np.dtype] | None = None
    saturate: bool = False  # clamp +-inf to +-max and NaN to 0 after the node (saturation overflow mode)
    # lossy storage of float outputs (4-bit compressed intermediates): value -> value as read back
    compress: Callable[[np.ndarray], np.ndarray] | None = None
    state: dict = field(default_factory=dict)  # per-node cache an op may keep (e.g. a delegated op object)
    # node input positions whose kernel takes a constant operand staged as float32 holding ctx.dtype values
    # (Variant.staged_f32_operands): the executor stages such initializers once at plan time and skips their
    # per-run rounding; other inputs at these positions are rounded to ctx.dtype as usual
    staged_f32: tuple[int, ...] = ()
    description: str = ""  # human summary (dtype, variants) for logs and reports

    def kernel(self, name: str) -> Callable:
        try:
            return self.kernels[name]
        except KeyError:
            raise KernelUnavailable(f"node {self.node.name!r} ({self.node.op_type}) asked for kernel {name!r} "
                                    "that was not bound at plan time") from None

    def cast_target(self, target: np.dtype) -> np.dtype:
        if is_float(target) and self.cast_float is not None:
            return self.cast_float(np.dtype(target))
        return np.dtype(target)


class Policy:
    """Base: subclasses implement bind(); finish() applies the dtype and overflow rule to a node's outputs."""

    name = "policy"

    def transform(self, model):
        """The graph this policy runs, from the model as loaded (a LoadedModel): the model itself, or a rewritten
        copy (the emulated NPU's device profiles apply the compiler's fusion passes)."""
        return model

    def prepare(self, initializers) -> None:
        """Called once before planning with the model's initializers (name -> array); policies that treat
        constant operands specially (int8 weight-only quantization) look at them here."""

    def bind(self, node: onnx.NodeProto, opset: int, kernel_names: list[str], cube: bool, *,
             foldable: bool = False, operand_kernel: str | None = None) -> NodeContext:  # pragma: no cover
        """The node's context. `foldable`: the node's values do not depend on any graph input's values (only on
        initializers and tensor shapes), so a compiler folds it to a constant before the device runs.
        `operand_kernel`: the op table's OpSpec.operands_in_node_order (whose variant may take staged operands)."""
        raise NotImplementedError

    def input_dtype(self, dtype: np.dtype) -> np.dtype:
        """The dtype a graph input or constant of float dtype `dtype` enters the run in."""
        raise NotImplementedError

    def finish_only_rounds(self, ctx: NodeContext) -> bool:
        """True when finish() for this node does nothing but round float outputs to ctx.dtype (keep_dtype: not
        even that), so the executor may do it inline; decided once per node at plan time. A subclass that
        overrides finish() is never inlined."""
        return type(self).finish is Policy.finish and ctx.compress is None and not ctx.saturate

    def finish(self, ctx: NodeContext, value: np.ndarray, keep_dtype: bool = False) -> np.ndarray:
        """Round a float output to the node's dtype (unless the op fixed its own, e.g. Cast), then saturate."""
        if not isinstance(value, np.ndarray) or not is_float(value.dtype):
            return value
        if not keep_dtype and value.dtype != ctx.dtype:
            value = convert_float(value, ctx.dtype)
        if ctx.compress is not None:
            value = ctx.compress(value)
        if ctx.saturate:
            value = saturate(value)
        return value


def saturate(value: np.ndarray) -> np.ndarray:
    """Saturation overflow mode: +-inf -> +-max of the dtype, NaN -> 0 (docs/NUMERICS.md §7)."""
    big = float_format(value.dtype).max
    bad = ~np.isfinite(value)
    if not bad.any():
        return value
    out = np.array(value, copy=True)
    fixed = np.nan_to_num(out[bad].astype(np.float64), nan=0.0, posinf=big, neginf=-big)
    out[bad] = fixed.astype(out.dtype)
    return out


class ReferencePolicy(Policy):
    """Every floating tensor in float64, every compute op through the registry's float64 reference.

    The exact rule for dtypes:
    - graph inputs, initializers and Constant values of a float type (fp16, bf16, fp32, fp64) enter as float64
      (exactly: every one of those formats is a subset of float64);
    - every float output of every node is float64;
    - Cast / CastLike to a float type produce float64 *without rounding to the target type*: the reference
      computes the mathematical value the graph describes, and a cast to fp16 is a precision decision of the
      deployment, which is exactly what the comparison against this run measures;
    - Cast from float to an integer or bool type is exact ONNX semantics on the float64 value (truncation toward
      zero; bool is x != 0), and integer/bool tensors are never touched.
    """

    name = "reference"

    def __init__(self) -> None:
        from mschecker.kernels.registry import get_kernel  # lazy: start-up (mschecker.kernels)

        self._get_kernel = get_kernel

    def input_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float64) if is_float(dtype) else np.dtype(dtype)

    def bind(self, node, opset, kernel_names, cube, *, foldable=False, operand_kernel=None) -> NodeContext:
        kernels = {}
        for k in kernel_names:
            try:
                kernels[k] = self._get_kernel(k).reference
            except KeyError:
                raise KernelUnavailable(f"kernel {k!r} is not in the registry") from None
        return NodeContext(node=node, opset=opset, dtype=np.dtype(np.float64), kernels=kernels,
                           cast_float=lambda t: np.dtype(np.float64), description="float64 reference")
