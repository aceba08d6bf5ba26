"""How an SD check is shown: the per-stage Rich table, the verdict lines, the PNGs and the JSON file.

Per-stage error is the relative Euclidean distance ||npu - ref|| / ||ref|| (scale-free, so the text embeddings,
latents of std 1-30 and the decoded image read on one axis), with max |err|, cosine and SNR beside it; the image
row adds PSNR and SSIM of the uint8 images (mschecker.sd.images). Files (each written atomically; the set is
staged in a hidden folder inside --out and moved in only once every file is written, so a failed write leaves
nothing half-written; this command's files of an earlier run that this run does not write are removed):
  <out>/sd_side_by_side.png  baseline | judged | amplified |difference| (then fixed NPU | its difference when a
                             fix was found); a panel whose image holds NaN says so, and so does the difference
                             panel where either side is NaN (drawn black there: the difference is undefined)
  <out>/sd_error_per_step.png  latent relative error after every step (log scale) of the judged side (and the
                               fixed NPU when the fix is before the VAE)
  <out>/<side>.image.npy     float32 (H, W, 3) in [0, 1] (diffusers' output_type="np"), for both sides; with
                             several images (prompts x --num-images-per-prompt) <side>.images.npy instead,
                             float32 (B, H, W, 3), and the side-by-side PNG shows the worst image (the verdict's)
  <out>/<side>.latents_step<k>.npy  float32 (B, C, h, w) latents after step k = 1..steps, for both sides
  <out>/<stage>.<ATC file>    the chosen fix's ATC files for the stage it fixes (bisect.writers.FILES:
                             keep_dtype.cfg, customize_dtypes.cfg, ..., atc_flags.txt), read back before written
  --json PATH                  SDCheck.to_dict() (schema_version 1; NaN/inf as strings like the check report)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from mschecker.bisect.writers import FILES as FIX_FILES, written_profile
from mschecker.compare import TensorComparison, json_safe
from mschecker.modelcheck.report import fmt_num, referee_table
from mschecker.sd.check import SDCheck, SIDES, XL_STAGES
from mschecker.sd.images import difference_image, figure_png, nan_pixels, plot_series, side_by_side, write_atomic
from mschecker.fsio import write_file_set
from mschecker.sd.folder import MODEL_FILES

SIDE_BY_SIDE, ERROR_PLOT = "sd_side_by_side.png", "sd_error_per_step.png"


def _row(name: str, c: TensorComparison) -> list[str]:
    bad = c.actual_nan + c.actual_inf
    return [name, fmt_num(c.rel_euclidean), fmt_num(c.max_abs_err), fmt_num(c.cosine, ".6f"), fmt_num(c.snr_db, ".1f"),
            "[red]" + " ".join(f"{n} {k}" for n, k in ((c.actual_nan, "NaN"), (c.actual_inf, "inf")) if n) + "[/red]"
            if bad else "0"]


def side_label(check: SDCheck, side: str) -> str:
    """How the report names a side: the NPU with its profile, the reference as the float64 truth."""
    return {"npu": f"npu {check.settings['profile']}", "reference": "float64 reference",
            "ort": "onnxruntime fp32"}.get(side, side)


def stage_table(check: SDCheck, title: str | None = None):
    """The Rich table: text embeddings, latents after each step, decoded image tensor, uint8 image."""
    from rich.table import Table

    from rich.markup import escape

    m = check.metrics
    s = check.settings
    base, judged = (side_label(check, x) for x in check.sides)
    # names from the user's folder may hold Rich markup ("[/bold]x"): escaped, they print as written
    table = Table(title=title or escape(f"SD {s['pipeline']} ({s['steps']} {s['scheduler']} steps): {judged} vs "
                                        f"{base}"))
    for col, just in (("stage", "left"), ("rel. error", "right"), ("max |err|", "right"), ("cosine", "right"),
                      ("SNR dB", "right"), ("NaN/inf", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    if len(m.texts) > 1:  # SDXL: each encoder's hidden states, then the pooled embedding
        for stage, c in m.texts.items():
            table.add_row(*_row(f"{stage} emb.", c))
        if m.pooled is not None:
            table.add_row(*_row("pooled text emb.", m.pooled))
    else:
        table.add_row(*_row("text emb.", m.text))
    for i, c in enumerate(m.steps):
        table.add_row(*_row(f"step {i + 1} latents", c))
    table.add_row(*_row("VAE output", m.decoded))
    ok = m.psnr_db >= check.psnr_min
    colour = "green" if ok else "red"
    worst = f" (worst of {len(m.psnr_per_image)}: image {worst_image(m) + 1})" if len(m.psnr_per_image) > 1 else ""
    table.add_row("image" + worst, f"PSNR [{colour}]{fmt_num(m.psnr_db, '.2f')} dB[/{colour}]",
                  f"SSIM {m.ssim:.4f}", "", "", "", end_section=True)
    return table


def worst_image(m) -> int:
    """Index of the image the verdict takes (lowest PSNR)."""
    return min(range(len(m.psnr_per_image)), key=lambda i: m.psnr_per_image[i]) if m.psnr_per_image else 0


def verdict_lines(check: SDCheck) -> list[str]:
    """Plain-text verdict: what failed, the first overflowing node, the fix found and its measured effect."""
    t, lines = check.tracker, []
    prof = side_label(check, check.sides[1])
    lines += [f"note: {n}" for n in check.settings.get("notes", ())]
    lines += referee_lines(check)
    word = "PASS" if check.referee is None else "image rule PASS"
    if check.tolerance_passed:
        lines.append(f"{word}: {prof} image PSNR {check.metrics.psnr_db:.2f} dB >= {check.psnr_min:g} dB, SSIM "
                     f"{check.metrics.ssim:.4f}, every stage output finite")
    else:
        lines.append(("FAIL" if check.referee is None else "image rule FAIL") + f": {prof}: "
                     + "; ".join(check.image_reasons()))
    if t.first_nonfinite and check.tolerance_passed and t.first_nan is None:
        # e.g. the -inf of a causal attention mask (TorchScript CLIP exports): inside the graph, by design
        lines.append("note: an inf inside the graph that reached no stage output (an attention mask?): "
                     + t.first_nonfinite.describe())
    elif t.first_nonfinite:
        lines.append("first NaN/inf: " + t.first_nonfinite.describe())
        hint = explain(t.first_nonfinite.op_type)
        if hint:
            lines.append("  why: " + hint)
        if t.first_nan is not None and t.first_nan is not t.first_nonfinite:
            lines.append("first NaN: " + t.first_nan.describe())
    if check.hidden_overflow:
        h = check.hidden_overflow
        lines.append("saturation mode hid an overflow; the stage in lockstep with the reference, first node that "
                     "overflows or leaves it: " + h.describe())
        hint = explain(h.op_type)
        if hint:
            lines.append("  why: " + hint)
    if check.divergence:
        d = check.divergence
        lines.append("no NaN/inf/max anywhere; first node far from the reference: " + d.describe())
        hint = explain(d.op_type)
        if hint:
            lines.append("  why (likely): " + hint + "; an overflow inside the kernel can leave a finite, collapsed "
                         "output")
    if t.first_saturated:
        lines.append("first output at the format's max (overflow in saturation mode): " + t.first_saturated.describe())
    for h in t.headroom.values():
        if h.dtype_max:
            lines.append(f"headroom {h.stage}: peak |x| {h.peak:.6g} at {h.node} ({h.peak / h.dtype_max:.1%} of "
                         f"{h.dtype_max:g})")
    for f in check.fixes:
        m = f.metrics
        state = "FIXES IT" if f.passed else "not enough"
        extra = f"; still NaN/inf first at {f.first_nonfinite.node}" if f.first_nonfinite else ""
        lines.append(f"re-run with {f.describe()}: image PSNR {m.psnr_db:.2f} dB, SSIM {m.ssim:.4f}{extra} -> {state}")
    if check.fix:
        f = check.fix
        lines.append(f"suggested fix: compile the {f.stage} with {f.describe().split(': ', 1)[1]} (check it: "
                     f"mschecker sd ... {f.cli_flags()}); the exit code judges the profile as given")
    elif check.fixes:
        lines.append("no fix found within the search (see the attempts above)")
    return lines


_NORM = ("the device computes this norm's statistics in fp32 (docs/DEVICE_KERNELS.md), so a NaN here comes from "
         "an input already beyond fp16's range (inf in INF_NAN mode: mean and variance become inf/NaN), or from "
         "the fused GroupNorm's one-pass variance going negative on a group whose |mean|/std is in the thousands")
_CONV = ("a convolution output past 65504 (real VAE decoders do this in their last, high-resolution blocks: "
         "diffusers' force_upcast, Huawei's Atlas A2 SD recipe); in INF_NAN mode the next GroupNorm turns the inf "
         "into NaN, in saturation mode (310P) it is clamped to 65504; keep the overflowing nodes and the residual "
         "stream they feed in fp32 (docs/NUMERICS.md §8)")
# Keyed by ONNX op type and by Ascend IR op type (a device profile names nodes by the latter).
_EXPLANATIONS = {
    **dict.fromkeys(("InstanceNormalization", "GroupNormalization", "InstanceNorm", "GroupNorm", "GroupNormSilu"),
                    _NORM),
    **dict.fromkeys(("LayerNormalization", "LayerNorm"),
                    "the TBE LayerNorm rounds its mean and variance to fp16: a row variance past 65504 becomes "
                    "inf and the output collapses to beta; an input beyond fp16's range gives NaN"),
    **dict.fromkeys(("Softmax", "SoftmaxV2"),
                    "softmax of scores that overflowed upstream (inf - inf = NaN after the max shift); keep the "
                    "score MatMul in fp32"),
    **dict.fromkeys(("MatMul", "BatchMatMulV2", "MatMulV2", "Gemm"),
                    "a matrix product whose result passes 65504 (e.g. attention scores QK^T); fp32 for that node"),
    **dict.fromkeys(("Conv", "Conv2D"), _CONV),
    "Add": "a residual-stream sum past 65504; keep the stream (its Adds and the convs feeding it) in fp32",
    "Gelu": "the high_performance Gelu (i-GELU in fp16 arithmetic) read with an IEEE reciprocal (--bracket "
            "pessimistic) takes its sign as x * vrec(|x|): NaN at x = 0 and inf for 0 < |x| <= 2^-16 in INF_NAN "
            "mode (docs/DEVICE_KERNELS.md); high_precision (the tanh form in fp32) avoids it",
}


def explain(op_type: str) -> str:
    return _EXPLANATIONS.get(op_type, "")


def referee_lines(check: SDCheck) -> list[str]:
    """The verdict of a check with --referee first (PASS/FAIL: both verdicts, which one sets the exit code), then
    the referee's side, rule and failures; empty without a referee."""
    v = check.referee
    if v is None:
        return []
    word = {True: "PASS", False: "FAIL"}
    lines = [f"{word[check.passed]}: image rule {word[check.tolerance_passed]}, referee {word[v.passed]} "
             f"({sum(bool(o.passed) for o in v.judged)}/{len(v.judged)} stage outputs); the exit code follows "
             f"--judge {check.judge}",
             f"referee: {v.spec} = {v.side}", f"referee rule: {v.describe_rule()}"]
    return lines + v.failure_reasons()


