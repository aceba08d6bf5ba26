"""`[[sd]]` cells: one Stable Diffusion check (mschecker.sd.check.run_check: float64 reference vs emulated NPU) per
(pipeline, prompt, seed, size, negative prompt, profile), on the bundled synthetic graphs of a preset or on
diffusers ONNX folders (read by path on the workers: GBs, never shipped).

An sd cell records the judged run's fingerprints (SDFingerprints; mschecker.campaign.cells says what and why);
with a ``referee``, ``<stage output>.referee_ratio`` and ``referee_pass`` as check cells do.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import math
from pathlib import Path

from mschecker.campaign.fingerprints import Recorder, pack
from mschecker.campaign.kinds.base import (REFEREE_METRICS, STATUS_FAIL, STATUS_PASS, Cell, CellKind, MetricInfo,
                                           cell_key, profile_hash, referee_side)
from mschecker.campaign.validation import (REFEREE_KEYS, check_referee, existing_path, int_in, is_of, list_of,
                                           npu_options_of, profiles_of, referee_params, short_int, show)
from mschecker.errors import InputError

# seeds are numpy.random.RandomState seeds (the SD check's initial noise and synthetic weights), [0, 2**32 - 1];
# SD steps are bounded by the scheduler's num_train_timesteps (the SD check's own rule, applied here).
SEED_MAX = 2**32 - 1
# The call arguments recorded in a cell's params only where they differ from diffusers' defaults: an older
# campaign's cells keep their spec_hash, so compare does not call them changed.
_GENERATION_DEFAULTS = {"negative_prompt": None, "num_images_per_prompt": 1, "height": None, "width": None,
                        "guidance_rescale": 0.0, "eta": 0.0}
# What an sd cell records (_run_sd): the image's, then <stage output>.<name> per stage output.
IMAGE_METRICS = (MetricInfo("image_psnr_db", True, "dB"), MetricInfo("image_ssim", True),
                 MetricInfo("nonfinite_outputs", False, "count"))
STAGE_METRICS = (MetricInfo("rel_euclidean", False), MetricInfo("max_abs_err", False))


class SDKind(CellKind):
    name = "sd"
    keys = {"name": str, "timeout_s": (int, float), "preset": str, "pipelines": list, "prompts": list, "seeds": list,
            "sizes": list, "negative_prompts": list, "steps": int, "scheduler": str, "guidance_scale": (int, float),
            "guidance_rescale": (int, float), "eta": (int, float), "num_images_per_prompt": int,
            "force_upcast": str, "profiles": list, "npu_options": dict, "stage_options": dict,
            "psnr_min": (int, float), "search_fix": bool, "weights_seed": int, **REFEREE_KEYS}
    required = ("name", "prompts")
    metrics = IMAGE_METRICS + STAGE_METRICS + REFEREE_METRICS
    headline = ("image_psnr_db", "image PSNR (dB), mean over prompts and seeds")

    def validate(self, block: dict, where: str, base: Path) -> dict:
        _validate_source(block, where, base)
        _validate_generation(block, where)
        _validate_sampling(block, where)
        _validate_numerics(block, where)
        check_referee(block, where)
        return block

    def expand(self, block: dict, repeats: int) -> list[Cell]:
        """One cell per (pipeline, prompt, seed, size, negative prompt, profile); an axis the block does not declare
        is left out of the coordinates, so a campaign's cell keys do not change when later versions add axes."""
        pipelines = list(block.get("pipeline_paths", {}).items()) or [(None, None)]
        axes = [("pipeline", pipelines), ("prompt", block["prompts"]), ("seed", block["seeds"]),
                ("size", block.get("sizes", [None])), ("negative_prompt", block.get("negative_prompts", [None])),
                ("profile", block["profiles"])]
        declared = {"pipeline": "pipelines" in block, "size": "sizes" in block,
                    "negative_prompt": "negative_prompts" in block}
        out = []
        for values in itertools.product(*(v for _, v in axes)):
            point = dict(zip((k for k, _ in axes), values))
            written, _ = point["pipeline"]
            coords = {k: (written if k == "pipeline" else v) for k, v in point.items() if declared.get(k, True)}
            out.append(Cell(cell_key(block["name"], coords), "sd", block["name"], coords, _params(block, point),
                            True, "npu", 0, block["timeout_s"]))
        return out

    def run(self, cell: Cell, params: dict) -> dict:
        return _run_sd(params)

    def headline_value(self, values: list[float]) -> float:
        return values[0]   # one image PSNR per cell

    def group_label(self, block: str, coords: dict) -> str:
        return f"{block} / {coords.get('profile')}"

    def profile_hash(self, params: dict, device: str) -> str | None:
        return profile_hash(params["profile"], params["npu_options"], params["stage_options"])


