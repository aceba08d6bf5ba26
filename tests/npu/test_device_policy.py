"""The NPU policy on a device profile (issue 21): what it binds comes from the device kernel table, its knobs speak
ATC, and its brackets, saturating twins and implmode defaults are the ones the table and the sources give.

Each test names the realistic bug it catches: a policy that ignores the table (picks by implmode as the generic
emulator does), forgets the saturating twin on the 310P, applies an implmode to an op that has none, matches a
keep_dtype entry only by the fused device name, or lets an ONNX op type through where ATC wants an IR type.
"""
import re

import numpy as np
import pytest

from mschecker.errors import InputError, KnobNote
from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.knobs import apply_knobs

from .fusion_graphs import G, gelu, group_norm


def _gn_sigmoid_model():
    """x -> GroupNorm (TorchScript form, fused by GE) -> Sigmoid -> Mul (SiLU) -> Softmax -> Exp."""
    g = G((1, 8, 4, 4))
    y = group_norm(g, groups=4, channels=8, prefix="/norm")
    s = g.op("Sigmoid", [y], "/act/Sigmoid")
    m = g.op("Mul", [y, s], "/act/Mul")
    sm = g.op("Softmax", [m], "/attn/Softmax", axis=-1)
    e = g.op("Exp", [sm], "/tail/Exp")
    return g.model(e)


def _gelu_model():
    g = G((2, 8))
    return g.model(gelu(g, prefix="/ff"))


def _bound(executor, name):
    """{kernel: variant} the policy bound for the node `name` (from its description)."""
    step = executor.step(name)
    return dict(part.split(":", 1) for part in step.ctx.description.split()[2:] if ":" in part), step.ctx


@pytest.fixture(scope="module")
def gn_model():
    return _gn_sigmoid_model()


def test_the_table_not_the_implmode_picks_the_kernels(gn_model):
    """ascend910b: GroupNorm runs GE's fp32 one-pass kernel with no implmode, SoftmaxV2 exponentiates in fp32,
    Sigmoid stays fp16 (a policy choosing by implmode would bind fp16_fp16stats / fp16_fp16acc / fp16_fast)."""
    ex = Executor(gn_model, NpuPolicy("ascend910b"))
    kernels, ctx = _bound(ex, "/norm/Mul/GroupNorm")
    assert kernels == {"group_norm": "fp16_ge_onepass"} and ctx.implmode == "none"
    assert _bound(ex, "/attn/Softmax")[0] == {"softmax": "fp16_v2"}
    assert _bound(ex, "/act/Sigmoid")[0] == {"sigmoid": "fp16_vexp"}
    kernels, ctx = _bound(ex, "/tail/Exp")
    assert ctx.implmode == "high_performance" and kernels == {"exp": "fp16_fast"}  # exp.py's own default


def test_an_op_without_implmode_reports_none_whatever_the_default_says(gn_model):
    """--implmode high_performance (ATC's *_for_all) changes nothing for GroupNorm: it has no implmode, and the
    plan and bisect must not offer one (bisect's high_precision move reads ctx.implmode)."""
    ex = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", implmode="high_performance")))
    assert ex.step("/norm/Mul/GroupNorm").ctx.implmode == "none"
    assert ex.step("/attn/Softmax").ctx.implmode == "high_performance"


def test_saturation_mode_binds_the_per_instruction_saturating_twin(gn_model):
    """310P: the fp16-arithmetic Sigmoid saturates inside the kernel (exp(-x) -> 65504, not inf)."""
    ex = Executor(gn_model, NpuPolicy("ascend310p"))
    assert _bound(ex, "/act/Sigmoid")[0] == {"sigmoid": "fp16_vexp_sat"}
    assert _bound(ex, "/norm/Mul/GroupNorm")[0] == {"group_norm": "fp16_ge_onepass"}  # fp32 inside: no twin
    x = np.full((1, 8, 4, 4), -20.0, np.float32)
    x[0, 0, 0, 0] = 0.0
    sig = Executor(_sigmoid_only(), NpuPolicy("ascend310p")).run({"x": x})
    ieee = Executor(_sigmoid_only(), NpuPolicy("ascend910b")).run({"x": x})
    out_sat, out_ieee = next(iter(sig.values())), next(iter(ieee.values()))
    assert out_ieee[0, 0, 0, 1] == 0 and out_sat[0, 0, 0, 1] == np.float16(1 / 65505)


