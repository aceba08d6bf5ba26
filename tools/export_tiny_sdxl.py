"""Dev-only: a TINY Stable Diffusion XL pipeline with random weights, exported to ONNX exactly as optimum does it
for users (`optimum-cli export onnx --task text-to-image`), then run once in optimum's ORTStableDiffusionXLPipeline
and compared with diffusers' torch StableDiffusionXLPipeline on the same initial latents.

Nothing is downloaded: every component is built from a config here, with weights drawn from torch's generator
seeded by --seed (deterministic: the same seed gives the same weights and so the same ONNX graphs). The
tokenizers are CLIPTokenizers over the byte-level vocabulary (514 ids, no merges) that
`mschecker sd --save-pipeline` writes; the CLIP text models take vocab_size 1000 >= 514.

Needs the dev environment (torch + diffusers + transformers + optimum-onnx); it is never a project dependency:

    python3 -m venv /tmp/devenv_sd
    /tmp/devenv_sd/bin/pip install torch==2.13.0 diffusers==0.39.0 "optimum-onnx[onnxruntime]==0.1.0"
    .venv/bin/python -m mschecker.cli sd --preset tiny --save-pipeline /tmp/sd_like     # the tokenizer files
    /tmp/devenv_sd/bin/python tools/export_tiny_sdxl.py --tokenizer /tmp/sd_like/tokenizer --out /tmp/sdxl_tiny

(diffusers 0.40+ needs huggingface_hub>=1, optimum-onnx 0.1.0 / optimum 2.1 need huggingface_hub<1 and
transformers<4.58: diffusers 0.39.0 is the newest that installs beside them.)

--out DIR (must not exist) receives:
    DIR/torch/   the diffusers pipeline (save_pretrained, safetensors): StableDiffusionXLPipeline.from_pretrained
    DIR/onnx/    what `optimum-cli export onnx --model DIR/torch --task text-to-image DIR/onnx` writes:
                 model_index.json, scheduler/, text_encoder/, text_encoder_2/, tokenizer/, tokenizer_2/, unet/,
                 vae_decoder/, vae_encoder/ (each model folder: model.onnx + config.json)
    DIR/check.json  the ORT-vs-torch run (unless --no-check)
--size: image height = width in pixels (default 128; the UNet's sample_size is size // 8). The export itself has
dynamic batch / height / width / sequence axes.
--exporter cli|api: optimum-cli in a subprocess (default) or optimum's main_export in-process (the same code).
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

MODEL_MAX_LENGTH = 77  # the tokenizers' model_max_length == the CLIP text models' max_position_embeddings
VOCAB_SIZE = 1000  # >= the 514 ids of the byte-level vocabulary
BOS, EOS = "<|startoftext|>", "<|endoftext|>"

# stabilityai/stable-diffusion-xl-base-1.0 scheduler/scheduler_config.json (EulerDiscreteScheduler)
SDXL_SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                      prediction_type="epsilon", steps_offset=1, timestep_spacing="leading",
                      interpolation_type="linear", use_karras_sigmas=False, clip_sample=False,
                      sample_max_value=1.0, set_alpha_to_one=False, skip_prk_steps=True)


def make_tokenizer(src: Path, dst: Path, pad_token: str):
    """A CLIPTokenizer over src's vocab.json + merges.txt, saved to dst (pad_token: SDXL's tokenizer pads with
    <|endoftext|>, its tokenizer_2 with "!")."""
    from transformers import CLIPTokenizer

    vocab = json.loads((src / "vocab.json").read_text())
    for tok in (BOS, EOS, pad_token):
        if tok not in vocab:
            raise SystemExit(f"tokenizer vocabulary {src / 'vocab.json'} lacks {tok!r}")
    if len(vocab) > VOCAB_SIZE:
        raise SystemExit(f"tokenizer vocabulary has {len(vocab)} ids > the text models' {VOCAB_SIZE}")
    tok = CLIPTokenizer(str(src / "vocab.json"), str(src / "merges.txt"), bos_token=BOS, eos_token=EOS,
                        unk_token=EOS, pad_token=pad_token, model_max_length=MODEL_MAX_LENGTH)
    tok.save_pretrained(str(dst))
    return CLIPTokenizer.from_pretrained(str(dst)), vocab


def clip_config(vocab: dict, hidden: int, projection_dim: int | None = None, act: str = "quick_gelu"):
    """act: quick_gelu as SD's / SDXL's text_encoder (OpenAI CLIP ViT-L), gelu as SDXL's text_encoder_2 (bigG)."""
    from transformers import CLIPTextConfig

    kw = dict(vocab_size=VOCAB_SIZE, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=MODEL_MAX_LENGTH, hidden_act=act,
              bos_token_id=vocab[BOS], eos_token_id=vocab[EOS], pad_token_id=1)
    if projection_dim is not None:
        kw["projection_dim"] = projection_dim
    return CLIPTextConfig(**kw)


def tiny_vae(seed: int, size: int, scaling_factor: float, force_upcast: bool):
    """AutoencoderKL with 4 blocks: the pipelines' vae_scale_factor 2 ** (4 - 1) = 8, as in SD / SDXL."""
    import torch
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                         up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 16, 16, 16),
                         latent_channels=4, norm_num_groups=8, layers_per_block=1, sample_size=size,
                         scaling_factor=scaling_factor, force_upcast=force_upcast).eval()


