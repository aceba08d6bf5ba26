"""What issue 22's ATC mutants (tools/mutants/patches/{fixes,policy_atc,knobs_atc}_*.patch) showed no test checked:
each test here fails under the mutant it names, and passes on the code as written.

- the fix writer: an fp32 move's customize_dtypes line leaves non-float inputs alone; an op a fusion rewrote in
  place (the MatMul that absorbed its bias keeps its name) is written to keep_dtype; a high_precision move leaves
  every other op on the implmode the base profile gave it (plain high_performance is no ini entry);
- the policy: first-wins for a repeated customize_dtypes name (and the CLI's line before the profile's); a cube op
  customized fp16 in / fp32 out computes in fp32 on fp16 operands; under a mixed mode a graph input is an ordinary
  producer (not a constant) and a keep_dtype / customize_dtypes node is told to the gray rule;
- the knobs: --precision-mode on a profile that says precision_mode_v2 replaces it.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.fixes import OpFacts, explicit_implmodes, fp32_customize, moved_profile, op_facts
from mschecker.npu.knobs import apply_knobs

from .fusion_graphs import G, gelu

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


# ------------------------------------------------------------------------------------------------ the fix writer
def test_an_fp32_customize_line_leaves_non_float_inputs_as_they_are():
    """fixes_customize_nonfloat_inputs_fp32: float32 on an index or shape input is a dtype change atc applies to
    an integer tensor (or refuses), not 'compute this op in fp32'."""
    assert fp32_customize("g", False, (False, True)) == "g::InputDtype:,float32,OutputDtype:float32"
    assert fp32_customize("g", False, (True, False)) == "g::InputDtype:float32,OutputDtype:float32"
    assert fp32_customize("GatherV2", True, (False, True, False)) == \
        "OpType::GatherV2:InputDtype:,float32,OutputDtype:float32"
    facts = {"/g": OpFacts("/g", "GatherV2", "SomeFusionPass", ("/a", "/b"), (False, True))}
    assert moved_profile(load_profile("ascend910b"), facts, fp32=["/g"]).customize_dtypes == \
        ("/g::InputDtype:,float32,OutputDtype:float32",)


def _matmul_bias_model():
    g = G((2, 4))
    mm = g.op("MatMul", ["x", g.const(np.eye(4, dtype=np.float32))], "/mm")
    y = g.op("Add", [mm, g.const(np.arange(4, dtype=np.float32))], "/bias")
    return g.model(g.op("Sigmoid", [y], "/act"))


def test_an_op_fused_in_place_keeps_its_name_and_goes_to_keep_dtype():
    """fixes_fused_away_ignores_name: GE's MatMul + bias fusion rewrites the MatMul in place (same name): it exists
    when atc applies keep_dtype, so its fp32 move is a keep_dtype entry (fixes' rule), not a customize_dtypes
    line."""
    base = load_profile("ascend910b")
    facts = op_facts(Executor(_matmul_bias_model(), NpuPolicy(base)))
    assert facts["/mm"].fused_by and not facts["/mm"].fused_away
    p = moved_profile(base, facts, fp32=["/mm"])
    assert p.keep_dtype == ("/mm",) and p.customize_dtypes == ()


def _three_implmode_ops():
    g = G((2, 8))
    y = gelu(g, prefix="/ff")
    s = g.op("Softmax", [y], "/sm", axis=-1)
    return g.model(g.op("Exp", [s], "/exp"))


@pytest.mark.parametrize("select", [
    {}, {"implmode": "high_performance"}, {"implmode": "high_precision"}, {"implmode": "high_performance_for_all"},
    {"implmode": "high_precision_for_all"}, {"implmode": "high_performance", "optypelist_for_implmode": ("Gelu",)},
    {"implmode": "high_precision", "optypelist_for_implmode": ("SoftmaxV2",)},
])
def test_a_high_precision_move_leaves_every_other_op_on_its_implmode(select):
    """fixes_explicit_implmodes_forgotten, fixes_explicit_hperf_all_ops: the ini a move writes makes atc ignore
    op_select_implmode, so the ini must say for every other op what the select said -- and no more (plain
    high_performance is CANN's built-in list, each op's own default path: no entry)."""
    base = load_profile("ascend910b").replace(**select)
    model = _three_implmode_ops()
    ex = Executor(model, NpuPolicy(base))
    before = {st.label: st.ctx.implmode for st in ex.steps}
    assert {"Gelu", "SoftmaxV2", "Exp"} <= {ex.policy.op_type_of(st.node) for st in ex.steps}
    moved = moved_profile(base, op_facts(ex), high_precision=["/exp"])
    after = {st.label: st.ctx.implmode for st in Executor(model, NpuPolicy(moved)).steps}
    assert after.pop("/exp") == "high_precision"
    before.pop("/exp")
    assert after == before
    if select in ({}, {"implmode": "high_performance"}):
        assert explicit_implmodes(base, {"Gelu", "SoftmaxV2", "Exp"}) == {}
        assert dict(moved.implmode_by_op_type) == {}


# ------------------------------------------------------------------------------------------------ the policy
def _softmax_model():
    g = G((2, 8))
    return g.model(g.op("Softmax", ["x"], "/sm", axis=-1))


def test_a_repeated_customize_name_first_wins_and_the_cli_line_comes_first():
    """policy_atc_custom_last_wins, knobs_atc_customize_after_profile: atc keeps the first entry of a name;
    apply_knobs puts the command line's lines before the profile's so that the command line wins."""
    prof = load_profile("ascend910b").replace(customize_dtypes=("/sm::InputDtype:float32",
                                                                "/sm::InputDtype:float16"))
    assert Executor(_softmax_model(), NpuPolicy(prof)).step("/sm").ctx.dtype == F32
    cli = apply_knobs(prof, customize_dtypes=["/sm::InputDtype:float16"])
    assert cli.customize_dtypes[0] == "/sm::InputDtype:float16"
    assert Executor(_softmax_model(), NpuPolicy(cli)).step("/sm").ctx.dtype == F16


def test_a_cube_op_customized_fp16_in_fp32_out_computes_fp32_on_fp16_operands():
    """policy_atc_cube_fp16_in_fp32_out_custom: the cube's fp16 x fp16 products are exact in its fp32
    accumulator: the result is fp32 arithmetic on fp16-rounded operands, not an fp16 result."""
    g = G((2, 4))
    w = np.full((4, 4), 1 + 2.0 ** -13, np.float32)   # rounds to 1.0 in fp16
    model = g.model(g.op("MatMul", ["x", g.const(w)], "/mm"))
    prof = apply_knobs("ascend910b", customize_dtypes=["/mm::InputDtype:float16,float16,OutputDtype:float32"])
    ex = Executor(model, NpuPolicy(prof))
    ctx = ex.step("/mm").ctx
    assert ctx.dtype == F32 and "operands:float16" in ctx.description.split()
    x = np.array([[1000.5, 0.25, 0, 0]] * 2, np.float32)  # fp16 values; their sum 1000.75 is not (spacing 0.5)
    got = ex.run({"x": x})["/mm_out"]
    assert got.dtype == F32 and got[0, 0] == np.float32(1000.75)


def _mixed_graph_input_first():
    """x -> MatMul (white: fp16) -> m; Add(y, m): y a graph input at index 0, the gray Add follows it."""
    g = G((2, 4), inputs={"y": (2, 4)})
    m = g.op("MatMul", ["x", g.const(np.eye(4, dtype=np.float32))], "/mm")
    return g.model(g.op("Add", ["y", m], "/add"))


def test_under_a_mixed_mode_a_graph_input_decides_like_any_producer():
    """policy_atc_mix_graph_input_constant: GE defers only Const/Constant/Variable inputs; a Data node at index 0
    decides the gray op's dtype: the graph's own fp32."""
    ex = Executor(_mixed_graph_input_first(), NpuPolicy(apply_knobs("ascend910b",
                                                                    precision_mode="allow_mix_precision")))
    assert ex.step("/mm").ctx.dtype == F16 and ex.step("/add").ctx.dtype == F32


@pytest.mark.parametrize("knob", [{"keep_dtype": ["/mm"]},
                                  {"customize_dtypes": ["/mm::InputDtype:float32,float32,OutputDtype:float32"]}])
def test_under_a_mixed_mode_a_kept_op_keeps_its_gray_successors_fp32(knob):
    """policy_atc_keep_dtype_not_in_mix: the white MatMul kept fp32 by keep_dtype / customize_dtypes produces fp32;
    the gray Sigmoid after it follows that fp32 output (a gray rule told nothing would lower it)."""
    g = G((2, 4))
    m = g.op("MatMul", ["x", g.const(np.eye(4, dtype=np.float32))], "/mm")
    model = g.model(g.op("Sigmoid", [m], "/sig"))
    plain = Executor(model, NpuPolicy(apply_knobs("ascend910b", precision_mode="allow_mix_precision")))
    assert plain.step("/mm").ctx.dtype == F16 and plain.step("/sig").ctx.dtype == F16
    ex = Executor(model, NpuPolicy(apply_knobs("ascend910b", precision_mode="allow_mix_precision", **knob)))
    assert ex.step("/mm").ctx.dtype == F32 and ex.step("/sig").ctx.dtype == F32


# ------------------------------------------------------------------------------------------------ the knobs
def test_precision_mode_replaces_a_profiles_v2_mode():
    """knobs_atc_v1_keeps_profile_v2: the profile says precision_mode_v2 = mixed_float16, the command line
    --precision-mode force_fp32: the command line's mode runs (atc takes one of the two; the flag is the later)."""
    base = load_profile("ascend910b").replace(precision_mode_v2="mixed_float16")
    assert base.precision_mode == "allow_mix_precision_fp16"
    got = apply_knobs(base, precision_mode="force_fp32")
    assert (got.precision_mode, got.precision_mode_v2) == ("force_fp32", "")
    assert apply_knobs(load_profile("ascend910b"), precision_mode_v2="origin").precision_mode == \
        "must_keep_origin_dtype"
