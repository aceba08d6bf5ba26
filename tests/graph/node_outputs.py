"""Helpers of the executor's bit-identity tests: every node output of a run, as bytes, and which ones differ."""
from __future__ import annotations

from mschecker.graph import Executor


def every_output(ex: Executor, feeds) -> dict[str, bytes]:
    """Every tensor a run produces, by name: dtype, shape and raw bytes (so -0/+0 and NaN payloads count)."""
    out = {}
    ex.run(feeds, capture=lambda node, name, v: out.__setitem__(name, f"{v.dtype}{v.shape}".encode() + v.tobytes()))
    return out


def differing(a: dict, b: dict) -> list[str]:
    """Names whose bytes differ between two every_output results of the same graph."""
    assert a.keys() == b.keys()
    return [k for k in a if a[k] != b[k]]
