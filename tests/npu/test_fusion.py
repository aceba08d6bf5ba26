"""GE's fusion passes on hand-built graphs (mschecker/npu/fusion.py, docs/FUSION.md): each pass fuses the form its
source matches, names the fused op as GE does, and rejects each form its source's checks refuse (with the check
in the reason); the fused graph computes the unfused graph's math under the float64 reference."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from mschecker.errors import InputError
from mschecker.graph.executor import Executor
from mschecker.graph.policy import ReferencePolicy
from mschecker.npu import fusion
from mschecker.npu.fusion import DEVICE_DOMAIN, apply, load_switch_file, pass_names, resolve_switches

from .fusion_graphs import G, attention, gelu, group_norm, layer_norm, layer_norm_mul, linear

RNG = np.random.default_rng(0)


def fused_nodes(model):
    return [n for n in model.graph.node if n.domain == DEVICE_DOMAIN]


def covers(node):
    return [s.decode() for a in node.attribute if a.name == "covers" for s in a.strings]


def attr(node, name):
    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def run(model, feeds):
    out = Executor(model, ReferencePolicy()).run(feeds)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def same_math(model, fused, feeds, rtol=1e-12):
    a, b = run(model, feeds), run(fused, feeds)
    for k in a:
        assert np.abs(a[k] - b[k]).max() <= rtol * max(np.abs(a[k]).max(), 1e-300), k


def only(report, name):
    return [f for f in report.fusions if f.pass_name == name]


def rejected(report, name):
    return [r for r in report.rejections if r.pass_name == name]


X4 = {"x": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)}


# ----------------------------------------------------------------------------------------------- GroupNorm
@pytest.mark.parametrize("constant_nodes", [True, False], ids=["ts_constant_nodes", "dynamo_initializers"])
def test_group_norm_export_becomes_one_group_norm_named_after_the_mul(constant_nodes):
    g = G((2, 8, 4, 4))
    y = group_norm(g, groups=4, constant_nodes=constant_nodes)
    m = g.model(y)
    out, rep = apply(m)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name) == ("GroupNorm", "/norm/Mul/GroupNorm")
    assert attr(n, "num_groups") == 4 and attr(n, "eps") == pytest.approx(1e-5)
    assert covers(n) == ["/norm/Reshape", "/norm/InstanceNormalization", "/norm/Reshape_1", "/norm/Mul", "/norm/Add"]
    assert list(n.output) == [y] and list(n.input) == ["x", "/norm.weight", "/norm.bias"]
    assert [x.op_type for x in out.graph.node if x.domain != DEVICE_DOMAIN] == [], "Shape/Constant pruned"
    assert only(rep, "GroupNormFusionPass")[0].notes == ()
    same_math(m, out, X4)


def test_group_norm_num_groups_comes_from_the_first_reshapes_output_dims():
    g = G((2, 8, 4, 4))
    m = g.model(group_norm(g, groups=2))
    [n] = fused_nodes(apply(m)[0])
    assert attr(n, "num_groups") == 2


@pytest.mark.parametrize("extra", ["/norm/Reshape_out", "/norm/InstanceNormalization_out", "/norm/Reshape_1_out",
                                   "/norm/Mul_out"])
def test_group_norm_rejects_an_intermediate_read_twice(extra):
    g = G((2, 8, 4, 4))
    y = group_norm(g)
    m = g.model(y, extra)
    out, rep = apply(m)
    assert fused_nodes(out) == []
    [r] = rejected(rep, "GroupNormFusionPass")
    assert "output size is [2], which not equal to 1" in r.reason
    same_math(m, out, X4)


def test_group_norm_output_read_twice_still_fuses():
    """The pass checks the outputs of Reshape, InstanceNorm, Reshape and Mul, not the Add's."""
    g = G((2, 8, 4, 4))
    y = group_norm(g)
    z = g.op("Sigmoid", [y], "/sig")
    m = g.model(y, z)
    assert len(fused_nodes(apply(m)[0])) == 1


def test_group_norm_commuted_mul_is_rejected_because_gamma_is_read_from_input_1():
    g = G((2, 8, 4, 4))
    m = g.model(group_norm(g, commute_mul=True))
    out, rep = apply(m)
    assert fused_nodes(out) == []
    assert "input 1 is the normalized tensor" in rejected(rep, "GroupNormFusionPass")[0].reason


