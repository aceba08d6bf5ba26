"""What a worker does with one cell: call the library entry point of its kind in-process and return a record.

Why in-process and not `mschecker ...` per cell: a subprocess per cell pays the interpreter, numpy, onnx and
onnxruntime imports (~3 s here) again for every cell, and its result would have to be parsed back from text.
The worker imports once and calls the same functions the commands call:
- check:   mschecker.modelcheck.check.check_model (the check command's library entry point) on model + inputs +
           goldens; golden directories are verified on load (mschecker.tensors.golden_store.load). With a ``referee``
           (mschecker.modelcheck.referee) the cell also records ``<output>.referee_ratio`` (err run / err referee against
           float64) and ``referee_pass`` (1 or 0), and its status follows ``judge`` (default both).
- sd:      mschecker.sd.check.run_check (the `mschecker sd` check: float64 reference vs emulated NPU); with a
           ``referee``, ``<stage output>.referee_ratio`` and ``referee_pass`` as for check cells.
- kernels: mschecker.kernels.suite.run_suite for one kernel (every variant, every planted bug).

Isolation comes from the engine instead: a cell that raises becomes a `crashed` record here (the campaign goes
on), a cell that runs past its timeout has its worker restarted by the engine, a worker that dies is recorded
by the engine as `killed`.

A record is plain data: status (pass | fail | crashed), one-line reason, metrics {name: float} (NaN allowed:
the store keeps it), detail (JSON-ready), versions, profile_hash, model_sha256, timings and the worker's peak
RSS so far; and, for a check cell that runs the graph executor (device "reference" or "npu"), fingerprints:
{"names": [node keys], "data": bytes} (mschecker.campaign.fingerprints.Recorder.record(); the store's
record_cell writes them), one fingerprint per float output of every device op, recorded for the first repeat
only (repeat 0: on those bit-exact devices every repeat computes the same bits, and repeats > 0 exist only on
devices that are not) and for the cell's one input set (a check cell has one). An "ort" (onnxruntime) cell has
none: onnxruntime runs the graph as one call and exposes no per-node values.

An sd cell records the judged run's fingerprints (the emulated NPU: bit-exact), through run_check's on_tensor
hook (SDFingerprints; not the float64 baseline, not the localization's nor the fix search's reruns): every float
output of every device op of every stage, in run order, keyed "<stage>[@<step>][#<run>]/<device op>:<output>"
-- text_encoder/ (text_encoder_2/ for SDXL), unet@1/ and unet@<last>/, vae_decoder/ (then vae_decoder#2/, ...
for the second and later images, decoded one at a time; "#k" also marks the k-th run of a static-batch-1 export
within one call). The UNet at its first and last step only: a row per node per step would multiply the rows by
the step count (x10 at the default), while the first step is where a change of the text encoders (or of the
UNet itself) shows first, and the last carries the drift accumulated over every step into the VAE; a change
that starts in a middle step shows at the last one, which is named instead (the first moved node is still in the
UNet). Every image is decoded and recorded: a change that depends on the values (an overflow in one image only)
must still have a first moved node, and a cell with one image, the usual, pays nothing for it. Rows per cell:
tiny preset 808 (56 + 2 x 333 + 86; 16 KB packed), small 1,739 (108 + 2 x 749 + 133; 35 KB), at any step count.
The fingerprints cost ~15% of the NPU run's time (small preset, 10 steps: 0.9 s of ~5 s).

A kernels cell records, through run_suite's on_outputs hook (KernelFingerprints), one fingerprint per (variant,
case group, output) in the suite's order, keyed "<kernel>/<variant>/<group>:<output>", the group being the
cases' strategy, "golden", or "search" (a planted bug's found case): the outputs of all of a group's cases as
one (fingerprints.FingerprintSum). A variant that changed names itself and the kind of input that shows it, in
~variants x (strategies + 1) rows (10 to 80 a kernel), where one row per case would be 20x that.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import resource
import time
import traceback
from pathlib import Path

from mschecker.errors import InputError
from mschecker.machine import MACHINE_FACTS, cpu_model, machine_facts  # noqa: F401  (MACHINE_FACTS: the store's columns)
from mschecker.campaign.spec import Cell

STATUS_PASS, STATUS_FAIL, STATUS_CRASHED, STATUS_TIMEOUT, STATUS_KILLED = "pass", "fail", "crashed", "timeout", "killed"
FINISHED = (STATUS_PASS, STATUS_FAIL)      # a resumed run skips these; the others are run again
# The per-output metrics of a check cell (mschecker.compare.TensorComparison fields).
CHECK_METRICS = ("max_abs_err", "rel_euclidean", "cosine", "snr_db", "ulp_max", "mismatch_frac")


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters (what the store and the table show)."""
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:300]


