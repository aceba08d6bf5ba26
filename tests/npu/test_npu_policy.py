"""Profiles, ATC parsers and the emulated NPU policy."""
import json

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from mschecker.dtypes import unit_roundoff
from mschecker.errors import InputError
from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.knobs import apply_knobs
from mschecker.npu.atc import parse_keep_dtype, parse_op_precision_ini
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile, preset_names

from ..profiles import GENERIC_FP16


def test_presets():
    assert set(preset_names()) >= {"ascend910b", "ascend310p", "bf16", "fp32"}
    p = load_profile("ascend910b")
    # a device profile: each op on its own default implmode path ("default"), the chip of the device table
    assert (p.storage_dtype, p.overflow_mode, p.implmode, p.cube_accumulation, p.device) == \
        ("float16", "inf_nan", "default", "float32", "ascend910b")
    p310 = load_profile("ascend310p")
    assert (p310.overflow_mode, p310.device, p310.implmode) == ("saturation", "ascend310p", "default")
    generic = load_profile(GENERIC_FP16)  # the tests' generic profile: no device, implmode by the profile
    assert (generic.device, generic.implmode) == ("", "high_performance")
    assert load_profile("bf16").storage_dtype == "bfloat16"
    assert load_profile("fp32").precision_mode == "must_keep_origin_dtype"


def test_profile_files_and_errors(tmp_path):
    good = tmp_path / "p.json"
    good.write_text(json.dumps({"name": "mine", "overflow_mode": "saturation",
                                "implmode": {"default": "high_precision", "by_op_type": {"Softmax": "high_performance"}}}))
    p = load_profile(good)
    assert p.implmode_by_op_type == {"Softmax": "high_performance"} and p.overflow_mode == "saturation"
    toml = tmp_path / "p.toml"
    toml.write_text('name = "t"\nstorage_dtype = "fp16"\nkeep_dtype = ["OpType::Softmax"]\n')
    assert load_profile(toml).keep_dtype == ("OpType::Softmax",)
    for text, match in (('overflow_mode = "wrap"', "overflow_mode"), ('colour = "red"', "unknown profile field"),
                        ('storage_dtype = "int8"', "storage_dtype"), ("name = ", "not a valid TOML")):
        toml.write_text(text)
        with pytest.raises(InputError, match=match):
            load_profile(toml)
    with pytest.raises(InputError, match="neither a preset"):
        load_profile("ascend999")


def test_atc_parsers(tmp_path):
    kd = tmp_path / "keep.cfg"
    kd.write_text("conv1\n# comment\n\nOpType::Softmax\n")
    assert parse_keep_dtype(kd) == ["conv1", "OpType::Softmax"]
    ini = tmp_path / "op.ini"
    ini.write_text("[ByOpType]\nSoftmax=high_precision\n[ByNodeName]\nsm2 = high_performance\n")
    assert parse_op_precision_ini(ini) == ({"Softmax": "high_precision"}, {"sm2": "high_performance"})
    ini.write_text("[ByOpType]\nSoftmax=fast\n")
    with pytest.raises(InputError, match=r"op.ini:2: Softmax = 'fast'"):
        parse_op_precision_ini(ini)
    ini.write_text("Softmax=high_precision\n")  # GE reads lines before any section as [ByOpType]
    assert parse_op_precision_ini(ini) == ({"Softmax": "high_precision"}, {})
    with pytest.raises(InputError, match="does not exist"):
        parse_keep_dtype(tmp_path / "nope")


def _graph():
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
                      h.make_node("Softmax", ["a"], ["b"], name="sm1"),
                      h.make_node("Softmax", ["b"], ["c"], name="sm2"),
                      h.make_node("Mul", ["c", "big"], ["y"], name="scale")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, 64])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(
                         np.float32), "w"), numpy_helper.from_array(np.array(1e6, np.float32), "big")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _ctx(ex, name):
    return next(s.ctx for s in ex.steps if s.node.name == name)


def test_variant_selection_implmode_node_wins_and_keep_dtype(tmp_path):
    """The generic emulator's mechanism (a generic profile: ONNX op types, variants by implmode/accumulation)."""
    ini = tmp_path / "op.ini"
    ini.write_text("[ByOpType]\nSoftmax=high_precision\n[ByNodeName]\nsm2=high_performance\n")
    ex = Executor(_graph(), NpuPolicy(apply_knobs(GENERIC_FP16, op_precision=ini, keep_dtype=["scale"])))
    assert "matmul:fp16_fp32acc" in _ctx(ex, "mm").description  # cube: fp32 accumulation whatever the implmode
    assert "softmax:fp16_fp32acc" in _ctx(ex, "sm1").description  # by type: high_precision
    assert "softmax:fp16_fp16acc" in _ctx(ex, "sm2").description  # by node name wins: high_performance
    assert _ctx(ex, "scale").dtype == np.float32  # keep_dtype island
    y = ex.run({"x": np.ones((4, 64), np.float32)})["y"]
    assert y.dtype == np.float32