def test_group_norm_with_instance_norm_scale_fuses_and_changes_the_math_as_on_the_device():
    """GE never reads the InstanceNorm's scale/bias: the fused GroupNorm drops them (noted in the report)."""
    g = G((2, 8, 4, 4))
    m = g.model(group_norm(g, in_scale=2.0))
    out, rep = apply(m)
    [f] = only(rep, "GroupNormFusionPass")
    assert "drops them" in f.notes[0]
    a, b = run(m, X4), run(out, X4)
    assert np.abs(a[m.graph.output[0].name] - b[m.graph.output[0].name]).max() > 0.1


def test_group_norm_gamma_not_per_channel_is_rejected():
    g = G((2, 8, 4, 4))
    m = g.model(group_norm(g, gamma_shape=(2, 1, 1)))  # 2 values for 8 channels: not per channel
    out, rep = apply(m)
    assert fused_nodes(out) == []
    assert "not one per channel" in rejected(rep, "GroupNormFusionPass")[0].reason


def test_group_norm_switched_off_leaves_the_instance_norm_to_single_instance_norm_fusion():
    """Off, the ONNX chain stays; SingleInstanceNormFusion then sees the rank-3 InstanceNorm: ND, NOT_CHANGED."""
    g = G((2, 8, 4, 4))
    m = g.model(group_norm(g))
    out, rep = apply(m, switches={"GroupNormFusionPass": "off"})
    assert fused_nodes(out) == []
    [r] = rejected(rep, "SingleInstanceNormFusion")
    assert "input format ND (rank 3)" in r.reason


def test_single_instance_norm_rank4_is_reported_not_modelled():
    g = G((2, 8, 4, 4))
    y = g.op("InstanceNormalization", ["x", g.const(np.ones(8)), g.const(np.zeros(8))], "/in", epsilon=1e-5)
    out, rep = apply(g.model(y))
    assert fused_nodes(out) == []
    assert "not modelled" in rejected(rep, "SingleInstanceNormFusion")[0].reason


# ----------------------------------------------------------------------------------------------- Gelu
X3 = {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)}
# the exporters' 1.4142135 is float32(sqrt(2)): the graph computes erf(x / 1.41421354) where the fused Gelu's
# reference is the exact erf GELU, a relative difference of |x phi(x)| * 1.7e-8 at most
GELU_RTOL = 1e-7


@pytest.mark.parametrize("form", ["ts", "mul0", "dynamo"])
def test_gelu_forms_fuse_into_one_gelu_named_after_mul1(form):
    g = G((2, 3, 8))
    y = gelu(g, form=form)
    m = g.model(y)
    out, rep = apply(m)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name, list(n.input), list(n.output)) == ("Gelu", "/act/Mul_1/Gelu", ["x"], [y])
    assert covers(n) == ["/act/Div", "/act/Erf", "/act/Add", "/act/Mul", "/act/Mul_1"]
    assert only(rep, "GeluONNXFusionPass")[0].notes == ()
    same_math(m, out, X3, rtol=GELU_RTOL)


def test_gelu_as_mul_by_sqrt_half_is_not_the_pattern():
    """GE's pattern starts at RealDiv: x * 0.70710677 -> Erf is not matched (no candidate, nothing fused)."""
    g = G((2, 3, 8))
    out, rep = apply(g.model(gelu(g, form="sqrt_half")))
    assert fused_nodes(out) == [] and rejected(rep, "GeluONNXFusionPass") == []


@pytest.mark.parametrize("kw,why", [
    (dict(div=1.414), "should be equal to 1.41421"),
    (dict(div=1.41423), "should be equal to 1.41421"),
    (dict(add=1.0001), "should be equal to 1.0"),
    (dict(half=0.49), "should be equal to 0.5"),
])
def test_gelu_constant_off_is_rejected(kw, why):
    g = G((2, 3, 8))
    out, rep = apply(g.model(gelu(g, **kw)))
    assert fused_nodes(out) == []
    assert why in rejected(rep, "GeluONNXFusionPass")[0].reason


