"""The diffusers peer check (tools/sd_peer_check.py): mschecker's onnxruntime side against diffusers'
OnnxStableDiffusionPipeline on the bundled tiny pipeline saved as a folder, per-step latents and image within
onnxruntime's own noise. Needs diffusers + torch, which the project never depends on: runs when this interpreter
has diffusers, or with MSCHECKER_DIFFUSERS_PYTHON=/path/to/python of such an environment; skipped otherwise.
Recorded results: benchmarks/results/sd_peer_check.json."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mschecker.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: tools/sd_peer_check.py runs diffusers' pipeline, which needs torch and transformers' CLIP tokenizer too: a
#: diffusers without them (a partial dev install) is no peer.
PEER_MODULES = ("diffusers", "transformers", "torch")
PYTHON = os.environ.get("MSCHECKER_DIFFUSERS_PYTHON") or (
    sys.executable if all(importlib.util.find_spec(m) for m in PEER_MODULES) else None)


@pytest.mark.skipif(PYTHON is None, reason="diffusers, transformers or torch not installed "
                                           "(set MSCHECKER_DIFFUSERS_PYTHON)")
@pytest.mark.parametrize("scheduler", ["ddim", "pndm"])
def test_ort_side_matches_diffusers_within_onnxruntime_noise(scheduler, tmp_path):
    folder = tmp_path / "pipe"
    assert main(["sd", "--preset", "tiny", "--scheduler", scheduler, "--save-pipeline", str(folder)]) == 0
    r = subprocess.run([PYTHON, str(ROOT / "tools" / "sd_peer_check.py"), "--pipeline", str(folder), "--steps", "3",
                        "--mschecker-python", sys.executable, "--json", str(tmp_path / "r.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["passed"] and len(result["rows"]) >= 4
