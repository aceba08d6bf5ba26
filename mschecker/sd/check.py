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

Saturation mode hides overflows inside kernels (NaN -> 0, inf -> max after every node): when such a run fails
without a visible event, `probe_hidden_overflow` re-runs the suspect stage in inf_nan mode to find the node.
A failure with no event at all (an overflow inside a kernel that leaves a finite, collapsed output) is located
by `first_divergent_node`: the suspect stage on the NPU and on the reference from the same inputs, compared
node by node; the first node with relative error > DIVERGENCE is the event the fix search starts from.

The fix search (`find_fix`), when the NPU run failed and overflowed somewhere: the stage where the first overflow
happened is re-run (the earlier stages' NPU outputs reused, because on a real NPU each stage is a separate model
compiled with its own ATC options) with, cumulatively and cheapest first, for the op type T of the first
overflowing node: the high_precision implementation of T (fp32 statistics / accumulation, fp16 storage: ATC
``op_precision_mode`` [ByOpType] T=high_precision), then ``keep_dtype OpType::T`` (fp32 storage too); if the rerun
overflows at another op type, that one is next. At most `MAX_FIX_ROUNDS` rounds, then the last resort: the whole
stage in fp32 (precision_mode must_keep_origin_dtype, what diffusers' ``force_upcast`` does for the VAE). The fix
is the first configuration whose run is finite and meets the PSNR threshold; it is reported with the rerun's
metrics, so the claim "this fixes it" is always measured.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..compare import TensorComparison, ToleranceRule, compare_arrays
from ..dtypes import float_format
from ..errors import InputError
from ..graph.policy import is_float_dtype
from .images import image_psnr, image_ssim
from .bundled import bundled_pipeline
from .folder import SDPipeline
from .pipeline import STAGES, PipelineResult, SDModels, run_pipeline, stage_runner_factory, to_uint8_image

MAX_FIX_ROUNDS = 3
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

    def __init__(self, progress: Callable[[str, int | None], None] | None = None):
        self.progress = progress
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
        if not isinstance(value, np.ndarray) or not is_float_dtype(value.dtype) or value.size == 0:
            return
        x = value.astype(np.float32, copy=False)  # bf16 has no numpy ufunc loops; every format fits fp32
        finite = np.isfinite(x)
        all_finite = bool(finite.all())
        mag = np.abs(x) if all_finite else np.abs(np.where(finite, x, 0))
        peak = float(mag.max())
        self._peaks[name] = peak
        head = self.headroom.setdefault(stage, StageHeadroom(stage))
        if peak > head.peak:
            head.peak, head.node = peak, node.name
        fmax = float(float_format(value.dtype).max) if value.dtype != np.float64 else None
        head.dtype_max = fmax if head.dtype_max is None else head.dtype_max
        saturated = int((mag >= fmax).sum()) if fmax is not None and value.dtype.itemsize <= 2 and peak >= fmax else 0
        if not all_finite and (stage not in self.first_by_stage or self.first_nan is None):
            event = self._event(stage, node, name, value, x, finite, peak, saturated)
            self.first_by_stage.setdefault(stage, event)
            if event.nan and self.first_nan is None:
                self.first_nan = event
        if saturated and self.first_saturated is None:
            self.first_saturated = self._event(stage, node, name, value, x, finite, peak, saturated)

    @property
    def first_nonfinite(self) -> NodeEvent | None:
        """The node that explains the failure: the first non-finite output in the stage where the first NaN
        appeared (an inf there is usually the overflow the NaN came from), else the first non-finite output.
        Per stage, because real exports carry -3.4e38 attention masks that are -inf in fp16 and harmless: such
        a mask in the text encoder must not be blamed for a NaN in the VAE."""
        if self.first_nan is not None:
            return self.first_by_stage[self.first_nan.stage]
        return next(iter(self.first_by_stage.values()), None)

    def _event(self, stage, node, name, value, x, finite, peak, saturated) -> NodeEvent:
        ins = [self._peaks[i] for i in node.input if i in self._peaks and i != name]
        return NodeEvent(stage, self.step, node.name, node.op_type, name, str(value.dtype),
                         nan=int(np.isnan(x).sum()), inf=int(np.isinf(x).sum()), saturated=saturated, peak=peak,
                         input_peak=max(ins) if ins else None)


@dataclass
class Metrics:
    """The compared tensors of one NPU run against the reference."""

    text: TensorComparison
    steps: list[TensorComparison]
    decoded: TensorComparison
    psnr_db: float
    ssim: float
    image: np.ndarray
    nonfinite_outputs: list[str]

    def to_dict(self) -> dict:
        def brief(c: TensorComparison) -> dict:
            return {"max_abs_err": c.max_abs_err, "rel_euclidean": c.rel_euclidean, "cosine": c.cosine,
                    "snr_db": c.snr_db, "nan": c.actual_nan, "inf": c.actual_inf}
        return {"text_embeddings": brief(self.text), "latents": [brief(c) for c in self.steps],
                "decoded": brief(self.decoded), "image_psnr_db": self.psnr_db, "image_ssim": self.ssim,
                "nonfinite_outputs": self.nonfinite_outputs}


@dataclass
class FixAttempt:
    """One re-run of the failing stage with a candidate fix, and what it measured."""

    stage: str
    keep_dtype: list[str]
    implmodes: dict[str, str]     # op type -> implmode (ATC op_precision_mode [ByOpType])
    precision_mode: str | None
    metrics: Metrics | None
    first_nonfinite: NodeEvent | None
    passed: bool
    seconds: float

    def describe(self) -> str:
        if self.precision_mode:
            return f"{self.stage}: precision_mode {self.precision_mode}"
        parts = [f"op_precision_mode {t}={m}" for t, m in self.implmodes.items()]
        if self.keep_dtype:
            parts.append("keep_dtype " + ", ".join(self.keep_dtype))
        return f"{self.stage}: " + " + ".join(parts)

    def cli_flags(self) -> str:
        """The `mschecker sd` flags that apply this fix (per-stage form)."""
        if self.precision_mode:
            return f"--precision-mode {self.stage}:{self.precision_mode}"
        flags = [f"--op-precision {self.stage}:{t}={m}" for t, m in self.implmodes.items()]
        if self.keep_dtype:
            flags.append("--keep-dtype " + ",".join(f"{self.stage}:{k}" for k in self.keep_dtype))
        return " ".join(flags)

    def to_dict(self) -> dict:
        return {"stage": self.stage, "keep_dtype": self.keep_dtype, "implmode_by_op_type": self.implmodes,
                "precision_mode": self.precision_mode, "passed": self.passed, "seconds": self.seconds,
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

    @property
    def sides(self) -> tuple[str, str]:
        """(baseline, judged): which runs ``reference`` and ``npu`` hold."""
        return tuple(self.settings.get("sides", ("reference", "npu")))

    @property
    def passed(self) -> bool:
        return not self.metrics.nonfinite_outputs and self.metrics.psnr_db >= self.psnr_min

    @property
    def fix(self) -> FixAttempt | None:
        return next((f for f in self.fixes if f.passed), None)

    def failure_reasons(self) -> list[str]:
        m, out = self.metrics, []
        if m.nonfinite_outputs:
            out.append("NaN/inf in " + ", ".join(m.nonfinite_outputs))
        if not m.psnr_db >= self.psnr_min:
            out.append(f"image PSNR {m.psnr_db:.2f} dB < {self.psnr_min:g} dB")
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
        }


def measure(reference: PipelineResult, npu: PipelineResult) -> Metrics:
    """Per-stage comparison of an NPU run against the reference run (same settings)."""
    def cmp(a, e, name):
        return compare_arrays(np.asarray(a), np.asarray(e), STAGE_RULE, name=name, topk=3)

    text = cmp(npu.text_embeddings, reference.text_embeddings, "text_embeddings")
    steps = [cmp(a, e, f"latents[{i + 1}]") for i, (a, e) in enumerate(zip(npu.latents[1:], reference.latents[1:]))]
    decoded = cmp(npu.decoded, reference.decoded, "decoded")
    bad = [c.name for c in [text, *steps, decoded] if c.actual_nan or c.actual_inf]
    return Metrics(text, steps, decoded, image_psnr(npu.image, reference.image),
                   image_ssim(npu.image, reference.image), npu.image, bad)


def per_stage_factory(device_for: dict[str, tuple[str, str | None, dict]], tracker: Tracker | None, *,
                      capture: bool = True):
    """A make_stage_runner whose stages may use different devices/profiles/options (one compiled model per
    stage, as on a real NPU), each call announced to ``tracker`` and (with ``capture``) captured by it."""
    factories = {}
    for stage in STAGES:
        device, profile, options = device_for[stage]
        options = dict(options)
        profile = options.pop("profile", None) or profile  # a per-stage --profile STAGE:NAME
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


def side_devices(side: str, profile: str, options: dict[str, dict]) -> dict[str, tuple[str, str | None, dict]]:
    """per_stage_factory's {stage: (device, profile, options)} for one side of the check."""
    if side == "npu":
        return {s: ("npu", profile, options[s]) for s in STAGES}
    if side in ("reference", "ort"):
        return {s: (side, None, {}) for s in STAGES}
    raise InputError(f"unknown side {side!r}; choose from {', '.join(SIDES)}")


def run_check(*, prompt: str, pipeline: SDPipeline | None = None, preset: str = "small", steps: int = 10,
              scheduler: str | None = None, seed: int = 0, guidance_scale: float = 7.5,
              sides: tuple[str, str] = ("reference", "npu"), profile: str = "ascend910b",
              npu_options: dict | None = None, stage_options: dict[str, dict] | None = None, psnr_min: float = 30.0,
              search_fix: bool = True, weights_seed: int = 0, initial_latents=None,
              progress: Callable[[str, str, int | None], None] | None = None) -> SDCheck:
    """Baseline run (``sides[0]``), judged run (``sides[1]``, captured), per-stage metrics, and -- when the
    judged side is the NPU and fails -- the overflow probes and the fix search. ``pipeline`` defaults to the
    bundled ``preset`` (DDIM unless ``scheduler`` says otherwise); ``scheduler`` overrides its scheduler class.
    ``npu_options`` (mschecker.npu.knobs.apply_knobs keywords) apply to every stage, ``stage_options[stage]``
    on top of them to one stage (keep_dtype lists are joined; "profile" picks that stage's profile).
    ``progress(run_label, stage, step)`` is called before every stage execution."""
    if len(sides) != 2 or sides[0] == sides[1] or any(s not in SIDES for s in sides):
        raise InputError(f"--sides {','.join(sides)}: give two different sides among {', '.join(SIDES)}")
    if pipeline is None:
        pipeline = bundled_pipeline(preset, weights_seed, scheduler or "ddim")
    options = stage_npu_options(npu_options, stage_options)
    models = pipeline.models
    common = dict(prompt=prompt, pipeline=pipeline, steps=steps, scheduler=scheduler, seed=seed,
                  guidance_scale=guidance_scale, initial_latents=initial_latents)
    timings = {}

    def label(side):
        return f"npu {profile}" if side == "npu" else side

    def announce(run_label):
        return (lambda stage, step: progress(run_label, stage, step)) if progress else None

    base_side, judged_side = sides
    ref_tracker = Tracker(announce(label(base_side)))
    t0 = time.perf_counter()
    reference = run_pipeline(make_stage_runner=per_stage_factory(
        side_devices(base_side, profile, options), ref_tracker, capture=False), **common)
    timings[base_side] = time.perf_counter() - t0

    tracker = Tracker(announce(label(judged_side)))
    t0 = time.perf_counter()
    npu = run_pipeline(make_stage_runner=per_stage_factory(side_devices(judged_side, profile, options), tracker),
                       **common)
    timings[judged_side] = time.perf_counter() - t0
    metrics = measure(reference, npu)
    settings = {"pipeline": pipeline.name, "preset": pipeline.name, "steps": steps,
                "scheduler": scheduler or pipeline.scheduler_config.get("_class_name"), "seed": seed,
                "guidance_scale": guidance_scale, "prompt": prompt, "profile": profile, "sides": list(sides),
                "npu_options": {st: {k: (v if isinstance(v, (list, dict)) else str(v)) for k, v in o.items()}
                                for st, o in options.items()},
                "weights_seed": weights_seed, "image_size": list(np.shape(reference.decoded)[2:]),
                "initial_latents": "given" if initial_latents is not None else f"RandomState({seed}).randn",
                "stage_costs": {side: {st: c.to_dict() for st, c in run.costs.items()}
                                for side, run in ((base_side, reference), (judged_side, npu))}}
    check = SDCheck(settings, psnr_min, reference, npu, metrics, tracker, timings, pipeline=pipeline)
    if judged_side != "npu":
        return check
    event = tracker.first_nonfinite or tracker.first_saturated
    if search_fix and not check.passed and event is None and _saturates(profile, options[suspect_stage(metrics)]):
        t0 = time.perf_counter()
        check.hidden_overflow = event = probe_hidden_overflow(check, models, common, profile, options, announce)
        timings["overflow_probe"] = time.perf_counter() - t0
    if search_fix and not check.passed and event is None:
        t0 = time.perf_counter()
        check.divergence = event = first_divergent_node(suspect_stage(metrics), check, models, profile, options,
                                                        announce)
        timings["divergence_probe"] = time.perf_counter() - t0
    if search_fix and not check.passed and event is not None:
        t0 = time.perf_counter()
        check.fixes = find_fix(check, event, models, common, profile, options, announce)
        timings["fix_search"] = time.perf_counter() - t0
    return check


def stage_npu_options(npu_options: dict | None, stage_options: dict[str, dict] | None) -> dict[str, dict]:
    """{stage: apply_knobs keywords}: the common options with each stage's own on top (npu.knobs.options_for:
    lists joined, tables merged)."""
    from ..npu.knobs import options_for

    knobs = {None: dict(npu_options or {}), **{st: dict(o or {}) for st, o in (stage_options or {}).items()}}
    return {st: options_for(knobs, st) for st in STAGES}


# Vector ops whose implmode picks how they accumulate (fp16 vs fp32 statistics / sums): for these the
# high_precision implementation is a real, cheaper fix than fp32 storage.
ACCUMULATING_OPS = frozenset({"InstanceNormalization", "LayerNormalization", "GroupNormalization", "Softmax",
                              "LogSoftmax", "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2"})


def fix_candidates(op_type: str) -> list[tuple[str, str]]:
    """What to try for an overflow first seen at a node of ``op_type``, cheapest first: for accumulating vector
    ops the high_precision implementation (fp32 statistics, fp16 storage: ATC op_precision_mode), then
    keep_dtype on the op type (fp32 storage too). Other ops (cube ops, elementwise, data movement) overflow in
    what they store or read, which only fp32 storage holds."""
    keep = [("keep_dtype", f"OpType::{op_type}")]
    return [("implmode", op_type)] + keep if op_type in ACCUMULATING_OPS else keep


def suspect_stage(metrics: Metrics, jump: float = 0.1) -> str:
    """The first stage whose output is non-finite or whose relative error exceeds ``jump`` (10%: an order of
    magnitude above the fp16 drift of a healthy run, 1e-3..5e-2 measured); the VAE when none does (the image
    failed, so the decoder is where it went wrong)."""
    for stage, c in (("text_encoder", metrics.text), ("unet", metrics.steps[-1] if metrics.steps else None),
                     ("vae_decoder", metrics.decoded)):
        if c is not None and (c.actual_nan or c.actual_inf or c.rel_euclidean is None or c.rel_euclidean > jump):
            return stage
    return "vae_decoder"


def _saturates(profile, options: dict) -> bool:
    from ..npu.knobs import apply_knobs

    options = dict(options)
    profile = options.pop("profile", None) or profile
    return apply_knobs(profile, **options).overflow_mode == "saturation"


def probe_hidden_overflow(check: SDCheck, models: SDModels, common: dict, profile: str, options: dict[str, dict],
                          announce) -> NodeEvent | None:
    """Saturation mode turns inf into +-max and NaN into 0 after every node, so an overflow inside a kernel
    (fp16 statistics: x^2 -> inf -> var inf -> NaN -> 0) leaves no trace in the captured tensors. Re-run the
    suspect stage with the same options in inf_nan mode to see where the first inf/NaN appears."""
    stage = suspect_stage(check.metrics)
    probe = Tracker(announce("overflow probe"))
    _rerun_from(stage, check.npu, models, common, profile,
                {**options, stage: {**options[stage], "overflow_mode": "inf_nan"}}, probe)
    return probe.first_nonfinite or probe.first_saturated


DIVERGENCE = 0.1  # relative error of a node output that counts as "wrong", not fp16 drift (1e-3..5e-2 here)


def stage_feeds(stage: str, result: PipelineResult, pipeline: SDPipeline) -> dict[str, np.ndarray]:
    """The inputs ``stage`` received in ``result``'s run (the UNet: its first step), as the graph takes them."""
    if stage == "text_encoder":
        return pipeline.text_feeds(result.token_ids)
    if stage == "unet":
        return dict(result.unet_feeds)
    return pipeline.vae_feeds(result.latents[-1])


def first_divergent_node(stage: str, check: SDCheck, models: SDModels, profile: str, options: dict[str, dict],
                         announce) -> NodeEvent | None:
    """A failure with no NaN/inf/max anywhere (e.g. fp16 statistics whose variance overflowed inside the kernel:
    rstd = 0, the output collapses to beta) is located by comparison: ``stage`` runs on the NPU and on the
    reference from the same inputs (the NPU run's own, so upstream drift is not counted), and the first node
    whose output's relative error ||npu - ref|| / ||ref|| exceeds DIVERGENCE is returned. NPU outputs are kept
    (in their fp16 storage) until the reference pass compares them: meant for the tiny/small presets."""
    feeds = stage_feeds(stage, check.npu, check.pipeline)
    kept: dict[str, tuple] = {}

    class Keep(Tracker):
        def on_tensor(self, st, node, name, value):
            if isinstance(value, np.ndarray) and is_float_dtype(value.dtype):
                kept[name] = value

    per_stage_factory({st: ("npu", profile, options[st]) for st in STAGES}, Keep(announce("divergence probe")))(
        getattr(models, stage), stage)(feeds)
    found: list[NodeEvent] = []

    def compare(st, node, name, ref):
        if found or name not in kept or not is_float_dtype(ref.dtype):
            return
        stored = kept[name]
        actual = stored.astype(np.float64)
        ref = np.asarray(ref, np.float64)
        norm = float(np.linalg.norm(ref))
        if norm == 0 or not np.isfinite(actual).all():
            return
        err = float(np.linalg.norm(actual - ref)) / norm
        if err > DIVERGENCE:
            ins = [float(np.abs(kept[i].astype(np.float32)).max()) for i in node.input if i in kept and kept[i].size]
            found.append(NodeEvent(stage, 0 if stage == "unet" else None, node.name, node.op_type, name,
                                   str(stored.dtype), peak=float(np.abs(actual).max()),
                                   input_peak=max(ins) if ins else None, rel_error=err))

    stage_runner_factory("reference", capture=compare)(getattr(models, stage), stage)(feeds)
    return found[0] if found else None


def find_fix(check: SDCheck, event: NodeEvent, models: SDModels, common: dict, profile: str,
             options: dict[str, dict], announce) -> list[FixAttempt]:
    """The rounds described in the module docstring, starting from the overflow ``event``; returns every
    attempt (the last one passes when a fix was found)."""
    stage = event.stage
    implmodes: dict[str, str] = {}
    keep: list[str] = []
    tried: set = set()
    attempts: list[FixAttempt] = []
    for _ in range(MAX_FIX_ROUNDS + 1):
        todo = [c for c in fix_candidates(event.op_type) if c not in tried] if event is not None else []
        last_resort = not todo or len(attempts) == MAX_FIX_ROUNDS
        fixed = dict(options[stage])
        if last_resort:
            for k in ("keep_dtype", "implmode_by_op_type"):
                fixed.pop(k, None)
            fixed["precision_mode"] = "must_keep_origin_dtype"
        else:
            kind, what = todo[0]
            tried.add(todo[0])
            if kind == "implmode":
                implmodes[what] = "high_precision"
            else:
                keep.append(what)
            if implmodes:
                fixed["implmode_by_op_type"] = {**fixed.get("implmode_by_op_type", {}), **implmodes}
            if keep:
                fixed["keep_dtype"] = list(fixed.get("keep_dtype") or []) + keep
        tracker = Tracker(announce(f"fix {len(attempts) + 1}"))
        t0 = time.perf_counter()
        rerun = _rerun_from(stage, check.npu, models, common, profile, {**options, stage: fixed}, tracker)
        metrics = measure(check.reference, rerun)
        ok = not metrics.nonfinite_outputs and metrics.psnr_db >= check.psnr_min
        attempts.append(FixAttempt(stage, [] if last_resort else list(keep),
                                   {} if last_resort else dict(implmodes),
                                   "must_keep_origin_dtype" if last_resort else None, metrics,
                                   tracker.first_nonfinite, ok, time.perf_counter() - t0))
        if ok or last_resort:
            break
        nxt = tracker.first_nonfinite or tracker.first_saturated
        if nxt is not None and nxt.stage != stage:
            break  # the fix moved the overflow to a later stage: report it, do not chase across stages
        event = nxt or event  # finite but below the threshold: escalate on the same op type
    return attempts


def _rerun_from(stage: str, npu: PipelineResult, models: SDModels, common: dict, profile: str,
                options: dict[str, dict], tracker: Tracker) -> PipelineResult:
    """Re-run ``stage`` and everything after it with ``options`` (earlier stages' NPU outputs are reused when
    the stage is the VAE; otherwise the pipeline re-runs, its earlier stages deterministic and unchanged)."""
    make = per_stage_factory({s: ("npu", profile, options[s]) for s in STAGES}, tracker)
    if stage == "vae_decoder":
        pipeline = common["pipeline"]
        vae = make(models.vae_decoder, "vae_decoder")
        decoded = pipeline.output("vae_decoder", vae(stage_feeds("vae_decoder", npu, pipeline)))
        return PipelineResult(npu.token_ids, npu.text_embeddings, npu.timesteps, list(npu.latents),
                              list(npu.noise_preds), decoded, to_uint8_image(decoded), npu.unet_feeds)
    return run_pipeline(make_stage_runner=make, **common)
