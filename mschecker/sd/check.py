"""The SD accuracy check: one SDPipeline (a diffusers ONNX folder or the bundled graphs) run on two sides --
by default the float64 reference and the emulated NPU; ``sides`` picks any two of reference, npu, ort (the
first is the baseline, the second is judged) -- compared stage by stage, with a capture hook that finds the
first node whose output overflowed, and a search for the fix (when the judged side is the NPU).

What is compared (same prompt, seeds, scheduler on both sides; mschecker.compare metrics for every tensor):
text embeddings, the latents after every step, the decoded image tensor, and the uint8 images (PSNR, SSIM).
In SDCheck, ``reference`` holds the baseline side's run and ``npu`` the judged side's.

Capture (NPU run): every tensor the executor produces passes `Tracker.on_tensor`, which records per stage the
peak |x| (headroom against the format's max, docs/NUMERICS.md §8: "output-only checks miss
internal overflow"), the first node whose output holds NaN or inf, and the first node whose output reached the
format's largest finite value (what overflow looks like in saturation mode). For the first non-finite node it
also reports the largest |x| among the node's inputs, which is usually the number that explains it.

Localization and the fix search are mschecker.bisect's (one engine for every model), applied to the stage that
failed. When the captured run shows no NaN/inf/max, ``locate`` runs the bisection's lockstep pass over the
suspect stage on the NPU run's own stage inputs (so upstream drift is not counted): the first node that
overflows (saturation mode's clamps counted before the clamp, so an overflow it hides is found) or whose
relative error against the reference on the same inputs exceeds DIVERGENCE is the event (``hidden_overflow``
under saturation, ``divergence`` otherwise).

The fix search (``find_fix``) is the bisection's group testing over the failing stage's nodes (``fix_by="node"``,
the default: the smallest fix; a device profile names them as the device does, e.g. the fused
``<Mul>/GroupNorm``, the names ATC's dtype files take after fusion) or its op types (``"op_type"``: fewer
evaluations, a coarser fix), ranked by their nodes' own error (each node run on the reference's inputs): moves
are ATC ``keep_dtype`` and ``op_precision_mode`` ``high_precision`` (preferred where it passes and the op has an
implmode that binds another kernel). Each evaluation re-runs the stage and everything after it (earlier stages' NPU outputs reused: on a
real NPU each stage is a separate model compiled with its own ATC options) and passes when the outputs are
finite, the image meets the PSNR threshold and no tensor inside the stage overflowed. The chosen fix is the
smallest passing configuration; every attempt is reported with its rerun's metrics, so the claim "this fixes it"
is always measured.
"""
from __future__ import annotations

import shlex
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from mschecker.bisect.lockstep import Analysis, analyse, reference_executor
from mschecker.bisect.engine import fusion_of
from mschecker.bisect.policy import npu_policy
from mschecker.bisect.report import fix_lines
from mschecker.npu.fixes import op_facts
from mschecker.bisect.samples import Sample
from mschecker.bisect.search import Evaluation, Evaluator, FixConfig, high_precision_capable, members, op_type_of, \
    rank_candidates, search
from mschecker.bisect.stats import Headroom, is_overflow
from mschecker.compare import TensorComparison, ToleranceRule, compare_arrays
from mschecker.dtypes import float_format, is_float
from mschecker.errors import InputError, KnobNote
from mschecker.graph.executor import Executor
from mschecker.npu.knobs import NpuOptions
from mschecker.sd.images import image_psnr, image_ssim
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import FORCE_UPCAST, MODEL_FILES, TEXT_STAGES, XL_STAGES, SDPipeline
from mschecker.sd.pipeline import STAGES, PipelineResult, SDModels, decode, run_in_batches, run_pipeline, \
    stage_runner_factory, to_uint8_images
from mschecker.npu.atc import parse_customize_line
from mschecker.npu.profile import NumericsProfile
from mschecker.tensors.meta import tensor_meta

SIDES = ("reference", "npu", "ort")
# The stage tensors are not judged element-wise: the verdict is the image rule (SDCheck.passed), and the metrics
# compare_arrays reports (relative error, max |err|, cosine, SNR, NaN/inf counts) do not depend on the rule. The
# rule only sets the comparisons' own mismatch counts in the JSON; atol = rtol = 1e-2 is the fp16 assert_close
# rtol of docs/NUMERICS.md §9 (1e-3) x10 for a whole network.
STAGE_RULE = ToleranceRule.from_args(atol=1e-2, rtol=1e-2)


@dataclass
class NodeEvent:
    """One notable node output in the NPU run."""

    stage: str
    step: int | None            # UNet step (0-based) or None for the text encoder / VAE
    node: str
    op_type: str
    output: str
    dtype: str
    nan: int = 0
    inf: int = 0
    saturated: int = 0          # elements at +-max of the dtype
    peak: float = 0.0           # max |finite x| of this output
    input_peak: float | None = None   # max |finite x| over the node's captured inputs
    rel_error: float | None = None    # ||npu - ref|| / ||ref|| (divergence events only)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("stage", "step", "node", "op_type", "output", "dtype", "nan", "inf",
                                              "saturated", "peak", "input_peak", "rel_error")}

    def describe(self) -> str:
        where = f"{self.stage}" + (f" step {self.step + 1}" if self.step is not None else "")
        what = ", ".join(f"{n} {k}" for k, n in (("NaN", self.nan), ("inf", self.inf), ("at max", self.saturated))
                         if n)
        if self.rel_error is not None:
            what = f"relative error {self.rel_error:.3g} against the reference on the same inputs, all finite"
        inp = f"; largest input |x| {self.input_peak:.6g}" if self.input_peak is not None else ""
        return f"{where}: {self.node} ({self.op_type}, {self.dtype}) -> {what}{inp}"