def render_console(check: SDCheck, console=None) -> None:
    from rich.console import Console


    console = console or Console()
    console.print(stage_table(check))
    if check.referee is not None:
        console.print(referee_table(check.referee))
    for line in verdict_lines(check):
        style = "bold green" if line.startswith("PASS") else "bold red" if line.startswith("FAIL") else None
        console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


def output_files(check: SDCheck) -> dict[str, bytes]:
    """{file name: bytes} of everything --out receives (see the module docstring)."""
    import io

    import numpy as np

    base, judged = check.sides
    k = worst_image(check.metrics)  # with several images the picture shows the one the verdict takes
    ref, npu = check.reference.images[k], check.metrics.images[k]
    ref_nan, npu_nan = nan_pixels(check.reference.decoded[k:k + 1]), nan_pixels(check.npu.decoded[k:k + 1])
    # where either side is NaN the difference is undefined: said so like a NaN image, never |0 - ref| = ref
    diff, gain = difference_image(npu, ref, undefined=ref_nan | npu_nan)
    judged_label = side_label(check, judged)
    tiles, labels = [ref, npu, diff], [side_label(check, base), judged_label, f"|diff| x{gain:.3g}"]
    nans = [float(ref_nan.mean()), float(npu_nan.mean()), float((ref_nan | npu_nan).mean())]
    if check.fix:
        fixed_diff, fixed_gain = difference_image(check.fix.metrics.images[k], ref, undefined=ref_nan)
        tiles += [check.fix.metrics.images[k], fixed_diff]
        labels += ["npu + fix", f"|diff fix| x{fixed_gain:.3g}"]
        nans += [0.0, float(ref_nan.mean())]
    files = {SIDE_BY_SIDE: figure_png(side_by_side(tiles, labels, nans))}
    files.update(fix_files(check))

    def errors(m):
        return [c.rel_euclidean if c.rel_euclidean is not None else math.nan for c in m.steps]
    series = {f"{judged_label} vs {side_label(check, base)}": errors(check.metrics)}
    if check.fix and check.fix.stage != "vae_decoder":  # a VAE-only fix leaves the latents as they were
        series["npu + fix"] = errors(check.fix.metrics)
    plot = plot_series(series, title=f"Latent error per step ({check.settings['pipeline']}, "
                                     f"{check.settings['scheduler']})", xlabel="step",
                       ylabel="relative error ||x - x_ref|| / ||x_ref||")
    files[ERROR_PLOT] = figure_png(plot)

    def npy(array) -> bytes:
        buf = io.BytesIO()
        np.save(buf, np.asarray(array, np.float32), allow_pickle=False)
        return buf.getvalue()
    for side, run in ((base, check.reference), (judged, check.npu)):
        if len(run.decoded) == 1:
            files[f"{side}.image.npy"] = npy(run.image_float)
        else:
            files[f"{side}.images.npy"] = npy(run.images_float)
        for k, latents in enumerate(run.latents[1:], start=1):
            files[f"{side}.latents_step{k}.npy"] = npy(latents)
    return files


