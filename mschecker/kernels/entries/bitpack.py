"""Registry entry: bitpack4, the lossy round trip of a tensor through block-scaled 4-bit codes packed 8:1.

The truth is the tensor itself (reference.quant.roundtrip). Contract per element, with s_b the block's scale
(optimized_kernels/bitpack.py: sym s = max|x_b|/7, asym s = (max - min)/15) and m_b = max|x_b|:
    |x_hat - x| <= s_b / 2 + u16 (|x| + s_b / 2) + 8 u32 m_b + floor
s_b / 2: round to nearest code (no clipping: the extreme of the block maps to an end code exactly, up to fp32
rounding); u16 (|x| + s/2): the fp16 output rounding of x_hat; 8 u32 m_b: the fp32 divide, multiply and (asym)
offset add and the rounding of s itself, each at most u32 times a value <= 2 m_b.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import unit_roundoff
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import quant as ref
from mschecker.optimized_kernels import bitpack as opt


def _contract(mode: str) -> Contract:
    def bound(case: Case, y, variant: Variant):
        x = np.asarray(case.inputs[0], dtype=np.float64)
        block = case.params.get("block", 32)
        s, _ = opt.block_scales(x, block, mode)
        per_block = opt.blocks(np.abs(x), block)
        m = np.max(per_block, axis=1)
        n = x.size
        s_el = np.repeat(s.astype(np.float64), block)[:n].reshape(x.shape)
        m_el = np.repeat(m.astype(np.float64), block)[:n].reshape(x.shape)
        return (s_el / 2 + unit_roundoff(variant.dtype) * (np.abs(x) + s_el / 2)
                + 8 * unit_roundoff("float32") * m_el + subnormal_floor(variant))

    return Contract(bound, f"4-bit block quantization ({mode}): s_b/2 + u16(|x| + s_b/2) + 8 u32 max|x_b| per "
                    "element (round to nearest code; derivation in mschecker/kernels/entries/bitpack.py)")


@st.composite
def block_cases(draw, xs=None):
    shape = draw(S.shapes(min_dims=1, max_dims=3, max_side=20))
    x = draw(xs(shape) if xs else S.tensors(shape=shape, dtype="float16"))
    block = draw(st.sampled_from([8, 16, 32, 64]))
    return Case((x,), {"block": block}, label=f"shape {shape} block {block}")


def _golden_cases():
    rng = np.random.default_rng(20261130)
    return [Case(((rng.standard_normal((3, 50)) * 2).astype(np.float16).astype(np.float64),), {"block": 32},
                 "3x50 block 32 (odd tail)")]


SYM, ASYM = _contract("sym"), _contract("asym")

register_kernel(D.attach(KernelInfo(
    name="bitpack4",
    family="quant",
    defaults=("fp16_sym",),
    stores_outputs=True,  # int4_intermediates: what a consumer reads back from 4-bit storage
    reference=ref.roundtrip,
    variants={
        "fp16_sym": Variant("fp16_sym", opt.bitpack4_fp16_sym, "float16", SYM,
                            doc="codes -7..7 (+8), fp32 scale per block, 8 codes per uint32"),
        "fp16_asym": Variant("fp16_asym", opt.bitpack4_fp16_asym, "float16", ASYM,
                             doc="codes 0..15 from the block minimum, fp32 scale and offset per block"),
        "bug_nibble_order": Variant("bug_nibble_order", opt.bitpack4_bug_nibble_order, "float16", None,
                                    planted_bug="unpack reads nibbles high to low", bug_of="fp16_sym"),
    },
    strategies={
        "generic": lambda: block_cases(),
        "near_overflow": lambda: block_cases(lambda s: S.near_overflow(shape=s)),
        "cancellation": lambda: block_cases(lambda s: S.cancellation(shape=s)),
    },
    golden_cases=_golden_cases,
    doc="bitpack4(x, block=32): x through block-scaled 4-bit codes packed eight per uint32 word and back.",
), {"fp16_sym": D.bitpack4("sym"), "fp16_asym": D.bitpack4("asym")}))