@dataclass
class StageHeadroom:
    """Peak |x| over every tensor of a stage in the NPU run, and which node holds it."""

    stage: str
    peak: float = 0.0
    node: str = ""
    dtype_max: float | None = None

    def to_dict(self) -> dict:
        return {"stage": self.stage, "peak": self.peak, "node": self.node, "dtype_max": self.dtype_max}


class Tracker:
    """The capture hook: counts UNet steps (one executor run per step) and records NodeEvents and headroom."""

    def __init__(self, progress: Callable[[str, int | None], None] | None = None,
                 on_tensor: Callable[[str, int | None, object, str, np.ndarray], None] | None = None):
        self.progress = progress
        self.extra = on_tensor   # run_check's on_tensor: every tensor, as (stage, step, node, name, value)
        self.stage: str | None = None
        self.step: int | None = None
        self.first_by_stage: dict[str, NodeEvent] = {}   # first non-finite output per stage, in run order
        self.first_nan: NodeEvent | None = None
        self.first_saturated: NodeEvent | None = None
        self.headroom: dict[str, StageHeadroom] = {}
        self._peaks: dict[str, float] = {}

    def begin(self, stage: str) -> None:
        if stage == "unet":
            self.step = 0 if self.stage != "unet" else self.step + 1
        else:
            self.step = None
        self.stage = stage
        self._peaks = {}
        if self.progress is not None:
            self.progress(stage, self.step)

    def on_tensor(self, stage: str, node, name: str, value: np.ndarray) -> None:
        if self.extra is not None:
            self.extra(stage, self.step, node, name, value)
        if not isinstance(value, np.ndarray) or not is_float(value.dtype) or value.size == 0:
            return
        h = Headroom.of(value)  # the bisection's headroom: peak, NaN/inf, elements at the format's max
        self._peaks[name] = h.peak
        head = self.headroom.setdefault(stage, StageHeadroom(stage))
        if h.peak > head.peak:
            head.peak, head.node = h.peak, node.name
        fmax = float(float_format(value.dtype).max) if value.dtype != np.float64 else None
        head.dtype_max = fmax if head.dtype_max is None else head.dtype_max
        if (h.nan or h.inf) and (stage not in self.first_by_stage or self.first_nan is None):
            event = self._event(stage, node, name, value, h)
            self.first_by_stage.setdefault(stage, event)
            if event.nan and self.first_nan is None:
                self.first_nan = event
        if h.saturated and self.first_saturated is None:
            self.first_saturated = self._event(stage, node, name, value, h)

    @property
    def first_nonfinite(self) -> NodeEvent | None:
        """The node that explains the failure: the first non-finite output in the stage where the first NaN
        appeared (an inf there is usually the overflow the NaN came from), else the first non-finite output.
        Per stage, because real exports carry -3.4e38 attention masks that are -inf in fp16 and harmless: such
        a mask in the text encoder must not be blamed for a NaN in the VAE."""
        if self.first_nan is not None:
            return self.first_by_stage[self.first_nan.stage]
        return next(iter(self.first_by_stage.values()), None)

    def _event(self, stage, node, name, value, h: Headroom) -> NodeEvent:
        ins = [self._peaks[i] for i in node.input if i in self._peaks and i != name]
        return NodeEvent(stage, self.step, node.name, node.op_type, name, str(value.dtype), nan=h.nan, inf=h.inf,
                         saturated=h.saturated, peak=h.peak, input_peak=max(ins) if ins else None)


@dataclass
class Metrics:
    """The compared tensors of one NPU run against the reference. With several images the image verdict is the
    worst image's (``psnr_db``, ``ssim``: the minimum over images; every image's in ``psnr_per_image``)."""

    text: TensorComparison
    steps: list[TensorComparison]
    decoded: TensorComparison
    psnr_db: float
    ssim: float
    image: np.ndarray
    nonfinite_outputs: list[str]
    texts: dict = field(default_factory=dict)     # text stage -> its hidden states' comparison (text = the first)
    pooled: TensorComparison | None = None        # SDXL's pooled text embedding
    psnr_per_image: list = field(default_factory=list)
    ssim_per_image: list = field(default_factory=list)
    images: np.ndarray | None = None              # (B, H, W, 3) uint8 of the judged run

    def stage_comparisons(self) -> list[tuple[str, TensorComparison | None]]:
        """(stage, the comparison of its output) in run order: what localization walks."""
        return [*self.texts.items(), ("unet", self.steps[-1] if self.steps else None), ("vae_decoder", self.decoded)]

    def to_dict(self) -> dict:
        def brief(c: TensorComparison) -> dict:
            return {"max_abs_err": c.max_abs_err, "rel_euclidean": c.rel_euclidean, "cosine": c.cosine,
                    "snr_db": c.snr_db, "nan": c.actual_nan, "inf": c.actual_inf}
        out = {"text_embeddings": brief(self.text), "latents": [brief(c) for c in self.steps],
               "decoded": brief(self.decoded), "image_psnr_db": self.psnr_db, "image_ssim": self.ssim,
               "nonfinite_outputs": self.nonfinite_outputs}
        if len(self.texts) > 1 or self.pooled is not None:
            out["text_encoders"] = {st: brief(c) for st, c in self.texts.items()}
            out["pooled_text_embeds"] = brief(self.pooled) if self.pooled is not None else None
        if len(self.psnr_per_image) > 1:
            out["image_psnr_db_per_image"] = self.psnr_per_image
            out["image_ssim_per_image"] = self.ssim_per_image
        return out


