"""A Stable Diffusion pipeline as one object: the three stage graphs, the tokenizer, the scheduler config, and
what the graphs declare -- input/output names, dtypes, the timestep's dtype and rank, static or dynamic batch,
the latent size -- read from the models, not assumed.

Two sources, one path. ``SDPipeline.from_folder(DIR)`` reads the diffusers ONNX layout (what
``OnnxStableDiffusionPipeline.save_pretrained`` and ``optimum-cli export onnx`` write)::

    model_index.json
    text_encoder/model.onnx          unet/model.onnx (+ weights.pb / model.onnx_data: external weights)
    vae_decoder/model.onnx           tokenizer/vocab.json, merges.txt or tokenizer.json (+ tokenizer_config.json,
                                     special_tokens_map.json; any of them gzipped)
    scheduler/scheduler_config.json  (optional: <stage>/config.json, read for sizes the graphs leave dynamic)

``mschecker.sd.bundled.bundled_pipeline(preset)`` holds the same files in memory (``PipelineFiles``: graphs as ModelProtos, JSON
and text as bytes) and is parsed by the same code; ``save(DIR)`` writes them out, so the bundled check and
``--pipeline`` on a saved folder run the same stage graphs with the same feeds.

Every part that is missing, unreadable or inconsistent with another is an InputError naming its file: UNet
cross-attention width vs text encoder hidden size, UNet vs VAE latent channels, latent sizes, the text length vs
the tokenizer's ``model_max_length``, timestep rank > 1, inputs a SD 1.x/2.x UNet does not have (SDXL's
``text_embeds``), an unknown scheduler class.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx

from ..errors import InputError
from ..tensormeta import TensorMeta, tensor_meta

STAGES = ("text_encoder", "unet", "vae_decoder")
MODEL_FILES = {s: f"{s}/model.onnx" for s in STAGES}
TOKENIZER_REQUIRED = ("tokenizer/vocab.json", "tokenizer/merges.txt")
SCHEDULER_CONFIG = "scheduler/scheduler_config.json"
# the unet's inputs by role, as diffusers' ONNX export names them; other exports are matched by rank
UNET_ROLES = ("sample", "timestep", "encoder_hidden_states")
DEFAULT_SCALING_FACTOR = 0.18215   # SD 1.x / 2.x VAE (diffusers' OnnxStableDiffusionPipeline hard-codes it)
DEFAULT_LATENT_SIZE = 64           # diffusers' default height = width = 512 px, / 8
# The VAE decodes latents / scaling_factor. Published VAEs use 0.13025 (SDXL) to 1.5305 (SD3); the range allows
# two orders of magnitude around them and no more. Below 1e-3 the decoder's input leaves fp16 for ordinary
# latents (|x| ~ 30 after denoising becomes 3e4 at 1e-3, past 65504 soon below it; 1e-300 makes every latent
# inf even in float32); above 1e3 unit-variance latents shrink to ~1e-3 and below, toward fp16's subnormals
# (6.1e-5), where the decoder's input keeps few significant bits. Outside it the run measures the factor, not
# the pipeline.
SCALING_FACTOR_RANGE = (1e-3, 1e3)


@dataclass
class SDModels:
    """The three stage graphs (ModelProtos or paths)."""

    text_encoder: object
    unet: object
    vae_decoder: object

    @classmethod
    def build(cls, preset, seed: int = 0) -> "SDModels":
        """The bundled graphs of ``preset`` (mschecker.sd.presets), weights from ``seed``."""
        from .clip import build_text_encoder
        from .presets import get_preset
        from .unet import build_unet
        from .vae import build_vae_decoder

        p = get_preset(preset)
        return cls(build_text_encoder(p, seed), build_unet(p, seed), build_vae_decoder(p, seed))


class PipelineFiles:
    """The files of a pipeline folder, on disk (``root``) or in memory (``entries``: relative name -> bytes
    or onnx.ModelProto). One reader for both, so the bundled graphs go through the folder's code path."""

    def __init__(self, root: Path | None = None, entries: Mapping[str, object] | None = None, label: str = ""):
        self.root = Path(root) if root is not None else None
        self.entries = dict(entries or {})
        self.label = label or (str(self.root) if self.root is not None else "bundled pipeline")

    def where(self, name: str) -> str:
        """How an error names the file ``name``."""
        return str(self.root / name) if self.root is not None else f"{self.label}: {name}"

    def exists(self, name: str) -> bool:
        return name in self.entries if self.root is None else (self.root / name).is_file()

    def require(self, name: str, gzip_ok: bool = False) -> None:
        if not self.exists(name) and not (gzip_ok and self.exists(name + ".gz")):
            raise InputError(f"{self.where(name)}: missing (a diffusers ONNX pipeline folder needs it)")

    def read_bytes(self, name: str) -> bytes:
        self.require(name)
        if self.root is None:
            return self.entries[name]
        try:
            return (self.root / name).read_bytes()
        except OSError as exc:
            raise InputError(f"{self.where(name)}: cannot read ({exc.strerror or exc})") from None

    def read_json(self, name: str, optional: bool = False) -> dict:
        if optional and not self.exists(name):
            return {}
        from ..schema import parse_json  # invalid JSON, and nesting past the parser's recursion limit: one line

        try:
            text = self.read_bytes(name).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{self.where(name)}: not valid JSON (not UTF-8: invalid byte at offset "
                             f"{exc.start})") from None
        doc = parse_json(text, self.where(name))
        if not isinstance(doc, dict):
            raise InputError(f"{self.where(name)}: expected a JSON object")
        return doc

    def model(self, name: str):
        """The graph for a runner: its path on disk (external data resolves next to it), or the ModelProto."""
        self.require(name)
        return str(self.root / name) if self.root is not None else self.entries[name]

    def model_header(self, name: str) -> onnx.ModelProto:
        """The model without its external weights (graph_header's model: opsets and inline constants kept)."""
        from ..graph.loader import read_model_proto

        model = self.model(name)
        return model if isinstance(model, onnx.ModelProto) else read_model_proto(model)

    def graph_header(self, name: str) -> onnx.GraphProto:
        """The graph without its weights (cheap even for a 3.4 GB external-data UNet), every external-data file
        it names checked to exist inside the folder (mschecker.graph.loader.read_model_proto), so a missing
        weights.pb is reported before any stage runs."""
        return self.model_header(name).graph


