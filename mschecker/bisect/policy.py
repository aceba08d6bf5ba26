"""The NPU policies bisection runs: the profile's own, plus a record of what saturation mode clamps away.

Saturation-mode parts (the 310P preset: +-inf -> +-max, NaN -> 0 after every node) leave no inf or NaN in any
tensor, so an overflow looks like a finite, wrong value. RecordingNpuPolicy computes exactly what NpuPolicy does
(same kernels, same bits: it rounds, then saturates through the same functions) and counts, per node, the
non-finite elements the clamp removed, so the bisection reports them as overflow.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from mschecker.graph.policy import NodeContext, saturate
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import NumericsProfile


class RecordingNpuPolicy(NpuPolicy):
    """NpuPolicy that counts, per node name, the inf/NaN elements its saturation clamped (hidden overflow)."""

    def __init__(self, profile: NumericsProfile | str):
        super().__init__(profile)
        self.hidden: Counter[str] = Counter()       # node name -> inf/NaN elements clamped
        self.hidden_nan: Counter[str] = Counter()   # node name -> NaN elements among them (clamped to 0)
        self._unclamped: dict[int, NodeContext] = {}

    def finish(self, ctx: NodeContext, value, keep_dtype: bool = False):
        if not ctx.saturate or not isinstance(value, np.ndarray):
            return super().finish(ctx, value, keep_dtype)
        plain = self._unclamped.get(id(ctx))
        if plain is None:
            plain = self._unclamped[id(ctx)] = dataclasses.replace(ctx, saturate=False)
        value = super().finish(plain, value, keep_dtype)
        if value.dtype.kind in "fV" and value.dtype != np.bool_:
            x = value.astype(np.float32, copy=False)
            bad = int(value.size - np.isfinite(x).sum())
            if bad:
                self.hidden[ctx.node.name] += bad
                self.hidden_nan[ctx.node.name] += int(np.isnan(x).sum())
                value = saturate(value)
        return value

    def take_hidden(self, node_name: str) -> tuple[int, int]:
        """(clamped inf/NaN, of which NaN) recorded for a node since the last call (and forget them)."""
        return self.hidden.pop(node_name, 0), self.hidden_nan.pop(node_name, 0)


def npu_policy(profile: NumericsProfile) -> NpuPolicy:
    """The policy an NPU run under `profile` uses here: recording the clamps in saturation mode."""
    return RecordingNpuPolicy(profile) if profile.overflow_mode == "saturation" else NpuPolicy(profile)
