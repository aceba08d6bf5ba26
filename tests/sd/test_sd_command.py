"""`mschecker sd` end to end, and the image pieces it is built from (PNG, PSNR, SSIM, plots).

The command runs in-process through mschecker.cli.main (exit codes, files, JSON). Its default run (the small
preset, 10 DDIM steps, ascend910b) is the documented failing case: the small VAE's residual stream passes fp16's
range in its last upsampler conv (float32 peak ~1.04e5, mschecker/sd/vae.py), the conv's fp16 output holds inf and
the next (GE-fused) GroupNorm turns it into NaN -- a black image, exit 1. The node-granular fix search keeps the
nodes that carry the stream there in fp32 (ATC keep_dtype, device names), and the run with the suggested flags
passes. ascend310p (saturation) clamps the same conv and passes, naming it -- as Huawei's SD recipe forces
up_blocks.2/3 GroupNorm inputs to fp32 on the A2 (910B) and nothing on the 310P Duo.
"""
import json
import math
import shlex

import numpy as np
import pytest

from mschecker.npu.atc import parse_atc_command, parse_customize_dtypes, parse_keep_dtype

from mschecker.cli import main
from mschecker.errors import InputError
from mschecker.sd import images
from mschecker.sd.images import decode_png, encode_png, gaussian_window, image_psnr, image_ssim

PSNR_MIN = 30.0
SMALL = ["--preset", "small", "--steps", "10"]  # the command's defaults, written out (~7 s with the fix search)
UPSAMPLER = "decoder.up_blocks.1.upsamplers.0.conv/Conv"  # the small VAE's last upsampler conv (stream gain 5.5)
# The node-granular fix of the default run (measured: 51.6 dB; 8 of them without conv_norm_out's GroupNorm are
# NaN): the upsampler conv whose output passes 65504, what carries the stream after it in fp32 -- up_blocks.2's
# residual Adds and its first ResNet's conv_shortcut -- and the fused GroupNorms that read the stream (each
# ResNet's norm1, conv_norm_out), named as GE names them after fusion.
FIX_NODES = ["decoder.conv_norm_out/Mul/GroupNorm", UPSAMPLER,
             "decoder.up_blocks.2.resnets.0.conv_shortcut/Conv", "decoder.up_blocks.2.resnets.0.norm1/Mul/GroupNorm",
             "decoder.up_blocks.2.resnets.0/Add", "decoder.up_blocks.2.resnets.1.norm1/Mul/GroupNorm",
             "decoder.up_blocks.2.resnets.1/Add", "decoder.up_blocks.2.resnets.2.norm1/Mul/GroupNorm",
             "decoder.up_blocks.2.resnets.2/Add"]


# ------------------------------------------------------------------------------------------------ PNG
def test_png_round_trip_rgb_and_grey():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (7, 5, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (4, 9), dtype=np.uint8)
    np.testing.assert_array_equal(decode_png(encode_png(rgb)), rgb)
    np.testing.assert_array_equal(decode_png(encode_png(grey)), np.stack([grey] * 3, axis=-1))
    data = bytearray(encode_png(rgb))
    with pytest.raises(InputError, match="not a readable PNG"):
        decode_png(bytes(data[:40]))


@pytest.mark.parametrize("bad", [np.zeros((4, 4, 3), np.float32), np.zeros((4, 4, 4), np.uint8),
                                 np.zeros((0, 4, 3), np.uint8)])
def test_png_rejects_what_it_cannot_write(bad):
    with pytest.raises(InputError):
        encode_png(bad)


# ------------------------------------------------------------------------------------------------ metrics
def test_psnr_hand_values():
    a = np.full((8, 8, 3), 100, np.uint8)
    assert image_psnr(a, a) == math.inf
    assert image_psnr(a + 1, a) == pytest.approx(20 * math.log10(255))  # MSE 1
    b = a.copy()
    b[0, 0, 0] = 110  # MSE = 100 / 192
    assert image_psnr(b, a) == pytest.approx(10 * math.log10(255 ** 2 * 192 / 100))