@dataclass(frozen=True)
class StageSpec:
    """One stage as its graph declares it: its inputs by role, the output the pipeline reads, and the file."""

    stage: str
    file: str
    inputs: dict[str, TensorMeta]
    output: str

    def batch(self, role: str) -> int | None:
        """The static batch (leading dim) of an input, None when dynamic."""
        shape = self.inputs[role].shape
        return shape[0] if shape and isinstance(shape[0], int) else None


@dataclass
class SDPipeline:
    """Everything a run needs; build with ``from_folder`` or ``bundled``."""

    name: str
    files: PipelineFiles
    stages: dict[str, StageSpec]
    tokenizer: object                    # callable(text) -> (text_length,) int64 ids
    scheduler_config: dict
    scaling_factor: float
    latent_shape: tuple[int, int, int]   # (channels, h, w)
    text_length: int
    preset: object | None = None         # the SDPreset of a bundled pipeline

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def from_folder(cls, directory: str | Path) -> "SDPipeline":
        d = Path(directory)
        if not d.is_dir():
            raise InputError(f"--pipeline {d}: not a folder")
        return cls.from_files(PipelineFiles(root=d), name=d.name or str(d))

    @classmethod
    def from_files(cls, files: PipelineFiles, name: str) -> "SDPipeline":
        files.read_json("model_index.json")
        for part in (*MODEL_FILES.values(), SCHEDULER_CONFIG):
            files.require(part)
        # the tokenizer reads vocab.json + merges.txt, or transformers 5's tokenizer.json alone, each maybe gzipped
        if not any(files.exists(f"tokenizer/tokenizer.json{gz}") for gz in ("", ".gz")):
            for part in TOKENIZER_REQUIRED:
                files.require(part, gzip_ok=True)
        stages = {s: _stage_spec(files, s) for s in STAGES}
        configs = {s: files.read_json(f"{s}/config.json", optional=True) for s in STAGES}
        latent_shape = _latent_shape(files, stages, configs)
        text_length = _check_widths(files, stages, configs)
        tok_config = files.read_json("tokenizer/tokenizer_config.json", optional=True)
        max_length = tok_config.get("model_max_length")
        if text_length is None:
            if not isinstance(max_length, int) or not 1 < max_length < 100000:
                raise InputError(f"{files.where('tokenizer/tokenizer_config.json')}: no usable model_max_length and "
                                 f"{files.where(MODEL_FILES['text_encoder'])} leaves the text length dynamic")
            text_length = max_length
        elif isinstance(max_length, int) and max_length != text_length and max_length < 100000:
            raise InputError(f"{files.where('tokenizer/tokenizer_config.json')}: model_max_length {max_length} but "
                             f"{files.where(MODEL_FILES['text_encoder'])} takes {text_length} tokens")
        scheduler_config = files.read_json(SCHEDULER_CONFIG)
        scaling = configs["vae_decoder"].get("scaling_factor", DEFAULT_SCALING_FACTOR)
        if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or not np.isfinite(scaling) \
                or scaling <= 0:
            raise InputError(f"{files.where('vae_decoder/config.json')}: scaling_factor {scaling!r} is not a positive "
                             "number")
        lo, hi = SCALING_FACTOR_RANGE
        if not lo <= scaling <= hi:
            raise InputError(f"{files.where('vae_decoder/config.json')}: scaling_factor {scaling!r} is outside "
                             f"[{lo:g}, {hi:g}] (published VAEs use 0.13 to 1.53; the decoder's input, latents / "
                             f"scaling_factor, would leave fp16's range)")
        pipe = cls(name, files, stages, _load_tokenizer(files, text_length), scheduler_config, float(scaling),
                   latent_shape, text_length)
        # an unknown scheduler class or option fails here, before any model runs (50: diffusers' default steps)
        make_scheduler_for(pipe, 50)
        return pipe

    # ------------------------------------------------------------------------------------------ parts
    def model(self, stage: str):
        """The stage's graph for make_runner: a path (folder) or a ModelProto (bundled)."""
        return self.files.model(MODEL_FILES[stage])

    @property
    def models(self) -> "SDModels":
        """The three graphs as an SDModels (what the fix search and the goldens take)."""
        return SDModels(*(self.model(s) for s in STAGES))

    # ------------------------------------------------------------------------------------------ stage inputs
    # The one place where stage feeds are built: names, dtypes and ranks from the graphs' declarations.
    def text_feeds(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        meta = self.stages["text_encoder"].inputs["input_ids"]
        return {meta.name: np.asarray(ids).astype(meta.dtype)}

    def unet_feeds(self, sample: np.ndarray, timestep, context: np.ndarray) -> dict[str, np.ndarray]:
        """``sample`` (B, C, h, w) and ``context`` (B, L, D) in the graph's float dtype; the timestep in its dtype
        and rank: 0-d, or 1-d of the declared length (B when dynamic: diffusers' exports broadcast either)."""
        spec = self.stages["unet"]
        s, t, c = (spec.inputs[r] for r in UNET_ROLES)
        batch = sample.shape[0]
        if len(t.shape) == 0:
            steps = np.array(timestep, dtype=t.dtype)
        else:
            n = t.shape[0] if isinstance(t.shape[0], int) else batch
            steps = np.full(n, timestep, dtype=t.dtype)
        return {s.name: np.asarray(sample).astype(s.dtype), t.name: steps, c.name: np.asarray(context).astype(c.dtype)}

    def vae_feeds(self, latents: np.ndarray) -> dict[str, np.ndarray]:
        meta = self.stages["vae_decoder"].inputs["latent_sample"]
        return {meta.name: (np.asarray(latents, np.float64) / self.scaling_factor).astype(meta.dtype)}

    def output(self, stage: str, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.asarray(outputs[self.stages[stage].output])

    def latent_dtype(self) -> np.dtype:
        """The dtype diffusers draws the initial latents in: the text embeddings' (the text encoder output)."""
        return self.stages["unet"].inputs["encoder_hidden_states"].dtype

    def initial_latents(self, rng: np.random.RandomState, init_noise_sigma: float) -> np.ndarray:
        """diffusers' ONNX pipeline: ``rng.randn(1, C, h, w)`` (rng = ``np.random.RandomState(seed)``) in the
        latents' dtype, times the scheduler's initial sigma (float64 here)."""
        draw = rng.randn(1, *self.latent_shape).astype(self.latent_dtype())
        return draw.astype(np.float64) * float(init_noise_sigma)

    def check_latents(self, latents: np.ndarray, where: str) -> np.ndarray:
        shape = (1, *self.latent_shape)
        arr = np.asarray(latents)
        if arr.shape != shape or arr.dtype.kind != "f":
            raise InputError(f"{where}: initial latents must be a float array of shape {shape}, got "
                             f"{arr.dtype}{arr.shape}")
        if not np.isfinite(arr.astype(np.float64)).all():
            raise InputError(f"{where}: initial latents hold NaN or inf")
        return arr.astype(np.float64)

    # ------------------------------------------------------------------------------------------ saving
    def save(self, directory: str | Path) -> Path:
        """Write the pipeline as a diffusers ONNX folder (see write_files)."""
        if self.files.root is not None:
            raise InputError(f"{self.files.root}: already a pipeline folder")
        return write_files(self.files, directory)


def write_files(files: PipelineFiles, directory: str | Path) -> Path:
    """Write in-memory pipeline files as a diffusers ONNX folder: graphs over 256 MB with their weights as external
    data in ``weights.pb`` (the name diffusers' OnnxRuntimeModel gives it). A graph entry may be a zero-argument
    builder, called when its turn comes and dropped after saving, so that only one stage's weights are in memory
    (the sd15 UNet alone is 3.4 GB). Written into a hidden sibling folder and renamed into place: an interrupted
    save leaves no half-written pipeline."""
    from ..fsio import make_directory, os_reason, remove_directories
    from .modelfile import save_model

    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"--save-pipeline {target}: exists and is not an empty folder")
    created = make_directory(target.parent)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        for name, entry in files.entries.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name in MODEL_FILES.values():
                model = entry() if callable(entry) else entry
                save_model(model, path, data_name="weights.pb")
                del model
            else:
                path.write_bytes(entry)
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    except OSError as exc:
        _remove_tree(tmp)
        remove_directories(created)
        raise InputError(f"--save-pipeline {target}: cannot write ({os_reason(exc)})") from None
    except BaseException:
        _remove_tree(tmp)
        remove_directories(created)
        raise
    return target


def _remove_tree(path: Path | None) -> None:
    import shutil

    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- graph roles
def _stage_spec(files: PipelineFiles, stage: str) -> StageSpec:
    name = MODEL_FILES[stage]
    where = files.where(name)
    graph = files.graph_header(name)
    inits = {t.name for t in graph.initializer}
    inputs = [tensor_meta(i) for i in graph.input if i.name not in inits]
    outputs = [tensor_meta(o) for o in graph.output]
    if not outputs:
        raise InputError(f"{where}: the graph has no outputs")
    if stage == "text_encoder":
        ints = [m for m in inputs if m.dtype.kind in "iu"]
        ids = next((m for m in inputs if m.name == "input_ids"), ints[0] if len(ints) == 1 else None)
        if ids is None or len(inputs) != 1:
            raise InputError(f"{where}: expected one integer input (input_ids), got "
                             f"{', '.join(m.describe() for m in inputs) or 'none'}")
        _check_rank(ids, 2, where)
        out = next((m for m in outputs if m.name == "last_hidden_state"), None) or \
            next((m for m in outputs if len(m.shape) == 3), None)
        if out is None or len(out.shape) != 3:
            raise InputError(f"{where}: no (batch, tokens, hidden) output such as last_hidden_state")
        return StageSpec(stage, where, {"input_ids": ids}, out.name)
    if stage == "unet":
        if len(outputs[0].shape) != 4:
            raise InputError(f"{where}: output {outputs[0].name!r} has rank {len(outputs[0].shape)}; a UNet predicts a "
                             "(batch, channels, h, w) sample")
        return StageSpec(stage, where, _unet_roles(inputs, where), outputs[0].name)
    latent = next((m for m in inputs if m.name == "latent_sample"), inputs[0] if len(inputs) == 1 else None)
    if latent is None or len(inputs) != 1:
        raise InputError(f"{where}: expected one input (latent_sample), got {', '.join(m.name for m in inputs)}")
    _check_rank(latent, 4, where)
    _check_float(latent, where)
    return StageSpec(stage, where, {"latent_sample": latent}, outputs[0].name)


def _unet_roles(inputs: list[TensorMeta], where: str) -> dict[str, TensorMeta]:
    by_name = {m.name: m for m in inputs}
    roles = {r: by_name[r] for r in UNET_ROLES if r in by_name}
    rank_of = {"sample": (4,), "timestep": (0, 1), "encoder_hidden_states": (3,)}
    for m in inputs:
        if m.name in roles.values() or any(m is v for v in roles.values()):
            continue
        role = next((r for r in UNET_ROLES if r not in roles and len(m.shape) in rank_of[r]), None)
        if role is None:
            raise InputError(f"{where}: input {m.name!r} ({m.describe()}) is not one of a SD 1.x/2.x UNet's "
                             f"inputs ({', '.join(UNET_ROLES)})")
        roles[role] = m
    missing = [r for r in UNET_ROLES if r not in roles]
    if missing:
        raise InputError(f"{where}: no input for {', '.join(missing)} (inputs: {', '.join(by_name)})")
    _check_rank(roles["sample"], 4, where)
    _check_rank(roles["encoder_hidden_states"], 3, where)
    t = roles["timestep"]
    if len(t.shape) > 1:
        raise InputError(f"{where}: timestep input {t.name!r} has rank {len(t.shape)}; a UNet takes a 0-d or 1-d "
                         "timestep")
    if t.dtype.kind not in "iuf":
        raise InputError(f"{where}: timestep input {t.name!r} has dtype {t.dtype}, expected an integer or float")
    _check_float(roles["sample"], where)
    _check_float(roles["encoder_hidden_states"], where)
    return roles


def _check_rank(meta: TensorMeta, rank: int, where: str) -> None:
    if len(meta.shape) != rank:
        raise InputError(f"{where}: input {meta.name!r} has rank {len(meta.shape)}, expected {rank}")


def _check_float(meta: TensorMeta, where: str) -> None:
    if meta.dtype.kind != "f":
        raise InputError(f"{where}: input {meta.name!r} has dtype {meta.dtype}, expected float16/float32")


def _static(dim) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _latent_shape(files: PipelineFiles, stages: dict[str, StageSpec], configs: dict) -> tuple[int, int, int]:
    """(C, h, w) from the UNet's sample (static dims), else the VAE's latent_sample, else unet/config.json."""
    sample = stages["unet"].inputs["sample"].shape
    latent = stages["vae_decoder"].inputs["latent_sample"].shape
    unet_file, vae_file = files.where(MODEL_FILES["unet"]), files.where(MODEL_FILES["vae_decoder"])
    dims = []
    for axis, what in ((1, "channels"), (2, "height"), (3, "width")):
        u, v = _static(sample[axis]), _static(latent[axis])
        if u is not None and v is not None and u != v:
            raise InputError(f"{vae_file}: latent_sample has {v} latent {what} but {unet_file}'s sample has {u}")
        dims.append(u if u is not None else v)
    cfg = configs["unet"]
    if dims[0] is None:
        dims[0] = cfg.get("in_channels") or configs["vae_decoder"].get("latent_channels") or 4
    for k in (1, 2):
        if dims[k] is None:
            size = cfg.get("sample_size", DEFAULT_LATENT_SIZE)
            size = size[k - 1] if isinstance(size, (list, tuple)) else size
            if not isinstance(size, int) or size <= 0:
                raise InputError(f"{files.where('unet/config.json')}: sample_size {size!r} is not a positive integer")
            dims[k] = size
    vae_ch = configs["vae_decoder"].get("latent_channels")
    if isinstance(vae_ch, int) and vae_ch != dims[0]:
        raise InputError(f"{files.where('vae_decoder/config.json')}: latent_channels {vae_ch} but {unet_file} "
                         f"takes {dims[0]} latent channels")
    return tuple(int(d) for d in dims)


def _check_widths(files: PipelineFiles, stages: dict[str, StageSpec], configs: dict) -> int | None:
    """UNet cross-attention width == text encoder hidden size (static dims, else config.json); returns the
    text length when the text encoder declares it."""
    te_graph = files.graph_header(MODEL_FILES["text_encoder"])
    out_meta = next(tensor_meta(o) for o in te_graph.output if o.name == stages["text_encoder"].output)
    hidden = _static(out_meta.shape[2]) or configs["text_encoder"].get("hidden_size")
    ehs = stages["unet"].inputs["encoder_hidden_states"].shape
    cross = _static(ehs[2]) or configs["unet"].get("cross_attention_dim")
    if hidden is not None and cross is not None and hidden != cross:
        raise InputError(f"{files.where(MODEL_FILES['unet'])}: cross-attention width {cross} (encoder_hidden_states) "
                         f"but {files.where(MODEL_FILES['text_encoder'])} outputs hidden size {hidden}")
    length = _static(stages["text_encoder"].inputs["input_ids"].shape[1])
    unet_length = _static(ehs[1])
    if length is not None and unet_length is not None and length != unet_length:
        raise InputError(f"{files.where(MODEL_FILES['unet'])}: encoder_hidden_states takes {unet_length} tokens but "
                         f"{files.where(MODEL_FILES['text_encoder'])} takes {length}")
    return length or unet_length


# ---------------------------------------------------------------------------------------------- tokenizer, scheduler
def _load_tokenizer(files: PipelineFiles, max_length: int):
    """CLIP's byte-level BPE from the folder's tokenizer/ (mschecker.sd.tokenizer.load_clip_tokenizer), padded
    and truncated to the text encoder's length. In-memory files are handed to it through a temporary folder
    (a few small text files), so the bundled tokenizer is read exactly as a saved folder's."""
    from .tokenizer import load_clip_tokenizer

    if files.root is not None:
        return load_clip_tokenizer(files.root / "tokenizer", max_length=max_length)
    with tempfile.TemporaryDirectory(prefix="mschecker-sd-tokenizer-") as tmp:
        for name in files.entries:
            if name.startswith("tokenizer/"):
                Path(tmp, Path(name).name).write_bytes(files.read_bytes(name))
        return load_clip_tokenizer(tmp, max_length=max_length)


def make_scheduler_for(pipe: SDPipeline, steps: int, override: str | None = None, noise_rng=None):
    """The scheduler of the folder's scheduler_config.json (mschecker.sd.scheduler.scheduler_from_config);
    ``override``, a --scheduler name, replaces the class and keeps the config values (diffusers' from_config).
    An unsupported class is an InputError naming the file and the supported classes."""
    from .scheduler import scheduler_from_config

    return scheduler_from_config(pipe.scheduler_config, steps, name=override,
                                 source=pipe.files.where(SCHEDULER_CONFIG), noise_rng=noise_rng)