def run_cell(cell: Cell, local_paths: dict[str, str] | None = None) -> dict:
    """Run one cell; never raises an Exception (a failure inside the cell is a `crashed` record).

    local_paths: {declared path: path on this worker} for cells whose files were shipped (see engine)."""
    started = time.time()
    t0 = time.perf_counter()
    record = {"status": STATUS_CRASHED, "reason": "", "metrics": {}, "detail": {}, "profile_hash": None,
              "model_sha256": None}
    try:
        params = _localize(cell.params, local_paths or {})
        if cell.kind == "check":
            record.update(_run_check(params, fingerprints=cell.repeat == 0))
        else:
            record.update(_RUNNERS[cell.kind](params))
    except Exception as exc:  # noqa: BLE001 - a crashing cell is recorded, the campaign goes on
        record.update(status=STATUS_CRASHED, reason=one_line(exc),
                      detail={"where": _where(exc), "input_error": isinstance(exc, InputError)})
    record.update(started_at=started, wall_s=time.perf_counter() - t0, versions=versions(),
                  machine=machine_facts(), peak_rss_bytes=peak_rss_bytes())
    return record


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""


def _localize(params: dict, local: dict[str, str]) -> dict:
    if not local:
        return params
    out = dict(params)
    for key in ("model", "golden"):
        if key in out:
            out[key] = local.get(out[key], out[key])
    if "inputs" in out:
        out["inputs"] = [local.get(p, p) for p in out["inputs"]]
    return out


@functools.lru_cache(maxsize=1)
def versions() -> dict:
    """What produced a result (recorded per cell: a cluster may mix machines)."""
    import numpy
    import onnxruntime

    from mschecker import __version__

    return {"mschecker": __version__, "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__,
            "python": platform.python_version(), "cpu": cpu_model(), "host": platform.node()}


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if platform.system() == "Darwin" else peak * 1024)


def _sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def profile_hash(profile: str | None, options: dict, stage_options: dict | None = None) -> str | None:
    """sha256 of the resolved numerics profile(s) the cell ran with (preset + options, per SD stage), so a
    preset file edited between runs shows up even when its name did not change."""
    if profile is None:
        return None
    from mschecker.npu.knobs import apply_knobs

    if stage_options is None:
        return _sha256_json(apply_knobs(profile, **options).to_dict())
    from mschecker.sd.check import stage_npu_options

    per_stage = stage_npu_options(options, stage_options)
    return _sha256_json({s: apply_knobs(profile, **o).to_dict() for s, o in per_stage.items()})


# --------------------------------------------------------------------------------------------------- check
class _RecordingRunner:
    """A graph runner whose first run() records per-node fingerprints (fingerprints.Recorder through
    run_captured: the same bits as run(), with the capture hook). Everything else goes to the runner."""

    def __init__(self, runner):
        from mschecker.campaign.fingerprints import Recorder

        self._runner = runner
        self.recorder: Recorder | None = Recorder(runner.executor)
        self.recorded: dict | None = None

    def __getattr__(self, name):
        return getattr(self._runner, name)

    def run(self, feeds):
        if self.recorder is None:
            return self._runner.run(feeds)
        recorder, self.recorder = self.recorder, None
        outputs = self._runner.run_captured(feeds, recorder)
        self.recorded = recorder.record()
        return outputs


