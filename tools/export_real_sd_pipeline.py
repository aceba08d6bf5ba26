"""Dev-only: the tiny real diffusers / transformers SD components (tools/export_real_sd_graphs.py's models) exported
as a diffusers ONNX pipeline folder that diffusers' OnnxStableDiffusionPipeline itself can run: TorchScript,
opset 17, dynamic batch (diffusers feeds the UNet a timestep of shape (1,) with a batch-2 sample, which the
static-batch fixtures in tests/fixtures/real_sd cannot take), int32 input_ids (as diffusers' own ONNX
conversion script exports them). For tools/sd_peer_check.py on real exported graphs.

    .venv/bin/python -m mschecker.cli sd --preset tiny --scheduler pndm --save-pipeline /tmp/sd_like
    /tmp/devenv_sd/bin/python tools/export_real_sd_pipeline.py --like /tmp/sd_like --out /tmp/sd_real
    /tmp/devenv_sd/bin/python tools/sd_peer_check.py --pipeline /tmp/sd_real --steps 4

--like: a folder written by `mschecker sd --save-pipeline` whose tokenizer/ (the byte-level vocabulary: 514 ids,
within the exported text encoder's 1000), scheduler/ and model_index.json are copied.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    import torch
    from export_real_sd_graphs import build_models

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--like", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.out.exists():
        print(f"export_real_sd_pipeline: error: {args.out} exists", file=sys.stderr)
        return 2
    modules, inputs, configs = build_models()
    args.out.mkdir(parents=True)
    for part in ("tokenizer", "scheduler"):
        shutil.copytree(args.like / part, args.out / part)
    shutil.copy(args.like / "model_index.json", args.out / "model_index.json")
    batch = {0: "batch"}
    spec = {
        "text_encoder": ({"input_ids": inputs["text_encoder"][0]["input_ids"].to(torch.int32)},
                         {"input_ids": batch, "last_hidden_state": batch}),
        "unet": (inputs["unet"][0], {"sample": batch, "timestep": batch, "encoder_hidden_states": batch,
                                     "out_sample": batch}),
        "vae_decoder": (inputs["vae_decoder"][0], {"latent_sample": batch, "sample": batch}),
    }
    for stage, (feeds, axes) in spec.items():
        (args.out / stage).mkdir()
        torch.onnx.export(modules[stage], tuple(feeds.values()), str(args.out / stage / "model.onnx"),
                          input_names=list(feeds), output_names=inputs[stage][1], opset_version=17, dynamo=False,
                          dynamic_axes=axes)
    cfg = configs
    (args.out / "unet" / "config.json").write_text(json.dumps({
        "sample_size": cfg["unet"]["sample_size"], "in_channels": cfg["unet"]["in_channels"],
        "cross_attention_dim": cfg["unet"]["cross_attention_dim"]}) + "\n")
    (args.out / "text_encoder" / "config.json").write_text(json.dumps({
        "hidden_size": cfg["text_encoder"]["hidden_size"]}) + "\n")
    (args.out / "vae_decoder" / "config.json").write_text(json.dumps({
        "latent_channels": cfg["vae_decoder"]["latent_channels"], "scaling_factor": 0.18215}) + "\n")
    print(f"pipeline: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