def test_device_profile_speaks_ir_types_and_runs_the_device_kernels():
    """ascend910b is a device profile: knobs name Ascend IR op types (SoftmaxV2, Mul), a by-node implmode still
    wins, every Softmax runs the device's SoftmaxV2 kernel whatever its implmode (fp32 exp and sum: the table's
    row), MatMul runs as BatchMatMulV2 with fp32 accumulation, and an op without an implmode reports "none"."""
    ex = Executor(_graph(), NpuPolicy(apply_knobs("ascend910b", implmode_by_op_type={"SoftmaxV2": "high_precision"},
                                                  implmode_by_node={"sm2": "high_performance"},
                                                  keep_dtype=["OpType::Mul"])))
    assert {s.node.name: ex.policy.op_type_of(s.node) for s in ex.steps} == {
        "mm": "BatchMatMulV2", "sm1": "SoftmaxV2", "sm2": "SoftmaxV2", "scale": "Mul"}
    assert "matmul:fp16_fp32acc" in _ctx(ex, "mm").description
    assert _ctx(ex, "sm1").implmode == "high_precision" and _ctx(ex, "sm2").implmode == "high_performance"
    assert "softmax:fp16_v2" in _ctx(ex, "sm1").description and "softmax:fp16_v2" in _ctx(ex, "sm2").description
    assert _ctx(ex, "scale").dtype == np.float32 and _ctx(ex, "scale").implmode == "none"  # OpType::Mul island


@pytest.mark.parametrize("knobs,match", [
    ({"implmode_by_op_type": {"Softmax": "high_precision"}}, r"Softmax is an ONNX op type.*SoftmaxV2"),
    ({"implmode_by_op_type": {"InstanceNormalization": "high_precision"}},
     r"InstanceNormalization is an ONNX op type.*InstanceNorm, which has no implmode"),
    ({"implmode_by_op_type": {"InstanceNorm": "high_precision"}}, r"InstanceNorm has no implmode"),
    ({"implmode_by_op_type": {"GroupNorm": "high_performance"}}, r"GroupNorm has no implmode"),
    ({"keep_dtype": ["OpType::Softmax"]}, r"keep_dtype OpType::Softmax: .*SoftmaxV2"),
    ({"keep_dtype": ["OpType::LayerNormalization"]}, r"LayerNormalization is an ONNX op type.*LayerNorm"),
])
def test_device_profile_refuses_what_atc_would_refuse(knobs, match):
    with pytest.raises(InputError, match=match):
        apply_knobs("ascend910b", **knobs)
    with pytest.raises(InputError, match=match):
        apply_knobs("ascend310p", **knobs)
    apply_knobs(GENERIC_FP16, **knobs)  # a generic profile models no device: ONNX op types are its vocabulary


def test_device_profile_accepts_ir_types_and_a_global_implmode():
    prof = apply_knobs("ascend910b", implmode="high_precision", implmode_by_op_type={"Gelu": "high_performance"},
                       keep_dtype=["OpType::SoftmaxV2", "OpType::InstanceNorm", "some_node"])
    assert prof.implmode == "high_precision" and dict(prof.implmode_by_op_type) == {"Gelu": "high_performance"}


def test_overflow_modes():
    x = {"x": np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)}
    ieee = Executor(_graph(), NpuPolicy("ascend910b")).run(x)["y"]
    sat = Executor(_graph(), NpuPolicy("ascend310p")).run(x)["y"]
    assert ieee.dtype == sat.dtype == np.float16
    big = ieee == np.inf  # 1e6 is inf in fp16 already as a constant: every positive product overflows
    assert big.any() and np.all(sat[big] == 65504) and np.isfinite(sat).all()


