"""What a device dump folder holds, whatever wrote it: dumped ops, each with its dumped inputs and outputs.

Readers (acl.py, msprobe.py, npyfiles.py) turn files into these records without reading tensor bytes; a tensor's
values are read (and converted from the kernel's layout) only when `DumpedTensor.load()` is called, one tensor at a
time, so a folder of any size is walked in bounded memory. A file or tensor that cannot be used is a `Skipped`
line, never an exception: a dump folder from a real device always holds things no comparison needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class DumpProblem(Exception):
    """A file or tensor of a dump that cannot be used; its message is one line naming what and why."""


@dataclass(frozen=True)
class TensorStats:
    """Per-tensor statistics as msprobe's statistics-mode dump.json records them (None: not recorded)."""

    max: float | None = None
    min: float | None = None
    mean: float | None = None
    norm: float | None = None   # L2 norm
    md5: str | None = None      # msprobe's "md5" summary: a CRC-32 of the bytes, not comparable across devices

    @classmethod
    def of(cls, x: np.ndarray) -> "TensorStats":
        """The same statistics computed here (float64), for comparing with a statistics-only dump."""
        a = np.asarray(x, dtype=np.float64)
        if a.size == 0:
            return cls()
        return cls(float(a.max()), float(a.min()), float(a.mean()), float(np.sqrt(np.sum(a * a))))


@dataclass
class DumpedTensor:
    """One input or output of a dumped op. `shape` is the host (ND) shape the values load as."""

    io: str                     # "input" | "output"
    index: int                  # position among the op's inputs / outputs
    dtype: str                  # numpy dtype name of the loaded values ("float16", "bfloat16", ...)
    shape: tuple[int, ...]
    source: str                 # the file (and place in it) it comes from, for messages
    origin: tuple[str, int] | None = None   # (original op name, output index) the dump itself records
    layout: str = "ND"          # the kernel's layout in the file (converted to ND on load)
    stats: TensorStats | None = None
    loader: Callable[[], np.ndarray] | None = None  # None: statistics only
    problem: str = ""           # why it cannot be loaded ("" when it can)

    @property
    def loadable(self) -> bool:
        return self.loader is not None and not self.problem

    def load(self) -> np.ndarray:
        """The values in host layout (DumpProblem when the tensor cannot be read)."""
        if self.problem:
            raise DumpProblem(f"{self.source}: {self.problem}")
        if self.loader is None:
            raise DumpProblem(f"{self.source}: statistics only, no tensor data")
        return self.loader()


@dataclass
class DumpedOp:
    """One op the device ran (a post-fusion device op for ACL dumps; an API or module call for msprobe)."""

    name: str
    op_type: str
    inputs: list[DumpedTensor] = field(default_factory=list)
    outputs: list[DumpedTensor] = field(default_factory=list)
    order: int = 0              # execution order as the dump tells it (timestamp, file order)
    source: str = ""


@dataclass
class Skipped:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class DumpScan:
    """A dump folder read: its kind(s), the dumped ops in execution order, and the files it could not use."""

    folder: str
    kinds: list[str] = field(default_factory=list)   # "acl", "msaccucmp-npy", "msprobe", "tensor-files"
    ops: list[DumpedOp] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def skip(self, path, reason: str) -> None:
        self.skipped.append(Skipped(str(path), reason))


@dataclass
class OpTensors:
    """What a writer puts in a dump for one op: its device name and type and its input / output values (host
    layout; None for an absent optional input)."""

    name: str
    op_type: str
    inputs: list[np.ndarray | None] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)
    origins: list[tuple[str, int] | None] = field(default_factory=list)  # per output: (ONNX node, output index)
    output_names: list[str] = field(default_factory=list)   # per output: the tensor's name in the graph run
