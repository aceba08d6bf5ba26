"""Dev-only: export tiny real diffusers / transformers SD components with torch.onnx.export, as test fixtures.

Not a project dependency: run it in a separate environment (the product and its tests never import torch):
    python3 -m venv /work/torchenv && /work/torchenv/bin/pip install torch==2.13.0 diffusers transformers \
        onnx onnxscript
    /work/torchenv/bin/python tools/export_real_sd_graphs.py [--out tests/fixtures/real_sd] [--update]

Models (random weights from torch.manual_seed(0), tiny configs with the real classes and code paths):
  unet          diffusers UNet2DConditionModel: CrossAttnDownBlock2D + DownBlock2D, mid block with cross attention,
                UpBlock2D + CrossAttnUpBlock2D, block_out_channels (16, 32), 8 groups, cross_attention_dim 32
  vae_decoder   diffusers AutoencoderKL(block_out_channels (16, 32), 8 groups): post_quant_conv + decoder
  text_encoder  transformers CLIPTextModel(hidden 32, 2 layers, 4 heads, 16 positions): last_hidden_state
Exporters: TorchScript (dynamo=False, opset 17) and dynamo (dynamo=True, opset 18, and 23 where it succeeds).
Each export goes to <out>/<model>_<exporter><opset>/ with model.onnx, the inputs (<input name>.npy) and torch's
float32 outputs (<output name>.npy), plus meta.json (versions, config, exporter); an export that fails is
recorded in <out>/export_report.json with its error, not hidden. Refuses to replace existing fixtures
without --update.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def build_models():
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet_cfg = dict(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(16, 32),
                    down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                    attention_head_dim=8, norm_num_groups=8)
    unet = UNet2DConditionModel(**unet_cfg).eval()
    vae_cfg = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                   up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(16, 32), latent_channels=4,
                   norm_num_groups=8, layers_per_block=1, sample_size=32)
    vae = AutoencoderKL(**vae_cfg).eval()
    clip_cfg = dict(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, max_position_embeddings=16)
    clip = CLIPTextModel(CLIPTextConfig(**clip_cfg)).eval()

    class UNetWrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, sample, timestep, encoder_hidden_states):
            return self.m(sample, timestep, encoder_hidden_states, return_dict=False)[0]

    class DecoderWrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, latent_sample):
            return self.m.decode(latent_sample, return_dict=False)[0]

    class ClipWrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids, return_dict=False)[0]

    g = torch.Generator().manual_seed(1)
    inputs = {
        "unet": ({"sample": torch.randn(2, 4, 8, 8, generator=g), "timestep": torch.tensor([981.0, 981.0]),
                  "encoder_hidden_states": torch.randn(2, 16, 32, generator=g) * 0.5}, ["out_sample"]),
        "vae_decoder": ({"latent_sample": torch.randn(1, 4, 8, 8, generator=g) / 0.18215}, ["sample"]),
        "text_encoder": ({"input_ids": torch.randint(0, 1000, (2, 16), generator=g)}, ["last_hidden_state"]),
    }
    configs = {"unet": unet_cfg, "vae_decoder": vae_cfg, "text_encoder": clip_cfg}
    return {"unet": UNetWrap(unet), "vae_decoder": DecoderWrap(vae), "text_encoder": ClipWrap(clip)}, inputs, configs


def export_one(module, feeds, output_names, path: Path, *, dynamo: bool, opset: int) -> None:
    import torch

    args = tuple(feeds.values())
    kwargs = dict(input_names=list(feeds), output_names=output_names, opset_version=opset, dynamo=dynamo)
    if dynamo:
        kwargs["external_data"] = False
    torch.onnx.export(module, args, str(path), **kwargs)


def main(argv=None) -> int:
    import onnx
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "real_sd")
    ap.add_argument("--update", action="store_true")
    args = ap.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()) and not args.update:
        print(f"export_real_sd_graphs: error: {args.out} already holds fixtures (pass --update)", file=sys.stderr)
        return 2
    import diffusers
    import transformers

    modules, inputs, configs = build_models()
    versions = {"torch": torch.__version__, "diffusers": diffusers.__version__,
                "transformers": transformers.__version__, "onnx": onnx.__version__}
    report = {"versions": versions, "exports": {}}
    staging = args.out.with_name(args.out.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, module in modules.items():
        feeds, output_names = inputs[name]
        with torch.no_grad():
            expected = module(*feeds.values())
        for exporter, dynamo, opset in (("ts", False, 17), ("dynamo", True, 18), ("dynamo", True, 23)):
            tag = f"{name}_{exporter}{opset}"
            d = staging / tag
            d.mkdir()
            try:
                export_one(module, feeds, output_names, d / "model.onnx", dynamo=dynamo, opset=opset)
                model = onnx.load(str(d / "model.onnx"))
                onnx.checker.check_model(model)
            except Exception as exc:  # noqa: BLE001 - recorded, the other exports go on
                shutil.rmtree(d)
                report["exports"][tag] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000],
                                          "trace": traceback.format_exc()[-1500:]}
                print(f"{tag}: FAILED {type(exc).__name__}: {str(exc)[:200]}")
                continue
            graph_inputs = [i.name for i in model.graph.input]
            for k, v in feeds.items():
                if k in graph_inputs:
                    np.save(d / f"{k}.npy", v.numpy())
            np.save(d / f"{model.graph.output[0].name}.npy", expected.numpy().astype(np.float32))
            ops = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                          for n in model.graph.node})
            meta = {"model": name, "exporter": exporter, "opset": opset, "versions": versions,
                    "config": configs[name], "inputs": [i for i in graph_inputs],
                    "outputs": [o.name for o in model.graph.output], "nodes": len(model.graph.node), "op_types": ops}
            (d / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
            size = sum(f.stat().st_size for f in d.iterdir())
            report["exports"][tag] = {"status": "ok", "bytes": size, "nodes": len(model.graph.node), "op_types": ops}
            print(f"{tag}: ok, {len(model.graph.node)} nodes, {size / 1024:.0f} KiB")
    (staging / "export_report.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.out.exists():
        shutil.rmtree(args.out)
    staging.rename(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