@dataclass
class FixAttempt:
    """One re-run of the failing stage with a candidate fix, and what it measured."""

    stage: str
    keep_dtype: list[str]         # device ops / "OpType::T" moved to fp32 (written: atc_keep_dtype, customize_dtypes)
    implmodes: dict[str, str]     # "OpType::T" or node name -> implmode (ATC op_precision_mode [ByOpType]/[ByNodeName])
    precision_mode: str | None
    metrics: Metrics | None
    first_nonfinite: NodeEvent | None
    passed: bool
    seconds: float
    chosen: bool = False          # the fix search's recommendation (the smallest passing configuration)
    atc_keep_dtype: list[str] = field(default_factory=list)    # keep_dtype as written: the moves atc can name so
    customize_dtypes: list[str] = field(default_factory=list)  # the others: fp32 for fused device ops (ATC lines)
    fusion_off: list[str] = field(default_factory=list)   # GE fusion passes switched off
    atc: list[str] = field(default_factory=list)          # the ATC settings it adds (bisect.report.fix_lines)
    profile: object = field(default=None, repr=False)    # the stage's NumericsProfile with the fix, as written

    def describe(self) -> str:
        if self.precision_mode:
            return f"{self.stage}: precision_mode {self.precision_mode}"

        parts = [f"op_precision_mode {t}={m}" for t, m in self.by_op_type.items()]
        parts += [f"op_precision_mode [ByNodeName] {n}={m}" for n, m in self.by_node.items()]
        keep = self.atc_keep_dtype if self.atc else self.keep_dtype  # atc: the ATC settings were recorded
        if keep:
            parts.append("keep_dtype " + ", ".join(keep))
        if self.customize_dtypes:
            parts.append("customize_dtypes fp32 " + ", ".join(parse_customize_line(c, "fix").key
                                                                for c in self.customize_dtypes))
        if self.fusion_off:
            parts.append("fusion off " + ", ".join(self.fusion_off))
        return f"{self.stage}: " + " + ".join(parts)

    @property
    def by_op_type(self) -> dict[str, str]:
        return {op_type_of(i): m for i, m in self.implmodes.items() if op_type_of(i)}

    @property
    def by_node(self) -> dict[str, str]:
        return {i: m for i, m in self.implmodes.items() if not op_type_of(i)}

    def cli_flags(self) -> str:
        """The `mschecker sd` flags that apply this fix (per-stage form)."""
        if self.precision_mode:
            return f"--precision-mode {self.stage}:{self.precision_mode}"
        flags = [f"--op-precision {self.stage}:{t}={m}" for t, m in self.by_op_type.items()]
        if self.by_node:  # inline entries name op types; nodes take an op_precision.ini file
            flags.append(f"--op-precision {self.stage}:OP_PRECISION.ini (with [ByNodeName] "
                         + ", ".join(f"{n}={m}" for n, m in self.by_node.items()) + ")")
        if self.atc_keep_dtype:
            flags.append(f"--keep-dtype {self.stage}:" + ",".join(self.atc_keep_dtype))  # STAGE: prefixes the list
        flags += [f"--customize-dtypes {shlex.quote(f'{self.stage}:{line}')}" for line in self.customize_dtypes]
        if self.fusion_off:  # a switch file applies to every stage
            flags.append("--fusion-switch FUSION_SWITCH.cfg (with " + ", ".join(f"{p}:off" for p in self.fusion_off)
                         + ")")
        return " ".join(flags)

    def to_dict(self) -> dict:
        return {"stage": self.stage, "keep_dtype": self.keep_dtype, "atc_keep_dtype": self.atc_keep_dtype,
                "customize_dtypes": self.customize_dtypes,
                "fusion_off": self.fusion_off, "atc": self.atc, "implmode_by_op_type": self.by_op_type,
                "implmode_by_node": self.by_node,
                "precision_mode": self.precision_mode, "passed": self.passed, "chosen": self.chosen,
                "seconds": self.seconds,
                "cli_flags": self.cli_flags(), "metrics": self.metrics.to_dict() if self.metrics else None,
                "first_nonfinite": self.first_nonfinite.to_dict() if self.first_nonfinite else None}


