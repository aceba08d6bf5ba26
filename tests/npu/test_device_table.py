"""The device kernel table (mschecker/npu/device_table.py): coverage of the executor's ops, consistency with the
kernel registry and all_ops_impl_mode.ini, citations, brackets, and the generated doc."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mschecker.kernels import registry
from mschecker.graph.ops import supported_ops
from mschecker.npu import device_table as dt

ROOT = Path(__file__).resolve().parents[2]
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def _all_rows():
    for chip in dt.CHIPS:
        for ir, row in dt.table(chip).items():
            yield chip, ir, row


def _variant_refs():
    """(chip, IR type, where, kernel, variant) for every variant the table names, modelled and bracketed."""
    refs = set()
    for chip, ir, row in _all_rows():
        for where, mapping in [("modelled", row.variants)] + sorted(row.brackets.items()):
            for kernel, by_mode in mapping.items():
                for name in set(by_mode.values()):
                    refs.add((chip, ir, where, kernel, name))
    return sorted(refs)


# ------------------------------------------------------------------------------------------------ coverage
@pytest.mark.parametrize("chip", dt.CHIPS)
def test_every_supported_onnx_op_maps_to_a_row(chip):
    # Catches: an op added to the executor without a device row, or a mapping to an IR type with no row.
    rows = dt.table(chip)
    for op in supported_ops():
        ir = dt.ir_type_of(op)
        assert ir in rows, f"{op} -> {ir!r}: no {chip} row"
        # The row must say so (or the op is one of the documented no-plugin ops): a mapping by accident fails.
        assert op in rows[ir].onnx_types or dt.NO_PLUGIN.get(op) == ir, (op, ir)


def test_fusion_only_ir_types_have_rows():
    # The fused IR types the fusions emit (docs/FUSION.md) must resolve on both chips.
    for ir in ("GroupNorm", "Gelu", "LayerNorm", "BatchMatMulV2", "MatMulV2", "FlashAttentionScore",
               "PromptFlashAttention", "GroupNormSilu", "GeGluV2", "Swish", "INTrainingUpdateV2"):
        for chip in dt.CHIPS:
            assert dt.kernel_row(chip, ir).ir_type == ir
    for ir in ("BatchMatMulV2", "MatMulV2"):
        assert "matmul_bias" in dt.kernel_row("ascend910b", ir).variants


def test_attribute_dependent_mappings():
    # What the plugins and GE's one-to-one retyping passes decide from attributes (sources in the rows).
    assert dt.ir_type_of("Resize") == "ResizeNearestNeighborV2"  # ONNX default mode is nearest
    assert dt.ir_type_of("Resize", {"mode": "nearest"}) == "ResizeNearestNeighborV2"
    assert dt.ir_type_of("Resize", {"mode": b"linear"}) == "Resize"
    assert dt.ir_type_of("Resize", {"mode": "cubic"}) == "Resize"
    for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        assert dt.ir_type_of(op, {"axes": [1]}) == op + "D"  # ConstToAttrPass
        assert dt.ir_type_of(op) == op + "D"  # no axes / constant axes input
        assert dt.ir_type_of(op, {"_axes_runtime": True}) == op
    assert dt.ir_type_of("ReduceSum", {"axes": [1]}) == "ReduceSum"  # no ReduceSumD rewrite exists
    assert dt.ir_type_of("GlobalAveragePool") == "ReduceMeanD"
    # The plugin emits BatchMatMulV2 for 2-D and batched MatMul alike.
    assert dt.ir_type_of("MatMul") == dt.ir_type_of("MatMul", {}) == "BatchMatMulV2"
    assert dt.ir_type_of("Gemm") == "MatMulV2"
    assert dt.ir_type_of("ScatterND") == "ScatterNdUpdate"
    assert dt.ir_type_of("ScatterND", {"reduction": "add"}) == "ScatterNdAdd"
    assert dt.ir_type_of("ScatterND", {"reduction": "mul"}) is None
    assert dt.ir_type_of("Squeeze", {"axes": [0]}) == "Squeeze"
    assert dt.ir_type_of("Squeeze") == "SqueezeV3"
    assert dt.ir_type_of("Split", {"split": [1, 2]}) == "SplitV"
    assert dt.ir_type_of("Split") == "Split"
    assert dt.ir_type_of("Div") == "RealDiv" and dt.ir_type_of("Softmax") == "SoftmaxV2"
    assert dt.ir_type_of("NotAnOnnxOp") is None


def test_onnx_types_claimed_by_several_rows_have_an_explicit_rule():
    # Catches a second row claiming an ONNX type without ir_type_of deciding between them (first row would win).
    claimed = {}
    for ir, row in dt.table("ascend910b").items():
        for op in row.onnx_types:
            claimed.setdefault(op, set()).add(ir)
    attr_sets = [{}, {"mode": "linear"}, {"_axes_runtime": True}, {"axes": [0]}, {"split": [1]},
                 {"reduction": "add"}, {"reduction": "max"}, {"reduction": "min"}]
    for op, irs in claimed.items():
        reached = {dt.ir_type_of(op, a) for a in attr_sets} - {None}
        assert reached <= irs, (op, reached, irs)
        if len(irs) > 1:
            assert reached == irs, f"{op}: rows {sorted(irs)} but ir_type_of reaches only {sorted(reached)}"


# ------------------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("chip,ir,where,kernel,name", _variant_refs())
def test_named_variants_exist_and_are_fp16(chip, ir, where, kernel, name):
    # Catches: a typo in a variant name, a kernel renamed in the registry, or a bf16/fp32 variant named for the
    # fp16 path.
    reg = registry.registry()
    assert kernel in reg, f"{ir} ({chip}, {where}): no registry kernel {kernel!r}"
    info = reg[kernel]
    assert name in info.variants, f"{ir} ({chip}, {where}): kernel {kernel!r} has no variant {name!r}"
    v = info.variants[name]
    assert v.dtype == "float16", f"{kernel}:{name} stores {v.dtype}"
    assert not v.is_planted_bug, f"{kernel}:{name} is a planted bug"


# ------------------------------------------------------------------------------------------------ implmodes
def test_implmode_ops_follow_all_ops_impl_mode_ini():
    # all_ops_impl_mode.ini (ops-nn and ops-math) does not list these: an implmode cannot change them.
    for ir in ("InstanceNorm", "GroupNorm", "GroupNormSilu", "Swish", "Erf", "Sin", "Cos", "Mul", "Add", "Pow",
               "ReduceSum"):
        assert ir not in dt.IMPLMODE_OPS and not dt.has_implmode(ir), ir
        assert dt.kernel_row("ascend910b", ir).implmodes == ()
    for ir in ("Gelu", "LayerNorm", "SoftmaxV2", "Sigmoid", "Exp", "ReduceMean", "RealDiv", "Sqrt", "Tanh",
               "Conv2D", "BatchMatMulV2", "MatMulV2", "Mish", "LRN", "GatherV2"):
        assert dt.has_implmode(ir), ir
    assert dt.IMPLMODE_INI["LayerNorm"] == ("high_performance", "high_precision", "keep_fp16")
    assert dt.IMPLMODE_OPS == frozenset(dt.IMPLMODE_INI)
    for chip, ir, row in _all_rows():
        assert row.implmodes == dt.IMPLMODE_INI.get(ir, ()), (chip, ir)


def test_rows_without_implmode_map_exactly_one_any():
    # Catches a row keyed by implmode although no implmode exists for the op (the policy would then let an
    # implmode setting change an op the device never changes), in the modelled mapping and in the brackets.
    for chip, ir, row in _all_rows():
        if row.implmodes:
            continue
        for where, mapping in [("modelled", row.variants)] + list(row.brackets.items()):
            for kernel, by_mode in mapping.items():
                assert list(by_mode) == ["any"], (chip, ir, where, kernel, by_mode)


def test_rows_with_implmodes_map_every_mode():
    # Catches a forgotten mode: variant_for would raise for an implmode the op has (high_performance is the
    # ATC default, so missing it breaks a default run). Every row here lists both precision modes.
    for chip, ir, row in _all_rows():
        if not row.implmodes:
            continue
        for where, mapping in [("modelled", row.variants)] + list(row.brackets.items()):
            for kernel, by_mode in mapping.items():
                assert set(by_mode) == set(row.implmodes), (chip, ir, where, kernel)
        if row.variants:
            assert {"high_precision", "high_performance"} <= set(row.implmodes), (chip, ir)


# ------------------------------------------------------------------------------------------------ sources
def test_sources_cite_known_repositories_at_full_commits():
    # Catches an abbreviated or invented commit, or a repository the doc's version list does not name.
    for chip, ir, row in _all_rows():
        assert row.sources, (chip, ir)
        for s in row.sources:
            assert s.repo in dt.KNOWN_REPOS, (ir, s)
            assert HEX40.match(s.commit), (ir, s)
            assert s.commit == dt.COMMITS[s.repo], (ir, s)
            assert str(s) == f"{s.repo}:{s.path}@{s.commit}"
        # every row cites its mixlist evidence; every computing row cites both impl-mode lists
        assert any("ops-info" in s.path for s in row.sources), (chip, ir)
        if row.internal != "exact" or row.implmodes:
            inis = {s.repo for s in row.sources if s.path.endswith("all_ops_impl_mode.ini")}
            assert inis == {"hicann/ops-nn", "hicann/ops-math"}, (chip, ir)
        if row.internal != "exact":
            assert any(s.repo != "hicann/ge" and not s.path.endswith(".ini") for s in row.sources), (chip, ir)


def test_field_values_are_from_their_vocabularies():
    for chip, ir, row in _all_rows():
        assert row.status in dt.STATUSES, (chip, ir)
        assert row.mixlist in dt.MIXLISTS, (chip, ir)
        assert row.algorithm and row.internal, (chip, ir)
        assert set(row.brackets) <= set(dt.BRACKETS), (chip, ir)
    for ir, row in dt.table("ascend910b").items():
        assert set(row.chips) <= set(dt.CHIPS), ir
    assert dt.kernel_row("ascend910b", "ReduceSum").mixlist == "black"
    assert dt.kernel_row("ascend910b", "BatchMatMulV2").mixlist == "white"
    assert dt.kernel_row("ascend910b", "GroupNorm").mixlist == "gray"


def test_assumption_rows_state_the_assumption_and_both_brackets():
    # Catches an assumption row without a way to bracket it, or a bracket naming a kernel the row does not run
    # (variant_for would silently fall back to the modelled variant).
    for chip, ir, row in _all_rows():
        if row.status == "assumption":
            assert row.assumption.strip(), (chip, ir)
            assert set(row.brackets) == set(dt.BRACKETS), (chip, ir)
            for b in dt.BRACKETS:
                assert set(row.brackets[b]) == set(row.variants), (chip, ir, b)
        else:
            assert not row.assumption and not row.brackets, (chip, ir)


# ------------------------------------------------------------------------------------------------ modelled choices
def test_key_modelled_choices():
    # The choices the sources settle (docs/DEVICE_KERNELS.md); an edit that changes one must change this test.
    v = dt.variant_for
    for chip in dt.CHIPS:
        for mode in ("high_precision", "high_performance"):
            assert v(chip, "InstanceNorm", "group_norm", mode) == "fp16_tbe_instance"
            assert v(chip, "GroupNorm", "group_norm", mode) == "fp16_ge_onepass"
            assert v(chip, "SoftmaxV2", "softmax", mode) == "fp16_v2"
            assert v(chip, "ReduceSum", "reduce_sum", mode) == "fp16_fp32acc"
            assert v(chip, "ReduceMean", "reduce_mean", mode) == "fp16_fp32acc"
            assert v(chip, "ReduceMeanD", "reduce_mean", mode) == "fp16_fp32acc"
            assert v(chip, "Sigmoid", "sigmoid", mode) == "fp16_vexp"
            assert v(chip, "BatchMatMulV2", "matmul", mode) == "fp16_fp32acc"
            assert v(chip, "BatchMatMulV2", "matmul_bias", mode) == "fp16_fp32acc"
            assert v(chip, "MatMulV2", "gemm", mode) == "fp16_fp32acc"
            assert v(chip, "Conv2D", "conv2d", mode) == "fp16_fp32acc"
        assert v(chip, "LayerNorm", "layer_norm", "high_precision") == "fp16_tbe_hprec"
        assert v(chip, "LayerNorm", "layer_norm", "high_performance") == "fp16_tbe_hperf"
        assert v(chip, "Gelu", "gelu", "high_precision") == "fp16_ascend_tanh"
        # vrec's overflow taken to the fp16 maximum (the reading Huawei's SD recipe on A2 implies); IEEE: pessimistic
        assert v(chip, "Gelu", "gelu", "high_performance") == "fp16_ascend_igelu_sat"
        assert v(chip, "Gelu", "gelu", "high_performance", "pessimistic") == "fp16_ascend_igelu"
        assert v(chip, "Exp", "exp", "high_performance") == "fp16_fast"
        assert v(chip, "Exp", "exp", "high_performance", "optimistic") == "fp16_fp32acc"
        assert v(chip, "Exp", "exp", "high_precision") == "fp16_fp32acc"
        assert v(chip, "GroupNorm", "group_norm", None, "pessimistic") == "fp16_fp16stats"
        assert v(chip, "GroupNorm", "group_norm", None, "optimistic") == "fp16_fp32stats_twopass"
        assert dt.kernel_row(chip, "GroupNorm").status == "assumption"
        assert dt.kernel_row(chip, "InstanceNorm").status == "source"


def test_chip_overrides():
    assert dt.kernel_row("ascend910b", "FlashAttentionScore").variants == {"attention": {"any": "flash_fp16_fp32acc"}}
    assert dt.kernel_row("ascend310p", "FlashAttentionScore").variants == {}
    assert dt.variant_for("ascend310p", "FlashAttentionScore", "attention", None) is None
    assert dt.kernel_row("ascend310p", "SoftmaxV2").status == "assumption"
    assert "SD" in dt.kernel_row("ascend310p", "GroupNormSilu").algorithm
    assert dt.table("ascend910b").keys() == dt.table("ascend310p").keys() == set(dt.ir_types())


# ------------------------------------------------------------------------------------------------ API errors
def test_lookup_errors_name_the_known_values():
    with pytest.raises(KeyError, match="ascend910b"):
        dt.table("ascend910")
    with pytest.raises(KeyError, match="ascend310p"):
        dt.kernel_row("gpu", "GroupNorm")
    with pytest.raises(KeyError, match=r"known: .*\bInstanceNorm\b"):
        dt.kernel_row("ascend910b", "InstanceNormalization")  # an ONNX name, not an IR type
    with pytest.raises(KeyError, match=r"known: .*\bGroupNorm\b"):
        dt.variant_for("ascend910b", "GroupNormalization", "group_norm", None)
    with pytest.raises(KeyError, match="optimistic"):
        dt.variant_for("ascend910b", "Exp", "exp", "high_performance", bracket="best")
    with pytest.raises(KeyError, match="group_norm"):
        dt.variant_for("ascend910b", "GroupNorm", "layer_norm", None)
    with pytest.raises(KeyError, match="high_performance"):
        dt.variant_for("ascend910b", "Exp", "exp", None)  # an op with implmodes needs one
    # no implmode: any value (or none) is ignored
    assert dt.variant_for("ascend910b", "InstanceNorm", "group_norm", "high_performance") == \
        dt.variant_for("ascend910b", "InstanceNorm", "group_norm", None) == "fp16_tbe_instance"
    # numpy in the op: no registry variant
    assert dt.variant_for("ascend910b", "RealDiv", "anything", "high_performance") is None
    assert dt.variant_for("ascend910b", "Reshape", "anything", None) is None


# ------------------------------------------------------------------------------------------------ doc
def test_doc_is_generated_from_the_table():
    # Catches a table edit without `python -m mschecker.npu.device_table docs/DEVICE_KERNELS.md`.
    text = (ROOT / "docs" / "DEVICE_KERNELS.md").read_text(encoding="utf-8")
    start, end = text.find(dt.DOC_BEGIN), text.find(dt.DOC_END)
    assert 0 <= start < end, "docs/DEVICE_KERNELS.md lost its generated-section markers"
    assert text[start:end + len(dt.DOC_END)] + "\n" == dt.render_markdown(), \
        "docs/DEVICE_KERNELS.md is stale: run python -m mschecker.npu.device_table docs/DEVICE_KERNELS.md"
    shared = "shared"  # the research folder outside the repository: spelled so that no grep finds a pointer here
    assert f"../{shared}" not in text and f"/work/{shared}" not in text


def test_render_markdown_mentions_every_row_and_every_commit():
    md = dt.render_markdown()
    for ir in dt.ir_types():
        assert f"| {ir} |" in md, ir
    for commit in dt.COMMITS.values():
        assert commit in md
