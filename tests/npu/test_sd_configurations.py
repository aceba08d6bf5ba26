"""Stable Diffusion's own configurations, taken from the graphs themselves (the real diffusers/transformers exports
in tests/fixtures/real_sd/ and the bundled SD-1.5 preset), not from convenient values:

- GroupNorm with SD-1.5's 32 groups and the exports' group counts, at the exports' epsilons (1e-6 and 1e-5, as the
  fp32 attribute values), on inputs whose variance is of the order of epsilon (where a wrong epsilon shows);
- LayerNorm's default epsilon (1e-5, ONNX's and torch's default) when the attribute or argument is absent;
- attention rows whose keys are all masked inside one of flash attention's key blocks;
- the KL-calibrated int8 weight GEMM on SD's linear-layer shapes with an outlier channel;
- every Resize mode / coordinate transform the exporters emit, on the NPU and the reference policy;
- Cast to fp16 and bf16 inside the NPU policy (round to nearest even, overflow to inf, subnormals, NaN).
Each kernel case goes through check_case: the contract and the two-sided emulation check.
"""
from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from mschecker.dtypes import bfloat16
from mschecker.graph import Executor, ReferencePolicy
from mschecker.kernels.check import check_case
from mschecker.npu.policy import NpuPolicy
from mschecker.kernels.registry import Case, get_kernel
from mschecker.sd.presets import PRESETS

REAL_SD = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"


def _real_attributes() -> dict[str, set]:
    """Attribute values of the normalization, Resize and Cast nodes of every bundled real export."""
    seen: dict[str, set] = {"groups": set(), "norm_eps": set(), "ln_eps": set(), "resize": set(), "cast_to": set()}
    for path in sorted(glob.glob(str(REAL_SD / "*" / "model.onnx"))):
        for n in onnx.load(path, load_external_data=False).graph.node:
            attrs = {a.name: h.get_attribute_value(a) for a in n.attribute}
            if n.op_type == "GroupNormalization":
                seen["groups"].add(int(attrs["num_groups"]))
            if n.op_type in ("GroupNormalization", "InstanceNormalization"):
                seen["norm_eps"].add(float(attrs.get("epsilon", 1e-5)))
            if n.op_type == "LayerNormalization":
                seen["ln_eps"].add(float(attrs.get("epsilon", 1e-5)))
            if n.op_type == "Resize":
                seen["resize"].add(tuple(sorted((k, v.decode() if isinstance(v, bytes) else v)
                                                for k, v in attrs.items() if k in (
                                                    "mode", "coordinate_transformation_mode", "nearest_mode"))))
            if n.op_type == "Cast":
                seen["cast_to"].add(int(attrs["to"]))
    return seen


REAL = _real_attributes()
SD15_GROUPS = PRESETS["sd15"].unet.groups  # SD-1.5: 32 groups in the UNet and the VAE


def test_the_exports_were_read():
    assert REAL["groups"] and REAL["norm_eps"] and REAL["ln_eps"] and REAL["resize"], REAL
    assert SD15_GROUPS == 32


# ---------------------------------------------------------------------------------------------- GroupNorm
GROUP_CONFIGS = sorted({(g, eps) for g in REAL["groups"] | {SD15_GROUPS} for eps in REAL["norm_eps"]})


def _group_case(groups: int, eps: float, spread: float) -> Case:
    """(1, 2*groups, 6, 6): two channels per group; per-group std `spread` (spread^2 ~ eps makes eps matter) on an
    offset mean, fp16 values."""
    rng = np.random.default_rng(groups)
    c = 2 * groups
    x = (rng.standard_normal((1, c, 6, 6)) * spread + rng.uniform(-1, 1, (1, c, 1, 1))).astype(np.float16)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float16)
    bias = rng.uniform(-0.5, 0.5, c).astype(np.float16)
    return Case((x, scale, bias), {"num_groups": groups, "epsilon": eps}, f"{groups} groups eps {eps:g} std {spread:g}")