@dataclass
class SDCheck:
    """Everything `mschecker sd` reports; `passed` is the verdict on the profile as given."""

    settings: dict
    psnr_min: float
    reference: PipelineResult
    npu: PipelineResult
    metrics: Metrics
    tracker: Tracker
    timings: dict
    fixes: list[FixAttempt] = field(default_factory=list)
    hidden_overflow: NodeEvent | None = None   # found by the inf_nan probe of a saturation-mode run
    divergence: NodeEvent | None = None        # first node far from the reference (failures without overflow)
    pipeline: SDPipeline | None = None
    referee: object = None                     # mschecker.modelcheck.referee.RefereeVerdict with --referee (sd/referee.py)
    judge: str = "both"                        # which verdicts set ``passed`` when there is a referee

    @property
    def sides(self) -> tuple[str, str]:
        """(baseline, judged): which runs ``reference`` and ``npu`` hold."""
        return tuple(self.settings.get("sides", ("reference", "npu")))

    @property
    def tolerance_passed(self) -> bool:
        """The image rule on the profile as given: finite stage outputs and PSNR >= psnr_min (what the fix
        search works on; the referee verdict is not something a fix is searched for)."""
        return not self.metrics.nonfinite_outputs and self.metrics.psnr_db >= self.psnr_min

    @property
    def passed(self) -> bool:
        """The exit code's verdict: the image rule, combined with the referee's per ``judge`` when there is one
        (mschecker.modelcheck.referee.combine)."""
        from mschecker.modelcheck.referee import combine  # lazy: start-up (mschecker.modelcheck)

        return combine(self.tolerance_passed, self.referee, self.judge)

    @property
    def fix(self) -> FixAttempt | None:
        """The fix search's recommendation (a passing attempt)."""
        return next((f for f in self.fixes if f.chosen), None)

    def image_reasons(self) -> list[str]:
        """Why the image rule (tolerance_passed) failed; empty when it passed."""
        m, out = self.metrics, []
        if m.nonfinite_outputs:
            out.append("NaN/inf in " + ", ".join(m.nonfinite_outputs))
        if not m.psnr_db >= self.psnr_min:
            out.append(f"image PSNR {m.psnr_db:.2f} dB < {self.psnr_min:g} dB")
        return out

    def failure_reasons(self) -> list[str]:
        """The image rule's reasons, and the referee's when it counts (``judge`` other than "tolerance")."""
        out = self.image_reasons()
        if self.referee is not None and self.judge != "tolerance":
            out += self.referee.failure_reasons()
        return out

    def to_dict(self) -> dict:
        t = self.tracker
        return {
            "schema_version": 1, "tool": "mschecker sd", "passed": self.passed,
            "verdict": "PASS" if self.passed else "FAIL", "failure_reasons": self.failure_reasons(),
            "settings": self.settings, "psnr_min_db": self.psnr_min, "metrics": self.metrics.to_dict(),
            "first_nonfinite": t.first_nonfinite.to_dict() if t.first_nonfinite else None,
            "first_nan": t.first_nan.to_dict() if t.first_nan else None,
            "first_saturated": t.first_saturated.to_dict() if t.first_saturated else None,
            "headroom": [h.to_dict() for h in t.headroom.values()],
            "hidden_overflow": self.hidden_overflow.to_dict() if self.hidden_overflow else None,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "fix_attempts": [f.to_dict() for f in self.fixes],
            "fix": self.fix.to_dict() if self.fix else None, "timings_s": self.timings,
            **({"tolerance_passed": self.tolerance_passed, "judge": self.judge, "referee": self.referee.to_dict()}
               if self.referee is not None else {}),
        }


def measure(reference: PipelineResult, npu: PipelineResult) -> Metrics:
    """Per-stage comparison of an NPU run against the reference run (same settings): each text encoder's output
    (the first named text_embeddings, as for SD 1.x; SDXL's second text_encoder_2 and its pooled embedding), the
    latents after every step, the decoded tensor, and every image (PSNR, SSIM; the verdict takes the worst)."""
    def cmp(a, e, name):
        return compare_arrays(np.asarray(a), np.asarray(e), STAGE_RULE, name=name, topk=3)

    texts = {st: cmp(npu.text_outputs[st], reference.text_outputs[st],
                     "text_embeddings" if st == "text_encoder" else f"{st}.hidden_states")
             for st in reference.text_outputs}
    pooled = cmp(npu.pooled, reference.pooled, "text_encoder_2.text_embeds") if reference.pooled is not None else None
    steps = [cmp(a, e, f"latents[{i + 1}]") for i, (a, e) in enumerate(zip(npu.latents[1:], reference.latents[1:]))]
    decoded = cmp(npu.decoded, reference.decoded, "decoded")
    bad = [c.name for c in [*texts.values(), *([pooled] if pooled else []), *steps, decoded]
           if c.actual_nan or c.actual_inf]
    psnr = [image_psnr(a, e) for a, e in zip(npu.images, reference.images)]
    ssim = [image_ssim(a, e) for a, e in zip(npu.images, reference.images)]
    return Metrics(texts["text_encoder"], steps, decoded, min(psnr), min(ssim), npu.image, bad, texts=texts,
                   pooled=pooled, psnr_per_image=psnr, ssim_per_image=ssim, images=npu.images)


def per_stage_factory(device_for: dict[str, tuple[str, str | None, dict]], tracker: Tracker | None, *,
                      capture: bool = True):
    """A make_stage_runner whose stages may use different devices/profiles/options (one compiled model per
    stage, as on a real NPU), each call announced to ``tracker`` and (with ``capture``) captured by it."""
    factories = {}
    for stage in device_for:
        device, profile, options = device_for[stage]
        hook = tracker.on_tensor if capture and tracker is not None and device != "ort" else None
        factories[stage] = stage_runner_factory(device, profile, capture=hook, **options)

    def make(model, stage_name):
        run = factories[stage_name](model, stage_name)

        def announced(feeds):
            if tracker is not None:
                tracker.begin(stage_name)
            return run(feeds)
        return announced
    return make


def side_devices(side: str, knobs: NpuOptions) -> dict[str, tuple[str, str | None, dict]]:
    """per_stage_factory's {stage: (device, profile, options)} for one side of the check."""
    if side == "npu":
        return {s: ("npu", knobs.profile_of(s), knobs.for_stage(s)) for s in XL_STAGES}
    if side in ("reference", "ort"):
        return {s: (side, None, {}) for s in XL_STAGES}
    raise InputError(f"unknown side {side!r}; choose from {', '.join(SIDES)}")