def _sigmoid_only():
    g = G((1, 8, 4, 4))
    return g.model(g.op("Sigmoid", ["x"], "/s"))


def test_brackets_swap_only_the_rows_that_have_one(gn_model):
    """--bracket pessimistic: the closed 910B GroupNorm becomes fp16 statistics; SoftmaxV2 (public, no bracket)
    stays; optimistic gives the two-pass fp32 statistics."""
    pess = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", bracket="pessimistic")))
    opt = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", bracket="optimistic")))
    assert _bound(pess, "/norm/Mul/GroupNorm")[0] == {"group_norm": "fp16_fp16stats"}
    assert _bound(opt, "/norm/Mul/GroupNorm")[0] == {"group_norm": "fp16_fp32stats_twopass"}
    assert _bound(pess, "/attn/Softmax")[0] == _bound(opt, "/attn/Softmax")[0] == {"softmax": "fp16_v2"}


def test_gelu_default_path_and_the_recipes_implmode():
    """The fused Gelu runs its kernel's default path (tanh form in fp32) unless an IR-typed implmode says
    high_performance (Huawei's SD recipe), which binds the fp16 i-GELU."""
    model = _gelu_model()
    plain = Executor(model, NpuPolicy("ascend910b"))
    (name,) = [st.node.name for st in plain.steps if st.node.op_type == "Gelu"]
    kernels, ctx = _bound(plain, name)
    assert kernels == {"gelu": "fp16_ascend_tanh"} and ctx.implmode == "high_precision"
    hp = Executor(model, NpuPolicy(apply_knobs("ascend910b", implmode_by_op_type={"Gelu": "high_performance"})))
    assert _bound(hp, name)[0] == {"gelu": "fp16_ascend_igelu_sat"}
    pess = Executor(model, NpuPolicy(apply_knobs("ascend910b", implmode_by_op_type={"Gelu": "high_performance"},
                                                 bracket="pessimistic")))
    assert _bound(pess, name)[0] == {"gelu": "fp16_ascend_igelu"}


@pytest.mark.parametrize("entry, says", [
    ("/norm/Mul/GroupNorm", "a device op that fusion creates, after atc applies keep_dtype"),
    ("/norm/InstanceNormalization", "node fused into device op '/norm/Mul/GroupNorm' (GroupNorm)"),
    ("OpType::InstanceNorm", "every InstanceNorm was fused into another device op"),
    ("OpType::GroupNorm", "every GroupNorm is made by a GE fusion, after atc applies keep_dtype"),
])
def test_keep_dtype_does_not_reach_an_op_a_fusion_created(gn_model, entry, says):
    """atc applies keep_dtype to the parsed graph, before fusion (keep_dtype_option.cc): the fused GroupNorm is
    named by none of these, it stays fp16, and the run says why, naming the device op to write instead."""
    ex = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", keep_dtype=[entry])))
    assert ex.step("/norm/Mul/GroupNorm").ctx.dtype == np.float16, entry
    with pytest.warns(KnobNote, match=re.escape(says)):
        ex.policy.emit_notes()
    ex = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", keep_dtype=["OpType::SoftmaxV2"])))
    assert ex.step("/attn/Softmax").ctx.dtype == np.float32


@pytest.mark.parametrize("line", ["/norm/Mul/GroupNorm::InputDtype:float32,float32,float32,OutputDtype:float32",
                                  "/norm/Mul/GroupNorm:InputDtype:float32",  # the SD recipe's single colon
                                  "OpType::GroupNorm:InputDtype:float32"])
