"""Small ONNX models with planted precision faults, for the bisection tests (built in memory, seeded)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, opset=20) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "planted", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def gelu_branches(n: int = 3, d: int = 64, rows: int = 8) -> onnx.ModelProto:
    """n branches MatMul -> Gelu, each its own output: every Gelu's error reaches an output on its own, so the
    fix must cover all of them (and, covering every Gelu, is written as one op-type entry)."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for i in range(n):
        w = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"proj{i}"))
        nodes.append(helper.make_node("Gelu", [f"m{i}"], [f"y{i}"], name=f"gelu{i}"))
        outs.append(_f32(f"y{i}", (rows, d)))
    return _model(nodes, [_f32("x", (rows, d))], outs, inits)


def layernorm_pair(d: int = 256, rows: int = 4, big: float = 400.0) -> onnx.ModelProto:
    """Two LayerNorms: `ln_big` normalizes activations of magnitude ~`big` (sum of squares over d elements far
    above fp16's 65504: fp16 statistics overflow, the output collapses to beta), `ln_small` values of
    magnitude ~1 (fp16 statistics are fine there)."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(np.full((d,), big, np.float32), "scale_up"),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(d)).astype(np.float32), "gamma"),
             numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "beta")]
    nodes = [helper.make_node("Mul", ["x", "scale_up"], ["x_big"], name="scale_up"),
             helper.make_node("LayerNormalization", ["x_big", "gamma", "beta"], ["y_big"], name="ln_big", axis=-1),
             helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["y_small"], name="ln_small", axis=-1)]
    return _model(nodes, [_f32("x", (rows, d))], [_f32("y_big", (rows, d)), _f32("y_small", (rows, d))], inits)


def deep_chain(layers: int = 48, d: int = 32, rows: int = 16) -> onnx.ModelProto:
    """A deep chain of MatMuls by random orthogonal matrices (norm-preserving): every layer adds about one fp16
    rounding, none stands out, and the error grows with depth until it crosses the tolerance."""
    rng = np.random.default_rng(2)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        inits.append(numpy_helper.from_array(q.astype(np.float32), f"q{i}"))
        out = "y" if i == layers - 1 else f"h{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"q{i}"], [out], name=f"layer{i}"))
        prev = out
    return _model(nodes, [_f32("x", (rows, d))], [_f32("y", (rows, d))], inits)


def tiny_mlp(d: int = 16, rows: int = 4, name_prefix: str = "") -> onnx.ModelProto:
    """MatMul -> Add -> Relu -> MatMul: healthy in fp16 at a tolerance of 1e-2."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), "w1"),
             numpy_helper.from_array((0.1 * rng.standard_normal(d)).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32), "w2")]
    p = name_prefix
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name=f"{p}fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name=f"{p}bias"),
             helper.make_node("Relu", ["hb"], ["r"], name=f"{p}act"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name=f"{p}fc2")]
    return _model(nodes, [_f32("x", (rows, d))], [_f32("y", (rows, d))], inits)


def overflowing_product(d: int = 16, rows: int = 4) -> onnx.ModelProto:
    """x * 4000 -> * 1/4000: the intermediate (|x| ~ 30 * 4000 = 1.2e5) overflows fp16 although the output is
    back in range: an inf inside (clamped to 65504 in saturation mode) that only a headroom check sees."""
    inits = [numpy_helper.from_array(np.array(4000.0, np.float32), "up"),
             numpy_helper.from_array(np.array(1 / 4000.0, np.float32), "down")]
    nodes = [helper.make_node("Mul", ["x", "up"], ["big"], name="blow_up"),
             helper.make_node("Mul", ["big", "down"], ["y"], name="scale_back")]
    return _model(nodes, [_f32("x", (rows, d))], [_f32("y", (rows, d))], inits)


def feeds(model: onnx.ModelProto, seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (scale * rng.standard_normal(shape)).astype(np.float32)
    return out


# ------------------------------------------------------------------ hazards a device profile really has
# In the forms the exporters write, so that GE's fusion passes (mschecker/npu/fusion.py) fuse them as on the device:
# the erf GELU into `<Mul_1 name>/Gelu`, the GroupNorm chain into `<Mul name>/GroupNorm`.
def device_gelu_branches(n: int = 3, d: int = 64, rows: int = 8) -> onnx.ModelProto:
    """n branches MatMul -> erf GELU (TorchScript form), each its own output. On a device profile each GELU is one
    fused `/act{i}/Mul_1/Gelu`; under --op-precision Gelu=high_performance it runs the fp16 i-GELU (up to 1.8e-2
    from erf GELU), which the tanh form of its high_precision path fixes."""
    from ..npu import fusion_graphs as FG

    rng = np.random.default_rng(0)
    g = FG.G((rows, d))
    outs = []
    for i in range(n):
        w = g.const(rng.standard_normal((d, d)) / np.sqrt(d), f"w{i}")
        outs.append(FG.gelu(g, g.op("MatMul", ["x", w], f"/proj{i}/MatMul"), prefix=f"/act{i}"))
    return g.model(*outs)


def device_group_norm_overflow(scale: float = 3e4, gamma: float = 1.0) -> onnx.ModelProto:
    """x * `scale` -> GroupNorm (TorchScript's Reshape -> InstanceNormalization -> Reshape -> Mul -> Add, fused on a
    device profile into `/norm/Mul/GroupNorm`). With |x| ~ 1 and scale 3e4 the product passes 65504 in fp16: inf
    (IEEE) feeds the GroupNorm, whose fp32 statistics cannot help -- the output is NaN -- or 65504 (saturation)
    and a wrong normalization. Of the ATC moves only an fp32 island over both nodes fixes it; the exact rescale
    (bisect.rescale: the constant 3e4 times 2^-k) fixes it too, so tests of the moves pass rescale=False.
    `gamma` scales the GroupNorm's weight (its output, the graph output, then passes 65504 itself: no rescale)."""
    from ..npu import fusion_graphs as FG

    g = FG.G((1, 8, 4, 4))
    y = FG.group_norm(g, g.op("Mul", ["x", g.const(np.float32(scale), "up")], "/scale_up/Mul"), prefix="/norm")
    for i, t in enumerate(g.inits):
        if t.name == "/norm.weight":
            g.inits[i] = numpy_helper.from_array(numpy_helper.to_array(t) * np.float32(gamma), t.name)
    return g.model(y)
