"""mschecker bisect on planted faults: each test asserts the exact culprit and the exact fix, the evaluation
bound, the proof re-run, and that the written files say what was proven."""
from __future__ import annotations

import json
import math

import numpy as np
import onnx

from mschecker.bisect import Budget, Sample, bisect_model
from mschecker.bisect.report import to_dict, write_outputs
from mschecker.graph.executor import Executor
from mschecker.npu.knobs import apply_knobs
from mschecker.npu.atc import parse_keep_dtype, parse_op_precision_ini
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.atc import parse_customize_dtypes

from ..profiles import GENERIC_FP16
from . import models as M

# The search's mechanics are tested on planted fp16 hazards (fp16 one-pass LayerNorm / InstanceNorm statistics, the
# poor polynomial GELU) under a GENERIC fp16 profile: the device presets (ascend910b, ascend310p) run the CANN kernels
# of the device kernel table, which have none of these hazards (no device does). The device tests at the end run
# bisect on ascend910b with hazards the device really has.
GENERIC = load_profile(GENERIC_FP16)


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _samples(model, n=2, scale=1.0):
    return [Sample(f"sample{i}", M.feeds(model, 10 + i, scale)) for i in range(n)]


def _check_bound(result):
    s = result.search
    assert s.located_in <= s.bound, (s.located_in, s.bound)
    k, n = len(s.culprits), len(s.candidates)
    if s.regime == "culprits":
        assert s.bound == 2 + (k + 1) * max(1, math.ceil(math.log2(n)))


def _minimal(result):
    """Every move of the fix is needed: leaving any one out fails (the attribution re-runs)."""
    assert result.attribution and not any(a.passes_without for a in result.attribution)


def test_poor_polynomial_gelu_is_fixed_by_high_precision_gelu(tmp_path, poly_gelu):
    model = M.gelu_branches()
    path = _save(tmp_path, model)
    desc = Executor(str(path), NpuPolicy(GENERIC)).step("gelu0").ctx.description
    assert "gelu:fp16_poly" in desc and "high_performance" in desc  # the plant is what the NPU runs
    r = bisect_model(path, _samples(model), tolerance=1e-2, profile=GENERIC)
    assert r.verdict == "FIXED" and r.exit_code == 0
    assert sorted(r.search.culprits) == ["gelu0", "gelu1", "gelu2"]
    assert [n.op_type for n in r.ranking[:3]] == ["Gelu"] * 3  # own error ranks them first
    assert r.recommendation.keep_dtype == [] and r.recommendation.by_node == {}
    assert r.recommendation.by_op_type == {"Gelu": "high_precision"}
    # the worst node's implmode binds another kernel: the cheap move is probed first and searched with
    assert r.search.move == "high_precision" and r.search.hp_probe is True
    assert sorted(r.search.candidates) == ["gelu0", "gelu1", "gelu2"] and r.search.evaluations == 7
    _check_bound(r)
    _minimal(r)
    assert r.proof.passed and all(s.passed for s in r.proof.outputs.values())
    assert not any(s.passed for s in r.analysis.outputs.values())  # it failed before
    assert r.onnx_check.ran and r.onnx_check.passed


def test_layernorm_variance_overflow_is_fixed_by_that_nodes_fp32_statistics(tmp_path):
    model = M.layernorm_pair()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, profile=GENERIC)
    assert r.verdict == "FIXED"
    assert r.analysis.first_crossing(1e-2).name == "ln_big"
    assert r.ranking[0].name == "ln_big" and r.ranking[0].own_error > 0.5  # collapsed to beta: ~100% error
    assert r.analysis.node("ln_small").own_error < 5e-3  # same op, small values: fine in fp16
    # high_precision = fp32 statistics with fp16 storage: the cheaper move wins over keep_dtype
    assert r.recommendation.by_node == {"ln_big": "high_precision"}
    assert r.recommendation.keep_dtype == [] and r.recommendation.by_op_type == {}
    assert r.search.evaluations == 3  # as given, both LayerNorms in high_precision, ln_big alone
    _check_bound(r)
    _minimal(r)
    assert r.onnx_check.ran and r.onnx_check.passed