@pytest.mark.parametrize("groups,eps", GROUP_CONFIGS)
@pytest.mark.parametrize("spread", [1e-3, 1.0])
def test_group_norm_sd_configurations(groups, eps, spread):
    info = get_kernel("group_norm")
    case = _group_case(groups, eps, spread)
    for v in info.correct_variants:
        result = check_case(info, v, case)
        assert result.passed, result.describe()


@pytest.mark.parametrize("groups,eps", GROUP_CONFIGS)
def test_group_norm_wrong_epsilon_is_caught(groups, eps):
    """The same kernel run with 10x the graph's epsilon breaks the contract where the variance is ~eps."""
    info = get_kernel("group_norm")
    case = _group_case(groups, eps, 1e-3)
    v = info.variant("fp16_fp32stats_twopass")
    wrong = Case(case.inputs, {**case.params, "epsilon": eps * 10}, case.label)
    out = v.fn(*wrong.cast(v.dtype).inputs, **wrong.params)
    ref = info.reference(*(np.asarray(a, np.float64) for a in case.inputs), **case.params)
    bound = info.contract_of(v).bound(case.cast(v.dtype), ref, v)
    assert np.any(np.abs(out.astype(np.float64) - ref) > bound)


# ---------------------------------------------------------------------------------------------- LayerNorm
def test_layer_norm_default_epsilon_is_onnx_and_torch_default():
    """Every variant, the reference and the executor's LayerNormalization node without an epsilon use 1e-5 (the
    exports write it as the fp32 value 9.999999747e-06, which equals float32(1e-5))."""
    assert REAL["ln_eps"] == {float(np.float32(1e-5))}
    info = get_kernel("layer_norm")
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 77, 64)) * 3e-3 + 0.5).astype(np.float16)  # var ~ 1e-5: eps matters
    scale = np.ones(64, np.float16)
    for v in info.correct_variants:
        xs = Case((x, scale)).cast(v.dtype).inputs
        default, explicit = v.fn(*xs), v.fn(*xs, epsilon=1e-5)
        assert np.array_equal(np.asarray(default).view(np.uint8), np.asarray(explicit).view(np.uint8)), v.name
        assert not np.array_equal(default, v.fn(*xs, epsilon=1e-6)), v.name  # and epsilon does matter here
    x64 = x.astype(np.float64)
    assert np.array_equal(info.reference(x64, scale.astype(np.float64)),
                          info.reference(x64, scale.astype(np.float64), epsilon=1e-5))
    g = h.make_graph([h.make_node("LayerNormalization", ["x", "s"], ["y"], axis=-1)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 77, 64])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(np.ones(64, np.float32), "s")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    got = Executor(m, ReferencePolicy()).run({"x": x.astype(np.float32)})["y"]
    assert np.allclose(got, info.reference(x64, np.ones(64), epsilon=1e-5), rtol=1e-12, atol=0)
    assert not np.allclose(got, info.reference(x64, np.ones(64), epsilon=1e-6), rtol=1e-6, atol=0)


# ---------------------------------------------------------------------------------------------- attention
def _attention_masked_block_cases() -> list[Case]:
    """Rows whose keys are all masked inside one 64-key block of flash attention (and kept in others)."""
    rng = np.random.default_rng(77)
    q, k, v = (rng.standard_normal((2, 40, 40)).astype(np.float16) for _ in range(3))
    k2, v2 = (rng.standard_normal((2, 150, 40)).astype(np.float16) for _ in range(2))
    middle = np.ones((40, 150), bool)
    middle[:, 64:128] = False  # the whole second key block masked for every row
    additive = np.where(middle, 0.0, -np.inf).astype(np.float16)
    pad = np.zeros((2, 1, 150), bool)
    pad[..., :20] = True  # CLIP-style padding: blocks 2 and 3 entirely masked
    return [Case((q, k2, v2, middle), {}, "bool mask: key block 64-127 masked for every row"),
            Case((q, k2, v2, additive), {}, "additive -inf mask: key block 64-127 masked"),
            Case((q, k2, v2, pad), {}, "key padding: keys >= 20 masked (blocks 1-2 empty)"),
            Case((q, k, v), {"causal": True}, "causal, 40 x 40")]


