"""The diffusers peer check (tools/sd_peer_check.py): mschecker's onnxruntime side against diffusers' own pipeline
code on the same folder and call arguments, per-step latents and every image within onnxruntime's own noise.

- the bundled tiny pipeline saved as a folder, against diffusers' OnnxStableDiffusionPipeline (and optimum's
  ORTStableDiffusionPipeline, which runs such folders once their text encoder config is completed);
- tiny random-weight SDXL and SD 1.x pipelines exported by optimum (tools/export_tiny_sdxl.py,
  tools/export_tiny_sd_sized.py: the folders `optimum-cli export onnx` writes), against optimum's
  ORTStableDiffusionXLPipeline / ORTStableDiffusionPipeline, with the call arguments mschecker takes: several
  prompts, negative prompts (absent: SDXL's zeros), images per prompt, a non-square size, guidance rescale, DDIM's
  eta (mschecker's per-step noise injected into the peer), SDXL's micro-conditioning.

Needs diffusers + torch (+ optimum-onnx for the optimum peer and the exports), which the project never depends on:
runs when this interpreter has them, or with MSCHECKER_DIFFUSERS_PYTHON=/path/to/python of such an environment
(tools/sd_peer_check.py's docstring: the recipe); skipped otherwise (CI). Recorded results:
benchmarks/results/sd_peer_check.json."""
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mschecker.cli import main

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "sd_peer_check.py"
#: tools/sd_peer_check.py runs diffusers' pipeline, which needs torch and transformers' CLIP tokenizer too: a
#: diffusers without them (a partial dev install) is no peer.
PEER_MODULES = ("diffusers", "transformers", "torch")
PYTHON = os.environ.get("MSCHECKER_DIFFUSERS_PYTHON") or (
    sys.executable if all(importlib.util.find_spec(m) for m in PEER_MODULES) else None)

needs_diffusers = pytest.mark.skipif(PYTHON is None, reason="diffusers, transformers or torch not installed "
                                                            "(set MSCHECKER_DIFFUSERS_PYTHON)")


@functools.lru_cache(maxsize=None)
def has_optimum() -> bool:
    """optimum-onnx in the peer's interpreter (the optimum peer and the exporters need it)."""
    if PYTHON is None:
        return False
    code = "import optimum.onnxruntime, optimum.exporters.onnx"
    return subprocess.run([PYTHON, "-c", code], capture_output=True, timeout=300).returncode == 0


def needs_optimum():
    if PYTHON is None:
        pytest.skip("diffusers, transformers or torch not installed (set MSCHECKER_DIFFUSERS_PYTHON)")
    if not has_optimum():
        pytest.skip(f"optimum-onnx not installed in {PYTHON}")


def peer_check(tmp_path: Path, folder: Path, args: list[str]) -> dict:
    out = tmp_path / "r.json"
    r = subprocess.run([PYTHON, str(TOOL), "--pipeline", str(folder), *args, "--mschecker-python", sys.executable,
                        "--case", "test", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return json.loads(out.read_text())["runs"]["test"]


@needs_diffusers
@pytest.mark.parametrize("scheduler", ["ddim", "pndm"])
def test_ort_side_matches_diffusers_within_onnxruntime_noise(scheduler, tmp_path):
    folder = tmp_path / "pipe"
    assert main(["sd", "--preset", "tiny", "--scheduler", scheduler, "--save-pipeline", str(folder)]) == 0
    result = peer_check(tmp_path, folder, ["--steps", "3"])
    assert result["peer"] == "diffusers OnnxStableDiffusionPipeline"
    assert result["passed"] and len(result["rows"]) >= 4


# --- optimum exports -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def like(tmp_path_factory) -> Path:
    """mschecker's own folder: the byte-level tokenizer files the exporters build their CLIP tokenizers from."""
    folder = tmp_path_factory.mktemp("like") / "pipe"
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(folder)]) == 0
    return folder