def run_check(*, prompt: str, pipeline: SDPipeline | None = None, preset: str = "small", steps: int = 10,
              scheduler: str | None = None, seed: int = 0, guidance_scale: float = 7.5,
              sides: tuple[str, str] = ("reference", "npu"), knobs: NpuOptions | None = None,
              profile: str | None = None, npu_options: dict | None = None,
              stage_options: dict[str, dict] | None = None, psnr_min: float = 30.0,
              search_fix: bool = True, weights_seed: int = 0, initial_latents=None, fix_by: str = "node",
              progress: Callable[[str, str, int | None], None] | None = None, generation: dict | None = None,
              force_upcast: str = "config",
              on_tensor: Callable[[str, int | None, object, str, np.ndarray], None] | None = None,
              referee=None, referee_k: float | None = None, judge: str = "both") -> SDCheck:
    """Baseline run (``sides[0]``), judged run (``sides[1]``, captured), per-stage metrics, and -- when the
    judged side is the NPU and fails -- the overflow probes and the fix search. ``pipeline`` defaults to the
    bundled ``preset`` (DDIM unless ``scheduler`` says otherwise); ``scheduler`` overrides its scheduler class.
    ``generation``: run_pipeline's other call arguments (negative_prompt, num_images_per_prompt, height, width,
    guidance_rescale, eta, SDXL's original_size / crops_coords_top_left / target_size); ``prompt`` may be a list.
    ``knobs``: the NPU side's options (mschecker.npu.knobs.NpuOptions: the profile, the options for every
    stage, each stage's own; what `mschecker sd` builds from its flags). Without it ``profile`` (default
    ascend910b), ``npu_options`` (apply_knobs keywords for every stage) and ``stage_options[stage]`` (on top of
    them for one stage; keep_dtype lists are joined; "profile" picks that stage's profile) make one (the
    campaign's cells give those).
    ``force_upcast`` ("config", "on", "off"): see upcast_vae_options.
    ``progress(run_label, stage, step)`` is called before every stage execution.
    ``on_tensor(stage, step, node, output_name, value)`` (optional) sees every tensor the judged side's run
    produces (its capture hook, as Tracker.on_tensor sees them; ``step`` is the UNet step, 0-based, None for the
    other stages), and nothing of the baseline run, the localization or the fix search's reruns; an "ort" judged
    side has no per-node capture, so it is never called.
    ``referee`` (a runnable mschecker.modelcheck.referee side), ``referee_k``, ``judge``: a third run on the referee side,
    judged stage by stage against the float64 run (mschecker.sd.referee); ``judge`` combines the verdicts."""
    if len(sides) != 2 or sides[0] == sides[1] or any(s not in SIDES for s in sides):
        raise InputError(f"--sides {','.join(sides)}: give two different sides among {', '.join(SIDES)}")
    if knobs is None:
        knobs = NpuOptions.from_dicts(profile, npu_options, stage_options)
    elif profile is not None or npu_options is not None or stage_options is not None:
        raise TypeError("run_check: give knobs, or profile / npu_options / stage_options, not both")
    if pipeline is None:
        pipeline = bundled_pipeline(preset, weights_seed, scheduler or "ddim")
    if "npu" in sides:
        check_stage_entries(pipeline, knobs)
    knobs, upcast, upcast_note = upcast_vae_options(pipeline, knobs, force_upcast, npu_side="npu" in sides)
    common = dict(prompt=prompt, pipeline=pipeline, steps=steps, scheduler=scheduler, seed=seed,
                  guidance_scale=guidance_scale, initial_latents=initial_latents, **(generation or {}))
    announce = _announcer(progress)
    reference, judged, tracker, timings = _run_sides(sides, knobs, common, announce, on_tensor)
    settings = _settings(common, generation, weights_seed, sides, knobs, (reference, judged), (upcast, upcast_note))
    check = SDCheck(settings, psnr_min, reference, judged, measure(reference, judged), tracker, timings,
                    pipeline=pipeline, judge=judge)
    if referee is not None:
        _attach_referee(check, referee, referee_k, common, knobs, announce)
    if sides[1] == "npu" and search_fix and not check.tolerance_passed:
        _diagnose(check, common, knobs, announce, fix_by)
    return check


def _announcer(progress):
    """run label -> the Tracker's progress callback (stage, step), or None without ``progress``."""
    def announce(run_label):
        return (lambda stage, step: progress(run_label, stage, step)) if progress else None
    return announce


def _run_sides(sides: tuple[str, str], knobs: NpuOptions, common: dict, announce, on_tensor):
    """(baseline run, judged run, the judged run's Tracker, timings): the two pipeline runs of the check, the
    judged one captured."""
    def label(side):
        return f"npu {knobs.profile_of()}" if side == "npu" else side

    base_side, judged_side = sides
    timings = {}
    ref_tracker = Tracker(announce(label(base_side)))
    t0 = time.perf_counter()
    reference = run_pipeline(make_stage_runner=per_stage_factory(
        side_devices(base_side, knobs), ref_tracker, capture=False), **common)
    timings[base_side] = time.perf_counter() - t0

    tracker = Tracker(announce(label(judged_side)), on_tensor=on_tensor)
    t0 = time.perf_counter()
    judged = run_pipeline(make_stage_runner=per_stage_factory(side_devices(judged_side, knobs), tracker), **common)
    timings[judged_side] = time.perf_counter() - t0
    return reference, judged, tracker, timings


def _settings(common: dict, generation: dict | None, weights_seed: int, sides: tuple[str, str], knobs: NpuOptions,
              runs: tuple[PipelineResult, PipelineResult], upcast: tuple[str | None, str | None]) -> dict:
    """The report's "settings": the call, the NPU options per stage, the runs' sizes, notes and costs."""
    pipeline, (reference, judged), (mode, note) = common["pipeline"], runs, upcast
    return {"pipeline": pipeline.name, "preset": pipeline.name, "steps": common["steps"],
            "scheduler": common["scheduler"] or pipeline.scheduler_config.get("_class_name"), "seed": common["seed"],
            "guidance_scale": common["guidance_scale"], "prompt": common["prompt"], "profile": knobs.profile_of(),
            "sides": list(sides),
            "npu_options": {st: {k: (v if isinstance(v, (list, dict)) else str(v)) for k, v in o.items()}
                            for st, o in knobs.report(XL_STAGES).items()},
            "weights_seed": weights_seed, "image_size": list(np.shape(reference.decoded)[2:]),
            "images": int(np.shape(reference.decoded)[0]), "sdxl": pipeline.xl, "force_upcast": mode,
            "generation": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (generation or {}).items()},
            "notes": list(reference.notes) + ([note] if note else []),
            "initial_latents": "given" if common["initial_latents"] is not None
            else f"RandomState({common['seed']}).randn",
            "stage_costs": {side: {st: c.to_dict() for st, c in run.costs.items()}
                            for side, run in zip(sides, runs)}}


