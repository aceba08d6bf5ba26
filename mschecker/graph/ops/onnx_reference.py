"""Ops delegated to onnx.reference (onnx's own operator implementations) where exact ONNX semantics are fiddly.

These are shape/index and small vector ops whose value is exact or a single rounding (Slice, Pad, GatherND, ...);
the inputs reach them already in the node's dtype and the executor rounds their outputs like any other node.
The onnx.reference op object is built once per node (its attributes are parsed then) and cached on the context.
"""
from __future__ import annotations

from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import load_op

from mschecker.graph.ops.table import register

DELEGATED = (
    # issue 4's list (Slice and Trilu are written out in tensor.py: per-node Python cost on every attention mask)
    "GatherND", "Pad",
    # common neighbours whose ONNX semantics onnx.reference already gets right
    "ArgMin", "DepthToSpace", "GatherElements", "Mod", "NonZero", "OneHot", "ReduceMax", "ReduceMin", "Round",
    "ScatterElements", "ScatterND", "SpaceToDepth", "TopK",
)
# (Elu, HardSigmoid, HardSwish, PRelu, Softplus and ReduceProd compute in floating point: they run registry
# kernels, pointwise.py, so that the policy's dtype, implmode and contracts apply to them.)


def run_onnx_reference(ctx, *inputs):
    """Run the node with onnx.reference's implementation for the model's opset."""
    impl = ctx.state.get("onnx_reference")
    if impl is None:
        cls = load_op("", ctx.node.op_type, ctx.opset, evaluator_cls=ReferenceEvaluator)
        params = {"log": lambda *a: None, "opsets": {"": ctx.opset}, "verbose": 0, "new_ops": {},
                  "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}
        impl = ctx.state["onnx_reference"] = cls(ctx.node, params)
    # trailing absent optional inputs are dropped, inner ones passed as None (onnx.reference's convention)
    args = list(inputs)
    while args and args[-1] is None:
        args.pop()
    out = impl.run(*args)
    return out if isinstance(out, tuple) else (out,)


def _delegate(op_type: str) -> None:
    exact = (1, 2, 3) if op_type == "Pad" else ()
    register(op_type, exact_inputs=exact)(lambda ctx, attrs, *inputs: run_onnx_reference(ctx, *inputs))


for _op in DELEGATED:
    _delegate(_op)
