"""Which produced tensors reach the capture callback: a node window and/or a name pattern.

Capture is how comparisons stream: the executor hands each produced tensor to a callback and forgets it as soon
as no later node needs it, so a caller that keeps nothing keeps memory at the live set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx

# callback(node, output_name, value)
CaptureFn = Callable[[onnx.NodeProto, str, np.ndarray], None]


@dataclass(frozen=True)
class CaptureFilter:
    """start/stop: node index (0-based, in execution order) or node name, both inclusive; pattern: a regex
    searched in the output tensor name or the node name. Unset parts match everything."""

    start: int | str | None = None
    stop: int | str | None = None
    pattern: str | None = None

    def resolve(self, node_names: list[str]) -> tuple[int, int, re.Pattern | None]:
        """(first index, last index, compiled pattern) for a plan's node order; ValueError for unknown names."""
        def index(v, default):
            if v is None:
                return default
            if isinstance(v, int):
                return v
            try:
                return node_names.index(v)
            except ValueError:
                raise ValueError(f"capture window names node {v!r}, which is not in the graph") from None

        rx = re.compile(self.pattern) if self.pattern else None
        return index(self.start, 0), index(self.stop, len(node_names) - 1), rx