def test_gelu_div_tolerance_is_1e_5_around_1_41421():
    for div, fused in ((1.41421 + 0.9e-5, True), (1.41421 - 0.9e-5, True), (1.41421 + 1.2e-5, False)):
        g = G((2, 3, 8))
        assert bool(fused_nodes(apply(g.model(gelu(g, div=div)))[0])) is fused, div


def test_gelu_intermediate_read_twice_is_rejected():
    g = G((2, 3, 8))
    y = gelu(g)
    out, rep = apply(g.model(y, "/act/Erf_out"))
    assert fused_nodes(out) == []
    assert "Output node of Erf0 node size is [2]" in rejected(rep, "GeluONNXFusionPass")[0].reason


def test_gelu_non_scalar_constant_is_rejected():
    g = G((2, 3, 8))
    y = gelu(g)
    m = g.model(y)
    one = next(n for n in m.graph.node if n.name == "/act/Add").input[1]
    for n in m.graph.node:  # the Add's 1.0 as a [2] tensor
        if n.op_type == "Constant" and n.output[0] == one:
            n.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.ones(2, np.float32)))
    out, rep = apply(m)
    assert fused_nodes(out) == []
    assert "must be a scalar" in rejected(rep, "GeluONNXFusionPass")[0].reason


def test_gelu_multiplying_another_tensor_still_fuses_and_is_noted():
    """GE does not check that the Mul multiplies the Gelu input: the device computes gelu(x) anyway."""
    g = G((2, 3, 8), inputs={"z": (2, 3, 8)})
    m = g.model(gelu(g, factor="z"))
    out, rep = apply(m)
    [f] = only(rep, "GeluONNXFusionPass")
    assert "GE does not check this" in f.notes[0]


# ----------------------------------------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("cast", [False, True], ids=["case1", "case3_cast"])
def test_layer_norm_decomposition_fuses(cast):
    g = G((2, 3, 8), opset=13)
    y = layer_norm(g, cast=cast)
    m = g.model(y)
    out, rep = apply(m)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name) == ("LayerNorm", "/ln/Add_1/LayerNorm")
    assert attr(n, "begin_norm_axis") == 2 and attr(n, "begin_params_axis") == -1
    assert attr(n, "epsilon") == pytest.approx(1e-5)
    assert list(n.input) == ["x", "/ln.weight", "/ln.bias"]
    same_math(m, out, X3)


def test_layer_norm_without_affine_fuses_under_the_inserted_mul_add_name():
    g = G((2, 3, 8), opset=13)
    y = layer_norm(g, affine=False)
    m = g.model(y)
    out, _ = apply(m)
    [n] = fused_nodes(out)
    assert n.name == "/ln/Div/Mul/Add/LayerNorm" and list(n.input)[1:] == ["", ""]
    same_math(m, out, X3)


def test_layer_norm_opset18_reduce_mean_axes_input_is_matched():
    g = G((2, 3, 8), opset=18)
    axes = g.const(np.array([-1]), dtype=np.int64)
    m0 = g.op("ReduceMean", ["x", axes], "/l/ReduceMean", keepdims=1)
    s = g.op("Sub", ["x", m0], "/l/Sub")
    p = g.op("Pow", [s, g.const(np.float32(2))], "/l/Pow")
    m1 = g.op("ReduceMean", [p, axes], "/l/ReduceMean_1", keepdims=1)
    a = g.op("Add", [m1, g.const(np.float32(1e-6))], "/l/Add")
    d = g.op("Div", [s, g.op("Sqrt", [a], "/l/Sqrt")], "/l/Div")
    m = g.model(d)
    out, _ = apply(m)
    assert [n.op_type for n in fused_nodes(out)] == ["LayerNorm"]
    same_math(m, out, X3)


@pytest.mark.parametrize("kw,why", [
    (dict(pow_exp=3.0), "the exp of pow is 3"),
    (dict(eps=0.2), "should be close to 0"),
    (dict(keepdims=0), "keep_dims in reducemean must be true"),
])
def test_layer_norm_checks_reject(kw, why):
    g = G((2, 3, 8), opset=13)
    out, rep = apply(g.model(layer_norm(g, **kw)))
    assert fused_nodes(out) == []
    assert why in rejected(rep, "LayerNormONNXFusionPass")[0].reason


