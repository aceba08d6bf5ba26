"""Regression goldens of the bundled SD pipeline (tiny preset): what golden/sd/tiny/ holds and how it is computed.

One golden directory (mschecker.tensors.golden_store layout: manifest + .npy, sha256-pinned) with tensors named
``<group>.<name>``:
  inputs.*          token ids, initial noise, and the exact stage inputs the per-stage goldens were run on
                    (UNet step-1 feeds by input name, VAE latent) -- taken from the reference pipeline run of the
                    bundled tiny pipeline (bundled_pipeline: the same code path as a pipeline folder);
  reference.*       float64 reference outputs of each stage on those inputs, and of the whole pipeline;
  npu.*             the emulated NPU's outputs (``PROFILE`` as given: the device-table kernels, a finite image
                    close to the reference on this preset);
  npu_pessimistic.* the same with the device table's pessimistic bracket (``--bracket pessimistic``: e.g. the
                    GroupNorm whose current 910B kernel is closed, bracketed by fp16 statistics): the VAE's
                    statistics overflow and the image is NaN, pinned bit for bit as the other end of the bracket.
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

from mschecker import golden_data
from mschecker.blas import ONE_THREAD_ENV
from mschecker.sd.check import STAGES, per_stage_factory, stage_feeds
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import SDPipeline
from mschecker.sd.pipeline import SDModels, run_pipeline

GOLDEN_DIR = golden_data.path("sd", "tiny")  # the repository's golden/sd/tiny, installed as package data
SETTINGS = {"preset": "tiny", "steps": 3, "scheduler": "ddim", "seed": 0, "guidance_scale": 7.5,
            "prompt": "a photo of an astronaut riding a horse", "weights_seed": 0}
PROFILE = "ascend910b"
PESSIMISTIC = {"bracket": "pessimistic"}
RUNS = {"reference": ("reference", None, {}), "npu": ("npu", PROFILE, {}),
        "npu_pessimistic": ("npu", PROFILE, PESSIMISTIC)}


def graph_hashes(models: SDModels) -> dict[str, str]:
    return {s: hashlib.sha256(getattr(models, s).SerializeToString()).hexdigest() for s in STAGES}


def _first(outputs) -> np.ndarray:
    return np.asarray(next(iter(outputs.values())))


def stage_inputs(pipeline: SDPipeline, reference) -> dict[str, np.ndarray]:
    """The stage inputs of the per-stage goldens, from the reference pipeline run, as the graphs take them
    (``inputs.unet_<input name>``: the UNet's step-1 feeds)."""
    unet = stage_feeds("unet", reference, pipeline)
    return {"inputs.token_ids": reference.token_ids, "inputs.initial_latents": reference.latents[0],
            **{f"inputs.unet_{name}": value for name, value in unet.items()},
            "inputs.vae_latent": next(iter(stage_feeds("vae_decoder", reference, pipeline).values()))}


def _pipeline_run(pipeline: SDPipeline, make):
    return run_pipeline(SETTINGS["prompt"], pipeline=pipeline, steps=SETTINGS["steps"], seed=SETTINGS["seed"],
                        guidance_scale=SETTINGS["guidance_scale"], make_stage_runner=make)


def run_group(group: str, pipeline: SDPipeline, inputs: dict[str, np.ndarray], *, pipeline_run: bool = True
              ) -> dict[str, np.ndarray]:
    """The ``group``'s tensors: each stage on the stored inputs, then (with ``pipeline_run``) the whole pipeline."""
    device, profile, options = RUNS[group]
    make = per_stage_factory({s: (device, profile, options) for s in STAGES}, None)
    unet_names = [m.name for m in pipeline.stages["unet"].inputs.values()]
    out = {}
    out[f"{group}.text_embeddings"] = pipeline.output("text_encoder", make(pipeline.model("text_encoder"),
                                                      "text_encoder")(pipeline.text_feeds(inputs["inputs.token_ids"])))
    out[f"{group}.unet_eps"] = pipeline.output("unet", make(pipeline.model("unet"), "unet")(
        {name: inputs[f"inputs.unet_{name}"] for name in unet_names}))
    vae_name = pipeline.stages["vae_decoder"].inputs["latent_sample"].name
    out[f"{group}.vae_decoded"] = pipeline.output("vae_decoder", make(pipeline.model("vae_decoder"), "vae_decoder")(
        {vae_name: inputs["inputs.vae_latent"]}))
    if pipeline_run:
        r = _pipeline_run(pipeline, make)
        out[f"{group}.pipeline_latents"] = r.latents[-1]
        out[f"{group}.pipeline_decoded"] = np.asarray(r.decoded)
        out[f"{group}.pipeline_image"] = r.image
    return out


def compute() -> tuple[dict[str, np.ndarray], dict]:
    """(tensors, extra) of the golden set, computed from scratch."""
    pipeline = bundled_pipeline(SETTINGS["preset"], SETTINGS["weights_seed"], SETTINGS["scheduler"])
    reference = _pipeline_run(pipeline, per_stage_factory({s: RUNS["reference"] for s in STAGES}, None))
    tensors = stage_inputs(pipeline, reference)
    for group in RUNS:
        tensors.update(run_group(group, pipeline, tensors))
    extra = {"settings": SETTINGS, "profile": PROFILE, "pessimistic": PESSIMISTIC, "graph_sha256": graph_hashes(pipeline.models)}
    return tensors, extra


def compute_pinned() -> tuple[dict[str, np.ndarray], dict]:
    """compute() in a fresh interpreter with one BLAS thread (the env var is only read when BLAS starts, so a
    process that already loaded numpy cannot change it); what the builder records and the tests recompute."""
    with tempfile.TemporaryDirectory(prefix="mschecker-sd-goldens-") as tmp:
        r = subprocess.run([sys.executable, "-m", "mschecker.sd.goldens", tmp], capture_output=True, text=True,
                           env={**os.environ, **ONE_THREAD_ENV})
        if r.returncode != 0:
            raise RuntimeError(f"computing the SD goldens failed:\n{r.stderr[-2000:]}")
        with np.load(Path(tmp) / "tensors.npz", allow_pickle=False) as z:
            tensors = {k: z[k] for k in z.files}
        return tensors, json.loads((Path(tmp) / "extra.json").read_text())


if __name__ == "__main__":  # the worker of compute_pinned: python -m mschecker.sd.goldens OUT_DIR
    _tensors, _extra = compute()
    np.savez(Path(sys.argv[1]) / "tensors.npz", **_tensors)
    (Path(sys.argv[1]) / "extra.json").write_text(json.dumps(_extra))
