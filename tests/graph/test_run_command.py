"""`mschecker run` and `mschecker check --device` end to end through subprocesses of the real CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto as T
from onnx import helper as h

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
    keep = tmp_path / "keep.cfg"
    keep.write_text("OpType::Softmax\n")
    ini = tmp_path / "op.ini"
    ini.write_text("[ByOpType]\nErf=high_precision\n")
    res = cli("run", "--model", MODEL, "--input", INPUTS, "--device", "npu", "--keep-dtype", keep,
              "--op-precision", ini, "--overflow-mode", "saturation", "--precision-mode", "force_fp16")
    assert res.returncode == 0, res.stderr
    assert "float32" in res.stdout  # the output comes from the kept (fp32) Softmax


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
    assert not out.exists()