def _run_check(p: dict, *, fingerprints: bool = False) -> dict:
    """fingerprints: record per-node fingerprints (graph executor devices only; see the module docstring)."""
    from mschecker.compare.rules import resolve_rule
    from mschecker.modelcheck.check import check_model, golden_tolerance_hint
    from mschecker.modelcheck.runners import make_runner

    rule, _ = resolve_rule(p["tolerance"], golden_tolerance_hint(p["golden"]))
    options = p["npu_options"] if p["device"] == "npu" else {}
    runner = make_runner(p["model"], device=p["device"], profile=p["profile"], **options)
    recording = None
    if fingerprints and p["device"] in ("reference", "npu") and hasattr(runner, "run_captured"):
        runner = recording = _RecordingRunner(runner)
    referee = _referee_side(p)
    report = check_model(p["model"], p["inputs"], p["golden"], rule, device=p["device"], profile=p["profile"],
                         runner=runner, topk=p["topk"], referee=referee, referee_k=p.get("referee_k"),
                         judge=p.get("judge", "both"))
    metrics = {}
    for t in report.tensors:
        for m in CHECK_METRICS:
            v = getattr(t, m, None)
            if v is not None:
                metrics[f"{t.name}.{m}"] = float(v)
    failing = [t for t in report.tensors if not t.passed]
    reason = "; ".join(f"{t.name}: {', '.join(t.failed_rules) or 'failed'}" for t in failing)
    verdict = getattr(report, "referee", None)
    if verdict is not None:
        metrics.update(verdict.metrics())
        if report.judge != "tolerance":  # the reason says why the status is what it is
            reason = "; ".join(([reason] if reason else []) + verdict.failure_reasons())
    out = {"status": STATUS_PASS if report.passed else STATUS_FAIL, "reason": reason, "metrics": metrics,
           "detail": {"rule": report.rule.to_dict() if hasattr(report.rule, "to_dict") else str(report.rule),
                      "timings_s": report.meta.get("timings_s"), "runner": report.meta.get("runner"),
                      **({"referee": verdict.to_dict()} if verdict is not None else {})},
           "profile_hash": profile_hash(p["profile"], options) if p["device"] == "npu" else None,
           "model_sha256": report.meta.get("model_sha256")}
    if recording is not None and recording.recorded is not None:
        out["fingerprints"] = recording.recorded
    return out


def _referee_side(p: dict):
    """The cell's referee side (mschecker.modelcheck.referee.parse_side of its ``referee`` param), None without one."""
    if "referee" not in p:
        return None
    from mschecker.modelcheck.referee import parse_side

    return parse_side(p["referee"], flag="referee")


