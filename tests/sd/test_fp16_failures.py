"""The known Stable Diffusion fp16 failures (docs/NUMERICS.md §8), reproduced on the emulated NPU, and their fixes.

Every failure is shown next to a control (the same graph where fp16 is fine) and next to the fix, measured
against the float64 reference, so none of these tests can pass by a run that is simply always broken or always
fine. Profiles: the ascend910b preset (fp16 storage, fp32 cube accumulation, INF/NAN overflow, high_performance
vector kernels, i.e. fp16 norm statistics), with ATC-style options on top.
"""
import math

import numpy as np
import pytest

from mschecker.sd import build_vae_decoder, get_preset
from mschecker.sd.builder import GraphBuilder
from mschecker.sd.check import STAGES, Tracker, per_stage_factory
from mschecker.sd.images import image_psnr
from mschecker.sd.layers import attention, group_norm
from mschecker.sd.pipeline import stage_runner_factory, to_uint8_image
from onnx import TensorProto

FP16_MAX = 65504.0
U16 = 2.0 ** -11  # fp16 unit roundoff
PSNR_MIN = 30.0   # the `mschecker sd` image threshold (its docstring: docs/NUMERICS.md §9)
GN_FP32_STATS = {"implmode_by_op_type": {"InstanceNormalization": "high_precision"}}


def run(model, feeds, stage="vae_decoder", device="npu", **options):
    """(first output as float64, tracker) of one graph on the reference or the emulated ascend910b."""
    tracker = Tracker()
    if device == "reference":
        runner = stage_runner_factory("reference")(model, stage)
    else:
        runner = per_stage_factory({s: ("npu", "ascend910b", options) for s in STAGES}, tracker)(model, stage)
    return np.asarray(next(iter(runner(feeds).values())), np.float64), tracker


# ------------------------------------------------------------------------------------------------ VAE decoder
@pytest.fixture(scope="module")
def vae():
    """tiny VAE decoder and latents of std 30 (as the synthetic pipeline's final latents): its float32
    activations peak at 77563 > 65504 (mschecker/sd/vae.py measurements; checked below on the reference)."""
    p = get_preset("tiny")
    model = build_vae_decoder(p)
    z = np.random.default_rng(0).standard_normal((1, *p.latent_shape)) * 30.0 / p.scaling_factor
    feeds = {"latent_sample": z.astype(np.float32)}
    peaks = {}
    ref = np.asarray(next(iter(stage_runner_factory(
        "reference", capture=lambda s, n, name, v: peaks.__setitem__(name, float(np.max(np.abs(v)))))(
            model, "vae_decoder")(feeds).values())), np.float64)
    return model, feeds, ref, peaks


def test_vae_reference_activations_pass_the_fp16_range(vae):
    _, _, ref, peaks = vae
    assert max(peaks.values()) > FP16_MAX
    assert np.isfinite(ref).all() and np.abs(ref).max() < 20  # the hazard is internal: the image is O(1)


def test_vae_fp16_inf_nan_mode_gives_a_black_image(vae):
    """GroupNorm statistics in fp32 (so the statistics hazard below does not fire first): the conv whose output
    passes 65504 becomes inf, the next GroupNorm turns it into NaN, and the image is black (NaN -> 0)."""
    model, feeds, ref, _ = vae
    out, tracker = run(model, feeds, **GN_FP32_STATS)
    assert not np.isfinite(out).any()
    first = tracker.first_nonfinite
    assert first.op_type == "Conv" and first.inf > 0 and first.stage == "vae_decoder"
    image = to_uint8_image(out)
    assert image.max() == 0  # black
    assert image_psnr(image, to_uint8_image(ref)) < 10


def test_vae_fp16_saturation_mode_clamps(vae):
    """Saturation mode: the same conv output is clamped to +-65504 instead of inf; everything stays finite and
    the clamped elements are exactly those whose reference value is beyond the range."""
    model, feeds, ref, peaks = vae
    out, tracker = run(model, feeds, overflow_mode="saturation", **GN_FP32_STATS)
    assert np.isfinite(out).all()
    sat = tracker.first_saturated
    assert sat is not None and sat.op_type == "Conv" and sat.saturated > 0 and sat.peak == FP16_MAX
    assert peaks[sat.output] > FP16_MAX  # it clamps where the true value is out of range
    assert tracker.first_nonfinite is None