def ssim_brute_force(x, y, size=11, sigma=1.5, k1=0.01, k2=0.03, peak=255.0):
    """Direct transcription of Wang et al. (2004) eqs. 14-16 with a 2-D Gaussian window, loop over every valid
    window position and channel: no separability, no vectorised filtering."""
    g = np.exp(-((np.arange(size) - (size - 1) / 2) ** 2) / (2 * sigma ** 2))
    w = np.outer(g, g)
    w /= w.sum()
    c1, c2 = (k1 * peak) ** 2, (k2 * peak) ** 2
    vals = []
    for ch in range(x.shape[2]):
        for i in range(x.shape[0] - size + 1):
            for j in range(x.shape[1] - size + 1):
                a = x[i:i + size, j:j + size, ch].astype(float)
                b = y[i:i + size, j:j + size, ch].astype(float)
                mx, my = (w * a).sum(), (w * b).sum()
                vx, vy = (w * (a - mx) ** 2).sum(), (w * (b - my) ** 2).sum()
                cxy = (w * (a - mx) * (b - my)).sum()
                vals.append(((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_ssim_matches_the_paper_definition_computed_directly():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (16, 14, 3), dtype=np.uint8)
    y = np.clip(x.astype(int) + rng.integers(-40, 41, x.shape), 0, 255).astype(np.uint8)
    assert image_ssim(y, x) == pytest.approx(ssim_brute_force(y, x), abs=1e-12)
    assert image_ssim(x, x) == pytest.approx(1.0, abs=1e-12)
    assert image_ssim(x, y) == pytest.approx(image_ssim(y, x), abs=1e-12)  # symmetric


def test_ssim_constant_images_closed_form():
    """Flat images: variances and covariance are 0, SSIM = (2 mx my + C1) / (mx^2 + my^2 + C1)."""
    x, y = np.full((12, 12, 3), 100, np.uint8), np.full((12, 12, 3), 140, np.uint8)
    c1 = (0.01 * 255) ** 2
    assert image_ssim(x, y) == pytest.approx((2 * 100 * 140 + c1) / (100 ** 2 + 140 ** 2 + c1), abs=1e-12)


def test_planted_bug_a_box_window_is_caught():
    """A uniform 11x11 window (a common slip) gives a different score than the Gaussian one on textured images:
    the direct-definition test above would fail for it."""
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
    y = np.clip(x.astype(int) + rng.integers(-60, 61, x.shape), 0, 255).astype(np.uint8)
    real = images.gaussian_window
    try:
        images.gaussian_window = lambda size=11, sigma=1.5: np.full(size, 1.0 / size)
        boxed = image_ssim(y, x)
    finally:
        images.gaussian_window = real
    assert abs(boxed - ssim_brute_force(y, x)) > 1e-3
    assert gaussian_window().sum() == pytest.approx(1.0)


def _hex(c: str) -> tuple[int, int, int]:
    return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))


def _texts(fig) -> str:
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


def test_plot_draws_every_series_in_the_colour_blind_safe_palette_and_marks_nan_steps():
    fig = images.plot_series({"a": [1e-3, 2e-3, math.nan, 5e-2], "b": [1e-2] * 4}, title="T", xlabel="step",
                             ylabel="err")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "step" and ax.get_ylabel() == "err"
    assert "a (1 not drawable: NaN/inf or <= 0)" in _texts(fig) and " b " in f" {_texts(fig)} "
    plot = decode_png(images.figure_png(fig))
    colours = {tuple(c) for c in plot.reshape(-1, 3)}
    assert _hex(images.PALETTE[0]) in colours and _hex(images.PALETTE[1]) in colours  # both series drawn
    lo, hi = ax.get_ylim()
    assert lo <= 1e-3 and hi >= 5e-2 and math.log10(lo).is_integer() and math.log10(hi).is_integer()


def test_panel_titles_each_image_and_a_nan_panel_says_nan():
    tile = np.zeros((16, 16, 3), np.uint8)
    fig = images.side_by_side([tile, tile, tile], ["reference", "npu", "diff"], [0.0, 1.0, 0.0])
    assert len(fig.axes) == 3
    assert [a.get_title().split("\n")[0] for a in fig.axes] == ["reference", "npu", "diff"]
    assert "NaN in 100% of pixels" in fig.axes[1].get_title() and "NaN" not in fig.axes[0].get_title()
    assert any(t.get_text() == "NaN" for t in fig.axes[1].texts) and not fig.axes[0].texts


