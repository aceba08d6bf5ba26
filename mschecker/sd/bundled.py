"""The bundled graphs as the files of a diffusers ONNX pipeline folder (in memory; SDPipeline.save writes them).

What goes in besides the three graphs (mschecker.sd.clip / unet / vae, synthetic weights):
- tokenizer/: a byte-level CLIP BPE vocabulary without merges -- the 256 byte symbols, the same with the
  ``</w>`` word end, ``<|startoftext|>`` and ``<|endoftext|>`` (514 ids, in the order transformers' CLIPTokenizer
  and the `tokenizers` BPE assign them), so every bundled text encoder (tiny: 1000 ids) can embed every id and
  transformers / diffusers load the folder as they load SD's. A prompt becomes one id per UTF-8 byte of each
  lowercased word (the last byte of a word with ``</w>``), framed by bos/eos and padded with eos to the text
  encoder's length, as CLIP pads for SD 1.x.
- scheduler/scheduler_config.json: SD 1.5's scheduler configuration (mschecker.sd.scheduler.SD15_CONFIG) with
  the class of the --scheduler name (DDIM by default: the bundled check's documented numbers are DDIM's).
- <stage>/config.json: the sizes the graphs leave dynamic (latent size, widths, VAE scaling factor).
"""
from __future__ import annotations

import json
from pathlib import Path

from mschecker.sd.folder import PipelineFiles, SDModels, SDPipeline, write_files
from mschecker.sd.presets import get_preset, is_xl_preset
from mschecker.sd.clip import build_text_encoder
from mschecker.sd.unet import build_unet
from mschecker.sd.vae import build_vae_decoder
from mschecker.errors import InputError

BOS, EOS = "<|startoftext|>", "<|endoftext|>"


def byte_level_vocab() -> dict[str, int]:
    """CLIP's vocabulary layout without merges: byte symbols, byte symbols + '</w>', bos, eos."""
    from tokenizers.pre_tokenizers import ByteLevel

    # GPT-2's byte -> symbol map lists the printable bytes as themselves, then the rest as chr(256 + n): in
    # CLIP's vocabulary order that is ascending code point
    symbols = sorted(ByteLevel.alphabet())
    tokens = symbols + [s + "</w>" for s in symbols] + [BOS, EOS]
    return {t: i for i, t in enumerate(tokens)}


def _json(doc) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