def test_vae_in_fp32_recovers_the_image(vae):
    """diffusers' force_upcast: the whole VAE in fp32 (must_keep_origin_dtype) gives the reference image."""
    model, feeds, ref, _ = vae
    out, tracker = run(model, feeds, precision_mode="must_keep_origin_dtype")
    assert tracker.first_nonfinite is None
    assert image_psnr(to_uint8_image(out), to_uint8_image(ref)) >= PSNR_MIN


def test_vae_keep_dtype_on_the_offending_nodes_recovers_the_image(vae):
    """Only the nodes that read or write a tensor beyond half the fp16 range (from the reference's activation
    peaks; half, so that fp16 error on the way cannot push a near-limit value over) in fp32: finite and above
    the image threshold, while most of the graph stays fp16."""
    model, feeds, ref, peaks = vae
    hot = {name for name, peak in peaks.items() if peak > FP16_MAX / 2}
    nodes = [n.name for n in model.graph.node if hot & (set(n.input) | set(n.output))]
    assert 0 < len(nodes) < len(model.graph.node) / 4
    out, tracker = run(model, feeds, keep_dtype=nodes, **GN_FP32_STATS)
    assert tracker.first_nonfinite is None
    assert image_psnr(to_uint8_image(out), to_uint8_image(ref)) >= PSNR_MIN


# ------------------------------------------------------------------------------------------------ attention
def attention_graph(dim=64, tokens=16):
    b = GraphBuilder("attention", seed=0)
    x = b.input("x", TensorProto.FLOAT, [1, tokens, dim])
    b.output(attention(b, x, "attn", dim, heads=1), "y", [1, tokens, dim])
    return b.model()


@pytest.fixture(scope="module")
def attn():
    model = attention_graph()
    base = np.random.default_rng(1).standard_normal((1, 16, 64))
    return model, base


SCORE_NODES = ["attn/scores/MatMul", "attn/scores/Mul", "attn/probs/Softmax"]


def rel_err(out, ref):
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_attention_scores_overflow_fp16_without_upcast(attn):
    """|x| ~ 100: q.k over 64 dims reaches ~1e5 > 65504 (the cube accumulates in fp32 but stores fp16), the
    score becomes inf, the softmax row NaN. Control: the same graph at |x| ~ 1 is fine in fp16."""
    model, base = attn
    feeds = {"x": (base * 100).astype(np.float32)}
    out, tracker = run(model, feeds)
    assert np.isnan(out).any()
    assert tracker.first_nonfinite.node == "attn/scores/MatMul" and tracker.first_nonfinite.inf > 0
    small = {"x": base.astype(np.float32)}
    ok, tracker_ok = run(model, small)
    assert tracker_ok.first_nonfinite is None
    assert rel_err(ok, run(model, small, device="reference")[0]) < ATTN_BOUND


# fp16 storage of x, q, k, v, probs, the mix and y: about 7 roundings of u16 = 4.9e-4 each along the path
# (relative error ~ sqrt(7) u16 ~ 1.3e-3 if independent, 7 u16 = 3.4e-3 worst case), plus the scores' rounding
# passed through the softmax. Bound 1e-2 = ~20 u16. Measured (seed 1): 4.9e-4 with the upcast at |x| ~ 100,
# 9.8e-4 without upcast at |x| ~ 1. A wrong scale, mask or head split is O(1); the overflow is NaN.
ATTN_BOUND = 1e-2


def test_attention_upcast_fixes_it(attn):
    """keep_dtype on the scores MatMul, scale and softmax (diffusers' upcast_attention + upcast_softmax): finite
    and close to the reference."""
    model, base = attn
    feeds = {"x": (base * 100).astype(np.float32)}
    ref = run(model, feeds, device="reference")[0]
    out, tracker = run(model, feeds, keep_dtype=SCORE_NODES)
    assert tracker.first_nonfinite is None
    assert rel_err(out, ref) < ATTN_BOUND


# ------------------------------------------------------------------------------------------------ norms
def norm_graph(kind: str, channels=8, groups=2):
    b = GraphBuilder(kind, seed=0)
    if kind == "layer_norm":
        x = b.input("x", TensorProto.FLOAT, [2, 4, channels])
        gamma = b.param("ln.weight", (channels,), std=0.05, mean=1.0)
        beta = b.param("ln.bias", (channels,), std=0.02)
        y = b.op("LayerNormalization", [x, gamma, beta], "ln", axis=-1, epsilon=1e-5)
        b.output(y, "y", [2, 4, channels])
    else:
        x = b.input("x", TensorProto.FLOAT, [1, channels, 2, 2])
        b.output(group_norm(b, x, "gn", channels, groups, 1e-5), "y", [1, channels, 2, 2])
    return b.model()