def test_layer_norm_gamma_of_another_shape_fails_case1_and_case2_fuses_the_normalization_alone():
    """Patterns run in order: case 1 (with Mul/Add) is rejected by CheckShape, then case 2 (ending at the Div)
    matches the same chain without the affine ops, which stay as they are."""
    g = G((2, 3, 8), opset=13)
    m = g.model(layer_norm(g, gamma_shape=(1, 8)))
    out, rep = apply(m)
    assert "The shape of FusedNodeMul0 is not as expect" in rejected(rep, "LayerNormONNXFusionPass")[0].reason
    assert [(n.op_type, n.name) for n in out.graph.node] == [("LayerNorm", "/ln/Div/Mul/Add/LayerNorm"),
                                                             ("Mul", "/ln/Mul"), ("Add", "/ln/Add_1")]
    same_math(m, out, X3)


def test_layer_norm_sub_read_a_third_time_is_rejected():
    g = G((2, 3, 8), opset=13)
    y = layer_norm(g)
    out, rep = apply(g.model(y, "/ln/Sub_out"))
    assert fused_nodes(out) == []
    assert "FusedNodeSub0 is [3], which not equal to 2" in rejected(rep, "LayerNormONNXFusionPass")[0].reason


def test_layer_norm_mul_variant_fuses_with_gamma_as_mul_input_0():
    g = G((2, 3, 8), opset=13)
    y = layer_norm_mul(g, gamma_first=True)
    m = g.model(y)
    out, _ = apply(m)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name, attr(n, "begin_norm_axis")) == ("LayerNorm", "/lnm/Add_1/LayerNorm", -1)
    same_math(m, out, X3)


def test_layer_norm_mul_variant_with_gamma_second_is_rejected_as_the_source_reads_input_0():
    """The source links Mul1's input 0 as gamma: with Mul(div, gamma) that is the Div it removes (a broken graph,
    not modelled: rejected); pattern 2 then fuses the normalization alone and the Mul/Add stay."""
    g = G((2, 3, 8), opset=13)
    m = g.model(layer_norm_mul(g, gamma_first=False))
    out, rep = apply(m)
    assert "takes Mul input 0 as gamma" in rejected(rep, "LayerNormONNXMULFusionPass")[0].reason
    assert [(n.op_type, n.name) for n in out.graph.node] == [("LayerNorm", "/lnm/Div/Mul/Add/LayerNorm"),
                                                             ("Mul", "/lnm/Mul"), ("Add", "/lnm/Add_1")]
    same_math(m, out, X3)


# ----------------------------------------------------------------------------------------------- MatMul + bias
@pytest.mark.parametrize("bias_first", [False, True], ids=["dynamo_matmul_first", "ts_bias_first"])
def test_matmul_bias_add_keeps_the_matmul_name_and_takes_the_bias(bias_first):
    g = G((2, 3, 8))
    y = linear(g, bias_first=bias_first)
    m = g.model(y)
    out, rep = apply(m)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name) == ("BatchMatMulV2", "/fc/MatMul")
    assert list(n.input) == ["x", "/fc.weight", "/fc.bias"] and list(n.output) == [y]
    assert covers(n) == ["/fc/MatMul", "/fc/Add"] and attr(n, "has_bias") == 1
    same_math(m, out, X3)


@pytest.mark.parametrize("bias_shape,why", [((1, 6), "Add input is not scalar"),
                                            ((1,), "bias shape 1, is not equal to input second dim 6")])
def test_matmul_bias_add_rejects_a_bias_that_is_not_one_per_column(bias_shape, why):
    g = G((2, 3, 8))
    out, rep = apply(g.model(linear(g, bias_shape=bias_shape)))
    assert fused_nodes(out) == []
    assert why in rejected(rep, "MatMulBiasAddFusionPass")[0].reason


def test_matmul_bias_add_rejects_a_matmul_read_twice():
    g = G((2, 3, 8))
    y = linear(g)
    out, rep = apply(g.model(y, "/fc/MatMul_out"))
    assert fused_nodes(out) == []
    assert "MatMul node should only have 1 output, actual 2" in rejected(rep, "MatMulBiasAddFusionPass")[0].reason


