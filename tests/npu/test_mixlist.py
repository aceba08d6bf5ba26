"""ATC mixed-precision lists (mschecker.npu.mixlist): colours per chip, modify_mixlist, and GE's gray rule."""
from __future__ import annotations

import re

import pytest

from mschecker.npu import mixlist as ml
from mschecker.npu.device_table import CHIPS, ir_types, table

B, P = "ascend910b", "ascend310p"
HEX40 = re.compile(r"^[0-9a-f]{40}$")


# ------------------------------------------------------------------------------------------------ colours
@pytest.mark.parametrize("chip, ir, want", [
    (B, "MatMulV2", "white"), (B, "Conv2D", "white"), (B, "Pow", "black"), (B, "ReduceMeanD", "black"),
    (B, "Log", "black"), (B, "SoftmaxV2", "gray"), (B, "Add", "gray"), (B, "MaxPoolV3", "white"),
    (B, "GeGluV2", "white"), (B, "GroupNormSilu", "gray"),
    (P, "MatMulV2", "white"), (P, "BatchMatMulV2", "white"), (P, "Conv2D", "white"), (P, "Pow", "gray"),
    (P, "ReduceMeanD", "gray"), (P, "ReduceSum", "gray"), (P, "Log", "gray"), (P, "MaxPoolV3", "gray"),
    (P, "SoftmaxV2", "gray"), (P, "GeGluV2", "white"), (P, "IsInf", "white"), (P, "GroupNormSilu", "gray"),
    (P, "PromptFlashAttention", "white"),
])
def test_sourced_colours(chip, ir, want):
    assert ml.colour(chip, ir) == want
    src = ml.colour_source(chip, ir)
    assert HEX40.match(src.commit) and src.repo and src.path
    assert not src.note.startswith("assumption:")


def test_310p_sources_name_the_ini_line_or_the_def():
    s = ml.colour_source(P, "MatMulV2")
    assert s.repo == "dengguojie/vue-element-admin" and s.path.endswith("aic-ascend310p-ops-info.ini")
    assert "precision_reduce.flag=true" in s.note
    s = ml.colour_source(P, "GeGluV2")
    assert s.repo == "hicann/ops-nn" and s.path.endswith("ge_glu_v2_def.cpp")


@pytest.mark.parametrize("chip", CHIPS)
def test_every_ir_type_has_a_colour(chip):
    for ir in ir_types():
        assert ml.colour(chip, ir) in ml.COLOURS, ir
        src = ml.colour_source(chip, ir)
        assert HEX40.match(src.commit), (ir, src)


def test_910b_reuses_the_device_table():
    rows = table(B)
    for ir in ir_types():
        assert ml.colour(B, ir) == rows[ir].mixlist, ir


def test_310p_fallbacks_are_marked_assumptions():
    marked = {ir for ir in ir_types() if ml.colour_source(P, ir).note.startswith("assumption:")}
    assert marked == set(ml._NO_310P_SOURCE)
    for ir in marked:
        assert ml.colour(P, ir) == ml.colour(B, ir)


def test_absent_ops_are_gray_and_flagged():
    for chip in CHIPS:
        assert not ml.in_opsinfo(chip, "TopK") and ml.colour(chip, "TopK") == "gray"
        assert ml.in_opsinfo(chip, "Add")
    assert ml.in_opsinfo(B, "FlashAttentionScore") and not ml.in_opsinfo(P, "FlashAttentionScore")
    with pytest.raises(KeyError):
        ml.colour("ascend910", "Add")


# ------------------------------------------------------------------------------------------------ modify_mixlist
A_G, R_G = ml.kPrecisionReduceToAddGrayList, ml.kPrecisionReduceToRemoveGrayList
A_W, R_W = ml.kPrecisionReduceToAddWhiteList, ml.kPrecisionReduceToRemoveWhiteList
A_B, R_B = ml.kPrecisionReduceToAddBlackList, ml.kPrecisionReduceToRemoveBlackList

# every combination VerifyMixlist accepts -> resulting colour for an op that starts (white, black, gray)
_EXPECT = {
    R_B: ("white", "gray", "gray"),
    R_W: ("gray", "black", "gray"),
    A_G: ("white", "black", "gray"),
    A_G | R_B: ("white", "gray", "gray"),
    A_G | R_W: ("gray", "black", "gray"),
    A_W: ("white", "white", "white"),
    A_W | R_G: ("white", "white", "white"),
    A_W | R_B: ("white", "white", "white"),
    A_B: ("black", "black", "black"),
    A_B | R_G: ("black", "black", "black"),
    A_B | R_W: ("black", "black", "black"),
}


def test_bitmaps_match_ge():
    assert (A_G, R_G, A_W, R_W, A_B, R_B) == (1, 2, 4, 8, 16, 32)
    assert ml.bitmap("black-list", "to-remove") == R_B and ml.bitmap("white-list", "to-add") == A_W
    assert ml.bitmap("gray-list", "to-remove") == R_G
    assert set(_EXPECT) == set(ml.kPrecisionReduceUpdateTemplate)