# ------------------------------------------------------------------------------------------------------ sd
@functools.lru_cache(maxsize=4)
def sd_models_sha256(preset: str, weights_seed: int) -> str | None:
    """sha256 over the generated stage graphs (once per worker and preset; SDXL's text_encoder_2 after the
    three SD stages). None for graphs past protobuf's 2 GB (sd15): they are a function of (preset, weights_seed,
    mschecker version), recorded anyway."""
    from mschecker.sd.modelfile import fits_protobuf
    from mschecker.sd.pipeline import STAGES, SDModels

    models = SDModels.build(preset, weights_seed)
    h = hashlib.sha256()
    for stage in STAGES + (("text_encoder_2",) if models.text_encoder_2 is not None else ()):
        graph = getattr(models, stage)
        if not fits_protobuf(graph):
            return None
        h.update(graph.SerializeToString(deterministic=True))
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _folder_models_sha256(folder: str, stamp: tuple) -> str:
    """sha256 over a pipeline folder's stage graphs and their external weights (``stamp``: the files' sizes and
    mtimes, so a re-export is hashed again and an unchanged folder once per worker)."""
    h = hashlib.sha256()
    for path, _, _ in stamp:
        h.update(path.encode("utf-8") + b"\0")
        with open(Path(folder) / path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


def pipeline_models_sha256(folder: str) -> str:
    """What the model_sha256 of a pipeline-folder cell hashes: every file under its stage folders' model dirs."""
    from mschecker.sd.folder import XL_STAGES

    root = Path(folder)
    files = sorted(p for stage in XL_STAGES if (root / stage).is_dir() for p in (root / stage).rglob("*")
                   if p.is_file())
    stamp = tuple((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _folder_models_sha256(str(root), stamp)


class SDFingerprints:
    """run_check's on_tensor hook recording an sd cell's fingerprints (see the module docstring for the choice):
    every float output of every device op of the judged run, stage by stage in run order, the UNet at its first
    and its last step only. Keys "<stage>[@<step>][#<run>]/<device op>:<output>": step 1-based (the UNet only);
    "#<run>" (2, 3, ...) for the second and later executor runs of one stage call -- the VAE decodes one image at
    a time (vae_decoder/ is the first image, vae_decoder#2/ the second, ...), a static-batch-1 export runs once
    per sample of a batch (text_encoder#2/, unet@1#2/: the guidance's second half) -- told apart because a node
    produces an output again only in another run. The nodes are fingerprints.Recorder's, in its graph_inputs
    mode (the hook sees nodes, not the executor): host-folded constants and integer / bool outputs skipped.

    unet_steps: how many times the UNet will run (one evaluation per scheduler timestep); the steps in between
    are not fingerprinted at all. None (not known): every step after the first is fingerprinted and only the
    latest kept, which costs a fingerprint of every step (measured, small preset, 10 steps: 0.9 s of
    fingerprints in a ~5 s NPU run with two steps recorded; ~5 s with every step). A run whose UNet ran another
    number of times than given records nothing (record() is None): its "last" step would be mislabelled."""

    def __init__(self, graph_inputs: dict[str, set[str]], unet_steps: int | None = None):
        from mschecker.campaign.fingerprints import Recorder

        self._recorder_type = Recorder
        self._graph_inputs = graph_inputs
        self.unet_steps = unet_steps
        self.entries: list = []         # recorded, in run order
        self._latest_step: list = []    # the UNet's latest recorded step after the first (joins at the VAE)
        self._scope: tuple | None = None   # (stage, step) of the call the current run belongs to
        self._run = 0
        self._seen: set = set()         # (node, output) of the current run: a repeat starts the next run
        self._recorder = None
        self.steps_seen = 0

    def __call__(self, stage: str, step, node, name: str, value) -> None:
        scope = (stage, step)
        if scope != self._scope:
            if stage != "unet":
                self._flush_step()
            self._scope, self._run = scope, 0
            self._open()
        elif (id(node), name) in self._seen:
            self._open()
        self._seen.add((id(node), name))
        if self._recorder is not None:
            self._recorder(node, name, value)

    def _open(self) -> None:
        """The next executor run of the current stage call: a fresh Recorder (it tells nodes apart by identity),
        or None for a UNet step that is not recorded."""
        stage, step = self._scope
        self._run += 1
        self._seen = set()
        if stage == "unet" and step is not None:
            self.steps_seen = max(self.steps_seen, step + 1)
        later = stage == "unet" and bool(step)   # a UNet step after the first
        if later and self.unet_steps is not None and step != self.unet_steps - 1:
            self._recorder = None
            return
        prefix = stage + (f"@{step + 1}" if step is not None else "") + (f"#{self._run}" if self._run > 1 else "")
        self._recorder = self._recorder_type(prefix=prefix + "/", graph_inputs=self._graph_inputs.get(stage, ()))
        if later:   # replaces the previous step's (the runs of one step accumulate)
            if self._run == 1:
                self._latest_step = []
            self._recorder.entries = self._latest_step
        else:
            self._recorder.entries = self.entries

    def _flush_step(self) -> None:
        self.entries += self._latest_step
        self._latest_step = []

    def record(self) -> dict | None:
        """The record's fingerprints ({"names", "data"}), None when nothing was recorded or the UNet ran another
        number of steps than announced."""
        from mschecker.campaign.fingerprints import pack

        self._flush_step()
        if not self.entries or (self.unet_steps is not None and self.steps_seen != self.unet_steps):
            return None
        return {"names": [e.key for e in self.entries], "data": pack(self.entries).tobytes()}


def sd_graph_inputs(pipeline) -> dict[str, set[str]]:
    """{stage: the names of its graph's inputs} (what SDFingerprints needs to tell the host-folded nodes)."""
    return {st: {m.name for m in spec.inputs.values()} for st, spec in pipeline.stages.items()}


def _run_sd(p: dict, *, fingerprints: bool = True) -> dict:
    """fingerprints: record the judged (NPU) run's per-node fingerprints (SDFingerprints)."""
    from mschecker.sd.bundled import bundled_pipeline
    from mschecker.sd.check import run_check
    from mschecker.sd.folder import SDPipeline

    if p.get("pipeline"):
        pipeline = SDPipeline.from_folder(p["pipeline"])
    else:  # what run_check builds when given none: built here for its stages' input names
        pipeline = bundled_pipeline(p.get("preset") or "small", p["weights_seed"], p["scheduler"] or "ddim")
    recorder = None
    if fingerprints:
        from mschecker.sd.folder import make_scheduler_for

        eta = (p.get("generation") or {}).get("eta", 0.0)
        try:  # run_pipeline evaluates the UNet once per timestep of this scheduler
            evaluations = len(make_scheduler_for(pipeline, p["steps"], p["scheduler"], eta=eta).timesteps)
        except Exception:  # noqa: BLE001 - run_check reports a bad scheduler as it always did
            evaluations = None
        recorder = SDFingerprints(sd_graph_inputs(pipeline), evaluations)
    check = run_check(prompt=p["prompt"], pipeline=pipeline, preset=p.get("preset") or "small", steps=p["steps"],
                      scheduler=p["scheduler"], seed=p["seed"], guidance_scale=p["guidance_scale"],
                      profile=p["profile"], npu_options=p["npu_options"], stage_options=p["stage_options"],
                      psnr_min=p["psnr_min"], search_fix=p["search_fix"], weights_seed=p["weights_seed"],
                      generation=p.get("generation"), force_upcast=p.get("force_upcast", "config"),
                      on_tensor=recorder, referee=_referee_side(p), referee_k=p.get("referee_k"),
                      judge=p.get("judge", "both"))
    m = check.metrics
    metrics = {"image_psnr_db": float(m.psnr_db), "image_ssim": float(m.ssim),
               "nonfinite_outputs": float(len(m.nonfinite_outputs))}
    texts = [("text_embeddings" if st == "text_encoder" else f"{st}.hidden_states", c) for st, c in m.texts.items()]
    for name, c in (*texts, ("pooled_text_embeds", m.pooled), ("latents_final", m.steps[-1] if m.steps else None),
                    ("decoded", m.decoded)):
        if c is not None:
            for attr in ("rel_euclidean", "max_abs_err"):
                v = getattr(c, attr, None)
                if v is not None:
                    metrics[f"{name}.{attr}"] = float(v)
    event = check.tracker.first_nonfinite
    detail = {"failure_reasons": check.failure_reasons(), "timings_s": check.timings,
              "first_nonfinite": event.describe() if event else None,
              "fix": check.fix.cli_flags() if check.fix else None,
              "image_size": check.settings["image_size"], "images": check.settings["images"],
              "notes": check.settings["notes"]}
    if check.referee is not None:
        metrics.update(check.referee.metrics())
        detail["referee"] = check.referee.to_dict()
    out = {"status": STATUS_PASS if check.passed else STATUS_FAIL, "reason": "; ".join(check.failure_reasons()),
           "metrics": metrics, "detail": detail,
           "profile_hash": profile_hash(p["profile"], p["npu_options"], p["stage_options"]),
           "model_sha256": pipeline_models_sha256(p["pipeline"]) if p.get("pipeline")
           else sd_models_sha256(p["preset"], p["weights_seed"])}
    fps = recorder.record() if recorder is not None else None
    if fps is not None:
        out["fingerprints"] = fps
    return out


# ------------------------------------------------------------------------------------------------- kernels
class KernelFingerprints:
    """run_suite's on_outputs hook recording a kernels cell's fingerprints: one per (variant, case group, output
    index), in the suite's order, keyed "<kernel>/<variant>/<group>:<output>", over the variant's outputs on every
    case of the group, in order (fingerprints.FingerprintSum: as one tensor; the hash over each case's bytes).
    The group is the case's strategy ("generic", "tails", ...; kernel_suite.kernel_cases labels each case
    "<strategy>: ..."), "golden" for the golden cases, "search" for the case a planted bug's targeted search
    found. Per group rather than per case: ~100 cases a variant would be 10-20x the rows, and the group already
    says which variant on which kind of input moved (the suite's own report names the case). Each output is
    fingerprinted as the hook gets it and not kept."""

    def __init__(self):
        self._sums: dict[tuple[str, int], object] = {}   # (node, output) -> FingerprintSum, in first-seen order
        self._groups: dict[str, set[str]] = {}           # kernel -> its strategies and "golden"

    def __call__(self, kernel: str, variant: str, case, outputs: tuple) -> None:
        from mschecker.kernels.registry import get_kernel
        from mschecker.campaign.fingerprints import FingerprintSum

        if kernel not in self._groups:
            self._groups[kernel] = {*get_kernel(kernel).strategies, "golden"}
        prefix = (case.label or "").split(": ", 1)[0]   # a searched case's own label may hold ": " too
        group = prefix if prefix in self._groups[kernel] else "search"
        for k, out in enumerate(outputs):
            key = (f"{kernel}/{variant}/{group}", k)
            if key not in self._sums:
                self._sums[key] = FingerprintSum()
            self._sums[key].add(out)

    def record(self) -> dict:
        from mschecker.campaign.fingerprints import NodeFingerprint, pack

        entries = [NodeFingerprint(node, k, acc.result()) for (node, k), acc in self._sums.items()]
        return {"names": [e.key for e in entries], "data": pack(entries).tobytes()}


def _run_kernels(p: dict, *, fingerprints: bool = True) -> dict:
    """fingerprints: record the variants' outputs' fingerprints (KernelFingerprints)."""
    from mschecker.kernels.suite import run_suite

    recorder = KernelFingerprints() if fingerprints else None
    report = run_suite([p["kernel"]], p["examples"], on_outputs=recorder)
    metrics = {}
    for o in report.outcomes:
        if o.planted_bug is not None:
            metrics[f"{o.variant}.caught"] = 1.0 if o.ok else 0.0
        else:
            metrics[f"{o.variant}.error_ratio"] = float(o.worst_ratio)
            metrics[f"{o.variant}.max_abs_err"] = float(o.max_abs_err)
            metrics[f"{o.variant}.ulp_p99"] = float(o.ulp_p99)
    bad = [o for o in report.outcomes if not o.ok]
    reason = "; ".join(f"{o.variant}: {o.verdict}" + (f" ({o.first_failure})" if o.first_failure else "")
                       for o in bad)
    out = {"status": STATUS_PASS if report.passed else STATUS_FAIL, "reason": reason[:300], "metrics": metrics,
           "detail": {"variants": len(report.outcomes), "examples": p["examples"]}}
    fps = recorder.record() if recorder is not None else None
    if fps is not None and fps["names"]:
        out["fingerprints"] = fps
    return out


_RUNNERS = {"check": _run_check, "sd": _run_sd, "kernels": _run_kernels}


def worker_files_root(run_id: str) -> Path:
    """Where a worker materializes shipped files for a run (removed by the engine at the end of the run)."""
    import tempfile

    safe = hashlib.sha256(run_id.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"mschecker-campaign-{os.getuid() if hasattr(os, 'getuid') else 0}-{safe}"