# ----------------------------------------------------------------------------------------------- CastRemove
def test_same_dtype_cast_is_removed_and_a_converting_cast_is_kept():
    g = G((2, 3))
    c1 = g.op("Cast", ["x"], "/c1", to=onnx.TensorProto.FLOAT)
    c2 = g.op("Cast", [c1], "/c2", to=onnx.TensorProto.FLOAT16)
    y = g.op("Cast", [c2], "/c3", to=onnx.TensorProto.FLOAT)
    m = g.model(y)
    out, rep = apply(m)
    assert [n.name for n in out.graph.node] == ["/c2", "/c3"]
    assert list(out.graph.node[0].input) == ["x"]
    assert [f.covers for f in only(rep, "CastRemoveFusionPass")] == [("/c1",)]


# ----------------------------------------------------------------------------------------------- opt-in edits
QKV = {k: RNG.standard_normal((2, 2, 5, 4)).astype(np.float32) for k in "qkv"}


@pytest.mark.parametrize("sdpa", [False, True], ids=["diffusers", "sdpa_export"])
def test_flash_attention_is_off_by_default_and_fuses_when_switched_on(sdpa):
    g = G((1,), inputs={k: (2, 2, 5, 4) for k in "qkv"})
    g.inputs = g.inputs[1:]
    y = attention(g, sdpa=sdpa)
    m = g.model(y)
    assert fused_nodes(apply(m)[0]) == []
    out, rep = apply(m, switches={"FlashAttention": "on"}, inner_precise=0)
    [n] = fused_nodes(out)
    assert (n.op_type, n.name) == ("FlashAttentionScore", "/attn1/FlashAttentionScore")
    assert attr(n, "scale_value") == pytest.approx(0.125, rel=1e-6) and attr(n, "inner_precise") == 0
    # scale_value is a float attribute (float32, as the op's): sqrt(0.125)^2 in fp32 is 0.125 within u32
    same_math(m, out, QKV, rtol=1e-12 if not sdpa else 1e-6)


def test_group_norm_silu_is_off_by_default_and_fuses_the_fused_group_norm_when_on():
    g = G((2, 8, 4, 4))
    y = group_norm(g)
    s = g.op("Sigmoid", [y], "/act/Sigmoid")
    z = g.op("Mul", [y, s], "/act/Mul")
    m = g.model(z)
    assert [n.op_type for n in fused_nodes(apply(m)[0])] == ["GroupNorm"]
    out, rep = apply(m, switches={"GroupNormSilu": "on"})
    [n] = fused_nodes(out)
    assert (n.op_type, n.name) == ("GroupNormSilu", "/norm/Mul/GroupNorm/GroupNormSilu")
    assert covers(n)[-2:] == ["/act/Sigmoid", "/act/Mul"] and len(covers(n)) == 7
    same_math(m, out, X4)


def test_gegluv2_fuses_split_gelu_mul_when_on():
    g = G((2, 3, 16))
    h, gate = g.op("Split", ["x", g.const(np.array([8, 8]), dtype=np.int64)], "/ff/Split", n_out=2, axis=-1)
    y = g.op("Mul", [h, gelu(g, gate, prefix="/ff/gelu")], "/ff/Mul")
    m = g.model(y)
    assert [n.op_type for n in fused_nodes(apply(m)[0])] == ["Gelu"]
    out, rep = apply(m, switches={"GeGluV2": "on"})
    [n] = fused_nodes(out)
    assert (n.op_type, n.name, attr(n, "activate_left")) == ("GeGluV2", "/ff/Mul/GeGluV2", 0)
    same_math(m, out, {"x": RNG.standard_normal((2, 3, 16)).astype(np.float32)}, rtol=GELU_RTOL)


# ----------------------------------------------------------------------------------------------- switches
def test_switches_default_on_off_and_all():
    on = resolve_switches(None)
    assert [n for n in pass_names() if on[n]] == ["CastRemoveFusionPass", "GroupNormFusionPass",
                                                  "SingleInstanceNormFusion", "GeluONNXFusionPass",
                                                  "LayerNormONNXFusionPass", "LayerNormONNXMULFusionPass",
                                                  "MatMulBiasAddFusionPass"]
    off = resolve_switches({"ALL": "off", "GeluONNXFusionPass": "on"})
    assert [n for n in pass_names() if off[n]] == ["GeluONNXFusionPass"]
    assert resolve_switches({"FlashAttention": True})["FlashAttention"] is True
    assert resolve_switches({"ALL": "on"})["FlashAttention"] is False, "ALL switches ATC's passes only"


