"""The documented merge rules of --keep-dtype (mschecker/npu/knobs.py's docstring: "Every flag may repeat";
apply_knobs: "keep_dtype: entries ... (added to the profile's list)"):

- the flag given twice for one stage: both values apply, in flag order (none replaces the other);
- a profile whose own keep_dtype is not empty: the flag's entries are added after the profile's, not instead;
- and the merged list is what the emulated NPU runs: every named node computes in fp32.

The flags are read into one NpuOptions (npu_options_from_args); the older {stage or None: options} spelling
(knobs_from_args) says the same.
"""
from __future__ import annotations

import argparse

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from mschecker.graph import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker.npu.knobs import NpuOptions, add_npu_arguments, apply_knobs, knobs_from_args, npu_options_from_args, \
    options_for

from ..profiles import GENERIC_FP16

STAGES = ("text_encoder", "unet", "vae_decoder")


def _args(argv, stages=STAGES):
    p = argparse.ArgumentParser()
    add_npu_arguments(p, stages)
    return p.parse_args(argv)


def _parse(argv, stages=STAGES) -> NpuOptions:
    return npu_options_from_args(_args(argv, stages), stages)


def test_keep_dtype_twice_for_one_stage_applies_both():
    k = _parse(["--keep-dtype", "unet:conv1", "--keep-dtype", "unet:OpType::Softmax,mm2"])
    assert k.per_stage["unet"]["keep_dtype"] == ["conv1", "OpType::Softmax", "mm2"]
    assert k.for_stage("unet")["keep_dtype"] == ["conv1", "OpType::Softmax", "mm2"]
    assert "keep_dtype" not in k.for_stage("vae_decoder")


def test_keep_dtype_twice_without_stage_applies_both(tmp_path):
    f = tmp_path / "keep.cfg"
    f.write_text("conv1\nOpType::LayerNormalization\n")
    k = _parse(["--keep-dtype", str(f), "--keep-dtype", "mm2"], stages=())
    assert k.common["keep_dtype"] == ["conv1", "OpType::LayerNormalization", "mm2"]
    prof = apply_knobs(GENERIC_FP16, **k.for_stage())  # ONNX op types: a generic profile's vocabulary
    assert tuple(prof.keep_dtype) == ("conv1", "OpType::LayerNormalization", "mm2")
    # a device profile merges the same way, in its own vocabulary (Ascend IR op types)
    f.write_text("conv1\nOpType::LayerNorm\n")
    k = _parse(["--keep-dtype", str(f), "--keep-dtype", "mm2"], stages=())
    assert tuple(apply_knobs("ascend910b", **k.for_stage()).keep_dtype) == ("conv1", "OpType::LayerNorm", "mm2")


def test_common_and_stage_keep_dtype_both_apply_to_the_stage():
    k = _parse(["--keep-dtype", "a", "--keep-dtype", "unet:b", "--keep-dtype", "c", "--keep-dtype", "unet:d"])
    assert k.for_stage("unet")["keep_dtype"] == ["a", "c", "b", "d"]
    assert k.for_stage("text_encoder")["keep_dtype"] == ["a", "c"]


