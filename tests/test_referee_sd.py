"""`mschecker sd --referee`: a third whole-pipeline run on the referee side judged stage by stage and on the
image against the float64 run (mschecker.sd.referee), beside the image rule (PSNR)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mschecker.modelcheck.referee import parse_side, rmse
from mschecker.sd.check import run_check

STAGES = ["text_embeddings", "latents_final", "decoded", "image"]


def cli(*args):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "mschecker.cli", "sd", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300)


def test_cli_sd_referee_reports_every_stage(tmp_path):
    res = cli("--preset", "tiny", "--steps", "2", "--no-fix", "--referee", "ort-fp16", "--out", tmp_path / "o",
              "--json", tmp_path / "r.json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert "referee PASS" in res.stdout and "referee: RMSE against float64" in res.stdout
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["passed"] is True and d["tolerance_passed"] is True and d["judge"] == "both"
    r = d["referee"]
    assert [o["name"] for o in r["outputs"]] == STAGES and r["spec"] == "ort-fp16" and r["measure"] == "rmse"
    assert all(o["passed"] and o["k"] == 3.0 and o["err_referee"] > 0 for o in r["outputs"])
    assert "referee" in d["timings_s"]


def test_bf16_pipeline_passes_psnr_but_not_the_referee():
    """bf16 storage keeps the tiny preset's image above 30 dB (~33 dB) but is ~11x the fp16 referee's error at
    every stage: the image rule passes, the referee fails, and --judge decides the verdict."""
    check = run_check(prompt="a cat", preset="tiny", steps=2, profile="bf16", search_fix=False,
                      referee=parse_side("ort-fp16"))
    assert check.tolerance_passed and not check.referee.passed and not check.passed
    assert [o.name for o in check.referee.failed] == STAGES and all(o.ratio > 5 for o in check.referee.failed)
    assert any(r.startswith("referee: image:") for r in check.failure_reasons())
    # the image verdict is measured on diffusers' float image against the float64 run's
    image = check.referee.outputs[-1]
    assert image.err_npu == pytest.approx(rmse(check.npu.images_float, check.reference.images_float), rel=1e-12)
    check.judge = "tolerance"
    assert check.passed and not any(r.startswith("referee") for r in check.failure_reasons())


def test_referee_without_a_float64_side_runs_one():
    """sides ort,npu: neither is the float64 run, so the referee's truth is a float64 run made for it."""
    check = run_check(prompt="a cat", preset="tiny", steps=1, sides=("ort", "npu"), search_fix=False,
                      referee=parse_side("ort-fp16"))
    truth = run_check(prompt="a cat", preset="tiny", steps=1, search_fix=False).reference
    latents = check.referee.outputs[1]
    assert latents.err_npu == pytest.approx(rmse(check.npu.latents[-1], truth.latents[-1]), rel=1e-12)


@pytest.mark.parametrize("extra, flag", [
    (["--referee", "dir:{tmp}"], "--referee"),
    (["--referee", "ort-fp16", "--referee-k", "0"], "--referee-k"),
    (["--judge", "both"], "--judge"),
])
def test_sd_bad_referee_is_one_line_exit_2(tmp_path, extra, flag):
    res = cli("--preset", "tiny", "--steps", "1", "--out", tmp_path / "o",
              *[e.replace("{tmp}", str(tmp_path)) for e in extra])
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0]
    assert not (tmp_path / "o").exists()  # refused before any work