def _diagnose(check: SDCheck, common: dict, knobs: NpuOptions, announce, fix_by: str) -> None:
    """A failing NPU run: the node to blame (the capture's first NaN/inf or saturated output, else the lockstep
    pass over the suspect stage: hidden_overflow under saturation, divergence otherwise) and the fix search over
    that node's stage."""
    event = check.tracker.first_nonfinite or check.tracker.first_saturated
    located = None
    if event is None:
        t0 = time.perf_counter()
        stage = suspect_stage(check.metrics)
        located = locate(stage, check, knobs)
        if knobs.profile_for(stage).overflow_mode == "saturation":
            check.hidden_overflow = event = located.event
        else:
            check.divergence = event = located.event
        check.timings["locate"] = time.perf_counter() - t0
    if event is not None:
        t0 = time.perf_counter()
        check.fixes = find_fix(check, event, common, knobs, announce,
                               located if located is not None and located.stage == event.stage else None, fix_by)
        check.timings["fix_search"] = time.perf_counter() - t0


def _attach_referee(check: SDCheck, side, k, common: dict, knobs: NpuOptions, announce) -> None:
    """check.referee: the referee pipeline judged against the float64 run -- the check's own when one of its
    sides is the reference, else a float64 run made here."""
    from mschecker.modelcheck.referee import check_judge  # lazy: start-up (mschecker.modelcheck)
    from mschecker.sd.referee import referee_pipeline

    check_judge(check.judge, "judge")
    t0 = time.perf_counter()
    base, judged = check.sides
    truth = check.reference if base == "reference" else check.npu if judged == "reference" else None
    if truth is None:
        tracker = Tracker(announce("reference (referee's truth)"))
        truth = run_pipeline(make_stage_runner=per_stage_factory(side_devices("reference", knobs), tracker,
                                                                 capture=False), **common)
    progress = announce(f"referee {side.spec}")
    check.referee = referee_pipeline(side, common, check.npu, truth, k=k, reduced=judged == "npu",
                                     begin=(lambda stage: progress(stage, None)) if progress else None)
    check.timings["referee"] = time.perf_counter() - t0


def check_stage_entries(pipeline: SDPipeline, knobs: NpuOptions) -> None:
    """Every keep_dtype / op_precision entry the user gave names something, before minutes of work: one with a
    STAGE: prefix in that stage's graph, one without in at least one stage's graph (it applies to all three, and
    each matches only its own). InputError naming the entry and what exists otherwise."""
    from mschecker.npu.entries import unmatched_entries  # lazy: start-up (mschecker.npu)
    def entries(opts):
        return NumericsProfile(name="entries", keep_dtype=tuple((opts or {}).get("keep_dtype", ())),
                               implmode_by_op_type=dict((opts or {}).get("implmode_by_op_type", {})),
                               implmode_by_node=dict((opts or {}).get("implmode_by_node", {})),
                               customize_dtypes=tuple((opts or {}).get("customize_dtypes", ())))

    # each stage's graph as its profile runs it (a device profile: fused, IR op types, device names)
    graphs, vocab, notes = {}, {}, {}
    for st in knobs.stages():
        if st not in pipeline.stage_names:
            raise InputError(f"{st}: options given for a stage {pipeline.name} does not have (its stages: "
                             f"{', '.join(pipeline.stage_names)})")
    for st in pipeline.stage_names:
        policy = npu_policy(knobs.profile_for(st))
        header = pipeline.files.model_header(MODEL_FILES[st])
        graphs[st] = policy.device_graph(header)
        vocab[st] = dict(op_type_of=policy.op_type_of, names_of=policy.names_of,
                         parsed_types={policy.op_type_of(n) for n in header.graph.node} if policy.chip else ())
        notes[st] = policy.knob_notes(header.graph, graphs[st]) if policy.chip else []
    for st, opts in knobs.per_stage.items():
        problems = unmatched_entries(entries(opts), graphs[st], **vocab[st])
        if problems:
            raise InputError(f"{st} stage: {problems[0]}")
    common = knobs.common
    singles = ([({"keep_dtype": [e]}, f"keep_dtype entry {e!r}") for e in common.get("keep_dtype", ())]
               + [({"implmode_by_op_type": {t: m}}, f"op_precision op type {t!r}")
                  for t, m in common.get("implmode_by_op_type", {}).items()]
               + [({"implmode_by_node": {n: m}}, f"op_precision node {n!r}")
                  for n, m in common.get("implmode_by_node", {}).items()]
               + [({"customize_dtypes": [c]}, f"customize_dtypes entry {c!r}")
                  for c in common.get("customize_dtypes", ())])
    for opts, what in singles:
        if all(unmatched_entries(entries(opts), graphs[st], **vocab[st]) for st in pipeline.stage_names):
            raise InputError(f"{what} matches nothing in any stage ({', '.join(pipeline.stage_names)}); give it a STAGE: "
                             "prefix to aim it at one")
    for st in pipeline.stage_names:  # entries that match but do nothing on the device, once every entry matches
        for note in notes[st]:
            warnings.warn(f"{st} stage: {note}", KnobNote, stacklevel=2)