@pytest.mark.parametrize("case", _attention_masked_block_cases(), ids=lambda c: c.label)
def test_attention_rows_with_a_fully_masked_block(case):
    info = get_kernel("attention")
    for v in info.correct_variants:
        result = check_case(info, v, case)
        assert result.passed, result.describe()


# --------------------------------------------------------------------------------------------- KL int8
@pytest.mark.parametrize("k,n", [(320, 320), (768, 320)])
def test_kl_int8_on_sd_linear_shapes(k, n):
    """SD's attention projections (320 wide; 768 for the cross-attention context) with heavy-tailed weights and one
    outlier channel: the KL calibration clips (threshold below max|w|) and the result meets its contract."""
    from mschecker.optimized_kernels.quant import kl_threshold

    rng = np.random.default_rng(k + n)
    w = (rng.standard_t(4, (k, n)) * 0.02).astype(np.float16)
    w[:, 3] *= 20  # an outlier channel
    x = rng.standard_normal((77, k)).astype(np.float16)
    assert kl_threshold(w) < np.max(np.abs(w.astype(np.float32)))
    info = get_kernel("int8_weight_gemm")
    for name in ("fp16_fp32acc_kl", "fp16_fp32acc_minmax"):
        result = check_case(info, name, Case((x, w), {}, f"SD linear {k}x{n}"))
        assert result.passed, result.describe()


# ----------------------------------------------------------------------------------------------- Resize
def _resize_model(attrs: dict) -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 5, 7])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("attrs", sorted(REAL["resize"]), ids=lambda a: ",".join(f"{k}={v}" for k, v in a))
def test_resize_modes_the_exporters_emit(attrs):
    """SD's 2x upsampling as exported, against onnx.reference, on both policies (nearest copies: exact)."""
    from onnx.reference import ReferenceEvaluator

    m = _resize_model(dict(attrs))
    x = np.random.default_rng(3).standard_normal((1, 4, 5, 7)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    ref = Executor(m, ReferencePolicy()).run({"x": x})["y"]
    assert np.array_equal(np.asarray(ref, np.float32), want)
    npu = Executor(m, NpuPolicy("ascend910b")).run({"x": x})["y"]
    assert npu.dtype == np.float16
    assert np.array_equal(npu, want.astype(np.float16))


# ------------------------------------------------------------------------------------------------- Cast
_CAST_VALUES = np.array([1.0, -2.5, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 65504.0,
                         65520.0, -65520.0, 1e6, 2.0 ** -24, 2.0 ** -25, 2.0 ** -26, 3 * 2.0 ** -26, 1e-40, -0.0,
                         np.inf, -np.inf, np.nan, 3.0e38], np.float32)


@pytest.mark.parametrize("to,dtype", [(T.FLOAT16, np.float16), (T.BFLOAT16, bfloat16)], ids=["fp16", "bf16"])
def test_cast_inside_the_npu_policy(to, dtype):
    """x -> Cast(to) -> Cast(float) under a profile that honours the graph's casts: round to nearest even (ties
    included), overflow to inf, subnormals kept, NaN kept; the values numpy/ml_dtypes give."""
    g = h.make_graph([h.make_node("Cast", ["x"], ["c"], to=to, name="down"),
                      h.make_node("Cast", ["c"], ["y"], to=T.FLOAT, name="up")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [_CAST_VALUES.size])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    with np.errstate(over="ignore"):
        want = _CAST_VALUES.astype(dtype).astype(np.float32)
    got = Executor(m, NpuPolicy("fp32")).run({"x": _CAST_VALUES})["y"]
    assert np.asarray(got).dtype == np.float32
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), list(zip(_CAST_VALUES[~same], got[~same], want[~same]))


@pytest.mark.parametrize("profile,dtype", [("bf16", bfloat16), ("ascend910b", np.float16)])
def test_npu_node_outputs_round_to_nearest_even(profile, dtype):
    """Every float node output is stored in the node dtype by the executor's conversion: round to nearest even
    (ties to even, overflow to inf, NaN kept), whichever route (fast fp16 cast or numpy/ml_dtypes) it takes. A
    Relu keeps its input's values, so the stored output is exactly the input rounded to the storage dtype."""
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [_CAST_VALUES.size])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    x = np.abs(_CAST_VALUES)
    got = Executor(m, NpuPolicy(profile)).run({"x": x})["y"]
    with np.errstate(over="ignore"):
        want = x.astype(dtype)
    assert str(np.asarray(got).dtype) == str(np.dtype(dtype))
    g64, w64 = np.asarray(got).astype(np.float64), want.astype(np.float64)
    assert ((g64 == w64) | (np.isnan(g64) & np.isnan(w64))).all(), list(zip(x, g64, w64))