def build_pipeline(tokenizer_src: Path, staging: Path, size: int, seed: int):
    import torch
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    if size % 8:
        raise SystemExit(f"--size {size} is not a multiple of 8")
    tok1, vocab = make_tokenizer(tokenizer_src, staging / "tokenizer", pad_token=EOS)
    tok2, _ = make_tokenizer(tokenizer_src, staging / "tokenizer_2", pad_token="!")
    te1_hidden, te2_hidden, proj_dim, time_dim = 32, 32, 32, 8
    torch.manual_seed(seed)
    te1 = CLIPTextModel(clip_config(vocab, te1_hidden)).eval()
    torch.manual_seed(seed + 1)
    te2 = CLIPTextModelWithProjection(clip_config(vocab, te2_hidden, projection_dim=proj_dim, act="gelu")).eval()
    torch.manual_seed(seed + 2)
    unet = UNet2DConditionModel(
        sample_size=size // 8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        transformer_layers_per_block=(1, 2), attention_head_dim=(2, 4), use_linear_projection=True,
        norm_num_groups=8, cross_attention_dim=te1_hidden + te2_hidden,
        addition_embed_type="text_time", addition_time_embed_dim=time_dim,
        projection_class_embeddings_input_dim=6 * time_dim + proj_dim).eval()
    vae = tiny_vae(seed + 3, size, scaling_factor=0.13025, force_upcast=True)
    scheduler = EulerDiscreteScheduler.from_config(SDXL_SCHEDULER)
    return StableDiffusionXLPipeline(vae=vae, text_encoder=te1, text_encoder_2=te2, tokenizer=tok1, tokenizer_2=tok2,
                                     unet=unet, scheduler=scheduler, force_zeros_for_empty_prompt=True)


def optimum_export(torch_dir: Path, onnx_dir: Path, exporter: str, extra: list[str] = ()) -> None:
    """What users run: optimum-cli export onnx --model TORCH --task text-to-image ONNX."""
    if exporter == "cli":
        cli = Path(sys.executable).with_name("optimum-cli")
        cmd = [str(cli), "export", "onnx", "--model", str(torch_dir), "--task", "text-to-image", *extra,
               str(onnx_dir)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    else:
        from optimum.exporters.onnx import main_export

        main_export(str(torch_dir), output=str(onnx_dir), task="text-to-image")


def rel(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_xl(torch_dir: Path, onnx_dir: Path, size: int, steps: int = 2) -> dict:
    """ORTStableDiffusionXLPipeline vs diffusers' StableDiffusionXLPipeline, same prompt and initial latents."""
    import numpy as np
    import torch
    from diffusers import StableDiffusionXLPipeline
    from optimum.onnxruntime import ORTStableDiffusionXLPipeline

    ort_pipe = ORTStableDiffusionXLPipeline.from_pretrained(str(onnx_dir))
    pt_pipe = StableDiffusionXLPipeline.from_pretrained(str(torch_dir))
    latents = torch.randn(1, 4, size // 8, size // 8, generator=torch.Generator().manual_seed(0))
    kw = dict(prompt="a photo of an astronaut riding a horse", num_inference_steps=steps, height=size, width=size,
              guidance_scale=5.0, output_type="np")
    out_ort = ort_pipe(latents=latents.clone(), **kw).images
    out_pt = pt_pipe(latents=latents.clone(), **kw).images
    lat_ort = ort_pipe(latents=latents.clone(), **{**kw, "output_type": "latent"}).images
    lat_pt = pt_pipe(latents=latents.clone(), **{**kw, "output_type": "latent"}).images
    return {"pipeline": "StableDiffusionXL", "steps": steps, "height": size, "width": size,
            "image_shape": list(out_ort.shape), "image_dtype": str(out_ort.dtype),
            "image_finite": bool(np.isfinite(out_ort).all()),
            "image_range": [float(out_ort.min()), float(out_ort.max())],
            "latents_rel_err_ort_vs_torch": rel(lat_ort, lat_pt),
            "image_rel_err_ort_vs_torch": rel(out_ort, out_pt),
            "image_max_abs_err_ort_vs_torch": float(np.abs(out_ort - out_pt).max())}


def versions() -> dict:
    import importlib.metadata as md

    return {p: md.version(p) for p in ("torch", "diffusers", "transformers", "optimum", "optimum-onnx",
                                        "onnx", "onnxruntime", "numpy")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    ap.add_argument("--size", type=int, default=128, help="image height = width in pixels (default 128)")
    ap.add_argument("--tokenizer", type=Path, default=Path("/tmp/peer/sd_like/tokenizer"),
                    help="folder with vocab.json + merges.txt (from `mschecker sd --save-pipeline`)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exporter", choices=("cli", "api"), default="cli")
    ap.add_argument("--no-check", action="store_true", help="skip the ORT-vs-torch run")
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"export_tiny_sdxl: error: {args.out} exists", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True)
    staging = args.out / "_tokenizers"
    pipe = build_pipeline(args.tokenizer, staging, args.size, args.seed)
    pipe.save_pretrained(str(args.out / "torch"))
    shutil.rmtree(staging)
    optimum_export(args.out / "torch", args.out / "onnx", args.exporter)
    report = {"versions": versions(), "size": args.size, "seed": args.seed, "exporter": args.exporter}
    if not args.no_check:
        report["check"] = check_xl(args.out / "torch", args.out / "onnx", args.size)
    (args.out / "check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
