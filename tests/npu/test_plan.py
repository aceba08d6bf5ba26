"""The device plan (mschecker/npu/plan.py) and `mschecker plan` (mschecker/commands/plan.py): device ops in
execution order with the table's facts and the policy's bound variants; exit codes; JSON shape; names printed
literally."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from mschecker.cli import main as cli
from mschecker.npu import device_table as dt
from mschecker.npu.plan import PLAN_SCHEMA, device_plan

from .fusion_graphs import G, gelu, group_norm, linear


def small_model(prefix_gn="/norm", prefix_act="/act"):
    """GroupNorm -> (flatten to (N, C, H*W)) -> Gelu -> Linear: one op of each fused kind, plus host-folded shape
    arithmetic (Shape, Constant)."""
    g = G((2, 8, 4, 4))
    y = group_norm(g, prefix=prefix_gn)
    flat = g.op("Reshape", [y, g.constant_node(np.array([2, 8, 16]), dtype=np.int64)], "/flatten")
    a = gelu(g, flat, prefix=prefix_act)
    z = linear(g, a, k=16, n=6)
    return g.model(z)


@pytest.fixture
def model_path(tmp_path):
    p = tmp_path / "m.onnx"
    onnx.save(small_model(), p)
    return p


def expected_variants(chip, ir, kernels, implmode, saturation=False):
    out = {}
    for k in kernels:
        v = dt.variant_for(chip, ir, k, implmode)
        from mschecker.kernels.registry import get_kernel

        if saturation and f"{v}_sat" in get_kernel(k).variants:
            v = f"{v}_sat"
        out[k] = v
    return out


@pytest.mark.parametrize("profile", ["ascend910b", "ascend310p"])
def test_plan_lists_fused_device_ops_in_order_with_table_facts(profile):
    plan = device_plan(small_model(), profile)
    assert [(op.ir_type, op.name) for op in plan.ops] == [
        ("GroupNorm", "/norm/Mul/GroupNorm"), ("Reshape", "/flatten"), ("Gelu", "/act/Mul_1/Gelu"),
        ("BatchMatMulV2", "/fc/MatMul")]
    assert plan.chip == profile and plan.host_folded > 0  # Shape / Constant nodes: folded, not device ops
    gn, _, ge, mm = plan.ops
    assert gn.fused_by == "GroupNormFusionPass" and gn.covers[0] == "/norm/Reshape" and len(gn.covers) == 5
    assert mm.fused_by == "MatMulBiasAddFusionPass" and mm.covers == ("/fc/MatMul", "/fc/Add")
    assert plan.ops[1].fused_by == "" and plan.ops[1].covers == ("/flatten",)
    for op in plan.ops:
        row = dt.kernel_row(profile, op.ir_type)
        assert op.algorithm == row.algorithm and op.sources == tuple(str(s) for s in row.sources)
        assert op.implmode == ("none" if not dt.has_implmode(op.ir_type) else op.implmode)
        assert set(op.dtypes_out) == {"float16"}
        kernels = list(op.variants)
        assert op.variants == expected_variants(profile, op.ir_type, kernels, op.implmode,
                                                saturation=profile == "ascend310p")
    assert gn.implmode == "none" and set(gn.variants) == {"group_norm"}
    assert mm.dtypes_in == ("float16", "float16", "float16") and set(mm.variants) == {"matmul_bias"}
    assert plan.ops[1].dtypes_in == ("float16", "int64")


def test_plan_json_shape():
    doc = json.loads(json.dumps(device_plan(small_model(), "ascend910b").to_json()))
    assert doc["schema"] == PLAN_SCHEMA and doc["device_ops"] == len(doc["ops"]) == 4
    assert doc["counts"] == {"BatchMatMulV2": 1, "Gelu": 1, "GroupNorm": 1, "Reshape": 1}
    assert set(doc["ops"][0]) == {"index", "name", "ir_type", "covers", "fused_by", "dtypes_in", "dtypes_out",
                                  "implmode", "variants", "algorithm", "internal", "status", "assumption",
                                  "sources", "notes"}
    assert [p["name"] for p in doc["fusion"]["passes"]][:3] == ["FlashAttention", "CastRemoveFusionPass",
                                                                "GroupNormFusionPass"]


def test_plan_with_a_pass_switched_off_shows_the_unfused_ops():
    plan = device_plan(small_model(), "ascend910b", fusion={"GroupNormFusionPass": "off"})
    assert [op.ir_type for op in plan.ops][:5] == ["Reshape", "InstanceNorm", "Reshape", "Mul", "Add"]
    inn = plan.ops[1]
    assert inn.variants == {"group_norm": dt.variant_for("ascend910b", "InstanceNorm", "group_norm", None)}


def test_generic_profile_plan_has_no_fusion(tmp_path):
    plan = device_plan(small_model(), "fp32")
    assert plan.chip == "" and plan.fusion is None
    assert "GroupNorm" not in plan.counts() and plan.counts()["InstanceNormalization"] == 1, "ONNX op types"
    assert {op.algorithm for op in plan.ops} == {""}, "a generic profile models no device kernel"


def test_render_prints_names_with_markup_literally():
    from io import StringIO

    from rich.console import Console

    m = small_model(prefix_gn="/[bold]norm[/bold]", prefix_act="[red]x")
    plan = device_plan(m, "ascend910b")
    buf = StringIO()
    plan.render(Console(file=buf, width=400, color_system=None, force_terminal=False))
    text = buf.getvalue()
    assert "/[bold]norm[/bold]/Mul/GroupNorm" in text and "[red]x/Mul_1/Gelu" in text


# ----------------------------------------------------------------------------------------------- the command
def test_plan_command_tables_and_out_file(model_path, tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert cli(["plan", "--model", str(model_path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "/norm/Mul/GroupNorm" in text and "device ops by IR type" in text and "fusion passes" in text
    doc = json.loads(out.read_text())
    assert doc["counts"]["GroupNorm"] == 1 and doc["model"] == str(model_path)


def test_plan_command_json(model_path, capsys):
    assert cli(["plan", "--model", str(model_path), "--json", "--profile", "ascend310p"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chip"] == "ascend310p" and doc["profile"] == "ascend310p" and len(doc["ops"]) == 4


def test_plan_command_markup_names_literal(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    onnx.save(small_model(prefix_gn="/[bold]norm[/bold]"), p)
    assert cli(["plan", "--model", str(p)]) == 0
    assert "/[bold]norm[/bold]/Mul/GroupNorm" in capsys.readouterr().out


def test_plan_command_fusion_switch_file(model_path, tmp_path, capsys):
    sw = tmp_path / "switch.cfg"
    sw.write_text('{"Switch": {"GraphFusion": {"GroupNormFusionPass": "off"}}}')
    assert cli(["plan", "--model", str(model_path), "--fusion-switch", str(sw), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "GroupNorm" not in doc["counts"] and doc["counts"]["InstanceNorm"] == 1


@pytest.mark.parametrize("args,msg", [
    (["--model", "{tmp}/missing.onnx"], "model file does not exist"),
    (["--model", "{model}", "--profile", "no_such_preset"], "no_such_preset"),
    (["--model", "{model}", "--fusion-switch", "{tmp}/missing.cfg"], "fusion switch file does not exist"),
    (["--model", "{model}", "--fusion-switch", "{bad}"], "unknown fusion pass(es) NoSuchPass"),
    (["--model", "{model}", "--out", "{tmp}/no/dir/plan.json"], "does not exist"),
])
def test_plan_command_bad_input_is_exit_2_one_line(model_path, tmp_path, capsys, args, msg):
    bad = tmp_path / "bad.cfg"
    bad.write_text("NoSuchPass:off\n")
    argv = ["plan"] + [a.format(tmp=tmp_path, model=model_path, bad=bad) for a in args]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err
    assert not (tmp_path / "no").exists()