UPCAST_MODE = "must_keep_origin_dtype"  # ATC's float32 for an fp32 export: what diffusers' upcast_vae() gives


def upcast_vae_options(pipeline: SDPipeline, knobs: NpuOptions, force_upcast: str = "config",
                       npu_side: bool = True) -> tuple[NpuOptions, str | None, str | None]:
    """diffusers' ``force_upcast`` (the VAE config's; SDXL's VAE sets it because its fp16 activations overflow)
    on the NPU side: the VAE decoder compiled with ATC's --precision_mode=must_keep_origin_dtype (an fp32 export
    stays fp32, as diffusers' ``upcast_vae()`` runs it in float32) unless that stage already has a precision
    mode of the user's. ``force_upcast``: "config" follows the VAE's config.json, "on" / "off" override it
    ("off" shows what the profile does to the VAE). Returns (``knobs``, with that precision mode for the
    vae_decoder when one is applied; the mode applied or None; a note for the report or None). An fp16 export
    cannot be upcast by a precision mode (ATC keeps its fp16: the VAE would have to be exported in fp32), which
    the note says; without an NPU side nothing is compiled."""
    if force_upcast not in FORCE_UPCAST:
        raise InputError(f"--force-upcast {force_upcast!r}: choose one of {', '.join(FORCE_UPCAST)}")
    wanted = pipeline.force_upcast if force_upcast == "config" else force_upcast == "on"
    vae = knobs.for_stage("vae_decoder")
    if not npu_side or not wanted or vae.get("precision_mode") or vae.get("precision_mode_v2"):
        return knobs, None, None
    if pipeline.stages["vae_decoder"].inputs["latent_sample"].dtype == np.float16:
        return knobs, None, ("force_upcast not applied: vae_decoder is an fp16 export, which no ATC precision mode "
                           "runs in float32 (diffusers upcasts the torch module; export the VAE in fp32 to do the "
                           "same)")
    note = (f"vae_decoder compiled with --precision_mode={UPCAST_MODE} on the NPU side (float32, as diffusers' "
            "force_upcast runs the VAE); --force-upcast off judges the profile's own VAE precision")
    return knobs.with_stage_options("vae_decoder", precision_mode=UPCAST_MODE), UPCAST_MODE, note


def stage_npu_options(npu_options: dict | None, stage_options: dict[str, dict] | None) -> dict[str, dict]:
    """{stage: apply_knobs keywords}: the common options with each stage's own on top (NpuOptions.for_stage:
    lists joined, tables merged), for callers that hold option dicts (the campaign's profile hash)."""
    knobs = NpuOptions(common=dict(npu_options or {}),
                       per_stage={st: dict(o or {}) for st, o in (stage_options or {}).items()})
    return {st: knobs.for_stage(st) for st in XL_STAGES}


def suspect_stage(metrics: Metrics, jump: float = 0.1) -> str:
    """The first stage whose output is non-finite or whose relative error exceeds ``jump`` (10%: an order of
    magnitude above the fp16 drift of a healthy run, 1e-3..5e-2 measured); the VAE when none does (the image
    failed, so the decoder is where it went wrong)."""
    for stage, c in metrics.stage_comparisons():
        if c is not None and (c.actual_nan or c.actual_inf or c.rel_euclidean is None or c.rel_euclidean > jump):
            return stage
    return "vae_decoder"


DIVERGENCE = 0.1  # relative error of a node output that counts as "wrong", not fp16 drift (1e-3..5e-2 here)


def stage_feeds(stage: str, result: PipelineResult, pipeline: SDPipeline) -> dict[str, np.ndarray]:
    """The inputs ``stage`` received in ``result``'s run (the UNet: its first step), as the graph takes them."""
    if stage in TEXT_STAGES:
        return pipeline.text_feeds(result.token_ids_by_stage[stage], stage)
    if stage == "unet":
        return dict(result.unet_feeds)
    return pipeline.vae_feeds(result.latents[-1])


@dataclass
class Located:
    """The lockstep pass over one stage (mschecker.bisect) and the node it points at."""

    stage: str
    analysis: Analysis
    npu: Executor                 # the stage's NPU executor (its plan tells which moves change a node)
    event: NodeEvent | None


def locate(stage: str, check: SDCheck, knobs: NpuOptions) -> Located:
    """``stage`` run in lockstep on the reference and the NPU from the NPU run's own stage inputs (a static-batch-1
    graph's batch split into samples, as the pipeline runs it): the first node that overflows -- saturation mode's
    clamps included -- or whose relative error exceeds DIVERGENCE."""
    model = getattr(check.pipeline.models, stage)
    npu = Executor(model, npu_policy(knobs.profile_for(stage)))
    reference = reference_executor(npu.model)  # the graph the device runs (fused ops in float64): bisect._plan
    parts: list[dict] = []
    run_in_batches(lambda f: parts.append(f) or {}, [tensor_meta(i) for i in reference.input_infos],
                   stage_feeds(stage, check.npu, check.pipeline))
    samples = [Sample(f"{stage} input {k}", p) for k, p in enumerate(parts)]
    analysis = analyse(reference, npu, samples, STAGE_RULE)
    node = analysis.first_crossing(DIVERGENCE)
    event = None
    if node is not None:
        out = max(node.outputs, key=lambda o: (o.overflow, o.error.rel_l2 if o.error else 0.0))
        h = out.headroom
        by_tensor = {o.tensor: o for n in analysis.nodes for o in n.outputs}
        peaks = [by_tensor[i].headroom.peak for i in node.inputs if i in by_tensor and by_tensor[i].headroom]
        step = next(st for st in reference.steps if st.index == node.index)
        peaks += [float(np.max(np.abs(np.asarray(p[i], np.float64)))) for p in parts for i in step.inputs
                  if i in p and np.size(p[i]) and is_float(np.asarray(p[i]).dtype)]
        event = NodeEvent(stage, 0 if stage == "unet" else None, node.name, node.op_type, out.tensor, h.dtype,
                          nan=h.nan + h.hidden_nan, inf=h.inf + h.hidden_overflow - h.hidden_nan,
                          saturated=h.saturated, peak=h.peak, input_peak=max(peaks) if peaks else None,
                          rel_error=None if node.overflow else node.error)
    return Located(stage, analysis, npu, event)