@pytest.mark.parametrize("src", [np.float32, np.float64])
@pytest.mark.parametrize("dst", [np.float16, bfloat16, np.float32])
def test_executor_conversion_rounds_to_nearest_even(src, dst):
    """graph.policy.convert_float (every node input and output the executor rounds to a node dtype) gives
    astype's bits on every route: ties to even, overflow to inf, subnormals, -0 and NaN."""
    from mschecker.graph.policy import convert_float

    if np.dtype(src).itemsize <= np.dtype(dst).itemsize:
        pytest.skip("not a narrowing conversion")
    x = np.concatenate([_CAST_VALUES, -_CAST_VALUES]).astype(src)
    x = np.concatenate([x, np.random.default_rng(5).standard_normal(5000).astype(src)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dst)
    got = convert_float(x, np.dtype(dst))
    assert got.dtype == want.dtype
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    same = ((g64 == w64) & (np.signbit(g64) == np.signbit(w64))) | (np.isnan(g64) & np.isnan(w64))
    assert same.all(), list(zip(x[~same][:5], g64[~same][:5], w64[~same][:5]))


def test_int8_weight_only_gemm_keeps_alpha_beta_and_trans_b():
    """Linear layers exported as Gemm (transB=1, bias as C) under the int8 weight-only profile: the quantized
    kernel's result keeps alpha, beta*C and the transposed weight; error within alpha * (s/2) sum|x| (the
    round-to-nearest codes, s = max|w_n|/127), C's fp16 storage and the fp16 output rounding, as
    test_npu_policy's MatMul case derives it."""
    from mschecker.dtypes import unit_roundoff
    from mschecker.npu.profile import load_profile

    rng = np.random.default_rng(31)
    w = rng.standard_normal((16, 256)).astype(np.float32)  # (N, K): transB=1
    c = rng.standard_normal(16).astype(np.float32)
    alpha, beta = 0.5, 2.0
    g = h.make_graph([h.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=alpha, beta=beta, transB=1, name="fc")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 256])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(c, "c")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    x = rng.standard_normal((4, 256)).astype(np.float16).astype(np.float32)
    ref = Executor(m, ReferencePolicy()).run({"x": x})["y"]
    prof = load_profile("ascend910b").replace(int8_weight_only=True, implmode="high_precision")
    ex = Executor(m, NpuPolicy(prof))
    assert "int8_weight_gemm" in ex.steps[0].ctx.description
    q = ex.run({"x": x})["y"].astype(np.float64)
    s = np.abs(w.astype(np.float16).astype(np.float64)).max(axis=1) / 127
    u = unit_roundoff("float16")  # C is stored in fp16 (beta u |C|), the output rounded once (x2 as above)
    bound = alpha * (s / 2) * np.abs(x).sum(axis=1, keepdims=True) + beta * u * np.abs(c) + 2 * u * np.abs(ref)
    assert np.all(np.abs(q - ref) <= bound)
