"""A dynamic-shape buffer arena: one growing allocation reused for tensors whose shapes change per call.

Dynamic-shape models (SD at several resolutions, variable sequence lengths) would otherwise allocate a fresh
buffer per call. `BufferArena.request(shape, dtype)` returns an ndarray view into one backing buffer, growing it
geometrically (capacity at least doubles) only when a request does not fit, so N requests between sizes
min and max cost at most ceil(log2(max/min)) + 1 allocations (counted in `allocations`).

Semantics, documented because they are the hazards of arenas:
- A view is valid until the next request: the next request reuses (and may zero) the same bytes, and a growth
  replaces the buffer (old views then keep the old buffer alive but no longer alias the arena).
- No stale data: by default a request is zero-filled over its whole extent, so values from an earlier, larger
  request never leak into a smaller one. `zero=False` skips the fill for callers that overwrite every element
  (the contents are then unspecified).
- The view's data pointer is aligned to `alignment` bytes (default 64, a cache line / vector register width).
- Any rank (0-d included), any fixed-size dtype (bf16 and fp8 from ml_dtypes included), zero-size shapes.
"""
from __future__ import annotations

import math

import numpy as np


class BufferArena:
    def __init__(self, alignment: int = 64, initial_bytes: int = 0):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a positive power of two, got {alignment}")
        self.alignment = alignment
        self.allocations = 0
        self.capacity = 0
        self._raw = np.empty(0, dtype=np.uint8)
        self._offset = 0
        if initial_bytes:
            self._grow(initial_bytes)

    def _grow(self, nbytes: int) -> None:
        cap = max(nbytes, 2 * self.capacity)
        cap = -(-cap // self.alignment) * self.alignment
        raw = np.empty(cap + self.alignment, dtype=np.uint8)
        self._offset = (-raw.ctypes.data) % self.alignment
        self._raw, self.capacity = raw, cap
        self.allocations += 1

    def request(self, shape, dtype, *, zero: bool = True) -> np.ndarray:
        """A C-contiguous array of `shape` and `dtype` backed by the arena (valid until the next request)."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > self.capacity:
            self._grow(nbytes)
        raw = self._raw[self._offset: self._offset + nbytes]
        if zero:
            raw[...] = 0
        return raw.view(dtype).reshape(shape)

    @staticmethod
    def max_allocations(min_bytes: int, max_bytes: int) -> int:
        """The growth policy's bound for requests whose sizes lie in [min_bytes, max_bytes] (first one = min)."""
        return math.ceil(math.log2(max_bytes / min_bytes)) + 1 if max_bytes > min_bytes else 1
