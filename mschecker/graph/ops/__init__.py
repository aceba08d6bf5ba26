"""The table of ONNX ops the executor implements: one OpSpec per op type, one obvious place per op.

Like onnx.reference's op classes, keyed by op type, but an implementation receives a NodeContext from the policy
(the node's dtype and its bound kernels), so the same code serves the float64 reference and the emulated NPU.
An implementation is `fn(ctx, attrs, *inputs) -> array | tuple of arrays`; absent optional inputs are None. It
runs inside the executor's np.errstate(all="ignore") (Executor.run and run_node, the only callers): inf/NaN are
values, not warnings, and the implementations do not pay for an errstate of their own per node.
Modules: elementwise.py (numpy in the node's dtype), compute.py (registry kernels: matmul, conv, norms, ...),
tensor.py (shape/index ops), pointwise.py (Elu, Softplus, HardSigmoid, PRelu, ReduceProd, ... through registry
kernels), onnx_reference.py (ops delegated to onnx.reference where ONNX semantics are fiddly);
table.py holds the table itself (OpSpec, register), a leaf the op modules import.
"""
from __future__ import annotations

from .table import OPS, OpFn, OpSpec, attribute_values, register

__all__ = ["OPS", "OpFn", "OpSpec", "attribute_values", "lookup", "register", "supported_ops"]


def _load_all() -> None:
    from . import compute, elementwise, onnx_reference, pointwise, tensor  # noqa: F401  (they register on import)


def supported_ops() -> list[str]:
    _load_all()
    return sorted(OPS)


def lookup(op_type: str) -> OpSpec | None:
    _load_all()
    return OPS.get(op_type)