def export(script: str, out: Path, like: Path, *extra: str) -> Path:
    r = subprocess.run([PYTHON, str(ROOT / "tools" / script), "--tokenizer", str(like / "tokenizer"), "--out",
                        str(out), "--size", "64", "--no-check", "--exporter", "api", *extra],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return out / "onnx"


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory, like) -> Path:
    needs_optimum()
    return export("export_tiny_sdxl.py", tmp_path_factory.mktemp("sdxl") / "x", like)


@pytest.fixture(scope="module")
def sd(tmp_path_factory, like) -> dict[str, Path]:
    """The SD 1.x export with PNDM (its own scheduler) and the same graphs with DDIM's scheduler config."""
    needs_optimum()
    pndm = export("export_tiny_sd_sized.py", tmp_path_factory.mktemp("sd") / "x", like)
    ddim = pndm.parent / "onnx_ddim"
    shutil.copytree(pndm, ddim)
    index = json.loads((ddim / "model_index.json").read_text())
    index["scheduler"] = ["diffusers", "DDIMScheduler"]
    (ddim / "model_index.json").write_text(json.dumps(index))
    config = json.loads((ddim / "scheduler" / "scheduler_config.json").read_text())
    (ddim / "scheduler" / "scheduler_config.json").write_text(json.dumps({**config, "_class_name": "DDIMScheduler"}))
    return {"pndm": pndm, "ddim": ddim}


XL_ARGS = ["--steps", "2", "--guidance-scale", "5"]
CASES = {
    # SDXL at its default size: no negative prompt -> zeros (force_zeros_for_empty_prompt), 1 image
    "sdxl default": ("sdxl", XL_ARGS, 2, 1),
    # non-square, 2 prompts x 2 images, negative prompt, guidance rescale, micro-conditioning
    "sdxl call arguments": ("sdxl", [*XL_ARGS, "--height", "48", "--width", "80", "--prompt", "a cat", "--prompt",
                                     "a dog", "--negative-prompt", "blurry", "--num-images-per-prompt", "2",
                                     "--guidance-rescale", "0.7", "--original-size", "96,128",
                                     "--crops-coords-top-left", "8,16", "--target-size", "48,64"], 2, 4),
    # SD 1.x, PNDM (steps + 1 UNet evaluations), one negative prompt per prompt
    "sd pndm call arguments": ("pndm", ["--steps", "2", "--height", "48", "--width", "80", "--prompt", "a cat",
                                        "--prompt", "a dog", "--negative-prompt", "blurry", "--negative-prompt",
                                        "dark", "--num-images-per-prompt", "2", "--guidance-rescale", "0.7"], 3, 4),
    # SD 1.x, DDIM eta 0.5: mschecker's per-step noise as the peer's variance_noise
    "sd ddim eta": ("ddim", ["--steps", "2", "--eta", "0.5", "--prompt", "a cat", "--prompt", "a dog",
                             "--latents-seed", "1"], 2, 2),
    # mschecker's own folder through optimum's pipeline (its text encoder config completed by the tool)
    "tiny via optimum": ("tiny", ["--steps", "2", "--peer", "optimum"], 2, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_optimum_peer_cases(case, request, tmp_path):
    which, args, evaluations, images = CASES[case]
    needs_optimum()
    if which == "sdxl":
        folder = request.getfixturevalue("sdxl")
    elif which == "tiny":
        folder = request.getfixturevalue("like")
    else:
        folder = request.getfixturevalue("sd")[which]
    result = peer_check(tmp_path, folder, args)
    assert result["peer"].startswith("optimum ORTStableDiffusion" + ("XL" if which == "sdxl" else "Pipeline"))
    steps = [r for r in result["rows"] if r["what"].startswith("latents")]
    assert len(steps) == evaluations and len(result["rows"]) == evaluations + images
    assert result["passed"], result["rows"]
    assert result["ort_noise_max"] > 0  # the bar is onnxruntime's own noise, never an exact-equality fluke
