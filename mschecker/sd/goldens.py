"""Regression goldens of the bundled SD pipeline (tiny preset): what golden/sd/tiny/ holds and how it is computed.

One golden directory (mschecker.golden layout: manifest + .npy, sha256-pinned) with tensors named
``<group>.<name>``:
  inputs.*          token ids, initial noise, and the exact stage inputs the per-stage goldens were run on
                    (UNet step-1 sample/timestep/context, VAE latent) -- taken from the reference pipeline run;
  reference.*       float64 reference outputs of each stage on those inputs, and of the whole pipeline;
  npu.*             the emulated NPU's outputs (``PROFILE``, as given: its VAE output is NaN, the documented
                    GroupNorm failure, pinned bit for bit as the regression state);
  npu_fp32stats.*   the NPU with the fix (InstanceNormalization high_precision in the VAE): a finite image.
Both runs are deterministic (float64 / fp16 numpy arithmetic, fixed seeds) for a given BLAS thread count, so
tests compare bit for bit; `compute_pinned` fixes the thread count at one, because OpenBLAS's dgemm/sgemm results
change in the last bits with it (measured: 537 bytes of the reference UNet eps differ between 1 thread and the
default 2, max 2.2e-15, which then flips fp16 roundings on the NPU side).
``extra`` records the settings and each graph's sha256 so that a change of the builders is reported as such
("rebuild the goldens") rather than as a numerical mismatch.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .. import golden_data
from .check import STAGES, per_stage_factory, stage_feeds
from .pipeline import SDModels, run_pipeline
from .presets import get_preset

GOLDEN_DIR = golden_data.path("sd", "tiny")  # the repository's golden/sd/tiny, installed as package data
SETTINGS = {"preset": "tiny", "steps": 3, "scheduler": "ddim", "seed": 0, "guidance_scale": 7.5,
            "prompt": "a photo of an astronaut riding a horse", "weights_seed": 0}
PROFILE = "ascend910b"
FIX = {"implmode_by_op_type": {"InstanceNormalization": "high_precision"}}
RUNS = {"reference": ("reference", None, {}), "npu": ("npu", PROFILE, {}), "npu_fp32stats": ("npu", PROFILE, FIX)}


def graph_hashes(models: SDModels) -> dict[str, str]:
    return {s: hashlib.sha256(getattr(models, s).SerializeToString()).hexdigest() for s in STAGES}


def _first(outputs) -> np.ndarray:
    return np.asarray(next(iter(outputs.values())))


def stage_inputs(models: SDModels, reference) -> dict[str, np.ndarray]:
    """The stage inputs of the per-stage goldens, from the reference pipeline run (float32 as the graphs take)."""
    args = (reference, get_preset(SETTINGS["preset"]), SETTINGS["scheduler"], SETTINGS["steps"])
    unet = stage_feeds("unet", *args)
    return {"inputs.token_ids": reference.token_ids, "inputs.initial_latents": reference.latents[0],
            "inputs.unet_sample": unet["sample"], "inputs.unet_timestep": unet["timestep"],
            "inputs.unet_context": unet["encoder_hidden_states"],
            "inputs.vae_latent": stage_feeds("vae_decoder", *args)["latent_sample"]}


def run_group(group: str, models: SDModels, inputs: dict[str, np.ndarray], *, pipeline: bool = True
              ) -> dict[str, np.ndarray]:
    """The ``group``'s tensors: each stage on the stored inputs, then (with ``pipeline``) the whole pipeline."""
    device, profile, options = RUNS[group]
    make = per_stage_factory({s: (device, profile, options) for s in STAGES}, None)
    out = {}
    if group != "npu_fp32stats":  # the fix only changes the VAE
        out[f"{group}.text_embeddings"] = _first(make(models.text_encoder, "text_encoder")(
            {"input_ids": inputs["inputs.token_ids"]}))
        out[f"{group}.unet_eps"] = _first(make(models.unet, "unet")(
            {"sample": inputs["inputs.unet_sample"], "timestep": inputs["inputs.unet_timestep"],
             "encoder_hidden_states": inputs["inputs.unet_context"]}))
    out[f"{group}.vae_decoded"] = _first(make(models.vae_decoder, "vae_decoder")(
        {"latent_sample": inputs["inputs.vae_latent"]}))
    if pipeline:
        r = run_pipeline(SETTINGS["prompt"], preset=SETTINGS["preset"], steps=SETTINGS["steps"],
                         scheduler=SETTINGS["scheduler"], seed=SETTINGS["seed"],
                         guidance_scale=SETTINGS["guidance_scale"], models=models, make_stage_runner=make)
        out[f"{group}.pipeline_latents"] = r.latents[-1]
        out[f"{group}.pipeline_decoded"] = np.asarray(r.decoded)
        out[f"{group}.pipeline_image"] = r.image
    return out


def compute() -> tuple[dict[str, np.ndarray], dict]:
    """(tensors, extra) of the golden set, computed from scratch."""
    models = SDModels.build(SETTINGS["preset"], SETTINGS["weights_seed"])
    reference = run_pipeline(SETTINGS["prompt"], preset=SETTINGS["preset"], steps=SETTINGS["steps"],
                             scheduler=SETTINGS["scheduler"], seed=SETTINGS["seed"],
                             guidance_scale=SETTINGS["guidance_scale"], models=models,
                             make_stage_runner=per_stage_factory({s: RUNS["reference"] for s in STAGES}, None))
    tensors = stage_inputs(models, reference)
    for group in RUNS:
        tensors.update(run_group(group, models, tensors))
    extra = {"settings": SETTINGS, "profile": PROFILE, "fix": FIX, "graph_sha256": graph_hashes(models)}
    return tensors, extra


PINNED_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def compute_pinned() -> tuple[dict[str, np.ndarray], dict]:
    """compute() in a fresh interpreter with one BLAS thread (the env var is only read when BLAS starts, so a
    process that already loaded numpy cannot change it); what the builder records and the tests recompute."""
    with tempfile.TemporaryDirectory(prefix="mschecker-sd-goldens-") as tmp:
        r = subprocess.run([sys.executable, "-m", "mschecker.sd.goldens", tmp], capture_output=True, text=True,
                           env={**os.environ, **PINNED_ENV})
        if r.returncode != 0:
            raise RuntimeError(f"computing the SD goldens failed:\n{r.stderr[-2000:]}")
        with np.load(Path(tmp) / "tensors.npz", allow_pickle=False) as z:
            tensors = {k: z[k] for k in z.files}
        return tensors, json.loads((Path(tmp) / "extra.json").read_text())


if __name__ == "__main__":  # the worker of compute_pinned: python -m mschecker.sd.goldens OUT_DIR
    _tensors, _extra = compute()
    np.savez(Path(sys.argv[1]) / "tensors.npz", **_tensors)
    (Path(sys.argv[1]) / "extra.json").write_text(json.dumps(_extra))