def bundled_files(preset="small", weights_seed: int = 0, scheduler: str = "ddim", models=None, *,
                  lazy: bool = False):
    """(PipelineFiles of the preset's pipeline folder, the SDPreset); ``models`` (an SDModels of ModelProtos)
    reuses graphs already built; ``lazy`` puts builders in place of the graphs (for writing the folder one stage
    at a time: mschecker.sd.folder.write_files)."""
    from mschecker.sd.scheduler import SCHEDULERS, SD15_CONFIG  # lazy: start-up (mschecker.sd.scheduler)

    p = get_preset(preset)
    if scheduler not in SCHEDULERS:
        raise InputError(f"unknown scheduler {scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
    if is_xl_preset(p):
        return _xl_files(p, weights_seed, scheduler, models, lazy), p
    scheduler_config = {**SD15_CONFIG, "_class_name": SCHEDULERS[scheduler].__name__}
    if lazy:
        from functools import partial

        models = SDModels(*(partial(build, p, weights_seed) for build in (build_text_encoder, build_unet,
                                                                            build_vae_decoder)))
    models = models or SDModels.build(p, weights_seed)
    index = {"_class_name": "OnnxStableDiffusionPipeline", "_diffusers_version": "0.42.1",
             "feature_extractor": [None, None], "requires_safety_checker": False, "safety_checker": [None, None],
             "scheduler": ["diffusers", scheduler_config["_class_name"]],
             "text_encoder": ["diffusers", "OnnxRuntimeModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
             "unet": ["diffusers", "OnnxRuntimeModel"], "vae_decoder": ["diffusers", "OnnxRuntimeModel"],
             "vae_encoder": [None, None]}
    entries = {
        "model_index.json": _json(index),
        "text_encoder/model.onnx": models.text_encoder,
        "text_encoder/config.json": _json({"hidden_size": p.clip.width, "max_position_embeddings": p.clip.max_length,
                                           "vocab_size": p.clip.vocab_size}),
        "unet/model.onnx": models.unet,
        "unet/config.json": _json({"sample_size": p.unet.latent_size, "in_channels": p.unet.in_channels,
                                   "out_channels": p.unet.out_channels, "cross_attention_dim": p.unet.cross_dim}),
        "vae_decoder/model.onnx": models.vae_decoder,
        "vae_decoder/config.json": _json({"latent_channels": p.vae.latent_channels,
                                          "scaling_factor": p.scaling_factor,
                                          "block_out_channels": list(p.vae.channels)}),
        **_tokenizer_entries("tokenizer", p.clip.max_length, EOS),
        "scheduler/scheduler_config.json": _json(scheduler_config),
    }
    return PipelineFiles(entries=entries, label=f"bundled {p.name} pipeline"), p


def _tokenizer_entries(folder: str, max_length: int, pad: str) -> dict[str, bytes]:
    specials = {"bos_token": BOS, "eos_token": EOS, "pad_token": pad, "unk_token": EOS}
    return {f"{folder}/vocab.json": _json(byte_level_vocab()), f"{folder}/merges.txt": b"#version: 0.2\n",
            f"{folder}/tokenizer_config.json": _json({"model_max_length": max_length, "do_lower_case": True,
                                                       **specials, "tokenizer_class": "CLIPTokenizer"}),
            f"{folder}/special_tokens_map.json": _json(specials)}


def _xl_files(p, weights_seed: int, scheduler: str, models, lazy: bool) -> PipelineFiles:
    """The SDXL-like preset as optimum writes an SDXL folder: two text encoders and tokenizers (the second pads
    with "!", as SDXL's tokenizer_2 does), the text_time UNet, the VAE with SDXL's scaling factor and
    force_upcast, force_zeros_for_empty_prompt in model_index.json."""
    from mschecker.sd.scheduler import SCHEDULERS, SD15_CONFIG  # lazy: start-up (mschecker.sd.scheduler)
    from mschecker.sd.sdxl_graphs import build_sdxl_models

    if lazy:
        from functools import partial

        from mschecker.sd.sdxl_graphs import SDXL_BUILDERS  # lazy: start-up (mschecker.sd.sdxl_graphs)

        graphs = {stage: partial(build, p, weights_seed) for stage, build in SDXL_BUILDERS.items()}
    elif models is not None:
        graphs = {s: getattr(models, s) for s in ("text_encoder", "text_encoder_2", "unet", "vae_decoder")}
    else:
        graphs = build_sdxl_models(p, weights_seed)
    scheduler_config = {**SD15_CONFIG, "timestep_spacing": "leading", "interpolation_type": "linear",
                        "use_karras_sigmas": False, "_class_name": SCHEDULERS[scheduler].__name__}
    onnx_model = ["diffusers", "OnnxRuntimeModel"]
    index = {"_class_name": "ORTStableDiffusionXLPipeline", "_diffusers_version": "0.42.1",
             "force_zeros_for_empty_prompt": True, "scheduler": ["diffusers", scheduler_config["_class_name"]],
             "text_encoder": onnx_model, "text_encoder_2": onnx_model, "tokenizer": ["transformers", "CLIPTokenizer"],
             "tokenizer_2": ["transformers", "CLIPTokenizer"], "unet": onnx_model, "vae_decoder": onnx_model,
             "vae_encoder": [None, None]}
    u = p.unet
    entries = {
        "model_index.json": _json(index),
        **{f"{stage}/model.onnx": graph for stage, graph in graphs.items()},
        "text_encoder/config.json": _json({"hidden_size": p.clip.width, "max_position_embeddings": p.clip.max_length,
                                           "vocab_size": p.clip.vocab_size, "num_hidden_layers": p.clip.layers}),
        "text_encoder_2/config.json": _json({"hidden_size": p.clip2.width, "projection_dim": p.clip2.projection_dim,
                                             "max_position_embeddings": p.clip2.max_length,
                                             "vocab_size": p.clip2.vocab_size, "num_hidden_layers": p.clip2.layers}),
        "unet/config.json": _json({"sample_size": u.latent_size, "in_channels": u.in_channels,
                                   "out_channels": u.out_channels, "cross_attention_dim": u.cross_dim,
                                   "addition_embed_type": "text_time",
                                   "addition_time_embed_dim": u.addition_time_embed_dim,
                                   "projection_class_embeddings_input_dim": u.projection_class_embeddings_input_dim}),
        "vae_decoder/config.json": _json({"latent_channels": p.vae.latent_channels, "scaling_factor": p.scaling_factor,
                                          "block_out_channels": list(p.vae.channels), "force_upcast": True}),
        **_tokenizer_entries("tokenizer", p.clip.max_length, EOS),
        **_tokenizer_entries("tokenizer_2", p.clip2.max_length, "!"),
        "scheduler/scheduler_config.json": _json(scheduler_config),
    }
    return PipelineFiles(entries=entries, label=f"bundled {p.name} pipeline")


def save_bundled(preset, directory, scheduler: str = "ddim", weights_seed: int = 0, tokenizer=None):
    """Write the bundled ``preset`` as a diffusers ONNX folder, one stage's graph in memory at a time.
    ``tokenizer``: a tokenizer folder (e.g. SD's real CLIP vocabulary) to ship instead of the byte-level one;
    its ids must fit the preset's text encoder (small and sd15 have CLIP's 49408)."""
    from mschecker.sd.tokenizer import load_clip_tokenizer  # lazy: start-up (mschecker.sd.tokenizer)

    files, p = bundled_files(preset, weights_seed, scheduler, lazy=True)
    if tokenizer is not None:
        folder = Path(tokenizer)
        tok = load_clip_tokenizer(folder, max_length=p.clip.max_length)  # a broken folder fails here, named
        if tok.vocab_size > p.clip.vocab_size:
            raise InputError(f"--tokenizer {folder}: {tok.vocab_size} ids do not fit the {p.name} text encoder's "
                             f"{p.clip.vocab_size}")
        targets = ("tokenizer", "tokenizer_2") if is_xl_preset(p) else ("tokenizer",)
        files.entries = {k: v for k, v in files.entries.items() if k.split("/")[0] not in targets}
        for f in sorted(folder.iterdir()):
            if f.is_file():
                for target in targets:
                    files.entries[f"{target}/{f.name}"] = f.read_bytes()
    return write_files(files, directory)


def bundled_pipeline(preset="small", weights_seed: int = 0, scheduler: str = "ddim", models=None) -> SDPipeline:
    """The bundled graphs of ``preset`` as an in-memory pipeline folder, parsed as any folder is."""
    files, p = bundled_files(preset, weights_seed, scheduler, models)
    pipe = SDPipeline.from_files(files, name=p.name)
    pipe.preset = p
    return pipe