@pytest.mark.parametrize("bits", sorted(_EXPECT))
def test_every_modify_mixlist_combination(bits):
    for op, start in (("MatMulV2", 0), ("Pow", 1), ("Add", 2)):
        assert ml.apply_updates(B, op, {op: bits}) == _EXPECT[bits][start], (op, bin(bits))


def test_updates_for_other_ops_change_nothing():
    assert ml.apply_updates(B, "Pow", {"Add": A_W}) == "black"
    assert ml.apply_updates(P, "Pow", {}) == "gray"
    assert ml.apply_updates(P, "Pow", {"Pow": A_B}) == "black"


@pytest.mark.parametrize("bits", [0, R_G, A_G | A_W, A_W | A_B, R_W | R_B, A_W | R_W, 64])
def test_invalid_bitmaps_are_refused(bits):
    with pytest.raises(ValueError):
        ml.apply_updates(B, "Add", {"Add": bits})
    with pytest.raises(ValueError):
        ml.MixState(B, updates={"Add": bits})


def test_remove_mismatch_only_warns():
    assert ml.apply_updates(B, "Pow", {"Pow": R_W}) == "black"
    assert ml.remove_mismatches(B, {"Pow": R_W, "MatMulV2": R_W}) == [
        "Pow: to-remove from white-list, but Pow is black on ascend910b: ignored"]


# ------------------------------------------------------------------------------------------------ the gray rule
def _chain(chip, types, **kw):
    """x -> types[0] -> types[1] -> ...; returns the decisions in order."""
    st = ml.MixState(chip, **kw)
    st.graph_input("x")
    st.constant("w")
    prev, out = "x", []
    for k, ir in enumerate(types):
        ins = [prev, "w"] if ir in ("MatMulV2", "Conv2D") else [prev]
        out.append(st.decide(f"n{k}", ir, ins, [f"t{k}"]))
        prev = f"t{k}"
    return out


def test_white_then_gray_chain_is_lowered():
    assert _chain(B, ["MatMulV2", "Add", "Mul", "SoftmaxV2"]) == [True, True, True, True]


def test_black_then_gray_stays_fp32():
    assert _chain(B, ["MatMulV2", "Pow", "Add", "Mul"]) == [True, False, False, False]


def test_chip_difference_pow_reducemean():
    # Pow/ReduceMeanD are black on 910B, gray (follow the MatMul) on 310P
    assert _chain(P, ["MatMulV2", "Pow", "Add"]) == [True, True, True]
    assert _chain(B, ["Conv2D", "ReduceMeanD", "Sqrt"]) == [True, False, False]
    assert _chain(P, ["Conv2D", "ReduceMeanD", "Sqrt"]) == [True, True, True]


def test_gray_fed_by_the_graph_input_stays_fp32():
    assert _chain(B, ["Add", "MatMulV2", "Add"]) == [False, True, True]


def _two_input(order, chip=B):
    st = ml.MixState(chip)
    st.graph_input("x")
    st.constant("w")
    st.decide("mm", "MatMulV2", ["x", "w"], ["lo"])     # fp16
    st.decide("pw", "Pow", ["x", "w"], ["hi"])          # black: fp32
    return st.decide("add", "Add", order, ["y"])


def test_mixed_inputs_first_nonconstant_input_decides():
    assert _two_input(["lo", "hi"]) is True
    assert _two_input(["hi", "lo"]) is False


def _lowered():
    """A 910B mixed state with graph input x, constant w and the white MatMulV2's lowered output lo."""
    st = ml.MixState(B)
    st.graph_input("x")
    st.constant("w")
    st.decide("mm", "MatMulV2", ["x", "w"], ["lo"])
    return st


def test_a_graph_input_is_not_a_constant():
    # GE's SortInputBySequence defers only Const/Constant/Variable producers; a Data (graph input) at index 0
    # decides like any producer: fp32
    st = _lowered()
    assert st.decide("add", "Add", ["x", "lo"], ["y"]) is False
    assert st.decide("add2", "Add", ["lo", "x"], ["y2"]) is True


def test_constants_are_visited_after_the_other_inputs():
    # Add(const, lowered): the constant (fp32) is input 0 but GE visits it last -> follows the lowered input
    st = _lowered()
    assert st.decide("add", "Add", ["w", "lo"], ["y"]) is True
    # a Const node's output counts as a constant too
    st.decide("c", "Const", [], ["c0"])
    assert st.decide("mul", "Mul", ["c0", "y"], ["z"]) is True
    # only constants: fp32
    assert st.decide("add2", "Add", ["w", "c0"], ["z2"]) is False


def test_non_float_inputs_do_not_decide():
    st = _lowered()
    st.decide("gt", "Greater", ["x", "w"], ["cond"], out_dtypes=["bool"])
    assert st.decide("sel", "SelectV2", ["cond", "lo", "x"], ["y"]) is True
    st.graph_input("idx", "int64")
    assert st.decide("g", "GatherV2", ["idx", "lo"], ["g0"]) is True


