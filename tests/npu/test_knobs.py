"""The NPU knobs' one vocabulary (mschecker/npu/knobs.py): flags, stage prefixes, file-or-inline values, merging."""
from __future__ import annotations

import argparse

import pytest

from mschecker.errors import InputError, UsageError
from mschecker.npu.knobs import add_npu_arguments, apply_knobs, knobs_from_args, npu_flags_given, options_for

from ..profiles import GENERIC_FP16

STAGES = ("text_encoder", "unet", "vae_decoder")


def _parse(argv, stages=STAGES):
    p = argparse.ArgumentParser()
    add_npu_arguments(p, stages)
    return knobs_from_args(p.parse_args(argv), stages)


def test_inline_entries_with_and_without_stage():
    k = _parse(["--keep-dtype", "vae_decoder:OpType::InstanceNormalization,conv1", "--keep-dtype", "OpType::Softmax",
                "--op-precision", "unet:Gelu=high_precision", "--op-precision", "Softmax=high_performance",
                "--profile", "ascend310p", "--profile", "unet:ascend910b", "--precision-mode",
                "vae_decoder:force_fp32", "--overflow-mode", "saturation"])
    assert k[None] == {"keep_dtype": ["OpType::Softmax"], "implmode_by_op_type": {"Softmax": "high_performance"},
                       "implmode_by_node": {}, "profile": "ascend310p", "overflow_mode": "saturation"}
    assert k["vae_decoder"] == {"keep_dtype": ["OpType::InstanceNormalization", "conv1"], "precision_mode": "force_fp32"}
    vae = options_for(k, "vae_decoder")
    assert vae["keep_dtype"] == ["OpType::Softmax", "OpType::InstanceNormalization", "conv1"]
    assert vae["profile"] == "ascend310p" and vae["precision_mode"] == "force_fp32"
    unet = options_for(k, "unet")
    assert unet["profile"] == "ascend910b"
    assert unet["implmode_by_op_type"] == {"Softmax": "high_performance", "Gelu": "high_precision"}
    assert options_for(k, "text_encoder")["keep_dtype"] == ["OpType::Softmax"]


def test_files_are_read_as_files(tmp_path):
    keep = tmp_path / "keep.cfg"
    keep.write_text("# fp32 islands\nconv1\nOpType::LayerNormalization\n")
    ini = tmp_path / "op_precision.ini"
    ini.write_text("[ByOpType]\nGelu=high_precision\n[ByNodeName]\nnode7=high_performance\n")
    k = _parse(["--keep-dtype", str(keep), "--op-precision", f"unet:{ini}"])
    assert k[None]["keep_dtype"] == ["conv1", "OpType::LayerNormalization"]
    assert k["unet"] == {"implmode_by_op_type": {"Gelu": "high_precision"},
                         "implmode_by_node": {"node7": "high_performance"}}


@pytest.mark.parametrize("argv,match", [
    (["--keep-dtype", "decoder:conv1"], "'decoder' is not a stage"),
    (["--keep-dtype", "unet:"], "nothing after the stage name"),
    (["--keep-dtype", "two words"], "not a node name"),
    (["--op-precision", "Gelu=fast"], "expected OpType=MODE"),
    (["--op-precision", "Gelu"], "expected OpType=MODE"),
    (["--precision-mode", "unet:fp8"], "'fp8' is not one of"),
    (["--customize-dtypes", "missing.cfg"], "neither an existing file nor a customize_dtypes line"),
    (["--customize_dtypes", "n::InputDtype:flaot32"], "flaot32"),
    (["--precision_mode_v2", "mixed_fp16"], "'mixed_fp16' is not one of"),
    (["--optypelist-for-implmode", ","], "no op type"),
])
def test_bad_values_are_usage_errors_naming_the_flag(argv, match):
    """Exit-2 errors naming the flag (in mschecker's spelling, whichever spelling was typed)."""
    with pytest.raises(InputError, match=match) as info:
        _parse(argv)
    assert argv[0].replace("_", "-") in str(info.value)


def test_a_command_without_stages_refuses_a_prefix():
    with pytest.raises(UsageError, match="has no stages"):
        _parse(["--keep-dtype", "unet:conv1"], stages=())
    assert _parse(["--keep-dtype", "OpType::Gelu"], stages=())[None]["keep_dtype"] == ["OpType::Gelu"]


def test_the_old_op_precision_mode_name_still_parses(tmp_path):
    ini = tmp_path / "p.ini"
    ini.write_text("[ByOpType]\nGelu=high_precision\n")
    assert _parse(["--op-precision-mode", str(ini)])[None]["implmode_by_op_type"] == {"Gelu": "high_precision"}


def test_a_fifo_given_as_a_file_is_refused_without_opening_it(tmp_path):
    import os

    fifo = tmp_path / "keep.txt"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        _parse(["--keep-dtype", str(fifo)])


def test_npu_flags_given_names_what_was_set():
    p = argparse.ArgumentParser()
    add_npu_arguments(p)
    assert npu_flags_given(p.parse_args(["--implmode", "high_precision", "--keep-dtype", "a"])) == [
        "--keep-dtype", "--implmode"]
    assert npu_flags_given(p.parse_args([])) == []


def test_apply_knobs_layers_on_the_profile(tmp_path):
    """Knob layering is the generic mechanism (a generic profile: ONNX op types such as Softmax are its knobs'
    vocabulary; a device profile would refuse them, tests/npu/test_npu_policy.py)."""
    ini = tmp_path / "p.ini"
    ini.write_text("[ByOpType]\nSoftmax=high_precision\n[ByNodeName]\nn1=high_performance\n")
    base = apply_knobs(GENERIC_FP16)
    prof = apply_knobs(GENERIC_FP16, precision_mode="allow_fp32_to_bf16", keep_dtype=["conv1"], op_precision=ini,
                       overflow_mode="saturation", implmode="high_precision", implmode_by_op_type={"Gelu": "high_precision"},
                       implmode_by_node={"n2": "high_precision"})
    assert prof.storage_dtype == "bfloat16" and prof.precision_mode == "allow_fp32_to_bf16"
    assert tuple(prof.keep_dtype) == tuple(base.keep_dtype) + ("conv1",)
    assert prof.implmode_by_op_type["Softmax"] == "high_precision" and prof.implmode_by_op_type["Gelu"] == "high_precision"
    assert prof.implmode_by_node == {**base.implmode_by_node, "n1": "high_performance", "n2": "high_precision"}
    assert prof.overflow_mode == "saturation" and prof.implmode == "high_precision"
    assert apply_knobs(GENERIC_FP16) == base
    with pytest.raises(InputError):
        apply_knobs("no_such_profile")
