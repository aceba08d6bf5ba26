"""The data mschecker ships with itself, installed as the package data `mschecker.golden_data`.

- default/: the demo model, its msame-style inputs and onnxruntime goldens (`mschecker demo`);
- kernels/: float64-reference goldens of every registered kernel (`mschecker kernels`, tools/build_kernel_goldens.py);
- sd/tiny/: goldens of the bundled Stable Diffusion pipeline's tiny preset (tools/build_sd_goldens.py).

Code finds them through `path()`, i.e. importlib.resources, so they are found the same way from a source checkout
(an editable install maps this directory, the repository's golden/) and from an installed wheel.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def path(*parts: str) -> Path:
    """A file or directory of the bundled data on the file system (pip installs wheels unpacked)."""
    return Path(str(resources.files(__name__).joinpath(*parts)))
