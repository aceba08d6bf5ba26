"""The table of ONNX ops the executor implements: one OpSpec per op type, one obvious place per op.

Like onnx.reference's op classes, keyed by op type, but an implementation receives a NodeContext from the policy
(the node's dtype and its bound kernels), so the same code serves the float64 reference and the emulated NPU.
An implementation is `fn(ctx, attrs, *inputs) -> array | tuple of arrays`; absent optional inputs are None. It
runs inside the executor's np.errstate(all="ignore") (Executor.run and run_node, the only callers): inf/NaN are
values, not warnings, and the implementations do not pay for an errstate of their own per node.
Modules: elementwise.py (numpy in the node's dtype), compute.py (registry kernels: matmul, conv, norms, ...),
tensor.py (shape/index ops), pointwise.py (Elu, Softplus, HardSigmoid, PRelu, ReduceProd, ... through registry
kernels), onnx_reference.py (ops delegated to onnx.reference where ONNX semantics are fiddly), device.py (the fused
device ops of GE's fusion passes, keyed `mschecker.device::<IR type>`: mschecker/npu/fusion.py);
table.py holds the table itself (OpSpec, register), a leaf the op modules import.
"""
from __future__ import annotations

from mschecker.graph.ops.table import DEVICE_DOMAIN, OPS, OpFn, OpSpec, attribute_values, register

__all__ = ["OPS", "OpFn", "OpSpec", "attribute_values", "device_ops", "lookup", "register", "supported_ops"]



def _load_all() -> None:
    # lazy: start-up (scipy, mschecker._fastref, mschecker.reference)
    from mschecker.graph.ops import compute, device, elementwise, onnx_reference, pointwise, tensor  # noqa: F401  (they register)


def supported_ops() -> list[str]:
    """The ONNX op types (default domain) the executor implements."""
    _load_all()
    return sorted(k for k in OPS if "::" not in k)


def device_ops() -> list[str]:
    """The fused device op types (Ascend IR op types of the `mschecker.device` domain) the executor implements."""
    _load_all()
    prefix = DEVICE_DOMAIN + "::"
    return sorted(k[len(prefix):] for k in OPS if k.startswith(prefix))


def lookup(op_type: str, domain: str = "") -> OpSpec | None:
    """The op of `domain` (the default ONNX domain, or mschecker.device for fused device ops); None if unknown."""
    _load_all()
    if domain in ("", "ai.onnx"):
        return OPS.get(op_type) if "::" not in op_type else None
    return OPS.get(f"{domain}::{op_type}") if domain == DEVICE_DOMAIN else None
