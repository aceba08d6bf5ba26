"""Small ONNX graphs in the forms the exporters write, for the fusion pass tests (tests/npu/test_fusion*.py)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


class G:
    """A graph under construction: nodes, initializers, one float input x (shape given), outputs chosen."""

    def __init__(self, shape, opset: int = 17, inputs: dict | None = None):
        self.nodes, self.inits = [], []
        self.inputs = [helper.make_tensor_value_info("x", F, list(shape))]
        for name, s in (inputs or {}).items():
            self.inputs.append(helper.make_tensor_value_info(name, F, list(s)))
        self.opset = opset
        self._k = 0

    def const(self, value, name=None, dtype=np.float32) -> str:
        self._k += 1
        name = name or f"c{self._k}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def constant_node(self, value, name=None, dtype=np.float32) -> str:
        """A Constant node (the TorchScript exporter's form) instead of an initializer (dynamo's)."""
        self._k += 1
        out = f"k{self._k}"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name or f"/Constant_{self._k}",
                                           value=numpy_helper.from_array(np.asarray(value, dtype=dtype))))
        return out

    def op(self, op_type, inputs, name, n_out: int = 1, **attrs):
        outs = [f"{name}_out{k}" if n_out > 1 else f"{name}_out" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs if n_out > 1 else outs[0]

    def model(self, *outputs) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, F, None) for o in outputs]
        g = helper.make_graph(self.nodes, "g", self.inputs, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])
        m.ir_version = 8
        return m


# ----------------------------------------------------------------------------------------------- the chains
def group_norm(g: G, x="x", *, groups=4, channels=8, prefix="/norm", in_scale=1.0, commute_mul=False,
               constant_nodes=True, gamma_shape=None):
    """TorchScript's GroupNorm: Reshape(x, [0, G, -1]) -> InstanceNorm(ones, zeros) -> Reshape(Shape(x)) ->
    Mul(gamma) -> Add(beta). Returns the output tensor."""
    c = g.constant_node if constant_nodes else g.const
    shape = c(np.array([0, groups, -1]), dtype=np.int64)
    r1 = g.op("Reshape", [x, shape], f"{prefix}/Reshape")
    inn = g.op("InstanceNormalization", [r1, c(np.full(groups, in_scale)), c(np.zeros(groups))],
               f"{prefix}/InstanceNormalization", epsilon=1e-5)
    sh = g.op("Shape", [x], f"{prefix}/Shape")
    r2 = g.op("Reshape", [inn, sh], f"{prefix}/Reshape_1")
    rng = np.random.default_rng(1)
    gshape = gamma_shape or (channels, 1, 1)
    gamma = g.const(1 + 0.1 * rng.standard_normal(gshape), f"{prefix}.weight")
    beta = g.const(0.1 * rng.standard_normal((channels, 1, 1)), f"{prefix}.bias")
    mul = g.op("Mul", [gamma, r2] if commute_mul else [r2, gamma], f"{prefix}/Mul")
    return g.op("Add", [mul, beta], f"{prefix}/Add")


def gelu(g: G, x="x", *, prefix="/act", form="ts", div=1.4142135381698608, add=1.0, half=0.5, factor=None):
    """The erf GELU as exporters write it. form "ts": Div(x, c) -> Erf -> Add(1) -> Mul(x, .) -> Mul(., 0.5);
    "mul0": Mul(x, 0.5) -> Mul(., Add) (pattern 1); "dynamo": Mul(0.5, Add) -> Mul(x, .); "sqrt_half":
    Mul(x, 0.7071) -> Erf (no RealDiv: not GE's pattern). `factor` replaces the multiplied x."""
    f = factor or x
    if form == "sqrt_half":
        d = g.op("Mul", [x, g.const(np.float32(1 / np.sqrt(2)))], f"{prefix}/Mul_sqrt")
    else:
        d = g.op("Div", [x, g.constant_node(np.float32(div))], f"{prefix}/Div")
    e = g.op("Erf", [d], f"{prefix}/Erf")
    a = g.op("Add", [e, g.constant_node(np.float32(add))], f"{prefix}/Add")
    if form in ("ts", "sqrt_half"):
        m0 = g.op("Mul", [f, a], f"{prefix}/Mul")
        return g.op("Mul", [m0, g.constant_node(np.float32(half))], f"{prefix}/Mul_1")
    if form == "mul0":
        m0 = g.op("Mul", [f, g.constant_node(np.float32(half))], f"{prefix}/Mul")
        return g.op("Mul", [m0, a], f"{prefix}/Mul_1")
    m0 = g.op("Mul", [g.const(np.float32(half)), a], f"{prefix}/Mul")
    return g.op("Mul", [f, m0], f"{prefix}/Mul_1")


def layer_norm(g: G, x="x", *, dim=8, prefix="/ln", pow_exp=2.0, eps=1e-5, keepdims=1, cast=False, affine=True,
               gamma_shape=None, axes=(-1,)):
    """The opset < 17 LayerNorm decomposition (LayerNormONNXFusionPass's case 1-4)."""
    m0 = g.op("ReduceMean", [x], f"{prefix}/ReduceMean", axes=list(axes), keepdims=keepdims)
    s = g.op("Sub", [x, m0], f"{prefix}/Sub")
    src = g.op("Cast", [s], f"{prefix}/Cast", to=TensorProto.FLOAT) if cast else s
    p = g.op("Pow", [src, g.constant_node(np.float32(pow_exp))], f"{prefix}/Pow")
    m1 = g.op("ReduceMean", [p], f"{prefix}/ReduceMean_1", axes=list(axes), keepdims=1)
    a = g.op("Add", [m1, g.constant_node(np.float32(eps))], f"{prefix}/Add")
    q = g.op("Sqrt", [a], f"{prefix}/Sqrt")
    d = g.op("Div", [s, q], f"{prefix}/Div")
    if not affine:
        return d
    rng = np.random.default_rng(2)
    gamma = g.const(1 + 0.1 * rng.standard_normal(gamma_shape or (dim,)), f"{prefix}.weight")
    beta = g.const(0.1 * rng.standard_normal((dim,)), f"{prefix}.bias")
    m = g.op("Mul", [d, gamma], f"{prefix}/Mul")
    return g.op("Add", [m, beta], f"{prefix}/Add_1")


def layer_norm_mul(g: G, x="x", *, dim=8, prefix="/lnm", square="Mul", gamma_first=True):
    """LayerNormONNXMULFusionPass's form: the centring Sub twice, the square as Mul(sub1, sub1) or Pow."""
    m0 = g.op("ReduceMean", [x], f"{prefix}/ReduceMean", axes=[-1], keepdims=1)
    s0 = g.op("Sub", [x, m0], f"{prefix}/Sub")
    s1 = g.op("Sub", [x, m0], f"{prefix}/Sub_1")
    sq = g.op("Mul", [s1, s1], f"{prefix}/Mul_sq") if square == "Mul" else \
        g.op("Pow", [s1, g.const(np.float32(2.0))], f"{prefix}/Pow")
    m1 = g.op("ReduceMean", [sq], f"{prefix}/ReduceMean_1", axes=[-1], keepdims=1)
    a = g.op("Add", [m1, g.const(np.float32(1e-5))], f"{prefix}/Add")
    q = g.op("Sqrt", [a], f"{prefix}/Sqrt")
    d = g.op("Div", [s0, q], f"{prefix}/Div")
    rng = np.random.default_rng(3)
    gamma = g.const(1 + 0.1 * rng.standard_normal(dim), f"{prefix}.weight")
    m = g.op("Mul", [gamma, d] if gamma_first else [d, gamma], f"{prefix}/Mul")
    return g.op("Add", [m, g.const(0.1 * rng.standard_normal(dim), f"{prefix}.bias")], f"{prefix}/Add_1")


def linear(g: G, x="x", *, k=8, n=6, prefix="/fc", bias_shape=None, bias_first=False):
    """nn.Linear on a 3-D input: MatMul(x, W) then Add with the bias."""
    rng = np.random.default_rng(4)
    w = g.const(rng.standard_normal((k, n)) / np.sqrt(k), f"{prefix}.weight")
    mm = g.op("MatMul", [x, w], f"{prefix}/MatMul")
    b = g.const(rng.standard_normal(bias_shape or (n,)), f"{prefix}.bias")
    return g.op("Add", [b, mm] if bias_first else [mm, b], f"{prefix}/Add")


def attention(g: G, q="q", k="k", v="v", *, prefix="/attn1", scale=0.125, sdpa=False):
    """MatMul(q, k^T) -> Mul(scale) -> Softmax -> MatMul(v) (diffusers), or the SDPA export's Mul(q, sqrt(scale)),
    Mul(k^T, sqrt(scale)) -> MatMul -> Softmax -> MatMul."""
    kt = g.op("Transpose", [k], f"{prefix}/Transpose", perm=[0, 1, 3, 2])
    if sdpa:
        s = np.float32(np.sqrt(scale))
        qs = g.op("Mul", [q, g.const(s)], f"{prefix}/Mul")
        ks = g.op("Mul", [kt, g.const(s)], f"{prefix}/Mul_1")
        scores = g.op("MatMul", [qs, ks], f"{prefix}/MatMul")
    else:
        mm = g.op("MatMul", [q, kt], f"{prefix}/MatMul")
        scores = g.op("Mul", [mm, g.const(np.float32(scale))], f"{prefix}/Mul")
    p = g.op("Softmax", [scores], f"{prefix}/Softmax", axis=-1)
    return g.op("MatMul", [p, v], f"{prefix}/MatMul_1")
