"""Input samples: one or several input sets for the same model, checked to have the same shapes.

A sample is one feed dict (graph input name -> array). Several samples make the bisection judge a fix on every
one of them (a fix found on one input and failing on another is no fix). Sources: each `--input` spec is one set
as `mschecker.tensors.sets.read_tensors` reads it (comma list, directory, .npz, Polygraphy JSON); a directory that
holds no tensor file but subdirectories is a folder of sets, one per subdirectory, in name order.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from mschecker.errors import InputError
from mschecker.tensors.sets import read_tensors


@dataclass(frozen=True)
class Sample:
    label: str                      # where it came from, for reports
    feeds: dict[str, np.ndarray]


def _expand(spec: str) -> list[str]:
    path = Path(spec)
    if path.is_dir() and not (path / "manifest.json").is_file():
        subdirs = sorted(p for p in path.iterdir() if p.is_dir())
        files = [p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")]
        if subdirs and not files:
            return [str(p) for p in subdirs]
    return [spec]


def read_samples(specs: Sequence[str], metas) -> list[Sample]:
    """Every input set named by `specs` (see the module docstring), keyed by the model's input names."""
    sets = [s for spec in specs for s in _expand(spec)]
    if not sets:
        raise InputError("--input: no input set given")
    samples = [Sample(s, read_tensors(s, metas, role="input")) for s in sets]
    check_same_shapes(samples)
    return samples


def check_same_shapes(samples: Sequence[Sample]) -> None:
    """All samples feed the same shapes and dtypes: the bisection compares one graph's tensors across samples,
    and a fix is judged per node over all of them. InputError names the sample and tensor that differ."""
    first = samples[0]
    for s in samples[1:]:
        for name, x in first.feeds.items():
            y = s.feeds.get(name)
            if y is None:
                raise InputError(f"input set {s.label}: has no tensor {name!r} (input set {first.label} has)")
            if np.shape(y) != np.shape(x) or np.asarray(y).dtype != np.asarray(x).dtype:
                raise InputError(f"input sets of different shapes: {name!r} is {np.shape(x)} {np.asarray(x).dtype} "
                                 f"in {first.label} but {np.shape(y)} {np.asarray(y).dtype} in {s.label}")
