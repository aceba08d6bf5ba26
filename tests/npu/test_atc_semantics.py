"""What each ATC precision setting does to the emulated device, rule by rule (docs/ATC.md; the GE sources are cited
there): precision_mode v1 / v2, the mixed-precision lists and modify_mixlist, customize_dtypes, the implmode
precedence (op_precision_mode ini > op_select_implmode + optypelist_for_implmode), atc's underscore spellings on
every command, and the fix writer (npu.fixes).

Each test names the realistic bug it catches."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from mschecker.errors import InputError, UsageError
from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.fixes import explicit_implmodes, moved_profile, op_facts
from mschecker.npu.knobs import add_npu_arguments, apply_knobs, knobs_from_args

from .fusion_graphs import G, gelu, group_norm

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


def _mixed_model():
    """x -> Pow (black on 910B, gray on 310P) -> Sigmoid (gray) -> MatMul (BatchMatMulV2, white) -> Sigmoid (gray) ->
    GroupNorm
    (fused, gray) -> Exp (gray) -> Add(graph input y) (gray)."""
    g = G((1, 8, 4, 4), inputs={"y": (1, 8, 4, 4)})
    p = g.op("Pow", ["x", g.const(np.float32(2.0))], "/pow")
    s0 = g.op("Sigmoid", [p], "/sig0")
    mm = g.op("MatMul", [s0, g.const(np.eye(4, dtype=np.float32))], "/mm")
    s1 = g.op("Sigmoid", [mm], "/sig1")
    gn = group_norm(g, s1, groups=4, channels=8, prefix="/norm")
    e = g.op("Exp", [gn], "/exp")
    return g.model(g.op("Add", [e, "y"], "/add"))


def _dtype(ex, name):
    return ex.step(name).ctx.dtype


def _run(model, **knobs):
    return Executor(model, NpuPolicy(apply_knobs(knobs.pop("profile", "ascend910b"), **knobs)))


# ------------------------------------------------------------------------------------------------ precision modes
def test_mixed_precision_white_lowers_gray_follows_black_stays():
    """allow_mix_precision on 910B: Pow is black (fp32) and the Sigmoid after it follows it (fp32); BatchMatMulV2 is
    white (fp16) and every gray op after it follows (fp16). A policy treating gray as white (or as black) fails."""
    ex = _run(_mixed_model(), precision_mode="allow_mix_precision")
    assert [_dtype(ex, n) for n in ("/pow", "/sig0", "/mm", "/sig1", "/norm/Mul/GroupNorm", "/exp", "/add")] == \
        [F32, F32, F16, F16, F16, F16, F16]


def test_the_310p_has_no_black_pow_so_its_gray_chain_follows_the_graph_input():
    """310P ops-info: Pow has no precision_reduce flag (gray): it follows its producer, the fp32 graph input."""
    ex = _run(_mixed_model(), profile="ascend310p", precision_mode="allow_mix_precision")
    assert [_dtype(ex, n) for n in ("/pow", "/sig0", "/mm", "/sig1")] == [F32, F32, F16, F16]


def test_modify_mixlist_moves_an_op_type_to_the_black_list():
    ex = _run(_mixed_model(), precision_mode_v2="mixed_float16",
              modify_mixlist={"black-list": {"to-add": ["BatchMatMulV2"]}})  # ONNX MatMul's IR type
    assert [_dtype(ex, n) for n in ("/mm", "/sig1", "/norm/Mul/GroupNorm")] == [F32, F32, F32]
    assert ex.policy.profile.precision_mode == "allow_mix_precision_fp16"  # v2's v1 twin


def test_mixed_bf16_lowers_to_bfloat16_and_the_310p_refuses_it():
    ex = _run(_mixed_model(), precision_mode="allow_mix_precision_bf16")
    assert _dtype(ex, "/mm").name == "bfloat16" and _dtype(ex, "/pow") == F32
    with pytest.raises(InputError, match="the 310P has no bfloat16"):
        apply_knobs("ascend310p", precision_mode_v2="mixed_bfloat16")


def test_mixed_modes_need_a_device_profile():
    from mschecker.graph.policy import KernelUnavailable

    with pytest.raises(KernelUnavailable, match="give the profile a device"):
        NpuPolicy(apply_knobs("fp32", precision_mode="allow_mix_precision"))


def test_force_fp32_is_cube_fp16in_fp32out_on_a_device():
    """--precision_mode.md: force_fp32 == cube_fp16in_fp32out: a cube op reads fp16-rounded operands into an fp32
    result, vector ops compute in fp32. A policy making force_fp32 all-fp32 on the device misses the operand
    rounding; the generic profile keeps fp32 everywhere."""
    g = G((2, 4))
    w = np.array([[1 + 2.0 ** -13, 0, 0, 0]] * 4, np.float32).T  # not an fp16 value: its rounding shows
    model = g.model(g.op("MatMul", ["x", g.const(w)], "/mm"))
    x = {"x": np.ones((2, 4), np.float32)}
    for mode in ("force_fp32", "cube_fp16in_fp32out"):
        ex = _run(model, precision_mode=mode)
        assert _dtype(ex, "/mm") == F32 and "operands:float16" in ex.step("/mm").ctx.description.split()
        assert ex.run(x)["/mm_out"][0, 0] == np.float32(1.0)  # 1 + 2^-13 rounded to fp16 is 1
    generic = Executor(model, NpuPolicy(apply_knobs("fp32", precision_mode="force_fp32")))
    assert generic.run(x)["/mm_out"][0, 0] == np.float32(1 + 2.0 ** -13)


def test_precision_mode_and_v2_are_refused_together_everywhere(tmp_path):
    with pytest.raises(UsageError, match="atc refuses"):
        apply_knobs("ascend910b", precision_mode="force_fp16", precision_mode_v2="fp16")
    p = tmp_path / "p.toml"
    p.write_text('name = "p"\ndevice = "ascend910b"\nprecision_mode = "force_fp16"\nprecision_mode_v2 = "origin"\n'
                 '[implmode]\ndefault = "default"\n')
    with pytest.raises(InputError, match="atc refuses the two together"):
        load_profile(p)
    with pytest.raises(UsageError, match="atc refuses --precision_mode together with --precision_mode_v2"):
        _flags(["--precision_mode=force_fp16", "--precision_mode_v2=origin"])
    with pytest.raises(InputError, match="Ascend 950 only"):
        apply_knobs("ascend910b", precision_mode_v2="mixed_hif8")


def test_v2_spelling_survives_the_profile_file_round_trip():
    prof = apply_knobs("ascend910b", precision_mode_v2="origin")
    assert prof.precision_mode == "must_keep_origin_dtype"
    again = load_profile_from_dict(prof.to_dict())
    assert again.precision_mode_v2 == "origin" and again == prof


def load_profile_from_dict(data):
    from mschecker.npu.profile import profile_from_dict

    return profile_from_dict(data, "round trip")


# ------------------------------------------------------------------------------------------------ implmodes
def _gelu_model():
    g = G((2, 8))
    return g.model(gelu(g, prefix="/ff"))


def _gelu_name(ex):
    return next(st.label for st in ex.steps if st.node.op_type == "Gelu")


@pytest.mark.parametrize("knobs, mode", [
    ({}, "high_precision"),                                                   # the kernel's own default
    ({"implmode": "high_performance"}, "high_precision"),                     # high_performance.ini: not Gelu
    ({"implmode": "high_performance_for_all"}, "high_performance"),
    ({"implmode": "high_performance", "optypelist_for_implmode": ["Gelu"]}, "high_performance"),  # the SD recipe
    ({"implmode": "high_performance", "optypelist_for_implmode": ["Sigmoid"]}, "high_precision"),  # not listed
    # an ini makes atc ignore op_select_implmode and optypelist_for_implmode
    ({"implmode": "high_performance_for_all", "implmode_by_op_type": {"Exp": "high_precision"}}, "high_precision"),
    ({"implmode_by_op_type": {"Gelu": "high_performance"}}, "high_performance"),
])
def test_implmode_precedence_is_atcs(knobs, mode):
    ex = _run(_gelu_model(), **knobs)
    assert ex.step(_gelu_name(ex)).ctx.implmode == mode


def test_by_node_name_is_the_device_name_and_beats_the_op_type():
    ex = _run(_gelu_model())
    name = _gelu_name(ex)
    ex = _run(_gelu_model(), implmode_by_op_type={"Gelu": "high_performance"}, implmode_by_node={name: "high_precision"})
    assert ex.step(name).ctx.implmode == "high_precision"


@pytest.mark.parametrize("knobs, says", [
    ({"implmode_by_op_type": {"GroupNorm": "high_precision"}}, "GroupNorm has no implmode"),
    ({"implmode_by_op_type": {"Gelu": "keep_fp16"}}, "Gelu implements high_performance, high_precision"),
    ({"implmode_by_op_type": {"Gelu": "enable_hi_float_32_execution"}}, "not supported by the current ATC"),
    ({"implmode": "high_precision", "optypelist_for_implmode": ["Softmax"]}, "Ascend IR op type SoftmaxV2"),
    ({"implmode": "high_precision", "optypelist_for_implmode": ["SoftmaxV3"]}, "nearest: SoftmaxV2"),
    ({"optypelist_for_implmode": ["Gelu"]}, "atc refuses --optypelist_for_implmode without --op_select_implmode"),
    ({"customize_dtypes": ["OpType::GroupNormalization:InputDtype:float32"]}, "ATC takes the Ascend IR op type"),
    ({"customize_dtypes": ["conv::InputDtype:int8"]}, "dtype 'int8' is not modelled"),
    ({"precision_mode": "allow_mix_precision", "modify_mixlist": {"black-list": {"to-add": ["Softmax"]}}},
     "SoftmaxV2"),
])
def test_what_the_device_refuses_is_one_line_naming_what_to_write(knobs, says):
    with pytest.raises(InputError, match=says):
        apply_knobs("ascend910b", **knobs)


# ------------------------------------------------------------------------------------------------ flags
def _flags(argv, stages=()):
    p = argparse.ArgumentParser()
    add_npu_arguments(p, stages)
    return knobs_from_args(p.parse_args(argv), stages)


def test_an_atc_command_lines_precision_part_pastes_as_it_is(tmp_path):
    """The SD recipe's UNet flags and every other precision flag in atc's underscore spelling."""
    cfg = tmp_path / "custom_precision.cfg"
    cfg.write_text("/up_blocks.2/resnets.0/norm2/Mul/GroupNorm:InputDtype:float32\n")
    mix = tmp_path / "mix.json"
    mix.write_text('{"black-list": {"to-add": ["SoftmaxV2"]}}')
    k = _flags(["--precision_mode=allow_mix_precision", "--optypelist_for_implmode=Gelu,Sigmoid",
                "--op_select_implmode=high_performance", f"--customize_dtypes={cfg}", f"--modify_mixlist={mix}",
                "--keep_dtype=OpType::Conv2D"])[None]
    assert k == {"precision_mode": "allow_mix_precision", "optypelist_for_implmode": ["Gelu", "Sigmoid"],
                 "implmode": "high_performance",
                 "customize_dtypes": ["/up_blocks.2/resnets.0/norm2/Mul/GroupNorm::InputDtype:float32"],
                 "modify_mixlist": {"black-list": {"to-add": ["SoftmaxV2"]}}, "keep_dtype": ["OpType::Conv2D"]}
    prof = apply_knobs("ascend910b", **k)
    assert prof.optypelist_for_implmode == ("Gelu", "Sigmoid") and prof.implmode == "high_performance"


def test_customize_dtypes_inline_takes_a_stage_prefix_and_keeps_its_colons():
    k = _flags(["--customize-dtypes", "vae_decoder:a/Mul/GroupNorm:InputDtype:float32",
                "--customize-dtypes", "OpType::SoftmaxV2:InputDtype:float32"], ("unet", "vae_decoder"))
    assert k["vae_decoder"]["customize_dtypes"] == ["a/Mul/GroupNorm::InputDtype:float32"]
    assert k[None]["customize_dtypes"] == ["OpType::SoftmaxV2:InputDtype:float32"]


# ------------------------------------------------------------------------------------------------ the fix writer
def _gn_model():
    g = G((1, 8, 4, 4))
    y = group_norm(g, groups=4, channels=8, prefix="/norm")
    return g.model(g.op("Sigmoid", [y], "/act"))


def test_moves_are_written_where_atc_can_take_them():
    """An op a fusion created: customize_dtypes (every float input fp32); an unfused op: keep_dtype; an op type
    that only fusions make: customize_dtypes by type; under a mixed mode an unfused type goes to the black list;
    high_precision: the ini, with the base's op_select_implmode written into it (atc reads one or the other)."""
    base = load_profile("ascend910b")
    facts = op_facts(Executor(_gn_model(), NpuPolicy(base)))
    assert facts["/norm/Mul/GroupNorm"].fused_away and not facts["/act"].fused_away
    p = moved_profile(base, facts, fp32=["/norm/Mul/GroupNorm", "/act"])
    assert p.keep_dtype == ("/act",)
    assert p.customize_dtypes == ("/norm/Mul/GroupNorm::InputDtype:float32,float32,float32,OutputDtype:float32",)
    assert moved_profile(base, facts, fp32=["OpType::GroupNorm"]).customize_dtypes == \
        ("OpType::GroupNorm:InputDtype:float32,float32,float32,OutputDtype:float32",)
    mixed = base.replace(precision_mode="allow_mix_precision")
    assert moved_profile(mixed, facts, fp32=["OpType::Sigmoid"]).modify_mixlist == \
        {"black-list": {"to-add": ["Sigmoid"]}}
    assert moved_profile(base, facts, fusion_off=["GroupNormFusionPass"]).fusion == {"GroupNormFusionPass": "off"}
    sel = base.replace(implmode="high_precision_for_all")
    hp = moved_profile(sel, facts, high_precision=["/act"])
    assert hp.implmode_by_node == {"/act": "high_precision"}
    assert hp.implmode_by_op_type == {"Sigmoid": "high_precision"}  # the for_all select, for the graph's types
    ex = Executor(_gn_model(), NpuPolicy(p))  # what is written is what runs
    assert _dtype(ex, "/norm/Mul/GroupNorm") == F32 and _dtype(ex, "/act") == F32


