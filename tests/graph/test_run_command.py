"""`mschecker run` and `mschecker check --device` end to end through subprocesses of the real CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto as T
from onnx import helper as h

from ..profiles import GENERIC_FP16

ROOT = Path(__file__).resolve().parents[2]
D = ROOT / "golden" / "default"
MODEL, INPUTS = str(D / "model.onnx"), f"{D / 'x.bin'},{D / 't.bin'}"


def cli(*args):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "mschecker.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=180)


def one_line_error(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr + res.stdout, res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_run_saves_outputs_and_check_device_matches_them(tmp_path):
    out = tmp_path / "npu_out"
    res = cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--profile", "ascend310p",
              "--save-outputs", out)
    assert res.returncode == 0, res.stderr
    assert (out / "manifest.json").is_file() and "float16" in res.stdout
    # the same device and profile reproduce the saved outputs bit for bit (determinism), so a zero tolerance passes
    res = cli("check", "--model", MODEL, "--input", INPUTS, "--golden", out, "--device", "npu", "--profile",
              "ascend310p", "--atol", "0", "--rtol", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    # refusing to overwrite, then overwriting on request
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "reference", "--save-outputs", out),
                   "already saved")
    assert cli("run", "--model", MODEL, "--input", INPUTS, "--device", "reference", "--save-outputs", out,
               "--update").returncode == 0


def test_run_with_atc_files(tmp_path):
    """ATC's files speak Ascend IR op types (the default profile ascend910b is a device profile): keeping SoftmaxV2
    in fp32 makes the `probs` output fp32; the same files in ONNX op types are what ATC would refuse, and so does
    the device profile (exit 2 naming the IR type); a generic profile takes ONNX op types."""
    keep = tmp_path / "keep.cfg"
    keep.write_text("OpType::SoftmaxV2\n")
    ini = tmp_path / "op.ini"
    ini.write_text("[ByOpType]\nLayerNorm=high_precision\n")
    res = cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--keep-dtype", keep,
              "--op-precision", ini, "--overflow-mode", "saturation", "--precision-mode", "force_fp16")
    assert res.returncode == 0, res.stderr
    assert "float32" in res.stdout  # the output comes from the kept (fp32) Softmax
    onnx_keep, onnx_ini = tmp_path / "onnx_keep.cfg", tmp_path / "onnx_op.ini"
    onnx_keep.write_text("OpType::Softmax\n")
    onnx_ini.write_text("[ByOpType]\nErf=high_precision\n")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--keep-dtype", onnx_keep),
                   "OpType::Softmax", "ONNX op type", "SoftmaxV2")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--op-precision", onnx_ini),
                   "Erf has no implmode")
    res = cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--profile", GENERIC_FP16,
              "--keep-dtype", onnx_keep, "--op-precision", onnx_ini, "--overflow-mode", "saturation")
    assert res.returncode == 0, res.stderr
    assert "float32" in res.stdout


def test_bad_inputs_are_one_line_exit_2_and_write_nothing(tmp_path, capsys):
    """In-process through mschecker.cli.main (the same code path as the console script, without 1 s of imports
    per case); the subprocess tests above cover the real entry point."""
    from mschecker.cli import main

    class Res:
        def __init__(self, argv):
            self.returncode = main([str(a) for a in argv])
            cap = capsys.readouterr()
            self.stdout, self.stderr = cap.out, cap.err

    def cli(*args):  # noqa: F811 - shadows the subprocess helper on purpose
        return Res(args)

    out = tmp_path / "never"
    g = h.make_graph([h.make_node("Foo", ["x"], ["y"], name="custom1")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    bad_model = tmp_path / "foo.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), bad_model)
    one_line_error(cli("run", "--model", bad_model, "--input", INPUTS, "--device", "reference", "--save-outputs", out),
                   "Foo (nodes custom1)")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--profile", "nope9",
                       "--save-outputs", out), "nope9")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--keep-dtype",
                       tmp_path / "missing.cfg", "--save-outputs", out), "missing.cfg")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "reference", "--overflow-mode",
                       "saturation"), "--device npu")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "reference", "--profile", "ascend910b"),
                   "reference")
    # a device profile's knobs are ATC's: Ascend IR op types, implmode only for ops that have one
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--op-precision",
                       "InstanceNormalization=high_precision", "--save-outputs", out),
                   "InstanceNormalization is an ONNX op type", "InstanceNorm, which has no implmode")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--op-precision",
                       "InstanceNorm=high_precision", "--save-outputs", out), "InstanceNorm has no implmode")
    one_line_error(cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--profile", "ascend310p",
                       "--keep-dtype", "OpType::Softmax", "--save-outputs", out), "OpType::Softmax", "SoftmaxV2")
    assert not out.exists()
    ok = cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--implmode", "high_precision",
             "--op-precision", "SoftmaxV2=high_performance", "--keep-dtype", "OpType::LayerNorm")
    assert ok.returncode == 0, ok.stderr