def norm_input(kind, lo, hi):
    shape = (2, 4, 8) if kind == "layer_norm" else (1, 8, 2, 2)
    rng = np.random.default_rng(2)
    return {"x": (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)}


def norm_bound(x, ref, axes):
    """fp16 input rounding moves x by u16 |x|, i.e. y by u16 |x| / std; output storage adds u16 |y|; x2 for the
    gamma/beta multiply-add roundings."""
    x = np.asarray(x, np.float64)
    std = x.std(axis=axes, keepdims=True)
    return 2 * U16 * (np.abs(x) / std + np.abs(ref)).max()


@pytest.mark.parametrize("kind, op_type, axes", [("layer_norm", "LayerNormalization", (-1,)),
                                                 ("group_norm", "InstanceNormalization", (2, 3))])
def test_norm_statistics_in_fp16_overflow_at_256_and_fp32_statistics_fix_it(kind, op_type, axes):
    """|x| in [256, 512): x^2 >= 65536 is past fp16's range, so fp16 one-pass statistics (the high_performance
    kernel) give var = inf and a collapsed or NaN output; the high_precision kernel (fp32 statistics, fp16
    storage; ATC op_precision_mode) is within the rounding bound of the reference. Control: |x| in [16, 64)
    keeps every square and the 4-element sums (<= 4 * 4096) in range, and fp16 statistics are fine there."""
    model = norm_graph(kind)
    feeds = norm_input(kind, 256, 512)
    ref = run(model, feeds, device="reference")[0]
    x16 = feeds["x"].astype(np.float16).astype(np.float64)
    grouped = x16 if kind == "layer_norm" else x16.reshape(1, 2, -1)
    bound = norm_bound(grouped, ref.reshape(grouped.shape), axes if kind == "layer_norm" else (-1,))
    bad, tracker = run(model, feeds)
    # the overflow is inside the kernel (x^2 -> inf, var -> inf, rstd -> 0): the output collapses to beta
    # (measured max error 2.0 for LayerNorm, 1.5 for GroupNorm, vs bounds ~1e-2), or is NaN when the sum of x
    # overflows too
    assert tracker.first_nonfinite is not None or np.abs(bad - ref).max() > 100 * bound
    if tracker.first_nonfinite is not None:
        assert tracker.first_nonfinite.op_type == op_type
    fixed, tracker = run(model, feeds, implmode_by_op_type={op_type: "high_precision"})
    assert tracker.first_nonfinite is None
    assert np.abs(fixed - ref).max() <= bound

    small = norm_input(kind, 16, 64)
    ok, tracker = run(model, small)
    ref_small = run(model, small, device="reference")[0]
    assert tracker.first_nonfinite is None
    x16 = small["x"].astype(np.float16).astype(np.float64)
    grouped = x16 if kind == "layer_norm" else x16.reshape(1, 2, -1)
    # fp16 statistics add the rounding of the sums (n = 4 or 8 terms: ~n u16 relative on E[x^2] and E[x]^2,
    # cancelling in the variance by up to E[x^2]/var) on top of the storage bound
    ex2_over_var = (grouped ** 2).mean(axis=-1).max() / grouped.var(axis=-1).min()
    stats_bound = norm_bound(grouped, ref_small.reshape(grouped.shape), (-1,)) + 8 * U16 * ex2_over_var * \
        np.abs(ref_small).max()
    assert np.abs(ok - ref_small).max() <= stats_bound


def test_fix_search_finds_fp32_statistics_for_the_default_vae_failure():
    """End to end on the tiny pipeline (3 steps): the ascend910b run's first NaN is the VAE's GroupNorm
    statistics, and the fix search's first candidate (InstanceNormalization high_precision) recovers the image."""
    from mschecker.sd.check import run_check

    check = run_check(prompt="a photo of an astronaut riding a horse", preset="tiny", steps=3)
    assert not check.passed and check.metrics.nonfinite_outputs == ["decoded"]
    first = check.tracker.first_nonfinite
    assert (first.stage, first.op_type) == ("vae_decoder", "InstanceNormalization") and first.nan > 0
    assert first.input_peak is not None and first.input_peak > 256  # the magnitude that explains it
    fix = check.fix
    assert fix is not None and fix.implmodes == {"InstanceNormalization": "high_precision"} and not fix.keep_dtype
    assert fix.metrics.psnr_db >= PSNR_MIN and not fix.metrics.nonfinite_outputs
    assert math.isclose(fix.metrics.steps[-1].rel_euclidean, check.metrics.steps[-1].rel_euclidean)  # UNet reused