def test_cast_is_never_lowered_and_a_fp16_to_fp32_cast_is_looked_through():
    st = ml.MixState(B)
    st.graph_input("x16", "float16")
    assert st.decide("cast", "Cast", ["x16"], ["x32"]) is False
    assert st.decide("add", "Add", ["x32"], ["y"]) is True
    black_cast = ml.MixState(B, updates={"Cast": A_B})
    black_cast.graph_input("x16", "float16")
    black_cast.decide("cast", "Cast", ["x16"], ["x32"])
    assert black_cast.decide("add", "Add", ["x32"], ["y"]) is False


def test_an_fp32_cast_after_a_lowered_op_is_not_looked_through():
    st = _lowered()
    st.decide("cast", "Cast", ["lo"], ["c"])             # original fp32 -> fp32: keeps fp32
    assert st.decide("add", "Add", ["c"], ["y"]) is False


def test_keep_dtype_and_kernel_support():
    st = ml.MixState(B)
    st.graph_input("x")
    st.constant("w")
    assert st.decide("mm", "MatMulV2", ["x", "w"], ["a"], keep_dtype=True) is False
    assert st.decide("add", "Add", ["a"], ["b"]) is False
    assert st.decide("mm2", "MatMulV2", ["x", "w"], ["c"], low_ok=False) is False
    assert st.decide("mm3", "MatMulV2", ["x", "w"], ["d"]) is True
    assert st.decide("add2", "Add", ["d"], ["e"], low_ok=False) is False
    assert st.decide("add3", "Add", ["x"], ["f"], fp32_ok=False) is True    # fp32 unsupported: reduce to fp16


def test_modify_mixlist_in_the_stream():
    assert _chain(B, ["MatMulV2", "Pow", "Add"], updates={"Pow": R_B}) == [True, True, True]
    assert _chain(B, ["MatMulV2", "Add", "Mul"], updates={"Add": A_B}) == [True, False, False]
    assert _chain(B, ["Add", "Mul"], updates={"Add": A_W}) == [True, True]
    assert _chain(B, ["MatMulV2", "Add"], updates={"MatMulV2": A_G | R_W}) == [False, False]


def test_absent_ops_gray_or_kept():
    st = _lowered()
    assert st.decide("tk", "TopK", ["lo"], ["v"]) is True
    keep = ml.MixState(B, absent="keep")
    keep.graph_input("x")
    keep.constant("w")
    keep.decide("mm", "MatMulV2", ["x", "w"], ["lo"])
    assert keep.decide("tk", "TopK", ["lo"], ["v"]) is False
    assert keep.decide("add", "Add", ["v"], ["y"]) is False


def test_bf16():
    assert _chain(B, ["MatMulV2", "Add", "Pow", "Mul"], low="bf16") == [True, True, False, False]
    with pytest.raises(ValueError):
        ml.MixState(P, low="bf16")
    # an op whose original dtype is fp16 keeps fp16 in bf16 mode (fp16 is only forbidden for fp32 originals)
    st = ml.MixState(B, low="bf16")
    st.graph_input("h", "float16")
    assert st.decide("add16", "Add", ["h"], ["y16"]) is False
    assert st.tensors["y16"].current == "float16"
    st.graph_input("x")
    st.constant("w")
    st.decide("mm", "MatMulV2", ["x", "w"], ["lo"])
    assert st.tensors["lo"].current == "bfloat16"
    assert st.decide("add", "Add", ["lo"], ["y"]) is True


def test_unknown_input_is_an_error():
    st = ml.MixState(B)
    with pytest.raises(KeyError):
        st.decide("add", "Add", ["nope"], ["y"])
    st.graph_input("x")
    assert st.decide("add", "Add", ["x", ""], ["y"]) is False      # "" = absent optional input


def test_batch_form_equals_the_stream():
    nodes = [("mm", "MatMulV2", ["x", "w"], ["a"]), ("pw", "Pow", ["a"], ["b"]), ("ad", "Add", ["b", "a"], ["c"]),
             ("mu", "Mul", ["a", "c"], ["d"]), ("sh", "Shape", ["d"], ["s"], ["int64"])]
    for chip in CHIPS:
        got = ml.lowered(chip, nodes, graph_inputs=["x"], constants={"w": "float32"})
        st = ml.MixState(chip)
        st.graph_input("x")
        st.constant("w")
        want = {n[0]: st.decide(n[0], n[1], n[2], n[3], out_dtypes=n[4] if len(n) > 4 else None) for n in nodes}
        assert got == want
        assert st.tensors["s"].current == "int64" and st.tensors["d"].current == "float16"
    assert ml.lowered(B, nodes, graph_inputs=["x"], constants=["w"]) == {
        "mm": True, "pw": False, "ad": False, "mu": True, "sh": True}
    assert ml.lowered(P, nodes, graph_inputs=["x"], constants=["w"]) == {
        "mm": True, "pw": True, "ad": True, "mu": True, "sh": True}
