"""Dev-only peer check: `mschecker sd --sides ort,...` against diffusers' OnnxStableDiffusionPipeline on the same
pipeline folder, prompt, seed and initial latents -- the latents after every step and the decoded image.

Runs in an environment with diffusers + torch (never a project dependency):
    python3 -m venv /tmp/devenv_sd && /tmp/devenv_sd/bin/pip install torch==2.13.0 diffusers transformers onnxruntime
    .venv/bin/python -m mschecker.cli sd --preset tiny --save-pipeline /tmp/sd_tiny      # or your own export
    /tmp/devenv_sd/bin/python tools/sd_peer_check.py --pipeline /tmp/sd_tiny [--steps 4] [--json OUT]
mschecker itself runs as a subprocess of the project's interpreter (--mschecker-python, default .venv/bin/python
of this checkout): its `--out` arrays (ort.latents_step<k>.npy, ort.image.npy) are what is compared.

The bar is onnxruntime's own noise: diffusers runs twice, with onnxruntime's graph optimizations on (its
default) and off -- the same model and inputs through fused vs unfused kernels, float32 rounding in another
order. The per-step latents' and the image's relative error ||a - b|| / ||b|| between mschecker and diffusers
(both optimized) must not exceed that between diffusers' two runs, times SLACK. Exit 0 when every step and the
image pass, 1 otherwise, 2 on bad input. Euler ancestral is out of reach: its per-step noise comes from torch's
generator in diffusers and from numpy's RandomState in mschecker.

What differs on purpose: mschecker does the host arithmetic (scheduler, guidance) in float64 where diffusers
does it in float32 (numpy / torch); that difference is what is being bounded. diffusers feeds input_ids as
int32 (its ONNX exports take int32); for a text encoder declaring int64 (the bundled graphs, optimum exports)
the ids are cast to the declared type on the way in -- the same ids either way.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SLACK = 2.0  # the mschecker-diffusers difference may reach twice onnxruntime's optimized-vs-unoptimized spread


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / nb if nb else float(np.linalg.norm(a - b))


class _CastIds:
    """diffusers' text encoder call with input_ids cast to the dtype the graph declares."""

    def __init__(self, model):
        self.model = model
        meta = next(i for i in model.model.get_inputs() if i.name == "input_ids")
        self.dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}[meta.type]

    def __call__(self, **kwargs):
        kwargs["input_ids"] = np.asarray(kwargs["input_ids"]).astype(self.dtype)
        return self.model(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def run_diffusers(folder: Path, prompt: str, steps: int, guidance: float, latents: np.ndarray,
                  optimize: bool) -> tuple[list[np.ndarray], np.ndarray]:
    import diffusers
    import onnxruntime as ort
    from diffusers import OnnxRuntimeModel, OnnxStableDiffusionPipeline
    from transformers import CLIPTokenizer

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)

    def model(stage):
        return OnnxRuntimeModel(model=ort.InferenceSession(str(folder / stage / "model.onnx"), sess_options=so,
                                                           providers=["CPUExecutionProvider"]))
    index = json.loads((folder / "model_index.json").read_text())
    cls = getattr(diffusers, index["scheduler"][1])
    if isinstance(cls.__dict__.get("init_noise_sigma"), property):  # Euler's is a torch tensor, which the ONNX
        cls = type(cls.__name__, (cls,), {  # pipeline's numpy latents cannot be multiplied by: hand it a float
            "init_noise_sigma": property(lambda self, get=cls.init_noise_sigma.fget: float(get(self)))})
    scheduler = cls.from_pretrained(str(folder / "scheduler"))
    pipe = OnnxStableDiffusionPipeline(vae_encoder=None, vae_decoder=model("vae_decoder"),
                                       text_encoder=_CastIds(model("text_encoder")),
                                       tokenizer=CLIPTokenizer.from_pretrained(str(folder / "tokenizer")),
                                       unet=model("unet"), scheduler=scheduler, safety_checker=None,
                                       feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    per_step: list[np.ndarray] = []
    size = latents.shape[-1] * 8  # diffusers draws/reshapes latents at height // 8
    out = pipe(prompt, height=size, width=size, num_inference_steps=steps, guidance_scale=guidance,
               latents=latents.copy(), output_type="np", callback=lambda i, t, x: per_step.append(np.array(x)),
               callback_steps=1)
    return per_step, np.asarray(out.images[0])


def run_mschecker(python: str, folder: Path, prompt: str, steps: int, guidance: float, latents_file: Path,
                  out: Path) -> tuple[list[np.ndarray], np.ndarray]:
    cmd = [python, "-m", "mschecker.cli", "sd", "--pipeline", str(folder), "--sides", "ort,reference",
           "--steps", str(steps), "--prompt", prompt, "--guidance-scale", str(guidance), "--latents",
           str(latents_file), "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode not in (0, 1):
        raise SystemExit(f"sd_peer_check: mschecker failed (exit {r.returncode}): {r.stderr.strip()[-500:]}")
    per_step = []  # one file per UNet evaluation: PNDM's PLMS warm-up evaluates steps + 1 times
    while (out / f"ort.latents_step{len(per_step) + 1}.npy").is_file():
        per_step.append(np.load(out / f"ort.latents_step{len(per_step) + 1}.npy"))
    return per_step, np.load(out / "ort.image.npy")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, required=True, help="a diffusers ONNX pipeline folder")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompt", default="a photo of an astronaut riding a horse")
    ap.add_argument("--guidance-scale", type=float, default=7.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mschecker-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    if not (args.pipeline / "model_index.json").is_file():
        print(f"sd_peer_check: error: {args.pipeline / 'model_index.json'} not found", file=sys.stderr)
        return 2
    unet_cfg = json.loads((args.pipeline / "unet" / "config.json").read_text()) \
        if (args.pipeline / "unet" / "config.json").is_file() else {}
    size = unet_cfg.get("sample_size", 64)
    channels = unet_cfg.get("in_channels", 4)
    # diffusers' own draw: generator.randn(*shape).astype(prompt_embeds.dtype) (fp32 exports)
    latents = np.random.RandomState(args.seed).randn(1, channels, size, size).astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="sd-peer-") as tmp:
        latents_file = Path(tmp) / "latents.npy"
        np.save(latents_file, latents)
        ours, our_image = run_mschecker(args.mschecker_python, args.pipeline, args.prompt, args.steps,
                                        args.guidance_scale, latents_file, Path(tmp) / "out")
    theirs, their_image = run_diffusers(args.pipeline, args.prompt, args.steps, args.guidance_scale, latents, True)
    plain, plain_image = run_diffusers(args.pipeline, args.prompt, args.steps, args.guidance_scale, latents, False)
    rows = []
    for k, (a, b, c) in enumerate(zip(ours, theirs, plain), start=1):
        rows.append({"what": f"latents step {k}", "mschecker_vs_diffusers": rel(a, b), "ort_noise": rel(c, b)})
    rows.append({"what": "image", "mschecker_vs_diffusers": rel(our_image, their_image),
                 "ort_noise": rel(plain_image, their_image)})
    bar = max(r["ort_noise"] for r in rows)
    ok = len(ours) == len(theirs) == len(plain) >= args.steps and all(r["mschecker_vs_diffusers"] <= SLACK * bar for r in rows)
    import diffusers
    import onnxruntime
    import torch

    result = {"pipeline": str(args.pipeline), "steps": args.steps, "prompt": args.prompt, "seed": args.seed,
              "guidance_scale": args.guidance_scale, "slack": SLACK, "ort_noise_max": bar, "passed": ok,
              "versions": {"diffusers": diffusers.__version__, "onnxruntime": onnxruntime.__version__,
                           "torch": torch.__version__}, "rows": rows}
    for r in rows:
        print(f"{r['what']:>16}: mschecker vs diffusers {r['mschecker_vs_diffusers']:.3e}   onnxruntime noise "
              f"{r['ort_noise']:.3e}")
    print(f"{'PASS' if ok else 'FAIL'}: every relative error <= {SLACK:g} x max onnxruntime noise ({bar:.3e})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
