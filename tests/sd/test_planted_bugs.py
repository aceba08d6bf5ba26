"""Planted bugs in the builders and schedulers: the checks of this suite must catch each of them.

Each bug is injected by monkeypatching one building block, then the very check the main tests use is run and
must fail (its measured error exceeds the bound the main test allows).
"""
import dataclasses

import numpy as np

import mschecker.sd.clip as clip_module
import mschecker.sd.layers as layers
from mschecker.sd import build_text_encoder, build_vae_decoder, get_preset
from mschecker.sd.activation_peaks import FP16_MAX, activation_peaks
from mschecker.sd.scheduler import DDIMScheduler
from tests.sd.test_graphs import CLIP_FORWARD_ATOL, causal_leak, clip_forward_error
from tests.sd.test_layers import ATOL, group_norm_error
from tests.sd.test_scheduler import ddim_forward_consistency_error
from tests.sd.test_vae_headroom import latent


def test_missing_causal_mask_is_caught(monkeypatch):
    monkeypatch.setattr(clip_module, "causal_mask", lambda n: np.zeros((1, 1, n, n), np.float32))
    model = build_text_encoder("tiny")
    before, _ = causal_leak(model)
    assert before > 0
    assert clip_forward_error(model) > CLIP_FORWARD_ATOL


def test_wrong_quick_gelu_constant_is_caught(monkeypatch):
    def plain_silu(b, x, scope):  # sigmoid(x) instead of sigmoid(1.702 x)
        return b.op("Mul", [x, b.op("Sigmoid", [x], scope)], scope)

    monkeypatch.setattr(clip_module, "quick_gelu", plain_silu)
    assert clip_forward_error(build_text_encoder("tiny")) > CLIP_FORWARD_ATOL


def test_group_norm_with_channel_interleaved_groups_is_caught():
    """Grouping channels as (C/G, G) instead of (G, C/G): a plausible transposed-reshape bug."""
    def buggy(b, x, name, channels, groups, eps):
        t = b.op("Reshape", [x, b.const("s", np.array([0, channels // groups, groups, -1], np.int64))], name)
        t = b.op("Transpose", [t], name, perm=[0, 2, 1, 3])
        return layers.group_norm(b, b.op("Reshape", [t, b.op("Shape", [x], name)], name), name, channels, groups,
                                 eps)

    assert group_norm_error(buggy, 4) > ATOL


def test_ddim_using_the_current_alpha_is_caught():
    class Buggy(DDIMScheduler):
        def step(self, eps, index, sample):
            a_t = self.alphas_cumprod[int(self.timesteps[index])]
            x0 = (sample - np.sqrt(1 - a_t) * eps) / np.sqrt(a_t)
            return np.sqrt(a_t) * x0 + np.sqrt(1 - a_t) * eps  # forgets to move to the previous timestep

    assert ddim_forward_consistency_error(Buggy(10)) > 1e-3


def test_vae_without_stream_gain_is_caught():
    """Plain unit gains never reach the fp16 range: the headroom test must notice."""
    p = get_preset("tiny")
    flat = dataclasses.replace(p, vae=dataclasses.replace(p.vae, stream_gain=1.0))
    assert max(activation_peaks(build_vae_decoder(flat), latent(flat, 30.0)).values()) < FP16_MAX