def _profile_with_keep(tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text('name = "mine"\nstorage_dtype = "fp16"\nprecision_mode = "force_fp16"\n'
                    'keep_dtype = ["OpType::Softmax", "ln"]\n')
    return toml


def test_profile_keep_dtype_is_extended_not_replaced(tmp_path):
    toml = _profile_with_keep(tmp_path)
    assert load_profile(toml).keep_dtype == ("OpType::Softmax", "ln")
    prof = apply_knobs(toml, keep_dtype=["mm", "OpType::Gelu"])
    assert tuple(prof.keep_dtype) == ("OpType::Softmax", "ln", "mm", "OpType::Gelu")
    # a keep_dtype file is added the same way
    f = tmp_path / "keep.cfg"
    f.write_text("mm\n")
    assert tuple(apply_knobs(toml, keep_dtype=f).keep_dtype) == ("OpType::Softmax", "ln", "mm")
    # no flag: the profile's own list stays
    assert tuple(apply_knobs(toml).keep_dtype) == ("OpType::Softmax", "ln")
    # a NumericsProfile object works the same
    assert tuple(apply_knobs(load_profile(toml), keep_dtype=["mm"]).keep_dtype) == ("OpType::Softmax", "ln", "mm")


def test_profile_and_flags_through_the_command_line(tmp_path):
    toml = _profile_with_keep(tmp_path)
    k = _parse(["--profile", str(toml), "--keep-dtype", "unet:mm", "--keep-dtype", "unet:relu"])
    assert tuple(k.profile_for("unet").keep_dtype) == ("OpType::Softmax", "ln", "mm", "relu")
    assert tuple(k.profile_for("vae_decoder").keep_dtype) == ("OpType::Softmax", "ln")


def test_the_profile_is_never_an_option_and_the_older_spelling_agrees(tmp_path):
    """--profile and --profile STAGE:NAME are NpuOptions' profile fields, not keys of any options dict; a stage's
    own profile wins over --profile for that stage only, and knobs_from_args / options_for (the older spelling,
    "profile" among the options) describe the same run."""
    toml = _profile_with_keep(tmp_path)
    argv = ["--profile", "ascend310p", "--profile", f"unet:{toml}", "--keep-dtype", "unet:mm", "--bracket",
            "pessimistic", "--keep-dtype", "OpType::SoftmaxV2"]
    k = _parse(argv)
    assert k.profile == "ascend310p" and k.stage_profiles == {"unet": str(toml)}
    assert all("profile" not in k.for_stage(st) for st in (None, *STAGES))
    assert k.profile_of("unet") == str(toml) and k.profile_of("vae_decoder") == k.profile_of() == "ascend310p"
    assert NpuOptions().profile_of() == "ascend910b" and _parse([]).profile is None
    legacy = knobs_from_args(_args(argv), STAGES)
    assert legacy == k.as_knobs() and legacy[None]["profile"] == "ascend310p"
    for st in STAGES:
        options = options_for(legacy, st)
        assert apply_knobs(options.pop("profile"), **options) == k.profile_for(st)
    # the report's per-stage view (mschecker sd's settings): a stage's own profile after the common options
    report = k.report(["unet", "vae_decoder"])
    assert list(report["unet"]) == ["keep_dtype", "bracket", "profile"] and report["unet"]["profile"] == str(toml)
    assert report["vae_decoder"] == {"keep_dtype": ["OpType::SoftmaxV2"], "bracket": "pessimistic"}


def test_merged_keep_dtype_is_what_the_npu_runs(tmp_path):
    """MatMul mm -> LayerNormalization ln -> Relu relu -> Softmax sm: with the profile keeping Softmax and ln, and
    the flag twice (mm, relu), every node runs in fp32; without the flags mm and relu run in fp16."""
    toml = _profile_with_keep(tmp_path)
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
                      h.make_node("LayerNormalization", ["a", "s"], ["n"], axis=-1, name="ln"),
                      h.make_node("Relu", ["n"], ["r"], name="relu"),
                      h.make_node("Softmax", ["r"], ["y"], axis=-1, name="sm")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8]), h.make_tensor_value_info("w", T.FLOAT, [8, 8]),
                      h.make_tensor_value_info("s", T.FLOAT, [8])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    from onnx import helper
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    k = _parse(["--profile", str(toml), "--keep-dtype", "mm", "--keep-dtype", "relu"], stages=())
    ex = Executor(m, NpuPolicy(k.profile_for()))
    assert {s.node.name: s.ctx.dtype for s in ex.steps} == {n: np.float32 for n in ("mm", "ln", "relu", "sm")}
    ex = Executor(m, NpuPolicy(apply_knobs(toml)))
    assert {s.node.name: s.ctx.dtype for s in ex.steps} == {"mm": np.float16, "ln": np.float32,
                                                            "relu": np.float16, "sm": np.float32}