def _params(block: dict, point: dict) -> dict:
    """The params of the cell at one point of the block's axes."""
    _, path = point["pipeline"]
    size = point["size"]
    params = {"prompt": point["prompt"], "seed": point["seed"], "profile": point["profile"],
              **({"pipeline": path} if path else {"preset": block["preset"]}),
              "steps": block.get("steps", 10), "scheduler": block.get("scheduler", "ddim"),
              "guidance_scale": float(block.get("guidance_scale", 7.5)),
              "npu_options": block["npu_options"], "stage_options": block["stage_options"],
              "psnr_min": float(block.get("psnr_min", 30.0)),
              "search_fix": block.get("search_fix", False),
              "weights_seed": block.get("weights_seed", 0)}
    generation = {"negative_prompt": point["negative_prompt"],
                  "num_images_per_prompt": block.get("num_images_per_prompt", 1),
                  "height": size[0] if size else None, "width": size[1] if size else None,
                  "guidance_rescale": float(block.get("guidance_rescale", 0.0)),
                  "eta": float(block.get("eta", 0.0))}
    generation = {k: v for k, v in generation.items() if v != _GENERATION_DEFAULTS[k]}
    if generation:
        params["generation"] = generation
    if block.get("force_upcast", "config") != "config":
        params["force_upcast"] = block["force_upcast"]
    params.update(referee_params(block))
    return params


# ------------------------------------------------------------------------------------------------ validation
def _validate_source(block: dict, where: str, base: Path) -> None:
    """preset or pipelines: the bundled graphs of a preset, or diffusers ONNX folders (an axis)."""
    # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.presets import PRESET_NAMES  # here, not at the top: only a campaign with SD blocks pays

    if "pipelines" in block:  # diffusers ONNX folders, an axis; read by path on the workers (GBs: not shipped)
        if "preset" in block:
            raise InputError(f"{where}: give preset or pipelines, not both")
        written = list_of(block, "pipelines", str, where, [])
        block["pipeline_paths"] = {w: existing_path(w, base, where, "pipelines") for w in written}
        for w, path in block["pipeline_paths"].items():
            if not Path(path).is_dir():
                raise InputError(f"{where}: pipelines {w!r}: {path} is not a folder")
    else:
        block.setdefault("preset", "small")
        if block["preset"] not in PRESET_NAMES:
            raise InputError(f"{where}: preset {block['preset']!r} is not one of {', '.join(PRESET_NAMES)}")


def _validate_generation(block: dict, where: str) -> None:
    """The pipeline call's axes and arguments: prompts, sizes, negative prompts, images, seeds."""
    # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.folder import FORCE_UPCAST, NUM_IMAGES_MAX, SIZE_MAX  # here: only SD blocks pay

    block["prompts"] = list_of(block, "prompts", str, where, [])
    if "sizes" in block:  # [height, width] px pairs; the pipeline checks them against its VAE factor when it runs
        sizes = list_of(block, "sizes", list, where, [])
        for j, size in enumerate(sizes):
            if len(size) != 2 or not all(is_of(v, int) and 1 <= v <= SIZE_MAX for v in size):
                raise InputError(f"{where}: sizes[{j}] must be [height, width] in px, integers in [1, {SIZE_MAX}], "
                                 f"got {show(size)}")
    if "negative_prompts" in block:
        list_of(block, "negative_prompts", str, where, [])
    int_in(block, "num_images_per_prompt", 1, 1, NUM_IMAGES_MAX, where)
    for key in ("guidance_rescale", "eta"):  # both in [0, 1]: mschecker.sd.pipeline / scheduler say why
        if key in block and not 0.0 <= block[key] <= 1.0:
            raise InputError(f"{where}: {key} must be in [0, 1], got {block[key]!r}")
    if block.get("force_upcast", "config") not in FORCE_UPCAST:
        raise InputError(f"{where}: force_upcast must be one of {', '.join(FORCE_UPCAST)}, got "
                         f"{block['force_upcast']!r}")
    block["seeds"] = list_of(block, "seeds", int, where, [0])
    for j, seed in enumerate(block["seeds"]):
        if not 0 <= seed <= SEED_MAX:
            raise InputError(f"{where}: seeds[{j}] must be an integer in [0, {SEED_MAX}], got {short_int(seed)}")
    int_in(block, "weights_seed", 0, 0, SEED_MAX, where)