def test_fix_search_keeps_the_overflowing_residual_stream_in_fp32():
    """Euler's larger final latents (tiny, 3 steps) push the VAE's residual stream past 65504: fp32 GroupNorm
    statistics are not enough (the stream itself overflows in fp16). The bisection's group testing over the VAE's
    op types keeps exactly the op types that carry the stream in fp32 -- the convs, the residual Add, GroupNorm's
    Reshape and InstanceNormalization -- fewer than the whole VAE in fp32 (which passes too), and leaving any
    one of the four out fails (each of those configurations was evaluated)."""
    from mschecker.sd.check import run_check

    check = run_check(prompt="a photo of an astronaut riding a horse", preset="tiny", steps=3, scheduler="euler")
    attempts, fix = check.fixes, check.fix
    assert fix is not None and fix.passed and fix.metrics.psnr_db >= PSNR_MIN and not fix.implmodes
    assert fix.keep_dtype == ["OpType::Add", "OpType::Conv", "OpType::InstanceNormalization", "OpType::Reshape"]
    whole = max(attempts, key=lambda a: len(a.keep_dtype))  # every candidate op type in fp32
    assert whole.passed and set(fix.keep_dtype) < set(whole.keep_dtype)
    stats_only = [a for a in attempts if "InstanceNormalization" in a.implmodes]
    assert stats_only and not any(a.passed for a in stats_only)  # fp32 statistics alone: the stream overflows
    for left_out in fix.keep_dtype:
        smaller = [a for a in attempts if set(a.keep_dtype) == set(fix.keep_dtype) - {left_out} and not a.implmodes]
        assert smaller and not any(a.passed for a in smaller), left_out
    assert sum(a.chosen for a in attempts) == 1


def test_saturation_mode_hides_the_groupnorm_overflow_and_the_lockstep_pass_finds_it():
    """ascend310p (saturation): the VAE's fp16 GroupNorm statistics still overflow (inside the kernel: variance
    inf, rstd 0), but saturation keeps every tensor finite, so the image is wrong with no NaN/inf/max anywhere in
    the captured tensors. The lockstep pass over the suspect stage finds the node (its own error on the
    reference's inputs: the output collapsed), and the fix (fp32 statistics) is verified under saturation mode."""
    from mschecker.sd.check import run_check

    check = run_check(prompt="a photo of an astronaut riding a horse", preset="tiny", steps=2, profile="ascend310p")
    assert not check.passed and not check.metrics.nonfinite_outputs  # finite but wrong
    assert check.metrics.psnr_db < 20
    assert check.tracker.first_nonfinite is None and check.tracker.first_saturated is None
    hidden = check.hidden_overflow
    assert (hidden.stage, hidden.op_type) == ("vae_decoder", "InstanceNormalization")
    assert hidden.rel_error > 0.5 or hidden.nan > 0  # collapsed (or NaN clamped away)
    assert check.fix is not None and check.fix.implmodes == {"InstanceNormalization": "high_precision"}
    assert check.fix.metrics.psnr_db >= PSNR_MIN


def test_a_finite_collapse_is_located_by_comparison_with_the_reference():
    """One DDIM step (tiny, noise seed 5: the first seed of 0..39 whose NPU run fails without any NaN/inf/max;
    seeds 10, 21, 24, 27 do too): the GroupNorm's input stays under 256, yet the fp16 sum of squares over a
    group overflows inside the kernel: variance inf, rstd 0, the output collapses to beta -- finite, no
    NaN/inf/max anywhere, and a wrong image. The check compares the stage node by node with the reference on
    the same inputs, names the GroupNorm, and the fp32-statistics fix passes."""
    from mschecker.sd.check import DIVERGENCE, run_check

    check = run_check(prompt="a photo of an astronaut riding a horse", preset="tiny", steps=1, seed=5)
    assert not check.passed and not check.metrics.nonfinite_outputs
    assert check.tracker.first_nonfinite is None and check.tracker.first_saturated is None
    d = check.divergence
    assert (d.stage, d.op_type) == ("vae_decoder", "InstanceNormalization") and d.rel_error > DIVERGENCE
    assert d.input_peak < 256
    assert check.fix is not None and check.fix.implmodes == {"InstanceNormalization": "high_precision"}
    assert check.fix.metrics.psnr_db >= PSNR_MIN
