"""Save/load the bundled SD graphs; ``generate_models`` writes one preset's three stages to a directory.

Graphs whose weights pass ``EXTERNAL_THRESHOLD`` bytes (always the sd15 preset; protobuf cannot serialise more
than 2 GB in one message) are saved with their weights as ONNX external data in ``<name>.onnx.data`` next to
the graph. sd15 is generated on demand (``generate_models("sd15", dir)``), never committed.
"""
from __future__ import annotations

import os
from pathlib import Path

import onnx

from ..errors import InputError
from .clip import build_text_encoder
from .presets import SDPreset, get_preset
from .unet import build_unet
from .vae import build_vae_decoder

EXTERNAL_THRESHOLD = 256 * 1024 * 1024
STAGE_BUILDERS = {"text_encoder": build_text_encoder, "unet": build_unet, "vae_decoder": build_vae_decoder}


def save_model(model: onnx.ModelProto, path: str | Path, *, external_data: bool | None = None) -> Path:
    """Write ``model`` to ``path`` (external data automatically above EXTERNAL_THRESHOLD bytes).

    With external data, onnx moves the weights out of ``model`` in place (so a multi-GB model is never copied).
    Small models are written atomically (temp file + os.replace).
    """
    path = Path(path)
    if external_data is None:
        external_data = model.ByteSize() > EXTERNAL_THRESHOLD if _fits_protobuf(model) else True
    if external_data:
        location = path.name + ".data"
        if (path.parent / location).exists():
            os.remove(path.parent / location)  # onnx appends to an existing data file
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=location, size_threshold=1024)
    else:
        tmp = path.with_name(path.name + ".tmp")
        onnx.save_model(model, str(tmp))
        os.replace(tmp, path)
    return path


def _fits_protobuf(model: onnx.ModelProto) -> bool:
    total = sum(len(t.raw_data) for t in model.graph.initializer)
    return total < 2**31 - 2**26


def load_model(path: str | Path) -> onnx.ModelProto:
    """Load a graph (and its external data, resolved next to it); InputError if missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: SD graph file not found")
    try:
        return onnx.load(str(path), load_external_data=True)
    except Exception as exc:  # onnx raises DecodeError, ValueError, OSError depending on the damage
        raise InputError(f"{path}: cannot load ONNX graph ({type(exc).__name__}: {exc})") from None


def generate_models(preset: str | SDPreset, directory: str | Path, seed: int = 0) -> dict[str, Path]:
    """Build and save the three stages of ``preset`` as ``<directory>/<stage>.onnx``; returns their paths.

    Stages are built one at a time so that at most one stage's weights are in memory (sd15 UNet: ~3.4 GB).
    """
    p = get_preset(preset)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for stage, build in STAGE_BUILDERS.items():
        model = build(p, seed)
        paths[stage] = save_model(model, directory / f"{stage}.onnx")
        del model
    return paths