def test_saturation_turns_nan_into_zero():
    g = h.make_graph([h.make_node("Sub", ["x", "x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    x = {"x": np.array([1e5, -1e5, 1.0], np.float32)}  # inf - inf = NaN in fp16
    assert np.isnan(Executor(m, NpuPolicy("ascend910b")).run(x)["y"][:2]).all()
    np.testing.assert_array_equal(Executor(m, NpuPolicy("ascend310p")).run(x)["y"], [0, 0, 0])


def test_missing_variant_is_a_plan_time_error(monkeypatch):
    from mschecker.kernels.registry import get_kernel

    info = get_kernel("softmax")  # the graph's Softmax, with its bf16 variants taken away for this test
    monkeypatch.setattr(info, "variants", {k: v for k, v in info.variants.items() if v.dtype != "bfloat16"})
    with pytest.raises(InputError, match="has no bfloat16 variant"):
        Executor(_graph(), NpuPolicy("bf16"))


def test_npu_error_within_bound_and_planted_bug_is_caught():
    """MatMul K=1024 with fp16 inputs: the emulated run's error vs the float64 reference on the same (fp16-rounded)
    inputs stays within the cube bound gamma_K(u_fp32)|A||B| + u_fp16|C| (docs/NUMERICS.md §2.3); the planted
    bug (fp16 accumulation sold as fp32) exceeds it, so the check can fail."""
    rng = np.random.default_rng(5)
    k = 1024
    a = rng.uniform(0, 1, (8, k)).astype(np.float16).astype(np.float32)
    b = rng.uniform(0, 1, (k, 8)).astype(np.float16)
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "g", [h.make_tensor_value_info("a", T.FLOAT, [8, k])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(b.astype(np.float32), "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    ref = Executor(m, ReferencePolicy()).run({"a": a})["y"]
    absprod = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    u32, u16 = unit_roundoff("float32"), unit_roundoff("float16")
    bound = k * u32 / (1 - k * u32) * absprod + u16 * np.abs(ref)
    good = Executor(m, NpuPolicy("ascend910b")).run({"a": a})["y"].astype(np.float64)
    assert np.all(np.abs(good - ref) <= bound)
    bug = NpuPolicy(load_profile("ascend910b").replace(variants={"matmul": "bug_fp16acc_as_fp32acc"}))
    bad = Executor(m, bug).run({"a": a})["y"].astype(np.float64)
    assert np.any(np.abs(bad - ref) > bound)


def _matmul_model(k=256, n=16):
    rng = np.random.default_rng(11)
    w = rng.standard_normal((k, n)).astype(np.float32)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [4, k])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(w, "w")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), w


def test_int8_weight_only_uses_the_quantized_gemm_within_its_bound():
    """|dy| <= (s/2) sum_k |x_k| per output channel (s = max|w_n|/127, docs/NUMERICS.md §2.4) plus the cube
    bound's output rounding u_fp16 |y|; and it is really quantized: the error exceeds the plain fp16 run's."""
    m, w = _matmul_model()
    x = np.random.default_rng(12).standard_normal((4, 256)).astype(np.float16).astype(np.float32)
    ref = Executor(m, ReferencePolicy()).run({"x": x})["y"]
    prof = load_profile("ascend910b").replace(int8_weight_only=True, implmode="high_precision")
    ex = Executor(m, NpuPolicy(prof))
    assert "int8_weight_gemm:fp16_fp32acc_minmax" in ex.steps[0].ctx.description
    q = ex.run({"x": x})["y"].astype(np.float64)
    w16 = w.astype(np.float16).astype(np.float64)
    s = np.abs(w16).max(axis=0) / 127
    # the fp16 output rounding is u|y_hat| with |y_hat| <= |ref| + the quantization term: x2 on u|ref| covers it
    # coarsely (measured: the quantization term dominates; the test passes with x1 too)
    bound = (s / 2) * np.abs(x).sum(axis=1, keepdims=True) + unit_roundoff("float16") * np.abs(ref) * 2
    assert np.all(np.abs(q - ref) <= bound)
    plain = Executor(m, NpuPolicy("ascend910b")).run({"x": x})["y"].astype(np.float64)
    assert np.abs(q - ref).max() > np.abs(plain - ref).max()


def test_int4_intermediates_round_trip_every_float_output():
    m, _ = _matmul_model()
    x = np.random.default_rng(13).standard_normal((4, 256)).astype(np.float32)
    plain = Executor(m, NpuPolicy("ascend910b")).run({"x": x})["y"].astype(np.float64)
    ex = Executor(m, NpuPolicy(load_profile("ascend910b").replace(int4_intermediates=True)))
    assert "bitpack4:fp16_sym" in ex.steps[0].ctx.description
    y = ex.run({"x": x})["y"].astype(np.float64)
    # block-scaled 4-bit: |x_hat - x| <= s/2 with s = max|block|/7, blocks of 32 of the flattened tensor;
    # plus one fp16 rounding of the dequantized value, u_fp16 |x_hat| <= u_fp16 (|x| + s/2): x2 on u|x| covers it
    blocks = np.abs(plain.ravel()).reshape(-1, 32).max(axis=1) / 7
    bound = np.repeat(blocks / 2, 32).reshape(plain.shape) + unit_roundoff("float16") * np.abs(plain) * 2
    assert np.all(np.abs(y - plain) <= bound) and not np.array_equal(y, plain)


def _mixed_graph():
    rng = np.random.default_rng(21)
    g = h.make_graph([h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="conv"),
                      h.make_node("Reshape", ["c", "shape"], ["r"], name="flat"),
                      h.make_node("MatMul", ["r", "m"], ["a"], name="mm"),
                      h.make_node("LayerNormalization", ["a", "s"], ["n"], axis=-1, name="ln"),
                      h.make_node("Cast", ["n"], ["h16"], to=T.FLOAT16, name="to16"),
                      h.make_node("Cast", ["h16"], ["y"], to=T.FLOAT, name="to32")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w"),
                                  numpy_helper.from_array(np.array([4, 64], np.int64), "shape"),
                                  numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "m"),
                                  numpy_helper.from_array(np.ones(32, np.float32), "s")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), {"x": rng.standard_normal((1, 4, 8, 8)).astype(
        np.float32)}


def test_precision_modes_decide_node_dtypes_and_casts():
    m, x = _mixed_graph()
    mixed = Executor(m, NpuPolicy(load_profile("ascend910b").replace(precision_mode="allow_fp32_to_fp16")))
    dtypes = {s.node.name: s.ctx.dtype for s in mixed.steps}
    assert dtypes["conv"] == dtypes["mm"] == np.float16  # cube ops lowered
    assert dtypes["ln"] == dtypes["flat"] == np.float32  # vector ops keep fp32
    keep = Executor(m, NpuPolicy("fp32"))
    assert all(s.ctx.dtype == np.float32 for s in keep.steps)
    # must_keep_origin_dtype honours the graph's own Cast to fp16: the output carries fp16 rounding
    y = keep.run(x)["y"]
    assert y.dtype == np.float32 and np.array_equal(y, y.astype(np.float16).astype(np.float32))
    # force_fp16 turns every Cast to a float type into the storage dtype
    assert Executor(m, NpuPolicy("ascend910b")).run(x)["y"].dtype == np.float16


def test_bf16_profile_runs_where_the_registry_has_bf16_variants():
    m, x = _mixed_graph()
    del m.graph.node[0]  # Conv has no bf16 variant; feed the Reshape directly
    m.graph.input[0].CopyFrom(h.make_tensor_value_info("c", T.FLOAT, [1, 4, 8, 8]))
    ex = Executor(m, NpuPolicy("bf16"))
    y = ex.run({"c": x["x"]})["y"]
    assert str(y.dtype) == "bfloat16"
    assert "matmul:bf16_fp32acc" in ex.step("mm").ctx.description


def test_winograd_profile_uses_the_winograd_variant_for_3x3_convs():
    """F(4x4,3x3) with fp16 transforms is measurably less accurate than direct convolution (docs/NUMERICS.md §5:
    35-60x the direct error with 64 channels); here we only require that it is the variant bound and that its
    output differs from the direct one."""
    m, x = _mixed_graph()
    direct = Executor(m, NpuPolicy("ascend910b"))
    wino = Executor(m, NpuPolicy(load_profile("ascend910b").replace(winograd="winograd_f4x3_fp16")))
    assert "conv2d:winograd_f4x3_fp16" in wino.step("conv").ctx.description
    assert "conv2d:fp16_fp32acc" in direct.step("conv").ctx.description
    assert not np.array_equal(wino.run(x)["y"], direct.run(x)["y"])


def test_constant_foldable_shape_arithmetic_stays_exact():
    """Shape -> Cast(float) -> Mul -> Cast(int64) -> Reshape: a compiler folds this on the host. Were it run in
    fp16, 4097 would round to 4096 and the Reshape would fail; the NPU policy runs foldable nodes in fp32."""
    g = h.make_graph([h.make_node("Shape", ["x"], ["s"]), h.make_node("Cast", ["s"], ["sf"], to=T.FLOAT),
                      h.make_node("Mul", ["sf", "one"], ["sm"], name="shape_mul"),
                      h.make_node("Cast", ["sm"], ["si"], to=T.INT64),
                      h.make_node("Reshape", ["x", "si"], ["r"]), h.make_node("Add", ["r", "r"], ["y"], name="add")],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4097])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(np.ones(2, np.float32), "one")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    ex = Executor(m, NpuPolicy("ascend910b"))
    y = ex.run({"x": np.ones((1, 4097), np.float32)})["y"]
    assert y.shape == (1, 4097) and y.dtype == np.float16
    assert ex.step("shape_mul").ctx.description.startswith("host-folded float32")
    assert ex.step("add").ctx.dtype == np.float16
