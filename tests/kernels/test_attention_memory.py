"""The blocked (flash) attention kernel's peak extra memory is O(seq * d), the naive kernel's O(seq^2).

Measured with tracemalloc (numpy reports its buffers to it): the peak of allocations made during one call,
inputs excluded. Doubling seq must roughly double flash's peak (ratio < 2.6: the O(L d) terms, fp32 copies of
K and V and the output, dominate the fixed 64x64 tile) and quadruple the naive kernel's (ratio > 3: the fp32
and fp16 L x L score and probability matrices dominate). At seq 4096, d = 64 the flash peak must also be far
below one fp32 score matrix (4096^2 * 4 B = 64 MiB): under 1/8 of it.
"""
from __future__ import annotations

import tracemalloc

import numpy as np

from mschecker.optimized_kernels import attention as attn

D = 64


def peak_extra_bytes(fn, seq: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((1, seq, D)).astype(np.float16) for _ in range(3))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn(q, k, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (1, seq, D) and np.all(np.isfinite(out))
    return peak - base


def test_flash_peak_memory_is_linear_in_seq():
    flash = {seq: peak_extra_bytes(attn.attention_flash_fp16_fp32acc, seq) for seq in (1024, 2048, 4096)}
    naive = {seq: peak_extra_bytes(attn.attention_fp16_naive, seq) for seq in (1024, 2048)}
    report = ", ".join(f"flash {s}: {b / 2**20:.2f} MiB" for s, b in flash.items()) + ", " + \
        ", ".join(f"naive {s}: {b / 2**20:.2f} MiB" for s, b in naive.items())
    print(report)
    assert flash[2048] / flash[1024] < 2.6, report
    assert flash[4096] / flash[2048] < 2.6, report
    assert naive[2048] / naive[1024] > 3.0, report
    assert flash[4096] < 4096**2 * 4 / 8, report
    assert flash[2048] < naive[2048] / 4, report
