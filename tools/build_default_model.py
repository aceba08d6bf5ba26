"""Regenerate golden/default: a small deterministic ONNX model, its msame-style inputs and onnxruntime goldens.

    python tools/build_default_model.py [--out golden/default] [--update]

The model (opset 17, about 330 fp32 weights) touches the op families the project checks: a strided 3x3 Conv, a
broadcast Add of a per-channel embedding (input `t`, like a diffusion timestep embedding), Reshape/Transpose to
tokens, LayerNormalization, an erf-GELU written out as ONNX opset-17 ops, MatMul + bias, ReduceMean over tokens and
Softmax. Two inputs (x: 1x3x16x16, t: 1x8) exercise msame's comma list; two outputs (logits, probs) exercise
output matching. Weights and inputs come from a fixed seed, so the model and input bytes are reproducible; the
goldens are whatever onnxruntime computes and are written through mschecker.tensors.golden_store (refused without --update).
Tests never run this on the committed files.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240917
OPSET, IR_VERSION = 17, 8


def build_model(rng: np.random.Generator) -> onnx.ModelProto:
    c_in, c, classes = 3, 8, 10
    w1 = (rng.standard_normal((c, c_in, 3, 3)) / np.sqrt(c_in * 9)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(c)).astype(np.float32)
    gamma = (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(c)).astype(np.float32)
    w2 = (rng.standard_normal((c, classes)) / np.sqrt(c)).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(classes)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in (
        (w1, "conv.w"), (b1, "conv.b"), (gamma, "ln.scale"), (beta, "ln.bias"), (w2, "head.w"), (b2, "head.b"),
        (np.array([1, c, 1, 1], np.int64), "t.shape"), (np.array([1, c, -1], np.int64), "tokens.shape"),
        (np.array(1 / np.sqrt(2), np.float32), "gelu.inv_sqrt2"), (np.array(1.0, np.float32), "gelu.one"),
        (np.array(0.5, np.float32), "gelu.half"))]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["conv"], name="conv", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Reshape", ["t", "t.shape"], ["t4"], name="t_reshape"),
        helper.make_node("Add", ["conv", "t4"], ["h"], name="add_t"),
        helper.make_node("Reshape", ["h", "tokens.shape"], ["h3"], name="to_tokens"),
        helper.make_node("Transpose", ["h3"], ["tok"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("LayerNormalization", ["tok", "ln.scale", "ln.bias"], ["ln"], name="ln", axis=-1,
                         epsilon=1e-5),
        # GELU(x) = 0.5 x (1 + erf(x / sqrt 2)): opset 17 has no Gelu op.
        helper.make_node("Mul", ["ln", "gelu.inv_sqrt2"], ["g0"], name="gelu_scale"),
        helper.make_node("Erf", ["g0"], ["g1"], name="gelu_erf"),
        helper.make_node("Add", ["g1", "gelu.one"], ["g2"], name="gelu_add"),
        helper.make_node("Mul", ["ln", "g2"], ["g3"], name="gelu_mul"),
        helper.make_node("Mul", ["g3", "gelu.half"], ["gelu"], name="gelu_half"),
        helper.make_node("MatMul", ["gelu", "head.w"], ["mm"], name="head_matmul"),
        helper.make_node("Add", ["mm", "head.b"], ["head"], name="head_bias"),
        helper.make_node("ReduceMean", ["head"], ["logits"], name="pool", axes=[1], keepdims=0),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "mschecker_default",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, 16, 16]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, c])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="mschecker", opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION)
    onnx.checker.check_model(model, full_check=True)
    return model


def build_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32),
            "t": rng.standard_normal((1, 8)).astype(np.float32)}


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    from mschecker.commands.demo import GOLDEN, INPUTS, MODEL
    from mschecker.modelcheck.check import record_goldens
    from mschecker.fsio import atomic_write_bytes
    from mschecker.tensors.io import write_tensor

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "golden" / "default"))
    p.add_argument("--update", action="store_true", help="replace existing goldens")
    args = p.parse_args(argv)
    out = Path(args.out)
    if (out / GOLDEN).exists() and not args.update:
        print(f"build_default_model: error: {out / GOLDEN} exists; pass --update to replace it", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    model = build_model(rng)
    atomic_write_bytes(out / MODEL, model.SerializeToString())
    inputs = build_inputs(rng)
    for file, (name, arr) in zip(INPUTS, inputs.items()):
        write_tensor(out / file, arr)  # raw little-endian + <file>.json sidecar, as msame users ship them
    from mschecker.commands.golden import DEFAULT_FP32_HINT

    manifest, diff = record_goldens(out / MODEL, ",".join(str(out / f) for f in INPUTS), out / GOLDEN,
                                       tolerance=dict(DEFAULT_FP32_HINT), update=args.update)
    manifest_extra = manifest["extra"]
    print(f"wrote {out}: model sha256 {manifest_extra['model_sha256'][:12]}, outputs {', '.join(manifest['tensors'])}")
    if args.update:
        print("changes: " + ("; ".join(diff) if diff else "none"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # InputError (e.g. goldens exist, no --update): one line, like the CLI
        if type(exc).__name__ != "InputError":
            raise
        print(f"build_default_model: error: {exc}", file=sys.stderr)
        sys.exit(2)
