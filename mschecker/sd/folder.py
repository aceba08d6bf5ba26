"""A Stable Diffusion pipeline as one object: the stage graphs, the tokenizers, the scheduler config, and what the
graphs declare -- input/output names, dtypes, the timestep's dtype and rank, static or dynamic batch and size --
read from the models, not assumed.

Two sources, one path. ``SDPipeline.from_folder(DIR)`` reads the diffusers ONNX layout (what
``OnnxStableDiffusionPipeline.save_pretrained`` and ``optimum-cli export onnx`` write)::

    model_index.json
    text_encoder/model.onnx          unet/model.onnx (+ weights.pb / model.onnx_data: external weights)
    vae_decoder/model.onnx           tokenizer/vocab.json, merges.txt or tokenizer.json (+ tokenizer_config.json,
                                     special_tokens_map.json; any of them gzipped)
    scheduler/scheduler_config.json  (optional: <stage>/config.json, read for sizes the graphs leave dynamic)

and, for **SDXL** (optimum's ``ORTStableDiffusionXLPipeline`` folders), also ``text_encoder_2/model.onnx`` and
``tokenizer_2/``. A folder is SDXL when its model_index.json names an XL pipeline class or a ``text_encoder_2``,
or when the UNet takes SDXL's ``text_embeds`` / ``time_ids``; such a folder without ``text_encoder_2`` is an
error naming the file. SDXL's text encoders are read as diffusers' StableDiffusionXLPipeline.encode_prompt reads
them: the penultimate hidden state (``hidden_states.{N-1}`` of the N-layer export; diffusers'
``hidden_states[-2]``) of each, concatenated on the last axis, and the pooled ``text_embeds`` of the second.

``mschecker.sd.bundled.bundled_pipeline(preset)`` holds the same files in memory (``PipelineFiles``: graphs as
ModelProtos, JSON and text as bytes) and is parsed by the same code; ``save(DIR)`` writes them out, so the bundled
check and ``--pipeline`` on a saved folder run the same stage graphs with the same feeds.

Every part that is missing, unreadable or inconsistent with another is an InputError naming its file: UNet
cross-attention width vs the text encoders' hidden sizes, UNet vs VAE latent channels, latent sizes, the text
length vs the tokenizer's ``model_max_length``, timestep rank > 1, UNet inputs neither SD 1.x/2.x nor SDXL has,
an unknown scheduler class.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx

from mschecker.errors import InputError
from mschecker.tensors.meta import TensorMeta, tensor_meta
from mschecker.sd.clip import build_text_encoder
from mschecker.sd.presets import get_preset, is_xl_preset
from mschecker.sd.unet import build_unet
from mschecker.sd.vae import build_vae_decoder
from mschecker.sd.modelfile import save_model

STAGES = ("text_encoder", "unet", "vae_decoder")                       # SD 1.x / 2.x
XL_STAGES = ("text_encoder", "text_encoder_2", "unet", "vae_decoder")  # SDXL: every stage any pipeline has
TEXT_STAGES = {"text_encoder": "tokenizer", "text_encoder_2": "tokenizer_2"}  # text encoder -> its tokenizer
MODEL_FILES = {s: f"{s}/model.onnx" for s in XL_STAGES}
SCHEDULER_CONFIG = "scheduler/scheduler_config.json"
# the unet's inputs by role, as diffusers' ONNX export names them; other exports are matched by rank
UNET_ROLES = ("sample", "timestep", "encoder_hidden_states")
XL_UNET_ROLES = ("text_embeds", "time_ids")  # SDXL's added conditioning (UNet2DConditionModel "text_time")
DEFAULT_SCALING_FACTOR = 0.18215   # SD 1.x / 2.x VAE (diffusers' OnnxStableDiffusionPipeline hard-codes it)
DEFAULT_LATENT_SIZE = 64           # diffusers' default height = width = 512 px, / 8
DEFAULT_VAE_SCALE_FACTOR = 8       # diffusers' ONNX pipeline hard-codes 8; its torch pipelines read the VAE config
# Limits of one run, each read from a user. Images: 16384 px per side is 16x SDXL's 1024 (a 2048 x 2048 latent:
# 128 MB per float64 latent, many GB of UNet activations); past it the run measures the machine, not the model.
SIZE_MAX = 16384
NUM_IMAGES_MAX = 64   # images per prompt, and prompts per run: past 64 a check becomes a throughput test
PROMPTS_MAX = 64
FORCE_UPCAST = ("config", "on", "off")  # the VAE's force_upcast: as its config.json says, or overridden
# The VAE decodes latents / scaling_factor. Published VAEs use 0.13025 (SDXL) to 1.5305 (SD3); the range allows
# two orders of magnitude around them and no more. Below 1e-3 the decoder's input leaves fp16 for ordinary
# latents (|x| ~ 30 after denoising becomes 3e4 at 1e-3, past 65504 soon below it; 1e-300 makes every latent
# inf even in float32); above 1e3 unit-variance latents shrink to ~1e-3 and below, toward fp16's subnormals
# (6.1e-5), where the decoder's input keeps few significant bits. Outside it the run measures the factor, not
# the pipeline.
SCALING_FACTOR_RANGE = (1e-3, 1e3)


@dataclass
class SDModels:
    """The stage graphs (ModelProtos or paths); ``text_encoder_2`` for SDXL only."""

    text_encoder: object
    unet: object
    vae_decoder: object
    text_encoder_2: object = None   # SDXL

    @classmethod
    def build(cls, preset, seed: int = 0) -> "SDModels":
        """The bundled graphs of ``preset`` (mschecker.sd.presets), weights from ``seed``."""
        p = get_preset(preset)
        if is_xl_preset(p):
            from mschecker.sd.sdxl_graphs import build_sdxl_models  # lazy: start-up (mschecker.sd.sdxl_graphs)

            return cls(**build_sdxl_models(p, seed))
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

    def require(self, name: str, gzip_ok: bool = False, why: str = "a diffusers ONNX pipeline folder needs it") -> None:
        if not self.exists(name) and not (gzip_ok and self.exists(name + ".gz")):
            raise InputError(f"{self.where(name)}: missing ({why})")

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
        # lazy: start-up (mschecker.schema)
        from mschecker.schema import parse_json  # invalid JSON, and nesting past the parser's recursion limit: one line

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
        from mschecker.onnxfile import read_model_proto  # lazy: start-up (mschecker.fsio, mschecker.onnxfile)

        model = self.model(name)
        return model if isinstance(model, onnx.ModelProto) else read_model_proto(model)

    def graph_header(self, name: str) -> onnx.GraphProto:
        """The graph without its weights (cheap even for a 3.4 GB external-data UNet), every external-data file
        it names checked to exist inside the folder (mschecker.onnxfile.read_model_proto), so a missing
        weights.pb is reported before any stage runs."""
        return self.model_header(name).graph


@dataclass(frozen=True)
class StageSpec:
    """One stage as its graph declares it: its inputs by role, the output the pipeline reads (a text encoder's
    hidden states, the UNet's noise prediction, the decoded image), SDXL's pooled output, and the file."""

    stage: str
    file: str
    inputs: dict[str, TensorMeta]
    output: str
    pooled: str | None = None   # text_encoder_2 of SDXL: text_embeds
    outputs: dict = field(default_factory=dict, compare=False)   # every output's TensorMeta, by name

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
    latent_shape: tuple[int, int, int]   # (channels, h, w) by default (diffusers: the UNet config's sample_size)
    text_length: int
    preset: object | None = None         # the SDPreset of a bundled pipeline
    tokenizer_2: object | None = None    # SDXL's second tokenizer (tokenizer_2/)
    vae_scale_factor: int = DEFAULT_VAE_SCALE_FACTOR   # image px per latent px
    static_size: tuple[int | None, int | None] = (None, None)   # latent h, w the graphs fix (None: dynamic)
    force_zeros_for_empty_prompt: bool = False  # SDXL (model_index.json): no negative prompt -> zero embeddings
    force_upcast: bool = False           # SDXL's VAE config: diffusers decodes in float32 whatever the model dtype

    @property
    def xl(self) -> bool:
        """An SDXL pipeline: two text encoders, pooled embeddings and time ids into the UNet."""
        return "text_encoder_2" in self.stages

    @property
    def stage_names(self) -> tuple[str, ...]:
        """The stages this pipeline runs, in run order."""
        return XL_STAGES if self.xl else STAGES

    @property
    def text_stages(self) -> tuple[str, ...]:
        return tuple(s for s in self.stage_names if s in TEXT_STAGES)

    def tokenizer_of(self, stage: str):
        return self.tokenizer_2 if stage == "text_encoder_2" else self.tokenizer

    # ------------------------------------------------------------------------------------------ construction
    @classmethod
    def from_folder(cls, directory: str | Path) -> "SDPipeline":
        d = Path(directory)
        if not d.is_dir():
            raise InputError(f"--pipeline {d}: not a folder")
        return cls.from_files(PipelineFiles(root=d), name=d.name or str(d))

    @classmethod
    def from_files(cls, files: PipelineFiles, name: str) -> "SDPipeline":
        index = files.read_json("model_index.json")
        # the UNet's graph is read once (a model with inline weights is read whole): it tells SDXL and is its spec
        unet = files.graph_header(MODEL_FILES["unet"]) if files.exists(MODEL_FILES["unet"]) else None
        xl = _is_xl(files, index, unet)
        stage_names = XL_STAGES if xl else STAGES
        for stage in stage_names:
            files.require(MODEL_FILES[stage], why=_needs(xl))
        files.require(SCHEDULER_CONFIG)
        for folder in (TEXT_STAGES[s] for s in stage_names if s in TEXT_STAGES):
            _require_tokenizer(files, folder, xl)
        stages = {s: _stage_spec(files, s, xl, unet if s == "unet" else None) for s in stage_names}
        del unet
        configs = {s: files.read_json(f"{s}/config.json", optional=True) for s in stage_names}
        latent_shape, static = _latent_shape(files, stages, configs)
        text_length = _check_widths(files, stages, configs)
        text_length = _text_length(files, "tokenizer", text_length)
        scheduler_config = files.read_json(SCHEDULER_CONFIG)
        vae_config = configs["vae_decoder"]
        scaling = vae_config.get("scaling_factor", DEFAULT_SCALING_FACTOR)
        if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or not np.isfinite(scaling) \
                or scaling <= 0:
            raise InputError(f"{files.where('vae_decoder/config.json')}: scaling_factor {scaling!r} is not a positive "
                             "number")
        lo, hi = SCALING_FACTOR_RANGE
        if not lo <= scaling <= hi:
            raise InputError(f"{files.where('vae_decoder/config.json')}: scaling_factor {scaling!r} is outside "
                             f"[{lo:g}, {hi:g}] (published VAEs use 0.13 to 1.53; the decoder's input, latents / "
                             f"scaling_factor, would leave fp16's range)")
        tokenizer_2 = None
        if xl:
            _text_length(files, "tokenizer_2", text_length)
            tokenizer_2 = _load_tokenizer(files, text_length, "tokenizer_2")
        pipe = cls(name, files, stages, _load_tokenizer(files, text_length), scheduler_config, float(scaling),
                   latent_shape, text_length, tokenizer_2=tokenizer_2,
                   vae_scale_factor=_vae_scale_factor(files, vae_config), static_size=static,
                   force_zeros_for_empty_prompt=xl and _flag(files, index, "model_index.json",
                                                             "force_zeros_for_empty_prompt", True),
                   # diffusers' SD 1.x/2.x pipeline never reads force_upcast (AutoencoderKL's config defaults it to
                   # true, so SD exports carry it too); its SDXL pipeline does
                   force_upcast=xl and _flag(files, vae_config, "vae_decoder/config.json", "force_upcast", False))
        # an unknown scheduler class or option fails here, before any model runs (50: diffusers' default steps)
        make_scheduler_for(pipe, 50)
        return pipe

    # ------------------------------------------------------------------------------------------ sizes
    @property
    def default_size(self) -> tuple[int, int]:
        """(height, width) in pixels when none is given: diffusers' ``unet.config.sample_size * vae_scale_factor``
        (the graphs' static latent size where they fix one)."""
        return (self.latent_shape[1] * self.vae_scale_factor, self.latent_shape[2] * self.vae_scale_factor)

    def latent_size(self, height: int | None = None, width: int | None = None) -> tuple[int, int]:
        """(latent h, latent w) for an image of ``height`` x ``width`` px (None: the default), checked as
        diffusers checks them (multiples of the VAE's scale factor) and against sizes the graphs fix."""
        f = self.vae_scale_factor
        size = []
        for flag, value, default, fixed in (("--height", height, self.default_size[0], self.static_size[0]),
                                            ("--width", width, self.default_size[1], self.static_size[1])):
            value = default if value is None else value
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 < value <= SIZE_MAX:
                raise InputError(f"{flag} {value!r}: must be an integer in [{f}, {SIZE_MAX}] px")
            if value % f:
                raise InputError(f"{flag} {value}: must be a multiple of {f} (the VAE's scale factor: the image is "
                                 f"{f}x the latents)")
            if fixed is not None and value // f != fixed:
                raise InputError(f"{flag} {value}: {self.files.where(MODEL_FILES['unet'])} takes latents of "
                                 f"{fixed} px ({fixed * f} px images) on that side")
            size.append(int(value) // f)
        return size[0], size[1]

    # ------------------------------------------------------------------------------------------ parts
    def model(self, stage: str):
        """The stage's graph for make_runner: a path (folder) or a ModelProto (bundled)."""
        return self.files.model(MODEL_FILES[stage])

    @property
    def models(self) -> "SDModels":
        """The stage graphs as an SDModels (what the fix search and the goldens take)."""
        return SDModels(*(self.model(s) for s in STAGES),
                        text_encoder_2=self.model("text_encoder_2") if self.xl else None)

    # ------------------------------------------------------------------------------------------ stage inputs
    # The one place where stage feeds are built: names, dtypes and ranks from the graphs' declarations.
    def text_feeds(self, ids: np.ndarray, stage: str = "text_encoder") -> dict[str, np.ndarray]:
        meta = self.stages[stage].inputs["input_ids"]
        return {meta.name: np.asarray(ids).astype(meta.dtype)}

    def unet_feeds(self, sample: np.ndarray, timestep, context: np.ndarray, text_embeds: np.ndarray | None = None,
                   time_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """``sample`` (B, C, h, w) and ``context`` (B, L, D) in the graph's float dtype; the timestep in its dtype
        and rank: 0-d, or 1-d of the declared length (B when dynamic: diffusers' exports broadcast either);
        SDXL's ``text_embeds`` (B, P) and ``time_ids`` (B, 6) in theirs."""
        spec = self.stages["unet"]
        s, t, c = (spec.inputs[r] for r in UNET_ROLES)
        batch = sample.shape[0]
        if len(t.shape) == 0:
            steps = np.array(timestep, dtype=t.dtype)
        else:
            n = t.shape[0] if isinstance(t.shape[0], int) else batch
            steps = np.full(n, timestep, dtype=t.dtype)
        feeds = {s.name: np.asarray(sample).astype(s.dtype), t.name: steps,
                 c.name: np.asarray(context).astype(c.dtype)}
        for role, value in zip(XL_UNET_ROLES, (text_embeds, time_ids)):
            if role in spec.inputs:
                feeds[spec.inputs[role].name] = np.asarray(value).astype(spec.inputs[role].dtype)
        return feeds

    def vae_feeds(self, latents: np.ndarray) -> dict[str, np.ndarray]:
        meta = self.stages["vae_decoder"].inputs["latent_sample"]
        return {meta.name: (np.asarray(latents, np.float64) / self.scaling_factor).astype(meta.dtype)}

    def output(self, stage: str, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.asarray(outputs[self.stages[stage].output])

    def pooled(self, stage: str, outputs: Mapping[str, np.ndarray]) -> np.ndarray | None:
        """SDXL's pooled text embedding (text_encoder_2's text_embeds); None for a stage without one."""
        name = self.stages[stage].pooled
        return None if name is None else np.asarray(outputs[name])

    def latent_dtype(self) -> np.dtype:
        """The dtype diffusers draws the initial latents in: the text embeddings' (the text encoder output)."""
        return self.stages["unet"].inputs["encoder_hidden_states"].dtype

    def initial_latents(self, rng: np.random.RandomState, init_noise_sigma: float, batch: int = 1,
                        size: tuple[int, int] | None = None) -> np.ndarray:
        """diffusers' ONNX pipeline: ``rng.randn(batch, C, h, w)`` (rng = ``np.random.RandomState(seed)``) in the
        latents' dtype, times the scheduler's initial sigma (float64 here)."""
        h, w = size or self.latent_shape[1:]
        draw = rng.randn(batch, self.latent_shape[0], h, w).astype(self.latent_dtype())
        return draw.astype(np.float64) * float(init_noise_sigma)

    def check_latents(self, latents: np.ndarray, where: str, batch: int | None = None) -> np.ndarray:
        """Given initial latents as float64: (batch, C, h, w), finite; their h, w define the image size (checked
        against sizes the graphs fix); ``batch`` (prompts x images per prompt) when known."""
        arr = np.asarray(latents)
        c = self.latent_shape[0]
        if arr.ndim != 4 or arr.dtype.kind != "f" or arr.shape[1] != c or 0 in arr.shape:
            raise InputError(f"{where}: initial latents must be a float array of shape (batch, {c}, h, w), got "
                             f"{arr.dtype}{arr.shape}")
        if batch is not None and arr.shape[0] != batch:
            raise InputError(f"{where}: initial latents hold {arr.shape[0]} samples but the run makes {batch} images "
                             "(prompts x --num-images-per-prompt)")
        for axis, fixed in zip((2, 3), self.static_size):
            if fixed is not None and arr.shape[axis] != fixed:
                raise InputError(f"{where}: latents of shape {arr.shape} but {self.files.where(MODEL_FILES['unet'])} "
                                 f"takes {fixed} latent px on axis {axis}")
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
    from mschecker.fsio import make_directory, os_reason, remove_directories  # lazy: start-up (mschecker.fsio)
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
def _needs(xl: bool) -> str:
    return "an SDXL pipeline folder needs it" if xl else "a diffusers ONNX pipeline folder needs it"


def _is_xl(files: PipelineFiles, index: dict, unet: onnx.GraphProto | None) -> bool:
    """SDXL by what the folder says of itself (model_index.json: an XL class or a text_encoder_2 entry), else by
    its UNet taking SDXL's added conditioning -- so a folder that lost text_encoder_2/ is named, not misread."""
    cls = index.get("_class_name")
    if isinstance(cls, str) and "XL" in cls:
        return True
    entry = index.get("text_encoder_2")
    if isinstance(entry, list) and any(e is not None for e in entry):
        return True
    if files.exists(MODEL_FILES["text_encoder_2"]):
        return True
    return unet is not None and any(i.name in XL_UNET_ROLES for i in unet.input)


def _require_tokenizer(files: PipelineFiles, folder: str, xl: bool) -> None:
    """vocab.json + merges.txt, or transformers 5's tokenizer.json alone, each maybe gzipped."""
    if not any(files.exists(f"{folder}/tokenizer.json{gz}") for gz in ("", ".gz")):
        for part in ("vocab.json", "merges.txt"):
            files.require(f"{folder}/{part}", gzip_ok=True, why=_needs(xl))


def _flag(files: PipelineFiles, config: dict, name: str, key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise InputError(f"{files.where(name)}: {key} {value!r} is not true or false")
    return value


def _vae_scale_factor(files: PipelineFiles, config: dict) -> int:
    """diffusers' ``2 ** (len(vae.config.block_out_channels) - 1)``; 8 (SD's) when the config does not say."""
    blocks = config.get("block_out_channels")
    if blocks is None:
        return DEFAULT_VAE_SCALE_FACTOR
    if not isinstance(blocks, list) or not 1 <= len(blocks) <= 8:
        raise InputError(f"{files.where('vae_decoder/config.json')}: block_out_channels {blocks!r} is not a list of "
                         "1 to 8 levels")
    return 2 ** (len(blocks) - 1)


def _text_length(files: PipelineFiles, folder: str, declared: int | None) -> int:
    """The text encoders' input length: declared by the graphs, else the tokenizer's model_max_length; the two
    must agree."""
    name = f"{folder}/tokenizer_config.json"
    max_length = files.read_json(name, optional=True).get("model_max_length")
    if declared is None:
        if not isinstance(max_length, int) or not 1 < max_length < 100000:
            raise InputError(f"{files.where(name)}: no usable model_max_length and "
                             f"{files.where(MODEL_FILES['text_encoder'])} leaves the text length dynamic")
        return max_length
    if isinstance(max_length, int) and max_length != declared and max_length < 100000:
        raise InputError(f"{files.where(name)}: model_max_length {max_length} but "
                         f"{files.where(MODEL_FILES['text_encoder'])} takes {declared} tokens")
    return declared


_HIDDEN = re.compile(r"hidden_states\.(\d+)$")


def _stage_spec(files: PipelineFiles, stage: str, xl: bool = False, graph: onnx.GraphProto | None = None
                ) -> StageSpec:
    """The stage's spec from its graph (``graph``: already read; else read here)."""
    name = MODEL_FILES[stage]
    where = files.where(name)
    graph = graph if graph is not None else files.graph_header(name)
    inits = {t.name for t in graph.initializer}
    inputs = [tensor_meta(i) for i in graph.input if i.name not in inits]
    outputs = [tensor_meta(o) for o in graph.output]
    if not outputs:
        raise InputError(f"{where}: the graph has no outputs")
    if stage in TEXT_STAGES:
        ints = [m for m in inputs if m.dtype.kind in "iu"]
        ids = next((m for m in inputs if m.name == "input_ids"), ints[0] if len(ints) == 1 else None)
        if ids is None or len(inputs) != 1:
            raise InputError(f"{where}: expected one integer input (input_ids), got "
                             f"{', '.join(m.describe() for m in inputs) or 'none'}")
        _check_rank(ids, 2, where)
        if xl:
            return StageSpec(stage, where, {"input_ids": ids}, *_xl_text_outputs(stage, outputs, where),
                             outputs={m.name: m for m in outputs})
        out = next((m for m in outputs if m.name == "last_hidden_state"), None) or \
            next((m for m in outputs if len(m.shape) == 3), None)
        if out is None or len(out.shape) != 3:
            raise InputError(f"{where}: no (batch, tokens, hidden) output such as last_hidden_state")
        return StageSpec(stage, where, {"input_ids": ids}, out.name, outputs={m.name: m for m in outputs})
    if stage == "unet":
        if len(outputs[0].shape) != 4:
            raise InputError(f"{where}: output {outputs[0].name!r} has rank {len(outputs[0].shape)}; a UNet predicts a "
                             "(batch, channels, h, w) sample")
        return StageSpec(stage, where, _unet_roles(inputs, where, xl), outputs[0].name)
    latent = next((m for m in inputs if m.name == "latent_sample"), inputs[0] if len(inputs) == 1 else None)
    if latent is None or len(inputs) != 1:
        raise InputError(f"{where}: expected one input (latent_sample), got {', '.join(m.name for m in inputs)}")
    _check_rank(latent, 4, where)
    _check_float(latent, where)
    return StageSpec(stage, where, {"latent_sample": latent}, outputs[0].name)


def _xl_text_outputs(stage: str, outputs: list[TensorMeta], where: str) -> tuple[str, str | None]:
    """(penultimate hidden state, pooled) of an SDXL text encoder as optimum exports it (output_hidden_states:
    ``hidden_states.0`` the embeddings .. ``hidden_states.N`` the last layer; text_encoder_2's ``text_embeds``),
    read as diffusers' encode_prompt reads them: ``hidden_states[-2]`` and, of the second encoder, output 0."""
    hidden = {int(m.group(1)): o for o in outputs if (m := _HIDDEN.match(o.name))}
    if len(hidden) < 2 or max(hidden) - 1 not in hidden:
        raise InputError(f"{where}: no hidden_states.N outputs (an SDXL text encoder is read at its penultimate "
                         "layer, hidden_states[-2]: export it with output_hidden_states, as optimum does)")
    penultimate = hidden[max(hidden) - 1]
    if len(penultimate.shape) != 3:
        raise InputError(f"{where}: {penultimate.name} has rank {len(penultimate.shape)}, expected (batch, tokens, "
                         "hidden)")
    if stage != "text_encoder_2":
        return penultimate.name, None
    pooled = next((o for o in outputs if o.name == "text_embeds"), None)
    if pooled is None or len(pooled.shape) != 2:
        raise InputError(f"{where}: no (batch, projection) output text_embeds (SDXL's pooled text embedding comes "
                         "from CLIPTextModelWithProjection)")
    return penultimate.name, pooled.name


def _unet_roles(inputs: list[TensorMeta], where: str, xl: bool = False) -> dict[str, TensorMeta]:
    roles_wanted = UNET_ROLES + (XL_UNET_ROLES if xl else ())
    by_name = {m.name: m for m in inputs}
    roles = {r: by_name[r] for r in roles_wanted if r in by_name}
    rank_of = {"sample": (4,), "timestep": (0, 1), "encoder_hidden_states": (3,), "text_embeds": (2,),
               "time_ids": (2,)}
    for m in inputs:
        if m.name in roles.values() or any(m is v for v in roles.values()):
            continue
        role = next((r for r in roles_wanted if r not in roles and len(m.shape) in rank_of[r]), None)
        if role is None:
            kind = "an SDXL" if xl else "a SD 1.x/2.x"
            raise InputError(f"{where}: input {m.name!r} ({m.describe()}) is not one of {kind} UNet's "
                             f"inputs ({', '.join(roles_wanted)})")
        roles[role] = m
    missing = [r for r in roles_wanted if r not in roles]
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
    for role in ("sample", "encoder_hidden_states", *(XL_UNET_ROLES if xl else ())):
        _check_float(roles[role], where)
    if xl:
        _check_rank(roles["text_embeds"], 2, where)
        _check_rank(roles["time_ids"], 2, where)
        n = _static(roles["time_ids"].shape[1])
        if n is not None and n != 6:
            raise InputError(f"{where}: time_ids takes {n} values per sample; SDXL's are 6 (original size, crop "
                             "top-left, target size)")
    return roles


def _check_rank(meta: TensorMeta, rank: int, where: str) -> None:
    if len(meta.shape) != rank:
        raise InputError(f"{where}: input {meta.name!r} has rank {len(meta.shape)}, expected {rank}")


def _check_float(meta: TensorMeta, where: str) -> None:
    if meta.dtype.kind != "f":
        raise InputError(f"{where}: input {meta.name!r} has dtype {meta.dtype}, expected float16/float32")


def _static(dim) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _latent_shape(files: PipelineFiles, stages: dict[str, StageSpec], configs: dict):
    """((C, h, w), (h, w) fixed by the graphs or None): C, h, w from the UNet's sample (static dims), else the
    VAE's latent_sample, else unet/config.json (sample_size, diffusers' default size), else 64."""
    sample = stages["unet"].inputs["sample"].shape
    latent = stages["vae_decoder"].inputs["latent_sample"].shape
    unet_file, vae_file = files.where(MODEL_FILES["unet"]), files.where(MODEL_FILES["vae_decoder"])
    dims = []
    for axis, what in ((1, "channels"), (2, "height"), (3, "width")):
        u, v = _static(sample[axis]), _static(latent[axis])
        if u is not None and v is not None and u != v:
            raise InputError(f"{vae_file}: latent_sample has {v} latent {what} but {unet_file}'s sample has {u}")
        dims.append(u if u is not None else v)
    static = (dims[1], dims[2])
    cfg = configs["unet"]
    if dims[0] is None:
        dims[0] = cfg.get("in_channels") or configs["vae_decoder"].get("latent_channels") or 4
    for k in (1, 2):
        if dims[k] is None:
            size = cfg.get("sample_size", DEFAULT_LATENT_SIZE)
            size = size[k - 1] if isinstance(size, (list, tuple)) and len(size) == 2 else size
            if isinstance(size, bool) or not isinstance(size, int) or not 0 < size <= SIZE_MAX:
                raise InputError(f"{files.where('unet/config.json')}: sample_size {size!r} is not a positive integer")
            dims[k] = size
    vae_ch = configs["vae_decoder"].get("latent_channels")
    if isinstance(vae_ch, int) and vae_ch != dims[0]:
        raise InputError(f"{files.where('vae_decoder/config.json')}: latent_channels {vae_ch} but {unet_file} "
                         f"takes {dims[0]} latent channels")
    return tuple(int(d) for d in dims), static


def _hidden_size(stages: dict[str, StageSpec], configs: dict, stage: str) -> int | None:
    spec = stages[stage]
    return _static(spec.outputs[spec.output].shape[2]) or configs[stage].get("hidden_size")


def _check_widths(files: PipelineFiles, stages: dict[str, StageSpec], configs: dict) -> int | None:
    """UNet cross-attention width == the text encoders' hidden sizes (summed for SDXL's two; static dims, else
    config.json); SDXL's pooled width == the UNet's text_embeds; returns the text length when a graph declares
    it."""
    text = [s for s in stages if s in TEXT_STAGES]
    hidden = [_hidden_size(stages, configs, s) for s in text]
    total = None if None in hidden else sum(hidden)
    unet = stages["unet"]
    ehs = unet.inputs["encoder_hidden_states"].shape
    cross = _static(ehs[2]) or configs["unet"].get("cross_attention_dim")
    encoders = " + ".join(files.where(MODEL_FILES[s]) for s in text)
    if total is not None and cross is not None and total != cross:
        raise InputError(f"{files.where(MODEL_FILES['unet'])}: cross-attention width {cross} (encoder_hidden_states) "
                         f"but {encoders} output{'s' if len(text) == 1 else ''} hidden size "
                         f"{' + '.join(map(str, hidden))}")
    if "text_encoder_2" in stages:
        pooled = stages["text_encoder_2"].outputs[stages["text_encoder_2"].pooled]
        p, u = _static(pooled.shape[1]), _static(unet.inputs["text_embeds"].shape[1])
        if p is not None and u is not None and p != u:
            raise InputError(f"{files.where(MODEL_FILES['unet'])}: text_embeds takes {u} values but "
                             f"{files.where(MODEL_FILES['text_encoder_2'])}'s {pooled.name} has {p}")
    lengths = {s: _static(stages[s].inputs["input_ids"].shape[1]) for s in text}
    unet_length = _static(ehs[1])
    for s, length in lengths.items():
        for other, n in (*lengths.items(), ("unet", unet_length)):
            if length is not None and n is not None and length != n:
                raise InputError(f"{files.where(MODEL_FILES[other])}: takes {n} tokens but "
                                 f"{files.where(MODEL_FILES[s])} takes {length}")
    return next((n for n in (*lengths.values(), unet_length) if n is not None), None)


# ---------------------------------------------------------------------------------------------- tokenizer, scheduler
def _load_tokenizer(files: PipelineFiles, max_length: int, folder: str = "tokenizer"):
    """CLIP's byte-level BPE from the folder's tokenizer/ (or SDXL's tokenizer_2/;
    mschecker.sd.tokenizer.load_clip_tokenizer), padded and truncated to the text encoder's length. In-memory
    files are handed to it through a temporary folder (a few small text files), so the bundled tokenizer is read
    exactly as a saved folder's."""
    from mschecker.sd.tokenizer import load_clip_tokenizer  # lazy: start-up (mschecker.sd.tokenizer)

    if files.root is not None:
        return load_clip_tokenizer(files.root / folder, max_length=max_length)
    with tempfile.TemporaryDirectory(prefix="mschecker-sd-tokenizer-") as tmp:
        for name in files.entries:
            if name.startswith(f"{folder}/"):
                Path(tmp, Path(name).name).write_bytes(files.read_bytes(name))
        return load_clip_tokenizer(tmp, max_length=max_length)


def make_scheduler_for(pipe: SDPipeline, steps: int, override: str | None = None, noise_rng=None,
                       eta: float = 0.0):
    """The scheduler of the folder's scheduler_config.json (mschecker.sd.scheduler.scheduler_from_config);
    ``override``, a --scheduler name, replaces the class and keeps the config values (diffusers' from_config).
    An unsupported class is an InputError naming the file and the supported classes."""
    from mschecker.sd.scheduler import scheduler_from_config  # lazy: start-up (mschecker.sd.scheduler)

    return scheduler_from_config(pipe.scheduler_config, steps, name=override,
                                 source=pipe.files.where(SCHEDULER_CONFIG), noise_rng=noise_rng, eta=eta)