def test_explicit_implmodes_writes_only_modes_an_op_implements():
    prof = load_profile("ascend910b").replace(implmode="high_performance", optypelist_for_implmode=("Gelu",))
    assert explicit_implmodes(prof) == {"Gelu": "high_performance"}
    assert explicit_implmodes(load_profile("ascend910b")) == {}
    everything = explicit_implmodes(load_profile("ascend910b").replace(implmode="high_precision_for_all"))
    assert everything["Gelu"] == "high_precision" and "GroupNorm" not in everything
    assert all("high_precision" in modes for modes in [__import__("mschecker.npu.device_table", fromlist=["x"])
                                                        .IMPLMODE_INI[t] for t in everything])


# ------------------------------------------------------------------------------------------------ the CLI
def test_cli_says_once_what_an_entry_does_not_reach_and_never_before_an_error(tmp_path, capsys):
    """`note:` on stderr for an entry naming a node GE's fusion consumed (atc would only log it), then the run;
    an entry matching nothing is one error line with no note in front (the exit-2 contract)."""
    import onnx

    from mschecker.cli import main

    model = tmp_path / "gn.onnx"
    onnx.save(_gn_model(), model)
    x = tmp_path / "x.npz"
    np.savez(x, x=np.random.default_rng(0).standard_normal((1, 8, 4, 4)).astype(np.float32))
    argv = ["run", "--model", str(model), "--input", str(x), "--device", "npu"]
    assert main(argv + ["--keep_dtype", "/norm/InstanceNormalization,/norm/Reshape"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("mschecker: note: keep_dtype '/norm/") for line in err)
    assert "customize_dtypes /norm/Mul/GroupNorm::InputDtype:float32" in err[0]
    assert main(argv + ["--keep_dtype", "/norm/InstanceNormalization,/nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'/nope' matches no node name" in err[0]


def test_the_plan_lists_every_entry_that_does_nothing_without_failing():
    """`mschecker plan` is where an engineer checks a setting: an entry naming no node and one naming a node a
    fusion consumed are both listed as notes (run / check / bisect make the first an error)."""
    from mschecker.npu.plan import device_plan

    plan = device_plan(_gn_model(), apply_knobs("ascend910b", keep_dtype=["/norm/InstanceNormalization", "/nope"]))
    assert len(plan.notes) == 2 and plan.to_json()["notes"] == plan.notes
    assert any("'/nope' matches no node name" in n for n in plan.notes)
    assert any("fused into device op '/norm/Mul/GroupNorm'" in n for n in plan.notes)