def _validate_sampling(block: dict, where: str) -> None:
    """scheduler (a name of the SD command's table, mschecker.sd.scheduler.SCHEDULERS), steps, guidance."""
    # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.scheduler import SCHEDULERS, make_scheduler  # here: mschecker.sd loads its graph builders

    if block.get("scheduler", "ddim") not in SCHEDULERS:
        raise InputError(f"{where}: scheduler must be one of {', '.join(SCHEDULERS)}, got {block['scheduler']!r}")
    steps = block.get("steps", 10)
    if steps < 1:
        raise InputError(f"{where}: steps must be >= 1, got {steps}")
    try:  # the SD check's own rule: no more steps than the scheduler's num_train_timesteps
        make_scheduler(block.get("scheduler", "ddim"), steps)
    except InputError as exc:
        raise InputError(f"{where}: steps: {exc}") from None
    for key in ("guidance_scale", "psnr_min"):
        if key in block and not math.isfinite(block[key]):
            raise InputError(f"{where}: {key} must be finite")


def _validate_numerics(block: dict, where: str) -> None:
    """profiles, npu_options and per-stage stage_options (SDXL's stages)."""
    # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.folder import XL_STAGES  # here: only SD blocks pay

    block["profiles"] = profiles_of(block, where)
    block["npu_options"] = npu_options_of(block, "npu_options", where)
    stages = block.get("stage_options", {})
    for stage, table in stages.items():
        if stage not in XL_STAGES:
            raise InputError(f"{where}: stage_options: unknown stage {stage!r} (known: {', '.join(XL_STAGES)})")
        if not isinstance(table, dict):
            raise InputError(f"{where}: stage_options.{stage} must be a table")
        npu_options_of(block, f"stage_options.{stage}", where, table)
    block["stage_options"] = {k: dict(v) for k, v in stages.items()}


# ----------------------------------------------------------------------------------------------------- running
@functools.lru_cache(maxsize=4)
def sd_models_sha256(preset: str, weights_seed: int) -> str | None:
    """sha256 over the generated stage graphs (once per worker and preset; SDXL's text_encoder_2 after the
    three SD stages). None for graphs past protobuf's 2 GB (sd15): they are a function of (preset, weights_seed,
    mschecker version), recorded anyway."""
    # here, not at the top: mschecker.sd loads its graph builders, which only sd cells' workers need
    from mschecker.sd.modelfile import fits_protobuf  # lazy: start-up (google.protobuf, onnx, mschecker.sd)
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
    # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.folder import XL_STAGES  # here: only sd cells load mschecker.sd

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
        self._recorder = Recorder(prefix=prefix + "/", graph_inputs=self._graph_inputs.get(stage, ()))
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
        self._flush_step()
        if not self.entries or (self.unet_steps is not None and self.steps_seen != self.unet_steps):
            return None
        return {"names": [e.key for e in self.entries], "data": pack(self.entries).tobytes()}


def sd_graph_inputs(pipeline) -> dict[str, set[str]]:
    """{stage: the names of its graph's inputs} (what SDFingerprints needs to tell the host-folded nodes)."""
    return {st: {m.name for m in spec.inputs.values()} for st, spec in pipeline.stages.items()}


def _run_sd(p: dict, *, fingerprints: bool = True) -> dict:
    """fingerprints: record the judged (NPU) run's per-node fingerprints (SDFingerprints)."""
    # here, not at the top: mschecker.sd loads its graph builders, which only sd cells' workers need
    from mschecker.sd.bundled import bundled_pipeline  # lazy: start-up (google.protobuf, onnx, mschecker.sd)
    from mschecker.sd.check import run_check
    from mschecker.sd.folder import SDPipeline

    if p.get("pipeline"):
        pipeline = SDPipeline.from_folder(p["pipeline"])
    else:  # what run_check builds when given none: built here for its stages' input names
        pipeline = bundled_pipeline(p.get("preset") or "small", p["weights_seed"], p["scheduler"] or "ddim")
    recorder = None
    if fingerprints:
        # lazy: start-up (google.protobuf, onnx, mschecker.sd)
        from mschecker.sd.folder import make_scheduler_for  # here: only sd cells load mschecker.sd

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
                      on_tensor=recorder, referee=referee_side(p), referee_k=p.get("referee_k"),
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