# ------------------------------------------------------------------------------------------------ command
@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default run (small preset, 10 steps, ascend910b): the documented failure, its diagnosis and its fix."""
    d = tmp_path_factory.mktemp("sd")
    rc = main(["sd", *SMALL, "--out", str(d / "out"), "--json", str(d / "r.json")])
    return rc, d, json.loads((d / "r.json").read_text())


def test_default_profile_fails_names_the_node_and_verifies_the_fix(default_run):
    rc, d, report = default_run
    assert rc == 1 and report["verdict"] == "FAIL" and not report["passed"]
    assert report["settings"]["profile"] == "ascend910b" and report["settings"]["preset"] == "small"
    # the conv's fp16 output holds inf (an unfused node: its ONNX op type), the fused GroupNorm after it NaN (its
    # IR op type, its GE name <Mul>/GroupNorm); the conv's finite part is the VAE's headroom peak
    first, nan = report["first_nonfinite"], report["first_nan"]
    assert (first["stage"], first["node"], first["op_type"]) == ("vae_decoder", UPSAMPLER, "Conv")
    assert first["inf"] > 0 and first["nan"] == 0 and first["dtype"] == "float16"
    assert (nan["node"], nan["op_type"]) == ("decoder.up_blocks.2.resnets.0.norm1/Mul/GroupNorm", "GroupNorm")
    assert nan["nan"] > 0 and nan["input_peak"] <= 65504
    vae = next(h for h in report["headroom"] if h["stage"] == "vae_decoder")
    assert vae["node"] == UPSAMPLER and vae["peak"] <= vae["dtype_max"] == 65504
    assert report["metrics"]["nonfinite_outputs"] == ["decoded"]
    assert report["metrics"]["image_psnr_db"] < 10  # black image
    assert len(report["metrics"]["latents"]) == 10
    fix = report["fix"]
    assert fix["passed"] and fix["metrics"]["image_psnr_db"] >= PSNR_MIN and not fix["implmode_by_op_type"]
    # fp32 for the nine device ops: keep_dtype for the unfused ones, customize_dtypes for the GroupNorms GE's fusion
    # created (atc applies keep_dtype before fusion: it cannot name them)
    fused = [n for n in FIX_NODES if n.endswith("/GroupNorm")]
    lines = [f"{n}::InputDtype:float32,float32,float32,OutputDtype:float32" for n in sorted(fused)]
    assert fix["keep_dtype"] == FIX_NODES and fix["fusion_off"] == []
    assert fix["atc_keep_dtype"] == [n for n in FIX_NODES if n not in fused] and fix["customize_dtypes"] == lines
    assert fix["cli_flags"] == "--keep-dtype vae_decoder:" + ",".join(fix["atc_keep_dtype"]) + "".join(
        f" --customize-dtypes vae_decoder:{line}" for line in lines)
    # the smallest passing configuration the search evaluated
    assert all(len(a["keep_dtype"]) + len(a["fusion_off"]) >= len(FIX_NODES)
               for a in report["fix_attempts"] if a["passed"])
    assert report["psnr_min_db"] == PSNR_MIN


def test_default_run_writes_the_pngs_and_arrays(default_run):
    _, d, report = default_run
    out = d / "out"
    panel = decode_png((out / "sd_side_by_side.png").read_bytes())
    plot = decode_png((out / "sd_error_per_step.png").read_bytes())
    assert panel.shape[1] > 4 * panel.shape[0] and plot.shape[2] == 3  # five panels side by side
    assert sorted(report["images"]) == sorted(str(out / n) for n in ("sd_side_by_side.png", "sd_error_per_step.png"))
    names = sorted(p.name for p in out.iterdir())
    fix_files = ["vae_decoder.keep_dtype.cfg", "vae_decoder.customize_dtypes.cfg", "vae_decoder.atc_flags.txt"]
    assert names == sorted(["sd_side_by_side.png", "sd_error_per_step.png", "reference.image.npy", "npu.image.npy",
                            *(f"{s}.latents_step{k}.npy" for s in ("reference", "npu") for k in range(1, 11)),
                            *fix_files])
    # the fix as atc takes it, for the stage it fixes: the files read back give the fix the check proved
    fix = report["fix"]
    assert parse_keep_dtype(out / fix_files[0]) == fix["atc_keep_dtype"]
    assert [e.text() for e in parse_customize_dtypes(out / fix_files[1])] == fix["customize_dtypes"]
    flags = parse_atc_command((out / fix_files[2]).read_text(), "atc_flags")
    assert (flags.model, flags.precision_mode, flags.keep_dtype, flags.customize_dtypes) == (
        "vae_decoder/model.onnx", "force_fp16", fix_files[0], fix_files[1])
    ref, npu = np.load(out / "reference.image.npy"), np.load(out / "npu.image.npy")
    assert ref.dtype == np.float32 and ref.shape == (64, 64, 3) and 0 <= ref.min() and ref.max() <= 1
    assert np.isnan(npu).all()  # the documented NaN image, kept as NaN (diffusers' output_type="np")
    assert np.load(out / "npu.latents_step10.npy").shape == (1, 4, 16, 16)  # the small VAE upsamples 4x


def test_the_stream_passes_65504_in_float32_where_the_report_and_the_fix_point(default_run):
    """The reference's final latents, decoded in float32 (onnxruntime, every node output): the VAE's peak is the
    upsampler conv's output, ~1.04e5 (mschecker/sd/vae.py: 103633), beyond fp16's 65504 -- the inf the device run
    reports is real range, not kernel error -- and every node of the fix reads or writes a tensor beyond 65504 (a
    fused GroupNorm through the Reshape it covers, which reads its input)."""
    from mschecker.sd import build_vae_decoder, get_preset
    from mschecker.sd.activation_peaks import FP16_MAX, activation_peaks

    _, d, _ = default_run
    p = get_preset("small")
    model = build_vae_decoder(p)
    z = np.load(d / "out" / "reference.latents_step10.npy")
    peaks = activation_peaks(model, {"latent_sample": (z / p.scaling_factor).astype(np.float32)})
    top = max(peaks, key=peaks.get)
    assert top == f"{UPSAMPLER}_out" and 1.0e5 < peaks[top] < 1.1e5
    nodes = {n.name: n for n in model.graph.node}

    def touched(name):
        if name.endswith("/Mul/GroupNorm"):
            name = name[:-len("/Mul/GroupNorm")] + "/Reshape"
        return set(nodes[name].input) | set(nodes[name].output)
    for name in FIX_NODES:
        assert max(peaks.get(t, 0.0) for t in touched(name)) > FP16_MAX, name


def test_the_suggested_fix_passes_and_the_threshold_is_honoured(default_run, tmp_path, capsys):
    flags = shlex.split(default_run[2]["fix"]["cli_flags"])
    rc = main(["sd", *SMALL, *flags, "--out", str(tmp_path / "o"), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0 and report["verdict"] == "PASS" and report["first_nonfinite"] is None
    assert report["fix_attempts"] == []
    psnr = report["metrics"]["image_psnr_db"]
    assert psnr >= PSNR_MIN and "PASS" in capsys.readouterr().out
    # the same run judged against a bar above its PSNR fails (finite image, but not close enough)
    rc = main(["sd", *SMALL, *flags, "--psnr-min", str(psnr + 1), "--out", str(tmp_path / "o2"), "--no-fix"])
    assert rc == 1


def test_310p_saturates_the_same_conv_and_passes_naming_it(tmp_path):
    """ascend310p (saturation mode) on the default run: the upsampler conv is clamped to 65504 instead of inf, the
    GroupNorm after it normalises the clamped stream, and the image passes (measured 39.9 dB) with nothing to fix;
    the report names the first output at the format's max."""
    rc = main(["sd", *SMALL, "--profile", "ascend310p", "--out", str(tmp_path / "o"),
               "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0 and report["verdict"] == "PASS" and report["first_nonfinite"] is None
    sat = report["first_saturated"]
    assert (sat["stage"], sat["node"], sat["op_type"]) == ("vae_decoder", UPSAMPLER, "Conv")
    assert sat["saturated"] > 0 and sat["peak"] == 65504
    assert report["metrics"]["image_psnr_db"] >= PSNR_MIN and report["fix_attempts"] == []


def test_an_entry_for_an_op_type_every_fusion_consumed_is_a_note_not_an_error():
    """GE fuses every InstanceNorm of SD's GroupNorm export into a GroupNorm: `OpType::InstanceNorm` matches the
    parsed graph (atc accepts it silently) but reaches no device op -- a note naming why, not an exit 2."""
    from mschecker.errors import KnobNote
    from mschecker.npu.knobs import NpuOptions
    from mschecker.sd.bundled import bundled_pipeline
    from mschecker.sd.check import check_stage_entries

    with pytest.warns(KnobNote, match="every InstanceNorm was fused into another device op"):
        check_stage_entries(bundled_pipeline("tiny"), NpuOptions(common={"keep_dtype": ["OpType::InstanceNorm"]}))


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "invalid choice"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--keep-dtype", "unet2:OpType::Softmax"], "not a stage"),
    (["--op-precision", "vae_decoder:Softmax"], "expected"),
    (["--precision-mode", "fp8"], "not one of"),
    (["--profile", "nope.toml"], "does not exist"),
    (["--psnr-min", "nan"], "must be finite"),
    (["--sides", "npu,npu"], "two different sides"),
    (["--sides", "reference,gpu"], "two different sides"),
    (["--profile", "unet:nope.toml"], "does not exist"),
    (["--pipeline", "/nonexistent/sd"], "not a folder"),
    (["--latents", "/nonexistent/l.npy"], "l.npy"),
    # a device profile speaks ATC: Ascend IR op types, and implmodes only where CANN has one
    (["--preset", "tiny", "--keep-dtype", "text_encoder:OpType::InstanceNormalization"],
     "keep_dtype OpType::InstanceNormalization: InstanceNormalization is an ONNX op type; ATC takes the Ascend IR "
     "op type InstanceNorm"),
    (["--preset", "tiny", "--op-precision", "InstanceNormalization=high_precision"],
     "InstanceNormalization is an ONNX op type; ATC takes the Ascend IR op type InstanceNorm, which has no implmode"),
    (["--preset", "tiny", "--op-precision", "vae_decoder:GroupNorm=high_precision"],
     "op_precision_mode GroupNorm=high_precision: GroupNorm has no implmode on the device"),
    (["--preset", "tiny", "--keep-dtype", "OpType::Nope"],
     "keep_dtype OpType::Nope: Nope is not an Ascend IR op type of the device table"),
    # entries that match nothing in the graph as the device runs it (fused): a STAGE: one in its stage, one
    # without a prefix in every stage
    (["--preset", "tiny", "--keep-dtype", "text_encoder:OpType::GroupNorm"],
     "text_encoder stage: keep_dtype entry op type 'GroupNorm' matches no node"),
    (["--preset", "tiny", "--keep-dtype", "vae_decoder:OpType::LayerNorm"],
     "vae_decoder stage: keep_dtype entry op type 'LayerNorm' matches no node"),
    (["--preset", "tiny", "--op-precision", "vae_decoder:Gelu=high_precision"],
     "vae_decoder stage: op_precision [ByOpType] op type 'Gelu' matches no node"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, tmp_path, capsys):
    out, js = tmp_path / "out", tmp_path / "r.json"
    assert main(["sd", *argv, "--out", str(out), "--json", str(js)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists() and not js.exists()


def test_an_entry_without_stage_needs_to_match_in_one_stage_only():
    """Entries are checked against each stage's graph as its profile runs it. On ascend910b (fused, IR op types):
    Gelu (GE's fused erf GELU) exists in the UNet alone, LayerNorm not in the VAE, GroupNorm not in the text
    encoder, and a fused GroupNorm answers to its device name and to the ONNX nodes it covers: without a prefix each
    applies to every stage and is accepted. The generic profile (no device) keeps ONNX op types and names."""
    from mschecker.npu.knobs import NpuOptions
    from mschecker.sd.bundled import bundled_pipeline
    from mschecker.sd.check import check_stage_entries

    from ..profiles import GENERIC_FP16

    pipe = bundled_pipeline("tiny")
    check_stage_entries(pipe, NpuOptions(common={"implmode_by_op_type": {"Gelu": "high_precision"},
                                                 "keep_dtype": ["OpType::LayerNorm", "OpType::GroupNorm",
                                                                "decoder.conv_norm_out/Mul/GroupNorm",
                                                                "decoder.conv_norm_out/InstanceNormalization"]}))
    with pytest.raises(InputError, match="op_precision node 'nope' matches nothing in any stage"):
        check_stage_entries(pipe, NpuOptions(common={"implmode_by_node": {"nope": "high_precision"}}))
    generic = str(GENERIC_FP16)
    check_stage_entries(pipe, NpuOptions(generic, {"implmode_by_op_type": {"InstanceNormalization": "high_precision"},
                                                   "keep_dtype": ["OpType::Softmax"]}))
    with pytest.raises(InputError, match="'decoder.conv_norm_out/Mul/GroupNorm' matches nothing in any stage"):
        check_stage_entries(pipe, NpuOptions(generic, {"keep_dtype": ["decoder.conv_norm_out/Mul/GroupNorm"]}))


def test_the_command_hands_one_npu_options_to_the_check(monkeypatch, tmp_path):
    """`mschecker sd` reads its NPU flags once into an NpuOptions and passes it to run_check as is: the profiles
    are its fields, never a key of an options dict; giving run_check both spellings is refused."""
    import mschecker.sd.check
    from mschecker.npu.knobs import NpuOptions
    from mschecker.sd.check import run_check

    seen = {}

    def record(**kwargs):
        seen.update(kwargs)
        raise InputError("recorded")  # the CLI's one-line exit 2: nothing runs
    monkeypatch.setattr(mschecker.sd.check, "run_check", record)
    assert main(["sd", "--preset", "tiny", "--profile", "vae_decoder:ascend310p", "--keep-dtype",
                 "unet:OpType::SoftmaxV2", "--bracket", "pessimistic", "--out", str(tmp_path / "o")]) == 2
    knobs = seen["knobs"]
    assert knobs == NpuOptions(profile=None, common={"bracket": "pessimistic"},
                               per_stage={"vae_decoder": {}, "unet": {"keep_dtype": ["OpType::SoftmaxV2"]}},
                               stage_profiles={"vae_decoder": "ascend310p"})
    assert knobs.stages() == ["vae_decoder", "unet"]  # the order entries are checked in: first named first
    assert not {"profile", "npu_options", "stage_options"} & set(seen)
    assert (knobs.profile_of(), knobs.profile_of("vae_decoder")) == ("ascend910b", "ascend310p")
    with pytest.raises(TypeError, match="not both"):
        run_check(prompt="a", knobs=knobs, profile="ascend310p")


# ------------------------------------------------------------------------------------------------ capture hook
def test_tracker_blames_the_stage_of_the_first_nan_not_a_harmless_inf_mask():
    """Real exports carry -3.4e38 attention masks, -inf in fp16 (tests/fixtures/real_sd text encoders): an -inf
    in the text encoder must not be reported as the cause of a NaN in the VAE; within the VAE the overflow (inf)
    that precedes the NaN is the culprit, and its largest input is reported."""
    from onnx import helper

    from mschecker.sd.check import Tracker

    t = Tracker()
    t.begin("text_encoder")
    t.on_tensor("text_encoder", helper.make_node("Add", ["s", "m"], ["masked"], name="mask_add"), "masked",
                np.array([1.0, -np.inf], np.float16))
    t.begin("vae_decoder")
    t.on_tensor("vae_decoder", helper.make_node("Conv", ["a"], ["x"], name="conv"), "x",
                np.array([3.0, 60000.0], np.float16))
    t.on_tensor("vae_decoder", helper.make_node("Mul", ["x", "x"], ["y"], name="square"), "y",
                np.array([9.0, np.inf], np.float16))
    t.on_tensor("vae_decoder", helper.make_node("Sub", ["y", "y"], ["z"], name="nan_maker"), "z",
                np.array([0.0, np.nan], np.float16))
    assert t.first_nan.node == "nan_maker"
    culprit = t.first_nonfinite
    assert (culprit.stage, culprit.node, culprit.inf, culprit.input_peak) == ("vae_decoder", "square", 1, 60000.0)
    assert t.first_by_stage["text_encoder"].node == "mask_add"
    assert t.headroom["vae_decoder"].peak == 60000.0 and t.headroom["vae_decoder"].node == "conv"
