"""Dev-only: a TINY Stable Diffusion 1.x-style pipeline with random weights at a real image size (UNet sample_size
16 = 128 px by default), exported to ONNX exactly as optimum does it for users (`optimum-cli export onnx --task
text-to-image`: dynamic batch / height / width / sequence axes), then run in optimum's ORTStableDiffusionPipeline at
the UNet's default size AND at a non-square other size (64 x 96 by default), each compared with diffusers' torch
StableDiffusionPipeline on the same initial latents.

Nothing is downloaded: every component is built from a config (tools/export_tiny_sdxl.py's helpers), weights
drawn from torch's generator seeded by --seed. The tokenizer is a CLIPTokenizer over the byte-level vocabulary
(514 ids, no merges) that `mschecker sd --save-pipeline` writes.

Needs the dev environment (torch + diffusers + transformers + optimum-onnx); it is never a project dependency:

    python3 -m venv /tmp/devenv_sd
    /tmp/devenv_sd/bin/pip install torch==2.13.0 diffusers==0.39.0 "optimum-onnx[onnxruntime]==0.1.0"
    .venv/bin/python -m mschecker.cli sd --preset tiny --save-pipeline /tmp/sd_like     # the tokenizer files
    /tmp/devenv_sd/bin/python tools/export_tiny_sd_sized.py --tokenizer /tmp/sd_like/tokenizer --out /tmp/sd_128

--out DIR (must not exist) receives DIR/torch/ (diffusers save_pretrained), DIR/onnx/ (what optimum-cli writes:
model_index.json, scheduler/, text_encoder/, tokenizer/, unet/, vae_decoder/, vae_encoder/) and DIR/check.json.
--size: the UNet's sample_size * 8 (default 128); --other-size HxW: the second run's size (default 64x96).
--scheduler pndm|ddim: SD 1.5's PNDMScheduler config (default) or DDIMScheduler with the same betas.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from export_tiny_sdxl import EOS, clip_config, make_tokenizer, optimum_export, rel, tiny_vae, versions  # noqa: E402

# runwayml/stable-diffusion-v1-5 scheduler/scheduler_config.json (PNDMScheduler)
SD15_SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                      clip_sample=False, set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1,
                      trained_betas=None)


def build_pipeline(tokenizer_src: Path, staging: Path, size: int, seed: int, scheduler: str):
    import torch
    from diffusers import DDIMScheduler, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    if size % 8:
        raise SystemExit(f"--size {size} is not a multiple of 8")
    tok, vocab = make_tokenizer(tokenizer_src, staging / "tokenizer", pad_token=EOS)
    hidden = 32
    torch.manual_seed(seed)
    te = CLIPTextModel(clip_config(vocab, hidden)).eval()
    torch.manual_seed(seed + 2)
    unet = UNet2DConditionModel(
        sample_size=size // 8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=hidden, attention_head_dim=8, norm_num_groups=8).eval()
    vae = tiny_vae(seed + 3, size, scaling_factor=0.18215, force_upcast=True)
    sched = (PNDMScheduler if scheduler == "pndm" else DDIMScheduler).from_config(SD15_SCHEDULER)
    return StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet, scheduler=sched,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def check_sd(torch_dir: Path, onnx_dir: Path, sizes: list[tuple[int, int]], steps: int = 2) -> list[dict]:
    """ORTStableDiffusionPipeline vs diffusers' StableDiffusionPipeline, same prompt and initial latents, per size."""
    import numpy as np
    import torch
    from diffusers import StableDiffusionPipeline
    from optimum.onnxruntime import ORTStableDiffusionPipeline

    ort_pipe = ORTStableDiffusionPipeline.from_pretrained(str(onnx_dir))
    pt_pipe = StableDiffusionPipeline.from_pretrained(str(torch_dir))
    results = []
    for h, w in sizes:
        latents = torch.randn(1, 4, h // 8, w // 8, generator=torch.Generator().manual_seed(0))
        kw = dict(prompt="a photo of an astronaut riding a horse", num_inference_steps=steps, height=h, width=w,
                  guidance_scale=7.5, output_type="np")
        out_ort = ort_pipe(latents=latents.clone(), **kw).images
        out_pt = pt_pipe(latents=latents.clone(), **kw).images
        lat_ort = ort_pipe(latents=latents.clone(), **{**kw, "output_type": "latent"}).images
        lat_pt = pt_pipe(latents=latents.clone(), **{**kw, "output_type": "latent"}).images
        results.append({"pipeline": "StableDiffusion", "scheduler": type(ort_pipe.scheduler).__name__,
                        "steps": steps, "height": h, "width": w, "image_shape": list(out_ort.shape),
                        "image_finite": bool(np.isfinite(out_ort).all()),
                        "image_range": [float(out_ort.min()), float(out_ort.max())],
                        "latents_rel_err_ort_vs_torch": rel(lat_ort, lat_pt),
                        "image_rel_err_ort_vs_torch": rel(out_ort, out_pt),
                        "image_max_abs_err_ort_vs_torch": float(np.abs(out_ort - out_pt).max())})
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    ap.add_argument("--size", type=int, default=128, help="the UNet's sample_size * 8, in pixels (default 128)")
    ap.add_argument("--other-size", default="64x96", help="HxW of the second check run (default 64x96)")
    ap.add_argument("--tokenizer", type=Path, default=Path("/tmp/peer/sd_like/tokenizer"),
                    help="folder with vocab.json + merges.txt (from `mschecker sd --save-pipeline`)")
    ap.add_argument("--scheduler", choices=("pndm", "ddim"), default="pndm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exporter", choices=("cli", "api"), default="cli")
    ap.add_argument("--no-check", action="store_true", help="skip the ORT-vs-torch runs")
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"export_tiny_sd_sized: error: {args.out} exists", file=sys.stderr)
        return 2
    try:
        oh, ow = (int(x) for x in args.other_size.lower().split("x"))
    except ValueError:
        print(f"export_tiny_sd_sized: error: --other-size {args.other_size!r} is not HxW", file=sys.stderr)
        return 2
    if oh % 8 or ow % 8:
        print(f"export_tiny_sd_sized: error: --other-size {args.other_size} is not a multiple of 8", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True)
    staging = args.out / "_tokenizers"
    pipe = build_pipeline(args.tokenizer, staging, args.size, args.seed, args.scheduler)
    pipe.save_pretrained(str(args.out / "torch"))
    shutil.rmtree(staging)
    optimum_export(args.out / "torch", args.out / "onnx", args.exporter)
    report = {"versions": versions(), "size": args.size, "seed": args.seed, "scheduler": args.scheduler,
              "exporter": args.exporter}
    if not args.no_check:
        report["check"] = check_sd(args.out / "torch", args.out / "onnx", [(args.size, args.size), (oh, ow)])
    (args.out / "check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
