"""bisect's fixes in the device's vocabulary under ATC's other settings: a mixed-precision mode (the fix is a list
edit, the implmode probe sees the mode's dtypes) and an op_select_implmode with optypelist_for_implmode (the
written ini carries it, since atc ignores the two flags once an ini is given)."""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.bisect import Sample, bisect_model
from mschecker.bisect.report import write_outputs
from mschecker.npu.atc import parse_atc_command, parse_modify_mixlist, parse_op_precision_ini
from mschecker.npu.knobs import apply_knobs

from ..npu.fusion_graphs import G


def _mixed_model():
    """MatMul (white: lowers the chain) -> Mul by 3e4 -> Mul by 1e-4 -> Sigmoid: the scaled-up stream overflows
    fp16 headroom enough to fail 1e-2 only where the two Muls run in fp16."""
    g = G((1, 8, 4, 4))
    mm = g.op("MatMul", ["x", g.const(np.eye(4, dtype=np.float32))], "/mm")
    a = g.op("Mul", [mm, g.const(np.float32(3e4))], "/up")
    b = g.op("Mul", [a, g.const(np.float32(1e-4))], "/down")
    return g.model(g.op("Sigmoid", [b], "/act"))


def _samples(model, seed=0):
    x = np.random.default_rng(seed).standard_normal((1, 8, 4, 4)).astype(np.float32)
    return [Sample("s0", {"x": x})]


@pytest.fixture
def mixed(tmp_path):
    import onnx

    path = tmp_path / "mixed.onnx"
    onnx.save(_mixed_model(), path)
    return path


def test_under_a_mixed_mode_an_op_type_fix_is_a_black_list_edit(mixed, tmp_path):
    profile = apply_knobs("ascend910b", precision_mode="allow_mix_precision")
    r = bisect_model(mixed, _samples(None), tolerance=1e-2, profile=profile, granularity="op_type")
    assert r.verdict == "FIXED" and r.proof.passed
    assert r.recommendation.mixlist_black == ["Mul"] and r.recommendation.keep_dtype == []
    # Mul has no implmode: the probe, bound in graph order under the mode's lists, finds nothing to try
    assert r.search.hp_probe is None
    files = write_outputs(r, tmp_path / "fix")
    assert parse_modify_mixlist(files["modify_mixlist"]) == {"black-list": {"to-add": ["Mul"]}}
    flags = parse_atc_command((tmp_path / "fix" / "atc_flags.txt").read_text(), "atc_flags.txt")
    assert (flags.precision_mode, flags.modify_mixlist) == ("allow_mix_precision", "modify_mixlist.json")


def test_under_a_mixed_mode_a_node_fix_is_keep_dtype(mixed):
    profile = apply_knobs("ascend910b", precision_mode_v2="mixed_float16")
    r = bisect_model(mixed, _samples(None), tolerance=1e-2, profile=profile)
    assert r.verdict == "FIXED" and r.proof.passed and r.search.hp_probe is None
    assert set(r.recommendation.keep_dtype) <= {"/up", "/down"} and r.recommendation.mixlist_black == []
    assert r.recommendation.fixed.precision_mode_v2 == "mixed_float16"  # the written flag keeps the v2 spelling


def test_the_written_ini_carries_the_base_profiles_optypelist(tmp_path):
    """--op_select_implmode high_performance --optypelist_for_implmode Gelu,Sigmoid (the SD recipe's UNet flags):
    the device's i-GELU misses the tolerance, the fix is Gelu=high_precision in an ini, which makes atc ignore
    both flags -- so the ini also holds Sigmoid=high_performance, and the command line drops the two flags."""
    import onnx

    from . import models as M

    model = M.device_gelu_branches()
    path = tmp_path / "g.onnx"
    onnx.save(model, path)
    samples = [Sample(f"s{i}", M.feeds(model, 10 + i, 1.0)) for i in range(2)]
    profile = apply_knobs("ascend910b", implmode="high_performance", optypelist_for_implmode=["Gelu", "Sigmoid"])
    r = bisect_model(path, samples, tolerance=1e-2, profile=profile)
    assert r.verdict == "FIXED" and r.proof.passed
    assert r.recommendation.by_op_type == {"Gelu": "high_precision", "Sigmoid": "high_performance"}
    files = write_outputs(r, tmp_path / "fix")
    assert parse_op_precision_ini(files["op_precision"]) == ({"Sigmoid": "high_performance",
                                                             "Gelu": "high_precision"}, {})
    flags = parse_atc_command((tmp_path / "fix" / "atc_flags.txt").read_text(), "atc_flags.txt")
    assert flags.op_select_implmode is None and flags.optypelist_for_implmode == ()
    assert flags.op_precision_mode == "op_precision.ini"
