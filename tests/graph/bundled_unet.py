"""The bundled SD UNet of a preset saved to a folder, with one denoising step's feeds (batch 2: unconditional and
prompt, as the pipeline runs it): the graph the executor tests run end to end."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def unet_step(preset: str, folder: Path, seed: int) -> tuple[Path, dict[str, np.ndarray]]:
    from mschecker.sd.modelfile import save_model
    from mschecker.sd.presets import get_preset
    from mschecker.sd.unet import build_unet

    p = get_preset(preset)
    path = save_model(build_unet(p), Path(folder) / "unet.onnx")
    rng = np.random.default_rng(seed)
    c, s, _ = p.latent_shape
    feeds = {"sample": rng.standard_normal((2, c, s, s)).astype(np.float32),
             "timestep": np.array([500.0, 500.0], np.float32),
             "encoder_hidden_states": rng.standard_normal((2, p.clip.max_length, p.unet.cross_dim)).astype(np.float32)}
    return path, feeds