def test_bundled_vae_decoder_overflow_is_fixed_by_its_norm_nodes(tmp_path):
    from mschecker.sd.presets import get_preset
    from mschecker.sd.vae import build_vae_decoder

    p = get_preset("tiny")
    model = build_vae_decoder(p, 0)
    rng = np.random.default_rng(0)
    samples = [Sample("latents", {"latent_sample": (rng.standard_normal((1,) + tuple(p.latent_shape))
                                                    / p.scaling_factor).astype(np.float32)})]
    path = _save(tmp_path, model)
    r = bisect_model(path, samples, tolerance=1e-2, check_onnx=False, profile=GENERIC)
    assert r.verdict == "FIXED"
    fix = r.recommendation
    assert fix.keep_dtype == [] and fix.by_op_type == {}
    assert set(fix.by_node.values()) == {"high_precision"}
    assert {r.analysis.node(n).op_type for n in fix.by_node} == {"InstanceNormalization"}
    assert "decoder.mid_block.resnets.0.norm1/InstanceNormalization" in fix.by_node  # the first one to collapse
    assert r.ranking[0].name == "decoder.mid_block.resnets.0.norm1/InstanceNormalization"
    _check_bound(r)
    _minimal(r)
    assert r.search.rule_of_thumb is not None and not r.search.rule_of_thumb.passed
    # the device runs each norm as GE's fused GroupNorm with fp32 statistics: the same latents pass as given
    dev = bisect_model(path, samples, tolerance=1e-2, check_onnx=False, profile="ascend910b")
    assert dev.verdict == "PASS" and dev.search.evaluations == 1
    norm = dev.analysis.node("decoder.mid_block.resnets.0.norm1/Mul/GroupNorm")
    assert norm.op_type == "GroupNorm" and "group_norm:fp16_ge_onepass" in norm.npu


def test_deep_fp16_chain_without_single_culprit_gets_a_cast_point(tmp_path):
    model = M.deep_chain()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=2e-3)
    assert r.verdict == "FIXED"
    s = r.search
    assert s.regime == "accumulation" and s.move == "keep_dtype" and s.hp_probe is None  # MatMul: no implmode
    own = [n.own_error for n in r.ranking]
    assert max(own) < 2 * min(own)  # no node stands out
    kept = r.recommendation.config.keep_dtype
    assert r.recommendation.by_node == {} and len(kept) > 1
    doc = to_dict(r)
    assert len(doc["islands"]) == 1  # one contiguous island after one cast point ...
    island = doc["islands"][0]
    assert island["nodes"][-1] == "layer47" and island["cast_out"] == ["y"]
    first = int(island["nodes"][0][len("layer"):])
    assert island["cast_in"] == [f"h{first - 1}"]
    # ... whose cast point is as late as possible: one node fewer fails
    later = {f"layer{i}" for i in range(first + 1, 48)}
    from mschecker.bisect.search import FixConfig, ModelEvaluator
    ev = ModelEvaluator(onnx_loaded(tmp_path), r.profile, r.samples, r.analysis, r.rule)
    assert not ev(FixConfig(keep_dtype=frozenset(later)), "one later").passed
    _check_bound(r)
    assert doc["rule_of_thumb"]["changes"] == 8 and doc["rule_of_thumb"]["rule"]


def onnx_loaded(tmp_path):
    from mschecker.graph.loader import load_model
    return load_model(tmp_path / "m.onnx")