@pytest.mark.parametrize("switches,msg", [({"GroupNormFusion": "off"}, "unknown fusion pass(es) GroupNormFusion"),
                                          ({"GroupNormFusionPass": "maybe"}, "'maybe' is not on or off"),
                                          ({"GroupNormFusionPass": 1}, "1 is not on or off")])
def test_bad_switches_are_input_errors_naming_the_passes(switches, msg):
    with pytest.raises(InputError, match="passes: FlashAttention, CastRemoveFusionPass" if "unknown" in msg else
                       "not on or off") as e:
        resolve_switches(switches, "sw.cfg")
    assert msg in str(e.value) and str(e.value).startswith("sw.cfg: ")


def test_a_pass_switched_off_does_not_fuse():
    g = G((2, 3, 8))
    m = g.model(gelu(g))
    out, rep = apply(m, switches={"GeluONNXFusionPass": "off"})
    assert fused_nodes(out) == [] and rep.enabled["GeluONNXFusionPass"] is False


def test_switch_file_json_and_lines(tmp_path):
    j = tmp_path / "fusion_switch.cfg"
    j.write_text('{"Switch": {"GraphFusion": {"ALL": "off", "GeluONNXFusionPass": "on"}, "UBFusion": {"ALL": "off"}}}')
    assert load_switch_file(j) == {"ALL": "off", "GeluONNXFusionPass": "on"}
    t = tmp_path / "lines.cfg"
    t.write_text("# ours\nGroupNormFusionPass:off\n\nFlashAttention: on\n")
    assert load_switch_file(t) == {"GroupNormFusionPass": "off", "FlashAttention": "on"}


@pytest.mark.parametrize("text,msg", [
    ('{"Switch": {"GraphFusion": {"Nope": "off"}}}', "unknown fusion pass(es) Nope"),
    ('{"Switch": {"GraphFusion": {"GeluONNXFusionPass": "no"}}}', "'no' is not on or off"),
    ('{"Switch": {"GraphFusion": ', "not valid JSON"),
    ('{"GraphFusion": {}}', "a JSON fusion switch file is"),
    ('{"Switch": {"UBFusion": {"TbeEltwiseQuantFusionPass": "off"}}}', "UB fusions are not modelled"),
    ("GroupNormFusionPass off\n", "line 1"),
])
def test_bad_switch_files_are_one_line_input_errors(tmp_path, text, msg):
    f = tmp_path / "sw.cfg"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_switch_file(f)
    assert msg in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)


def test_missing_switch_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_switch_file(tmp_path / "none.cfg")


# ----------------------------------------------------------------------------------------------- matcher
def test_matcher_finds_pattern_inputs_at_any_anchor_and_typeless_ops_match_constants():
    """GE's MatchFromOutput: a typeless pattern op (Input0) may take a Const; GetNodeFromMapping then takes the
    first node mapped. dynamo's Mul(0.5, Add) -> Mul(x, .) fuses through that (pattern 2 with Input0 = the 0.5)."""
    g = G((2, 3, 8))
    m = g.model(gelu(g, form="dynamo"))
    graph = fusion._Graph(m, None)
    pattern = fusion._Pattern({"Input0": None, "Mul0": ("Mul",), "Add0": ("Add",)},
                              {"Mul0": ("Input0", "Add0")}, "Mul0")
    mul0 = [n.name for n in m.graph.node].index("/act/Mul")
    mapping = fusion._match(graph, mul0, pattern)
    assert graph.ge_type(mapping["Input0"][0]) == "Const" and graph.ge_type(mapping["Add0"][0]) == "Add"


def test_report_is_json_ready():
    import json

    g = G((2, 8, 4, 4))
    _, rep = apply(g.model(group_norm(g)))
    doc = json.loads(json.dumps(rep.to_dict()))
    assert doc["fusions"][0]["device_name"] == "/norm/Mul/GroupNorm"
    assert {p["name"]: p["fused"] for p in doc["passes"]}["GroupNormFusionPass"] == 1
    assert all("@" in s for p in doc["passes"] if p["kind"] == "GE" for s in p["sources"])