def write_outputs(check: SDCheck, out_dir: str | Path) -> list[Path]:
    """Every output file into ``out_dir`` (created) as one set (mschecker.fsio.write_file_set: staged in a
    hidden folder there, then moved into place); this command's files of an earlier run that this one does not
    write (the latents of steps beyond this run's, a side not compared this time) are removed, other files are
    left alone."""
    import os


    files = output_files(check)
    out = Path(out_dir)
    try:
        stale = [n for n in os.listdir(out) if _OWN_FILE.match(n)] if out.is_dir() else []
    except OSError:  # unlistable: nothing known to clear; the write reports its own faults
        stale = []
    return write_file_set(out, files, stale=stale, flag="--out", prefix=".mschecker-sd-")


def fix_files(check: SDCheck) -> dict[str, bytes]:
    """The chosen fix's ATC files for its stage, `<stage>.<file>` (bisect.writers.FILES: keep_dtype.cfg,
    customize_dtypes.cfg, ..., atc_flags.txt naming the stage's model and those files), read back by mschecker's
    own ATC readers before they are written (writers.written_profile)."""
    fix = check.fix
    if fix is None or fix.profile is None:
        return {}
    _, texts = written_profile(fix.profile, MODEL_FILES[fix.stage], prefix=f"{fix.stage}.")
    return {f"{fix.stage}.{FIX_FILES[kind]}": text.encode("utf-8") for kind, text in texts.items()}


def _own_file_pattern():
    import re


    sides = "|".join(re.escape(s) for s in SIDES)
    stages = "|".join(re.escape(s) for s in XL_STAGES)
    fixes = "|".join(re.escape(n) for n in FIX_FILES.values())
    return re.compile(rf"^(?:(?:{sides})\.(?:images?|latents_step\d+)\.npy|{re.escape(SIDE_BY_SIDE)}|"
                      rf"{re.escape(ERROR_PLOT)}|(?:{stages})\.(?:{fixes}))$")


_OWN_FILE = _own_file_pattern()


def write_json(check: SDCheck, path: str | Path, extra: dict | None = None) -> Path:
    """SDCheck.to_dict() (plus ``extra``, e.g. the image paths) as JSON, atomically."""
    path = Path(path)
    data = check.to_dict()
    if extra:
        data.update(extra)
    return write_atomic(path, (json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n").encode("utf-8"))