def test_nothing_to_fix_exits_0_with_zero_changes(tmp_path):
    model = M.tiny_mlp()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2)
    assert r.verdict == "PASS" and r.exit_code == 0 and r.recommendation is None
    assert r.search.evaluations == 1 and r.analysis.first_low_headroom() is None
    files = write_outputs(r, tmp_path / "out", json_report=True)
    assert not (tmp_path / "out" / "keep_dtype.cfg").exists() and set(files) == {"plot", "json"}
    doc = json.loads((tmp_path / "out" / "bisect_report.json").read_text())
    assert doc["verdict"] == "PASS" and doc["recommendation"] is None


def test_no_configuration_meets_an_impossible_tolerance_exit_1(tmp_path):
    model = M.tiny_mlp()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-12)
    assert r.verdict == "FAIL" and r.exit_code == 1 and r.recommendation is None
    assert r.search.evaluations == 2  # as given, then everything in fp32: still fails, nothing further to try
    doc = to_dict(r)
    assert doc["closest"]["failing_outputs"] == ["y"]
    write_outputs(r, tmp_path / "out")
    assert not (tmp_path / "out" / "keep_dtype.cfg").exists()  # an unproven fix is never written


def test_exhausted_evaluation_budget_exit_1_and_reports_it(tmp_path, poly_gelu):
    model = M.gelu_branches()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, budget=Budget(evaluations=1),
                     profile=GENERIC)
    assert r.verdict == "FAIL" and r.search.evaluations == 1 and "budget 1" in r.search.exhausted


def test_saturation_mode_overflow_is_reported_as_overflow(tmp_path):
    model = M.overflowing_product()
    path = _save(tmp_path, model)
    r = bisect_model(path, _samples(model, scale=30.0), tolerance=1e-2, profile="ascend310p")
    blow = r.analysis.node("blow_up")
    head = blow.outputs[0].headroom
    assert head.inf == 0 and head.nan == 0  # saturation left no inf in the tensor ...
    assert head.hidden_overflow > 0 and head.saturated == head.hidden_overflow and blow.overflow  # ... we saw it
    assert r.analysis.first_crossing(1e-2).name == "blow_up"
    assert r.verdict == "FIXED" and r.recommendation.keep_dtype == ["OpType::Mul"]
    # the same model under IEEE overflow: the inf is there, same verdict
    r2 = bisect_model(path, _samples(model, scale=30.0), tolerance=1e-2, profile="ascend910b")
    assert r2.analysis.node("blow_up").outputs[0].headroom.inf > 0 and r2.analysis.node("blow_up").overflow
    assert r.analysis.first_low_headroom().name == r2.analysis.first_low_headroom().name == "blow_up"
    assert r2.recommendation.keep_dtype == ["OpType::Mul"]


def test_an_inf_inside_fails_a_configuration_whose_outputs_look_fine(tmp_path):
    """Both Muls keep the output finite under saturation only by clamping: the output error alone would not
    show the overflow of `blow_up`; the configuration must still fail while it overflows."""
    model = M.overflowing_product()
    path = _save(tmp_path, model)
    r = bisect_model(path, _samples(model, scale=30.0), tolerance=1e-2, profile="ascend310p")
    base = r.search.log[0]
    assert not base.passed and "blow_up" in base.overflow_nodes