def test_customize_dtypes_names_the_fused_op_by_its_device_name_or_type(gn_model, line):
    ex = Executor(gn_model, NpuPolicy(apply_knobs("ascend910b", customize_dtypes=[line])))
    assert ex.step("/norm/Mul/GroupNorm").ctx.dtype == np.float32
    assert ex.step("/act/Sigmoid").ctx.dtype == np.float16


def test_customize_dtypes_on_a_consumed_node_has_no_effect_and_says_so(gn_model):
    ex = Executor(gn_model, NpuPolicy(apply_knobs(
        "ascend910b", customize_dtypes=["/norm/InstanceNormalization::InputDtype:float32"])))
    assert ex.step("/norm/Mul/GroupNorm").ctx.dtype == np.float16
    assert ex.policy.notes == ["customize_dtypes '/norm/InstanceNormalization': node fused into device op "
                               "'/norm/Mul/GroupNorm' (GroupNorm); atc does not apply the entry to it -- write "
                               "customize_dtypes /norm/Mul/GroupNorm::InputDtype:float32,... to set the fused op's "
                               "dtype"]


def test_customize_dtypes_wins_over_keep_dtype_and_output_dtype_rounds(gn_model):
    """customize_dtypes beats keep_dtype (--customize_dtypes.md); a narrower OutputDtype rounds the outputs."""
    prof = apply_knobs("ascend910b", keep_dtype=["OpType::SoftmaxV2"],
                       customize_dtypes=["OpType::SoftmaxV2:InputDtype:float16"])
    assert Executor(gn_model, NpuPolicy(prof)).step("/attn/Softmax").ctx.dtype == np.float16
    prof = apply_knobs("ascend910b", customize_dtypes=["/attn/Softmax::InputDtype:float32,OutputDtype:float16"])
    ctx = Executor(gn_model, NpuPolicy(prof)).step("/attn/Softmax").ctx
    assert ctx.dtype == np.float32 and ctx.compress is not None
    y = ctx.compress(np.array([1 + 2.0 ** -12], np.float32))
    assert y.dtype == np.float32 and y[0] == 1.0  # rounded through fp16, stored as fp32


def test_a_profile_variant_override_wins_over_the_table(gn_model):
    prof = load_profile("ascend910b").replace(variants={"group_norm": "fp16_fp32stats_welford"})
    assert _bound(Executor(gn_model, NpuPolicy(prof)), "/norm/Mul/GroupNorm")[0] == \
        {"group_norm": "fp16_fp32stats_welford"}


@pytest.mark.parametrize("changes, says", [
    ({"implmode_by_op_type": {"InstanceNormalization": "high_precision"}},
     "InstanceNormalization is an ONNX op type; ATC takes the Ascend IR op type InstanceNorm, which has no implmode"),
    ({"implmode_by_op_type": {"GroupNorm": "high_precision"}}, "GroupNorm has no implmode on the device"),
    ({"implmode_by_op_type": {"Softmax": "high_precision"}}, "Ascend IR op type SoftmaxV2"),
    ({"implmode_by_op_type": {"Frobnicate": "high_precision"}}, "not an Ascend IR op type of the device table"),
    ({"keep_dtype": ("OpType::Conv",)}, "ATC takes the Ascend IR op type Conv2D"),
    ({"device": "ascend999"}, "is not a chip of the device kernel table"),
    ({"fusion": {"NoSuchPass": "off"}}, "is not a fusion pass"),
    ({"bracket": "middling"}, "bracket 'middling' is not one of"),
])
def test_device_knobs_refuse_what_atc_would_refuse(changes, says):
    with pytest.raises(InputError, match=None) as exc:
        load_profile("ascend910b").replace(**changes)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_ir_types_with_an_implmode_are_accepted_and_a_generic_profile_keeps_onnx_types():
    load_profile("ascend910b").replace(implmode_by_op_type={"SoftmaxV2": "high_precision", "Gelu": "high_performance"})
    load_profile("fp32").replace(implmode_by_op_type={"InstanceNormalization": "high_precision"})  # generic: as before
    with pytest.raises(InputError, match="implmode 'default' is not one of"):
        load_profile("fp32").replace(implmode="default")  # each device op's own default needs a device
