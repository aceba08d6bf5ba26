"""The synthetic VAE decoders reproduce SD's fp16 hazard: internal activations pass 65504 for large latents.

Measured with onnxruntime in float32 over every node output (activation_peaks). The thresholds are the fp16
range itself; the latent scales (1 inside, 30 outside) come from the measurements in mschecker/sd/vae.py
(tiny: ~2.4e3 at scale 1, ~7e4 at scale 30, linear in between).
"""
import numpy as np
import pytest

from mschecker.sd import build_vae_decoder, get_preset
from mschecker.sd.activation_peaks import FP16_MAX, activation_peaks


def latent(preset, scale, seed=0):
    return {"latent_sample": (np.random.default_rng(seed).standard_normal((1, *preset.latent_shape)) * scale
                              / preset.scaling_factor).astype(np.float32)}


@pytest.fixture(scope="module")
def tiny_vae():
    return build_vae_decoder("tiny")


def test_tiny_vae_overflows_fp16_internally_for_large_latents(tiny_vae):
    p = get_preset("tiny")
    peaks = activation_peaks(tiny_vae, latent(p, 30.0))
    over = [name for name, peak in peaks.items() if peak > FP16_MAX]
    assert over, f"max |activation| {max(peaks.values()):.0f} never passes the fp16 range"
    # the overflow sits in the late, high-resolution part (after the upsampler), as in real SD VAEs
    assert any("up_blocks" in name for name in over)
    # ... while the decoded image itself stays O(1): the hazard is internal
    assert peaks[tiny_vae.graph.node[-1].output[0]] < 20


def test_tiny_vae_stays_inside_fp16_for_ordinary_latents(tiny_vae):
    peaks = activation_peaks(tiny_vae, latent(get_preset("tiny"), 1.0))
    assert max(peaks.values()) < FP16_MAX / 4


def test_peaks_grow_linearly_with_latent_scale(tiny_vae):
    """The residual stream is linear in the latent (only branches are normalised), the documented mechanism."""
    p = get_preset("tiny")
    low = activation_peaks(tiny_vae, latent(p, 10.0))
    high = activation_peaks(tiny_vae, latent(p, 30.0))
    name = max(high, key=high.get)
    assert 2.5 < high[name] / low[name] < 3.5


@pytest.mark.slow
def test_small_vae_overflows_fp16_for_large_latents():
    p = get_preset("small")
    model = build_vae_decoder(p)
    assert max(activation_peaks(model, latent(p, 30.0)).values()) > FP16_MAX
    assert max(activation_peaks(model, latent(p, 1.0)).values()) < FP16_MAX / 4