class StageEvaluator(Evaluator):
    """One fix-search evaluation: the stage re-run with a FixConfig's op-type moves on top of its options (and
    the stages after it), judged by the check's rule (finite outputs, PSNR >= psnr_min) and by no overflow
    inside the stage (stats.is_overflow against the lockstep pass's reference ranges)."""

    def __init__(self, check: SDCheck, located: Located, common: dict, knobs: NpuOptions, announce):
        super().__init__()
        self.check, self.located, self.common, self.knobs = check, located, common, knobs
        self.announce, self.stage = announce, located.stage
        self.base = knobs.profile_for(self.stage)
        self.facts = op_facts(located.npu)

    def run(self, config: FixConfig, purpose: str) -> Evaluation:
        implmodes = {i: "high_precision" for i in sorted(config.high_precision)}  # "OpType::T" items or node names
        moved = config.profile(self.base, self.facts)  # the moves in ATC's vocabulary (npu.fixes)
        keep = sorted(config.keep_dtype)  # the device ops (or IR types) moved to fp32
        written = [e for e in moved.keep_dtype if e not in self.base.keep_dtype]
        custom = [e for e in moved.customize_dtypes if e not in self.base.customize_dtypes]
        tracker = Tracker(self.announce(f"fix {self.count}"))
        t0 = time.perf_counter()
        rerun = _rerun_from(self.stage, self.check.npu, self.check.pipeline.models, self.common, self.knobs,
                            moved, tracker)
        metrics = measure(self.check.reference, rerun)
        inside = tracker.first_by_stage.get(self.stage)
        overflow = inside is not None and is_overflow(
            Headroom(inside.dtype, inside.peak, 0.0, inside.nan, inside.inf, inside.saturated, 0, 0.0),
            self.located.analysis.reference_ranges.get(inside.output))
        psnr_ok = metrics.psnr_db >= self.check.psnr_min
        ok = not metrics.nonfinite_outputs and psnr_ok and not overflow
        attempt = FixAttempt(self.stage, keep, implmodes, None, metrics, inside, ok, time.perf_counter() - t0,
                             atc_keep_dtype=written, customize_dtypes=custom, fusion_off=sorted(config.fusion_off),
                             atc=fix_lines(self.base, moved), profile=moved)
        failing = list(metrics.nonfinite_outputs) + ([] if psnr_ok else ["image PSNR"])
        score = metrics.decoded.rel_euclidean if metrics.decoded.rel_euclidean is not None else float("inf")
        if metrics.nonfinite_outputs:
            score = float("inf")
        return Evaluation(purpose, config, ok, score, failing, [inside.node] if overflow else [], 0.0,
                          detail=attempt)


def find_fix(check: SDCheck, event: NodeEvent, common: dict, knobs: NpuOptions, announce,
             located: Located | None = None, fix_by: str = "node") -> list[FixAttempt]:
    """mschecker.bisect's search over the nodes (``fix_by="node"``) or the op types (``"op_type"``) of the stage
    where ``event`` happened (module docstring); returns every attempt, the recommendation marked ``chosen``."""
    stage = event.stage
    if located is None:
        located = locate(stage, check, knobs)
    analysis = located.analysis
    items = rank_candidates(analysis, fix_by)
    base = knobs.profile_for(stage)
    position = {item: min(n.index for n in analysis.nodes if n.name in set(members(item, analysis)))
                for item in items}
    evaluator = StageEvaluator(check, located, common, knobs, announce)
    given = Evaluation("profile as given (the NPU run)", FixConfig(), False, float("inf"),
                       check.failure_reasons(), [event.node], 0.0)
    result = search(evaluator, items, high_precision_capable(located.npu, base, items), [], position,
                    baseline=given, fusion_of=fusion_of(evaluator.facts))
    attempts = [ev.detail for ev in result.log if ev.detail is not None]
    if result.recommended is not None and result.best is not None and result.best.detail is not None:
        result.best.detail.chosen = True
    return attempts


def _rerun_from(stage: str, npu: PipelineResult, models: SDModels, common: dict, knobs: NpuOptions,
                fixed, tracker: Tracker) -> PipelineResult:
    """Re-run ``stage`` under ``fixed`` (a NumericsProfile holding every option of the stage) and everything
    after it with ``knobs`` (earlier stages' NPU outputs are reused when the stage is the VAE; otherwise the
    pipeline re-runs, its earlier stages deterministic and unchanged)."""
    make = per_stage_factory({**side_devices("npu", knobs), stage: ("npu", fixed, {})}, tracker)
    if stage == "vae_decoder":
        from dataclasses import replace

        decoded = decode(common["pipeline"], make(models.vae_decoder, "vae_decoder"), npu.latents[-1])
        return replace(npu, latents=list(npu.latents), noise_preds=list(npu.noise_preds), decoded=decoded,
                       images=to_uint8_images(decoded), costs={})
    return run_pipeline(make_stage_runner=make, **common)