def test_written_files_round_trip_into_a_profile(tmp_path, poly_gelu):
    model = M.layernorm_pair()
    path = _save(tmp_path, model)
    r = bisect_model(path, _samples(model), tolerance=1e-2, profile=GENERIC)
    files = write_outputs(r, tmp_path / "fix", json_report=True, html_report=True)
    proven = r.recommendation.profile(r.profile)
    assert "keep_dtype" not in files and "customize_dtypes" not in files  # a file only where it has entries
    via_files = apply_knobs(GENERIC_FP16, op_precision=files["op_precision"])
    assert via_files.keep_dtype == proven.keep_dtype == ()
    assert dict(via_files.implmode_by_node) == dict(proven.implmode_by_node) == {"ln_big": "high_precision"}
    assert parse_op_precision_ini(files["op_precision"]) == ({}, {"ln_big": "high_precision"})
    from_json = load_profile(files["profile"])
    assert dict(from_json.implmode_by_node) == {"ln_big": "high_precision"}
    assert from_json.precision_mode == proven.precision_mode
    flags = (tmp_path / "fix" / "atc_flags.txt").read_text()
    assert "--op_precision_mode=op_precision.ini" in flags and "--keep_dtype" not in flags
    # atc ignores --op_select_implmode once an ini is given: the flag is not written
    assert "--precision_mode=force_fp16" in flags and "--op_select_implmode" not in flags
    patched = onnx.load(files["onnx"])
    ln = next(n for n in patched.graph.node if n.name == "ln_big")
    assert any(n.op_type == "Cast" for n in patched.graph.node)
    types = {v.name: v.type.tensor_type.elem_type for v in patched.graph.value_info}
    assert types.get(ln.output[0]) in (None, onnx.TensorProto.FLOAT)
    doc = json.loads((tmp_path / "fix" / "bisect_report.json").read_text())
    assert doc["verdict"] == "FIXED" and doc["proof"]["passed"] and doc["files"]["onnx"].endswith(".onnx")
    assert "<html" in (tmp_path / "fix" / "bisect_report.html").read_text()[:200].lower()


def test_results_are_deterministic(tmp_path, poly_gelu):
    model = M.gelu_branches()
    path = _save(tmp_path, model)
    a = to_dict(bisect_model(path, _samples(model), tolerance=1e-2, check_onnx=False, profile=GENERIC))
    b = to_dict(bisect_model(path, _samples(model), tolerance=1e-2, check_onnx=False, profile=GENERIC))
    assert a["verdict"] == "FIXED"  # a search that did something
    for d in (a, b):
        d.pop("timings_s")
        for e in d["search"]["log"]:
            e.pop("seconds")
    assert a == b


def test_a_fix_must_hold_on_every_sample(tmp_path):
    """ln_big only overflows on a loud sample: with a quiet one alone nothing is wrong; with both, the fix."""
    model = M.layernorm_pair(big=40.0)  # sum of squares ~ 256 * 1600 = 4e5: overflows only at scale >~0.4
    path = _save(tmp_path, model)
    quiet = Sample("quiet", M.feeds(model, 1, 0.05))
    loud = Sample("loud", M.feeds(model, 2, 3.0))
    assert bisect_model(path, [quiet], tolerance=1e-2, profile=GENERIC).verdict == "PASS"
    r = bisect_model(path, [quiet, loud], tolerance=1e-2, profile=GENERIC)
    assert r.verdict == "FIXED" and r.recommendation.by_node == {"ln_big": "high_precision"}
    assert len(r.proof.per_sample) == 2


def test_op_type_granularity_moves_whole_op_types(tmp_path):
    model = M.layernorm_pair()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, granularity="op_type",
                     profile=GENERIC)
    assert r.verdict == "FIXED" and r.search.candidates[0] == "OpType::LayerNormalization"
    assert r.recommendation.by_op_type == {"LayerNormalization": "high_precision"}
    assert r.recommendation.by_node == {} and r.recommendation.keep_dtype == []
    assert {n.name for n in r.culprits} == {"ln_big", "ln_small"}
    assert r.proof.passed and r.onnx_check.passed


def test_inherited_error_is_what_the_inputs_carried(tmp_path):
    """In the LayerNorm model, nothing downstream of ln_big exists; scale_up's output feeds ln_big: ln_big
    inherits scale_up's small error and adds ~100% of its own."""
    model = M.layernorm_pair()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, check_onnx=False)
    ln_big, scale_up = r.analysis.node("ln_big"), r.analysis.node("scale_up")
    assert ln_big.inputs == ["x_big"] and ln_big.inherited == scale_up.error < 1e-3
    assert ln_big.own_error > 0.5 and r.analysis.node("ln_small").inherited == 0.0  # reads the graph input


def test_high_precision_is_tried_only_where_it_binds_other_kernels(tmp_path):
    from mschecker.bisect.search import high_precision_capable

    model = M.layernorm_pair()
    path = _save(tmp_path, model)
    ex = Executor(str(path), NpuPolicy(GENERIC))
    items = ["ln_big", "scale_up", "OpType::LayerNormalization", "OpType::Mul"]
    capable = high_precision_capable(ex, GENERIC, items)
    assert "ln_big" in capable and "OpType::LayerNormalization" in capable  # fp16 -> fp32 statistics
    assert "scale_up" not in capable and "OpType::Mul" not in capable  # Mul's fp16 kernel is the same either way
    # a device profile in its own vocabulary: LayerNorm has an implmode (TBE hperf -> hprec), Mul has none
    dev = Executor(str(path), NpuPolicy("ascend910b"))
    capable = high_precision_capable(dev, load_profile("ascend910b"), ["ln_big", "scale_up", "OpType::LayerNorm",
                                                                       "OpType::Mul"])
    assert capable == {"ln_big", "OpType::LayerNorm"}
    reshape = onnx.helper.make_node("Reshape", ["y_small", "shape"], ["y_flat"], name="flatten")
    model.graph.node.append(reshape)
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), "shape"))
    model.graph.output.append(onnx.helper.make_tensor_value_info("y_flat", onnx.TensorProto.FLOAT, [1024]))
    ex = Executor(str(_save(tmp_path, model, "m2.onnx")), NpuPolicy(GENERIC))
    assert "flatten" not in high_precision_capable(ex, GENERIC, ["flatten"])  # no kernel


def test_atc_files_keep_the_base_profiles_own_entries(tmp_path):
    """A base profile that already keeps a node in fp32 and runs an op type in high_precision: ATC takes one
    file of each kind, so the written files hold those entries next to the fix's."""
    import json as _json

    base = GENERIC.replace(name="mine", keep_dtype=("scale_up",),
                                              implmode_by_op_type={"Gelu": "high_precision"})
    prof = tmp_path / "mine.json"
    prof.write_text(_json.dumps(base.to_dict()))
    model = M.layernorm_pair()
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, profile=str(prof),
                     check_onnx=False)
    files = write_outputs(r, tmp_path / "fix")
    assert r.recommendation.by_node == {"ln_big": "high_precision"}
    assert parse_keep_dtype(files["keep_dtype"]) == ["scale_up"]
    assert parse_op_precision_ini(files["op_precision"]) == ({"Gelu": "high_precision"},
                                                              {"ln_big": "high_precision"})
    assert "--keep_dtype=keep_dtype.cfg" in (tmp_path / "fix" / "atc_flags.txt").read_text()


def test_an_integer_output_is_judged_too(tmp_path):
    """An ArgMax label output: the fix must get the labels right, not only the float logits."""
    model = M.gelu_branches(n=1)
    model.graph.node.append(onnx.helper.make_node("ArgMax", ["y0"], ["label"], name="argmax", axis=1,
                                                  keepdims=0))
    model.graph.output.append(onnx.helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [8]))
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, check_onnx=False)
    assert "label" in r.analysis.outputs and "label" in r.analysis.per_sample[0]
    assert r.analysis.outputs["label"].passed == (r.analysis.outputs["label"].max_abs == 0)


def test_unnamed_nodes_can_be_moved(tmp_path):
    """Nodes without a name are selected by their label ("#index:OpType"), which ATC's files cannot carry (a
    leading '#' is a comment): the fix is written for the node's op type, the closest expressible one, and the
    report says so."""
    model = M.layernorm_pair()
    for node in model.graph.node:
        node.name = ""
    r = bisect_model(_save(tmp_path, model), _samples(model), tolerance=1e-2, profile=GENERIC)
    assert r.verdict == "FIXED" and r.recommendation.by_node == {}
    # the closest fix ATC's files can carry: the node's op type
    assert r.recommendation.rewritten == {"#1:LayerNormalization": "OpType::LayerNormalization"}
    assert r.recommendation.by_op_type == {"LayerNormalization": "high_precision"}
    assert r.proof.passed and r.onnx_check.ran and r.onnx_check.passed


# ------------------------------------------------------------------------------------ device profiles
# bisect on ascend910b / ascend310p runs GE's fused graph: culprits are named as the device names them (a fused op:
# `<Mul name>/GroupNorm`, `<Mul_1 name>/Gelu`) with their Ascend IR op types, the written files speak ATC's
# language, and the patched ONNX model keeps the ONNX nodes a fused op covers in fp32.
def _reads_fp32_cast(model: onnx.ModelProto, node_name: str) -> bool:
    """Whether the node's first input comes from a Cast to float32 (it sits inside an fp32 island)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    node = next(n for n in model.graph.node if n.name == node_name)
    src = producer.get(node.input[0])
    return src is not None and src.op_type == "Cast" and \
        next(a.i for a in src.attribute if a.name == "to") == onnx.TensorProto.FLOAT


def test_device_igelu_is_fixed_by_high_precision_gelu_under_its_device_name(tmp_path):
    model = M.device_gelu_branches()
    path = _save(tmp_path, model)
    profile = apply_knobs("ascend910b", implmode_by_op_type={"Gelu": "high_performance"})
    gelus = ["/act0/Mul_1/Gelu", "/act1/Mul_1/Gelu", "/act2/Mul_1/Gelu"]
    desc = Executor(str(path), NpuPolicy(profile)).step(gelus[0]).ctx.description
    assert "gelu:fp16_ascend_igelu" in desc and "high_performance" in desc  # the device's i-GELU
    r = bisect_model(path, _samples(model), tolerance=1e-2, profile=profile)
    assert r.verdict == "FIXED" and sorted(r.search.culprits) == gelus
    assert [(n.name, n.op_type) for n in r.ranking[:3]] == [(g, "Gelu") for g in gelus]
    assert r.recommendation.by_op_type == {"Gelu": "high_precision"}  # the IR type: what ATC's ini takes
    assert r.recommendation.keep_dtype == [] and r.recommendation.by_node == {}
    assert r.search.move == "high_precision" and r.search.hp_probe is True
    assert r.search.layers == ["/proj0/MatMul", "/proj1/MatMul", "/proj2/MatMul"]  # BatchMatMulV2: layer ops
    _check_bound(r)
    _minimal(r)
    assert r.proof.passed and r.onnx_check.ran and r.onnx_check.passed
    # ONNX has no implmode: each fused Gelu is an fp32 island of the ONNX nodes it covers in the patched model
    patched = onnx.load_from_string(r.onnx_bytes)
    assert all(_reads_fp32_cast(patched, f"/act{i}/Div") for i in range(3))
    files = write_outputs(r, tmp_path / "fix")
    assert parse_op_precision_ini(files["op_precision"]) == ({"Gelu": "high_precision"}, {})
    flags = (tmp_path / "fix" / "atc_flags.txt").read_text()
    # implmode "default": ATC's own default, no flag (--op_select_implmode=default is no ATC value)
    assert "--op_select_implmode" not in flags and "--op_precision_mode=op_precision.ini" in flags
    fixed = apply_knobs("ascend910b", op_precision=files["op_precision"])  # the device takes the files back
    assert dict(fixed.implmode_by_op_type) == {"Gelu": "high_precision"}


def test_device_group_norm_fed_beyond_fp16_range_is_fixed_by_an_fp32_island(tmp_path):
    """inf_nan (910B): x * 3e4 overflows fp16, the fused GroupNorm (fp32 statistics, no implmode) turns the inf
    into NaN; the fix keeps both nodes in fp32, one island, written by their device names: keep_dtype for the Mul,
    customize_dtypes for the GroupNorm GE's fusion created (keep_dtype, applied before fusion, cannot name it)."""
    model = M.device_group_norm_overflow()
    path = _save(tmp_path, model)
    r = bisect_model(path, _samples(model), tolerance=1e-2, rescale=False)  # the default profile: ascend910b
    assert [(n.name, n.op_type, n.overflow) for n in r.analysis.nodes] == [
        ("/scale_up/Mul", "Mul", True), ("/norm/Mul/GroupNorm", "GroupNorm", True)]
    assert r.analysis.first_low_headroom().name == "/scale_up/Mul"
    assert r.verdict == "FIXED" and r.recommendation.keep_dtype == ["/scale_up/Mul"]
    gn_line = "/norm/Mul/GroupNorm::InputDtype:float32,float32,float32,OutputDtype:float32"
    assert r.recommendation.customize_dtypes == [gn_line]
    assert r.recommendation.by_node == {} and r.recommendation.by_op_type == {}  # neither has an implmode
    _check_bound(r)
    _minimal(r)
    assert r.proof.passed and r.onnx_check.ran and r.onnx_check.passed and r.onnx_check.extra_fp32 == []
    patched = onnx.load_from_string(r.onnx_bytes)  # the GroupNorm's ONNX nodes read the kept Mul's fp32 output
    producer = {o: n.name for n in patched.graph.node for o in n.output}
    assert producer[next(n for n in patched.graph.node if n.name == "/norm/Reshape").input[0]] == "/scale_up/Mul"
    doc = to_dict(r)
    assert doc["islands"] == [{"nodes": ["/scale_up/Mul", "/norm/Mul/GroupNorm"], "cast_in": ["x"],
                               "cast_out": ["/norm/Add_out"]}]
    files = write_outputs(r, tmp_path / "fix")
    assert parse_keep_dtype(files["keep_dtype"]) == ["/scale_up/Mul"]
    assert [e.text() for e in parse_customize_dtypes(files["customize_dtypes"])] == [gn_line]
    flags = (tmp_path / "fix" / "atc_flags.txt").read_text()
    assert "--op_select_implmode" not in flags and "--customize_dtypes=customize_dtypes.cfg" in flags
    # saturation (310P): no inf is left in any tensor, the clamp is recorded; the same fix
    r310 = bisect_model(path, _samples(model), tolerance=1e-2, profile="ascend310p", rescale=False)
    head = r310.analysis.node("/scale_up/Mul").outputs[0].headroom
    assert head.inf == 0 and head.hidden_overflow > 0 and r310.analysis.node("/scale_up/Mul").overflow
    assert r310.verdict == "FIXED" and r310.recommendation.keep_dtype == r.recommendation.keep_dtype
    assert r310.recommendation.customize_dtypes == [gn_line]
    assert r310.proof.passed and r310.onnx_check.passed


def test_an_evaluation_sees_a_fused_ops_hidden_overflow(tmp_path):
    """Saturation mode: the clamp a fused op's output took (a GroupNorm whose weight takes it past 65504) counts
    as overflow in every evaluation of the search, under the fused op's device name."""
    from mschecker.bisect.search import FixConfig, ModelEvaluator
    from mschecker.graph.loader import load_model

    model = M.device_group_norm_overflow(scale=1.0, gamma=3e4)
    path = _save(tmp_path, model)
    r = bisect_model(path, _samples(model), tolerance=1e-2, profile="ascend310p", check_onnx=False)
    assert r.analysis.node("/norm/Mul/GroupNorm").overflow  # the lockstep pass saw it
    ev = ModelEvaluator(load_model(path), r.profile, r.samples, r.analysis, r.rule)
    assert ev(FixConfig(), "as given").overflow_nodes == ["/norm/Mul/GroupNorm"]
    assert ev(FixConfig(keep_dtype=frozenset({"/norm/Mul/GroupNorm"})), "kept").overflow_nodes == []
