"""Registry entry: qkv_projection (fused Q/K/V projection: one GEMM over [W_q | W_k | W_v], then split).

Contract per output (q, k, v): the GEMM bound of contracts.dot_bound with the bias folded into the dot product,
gamma_{D+1}(u_acc)(|x||W| + |b|) + u_storage|y| (the bias add is one more rounding in the fp32 epilogue).
tests/kernels/test_linalg_extra.py also holds the fused kernel to three separate GEMMs (matmul kernel).
Strategies: generic (batched x, equal widths as in self-attention, optional biases) and long_inner (D > 2048 with
positive values, where an fp16 accumulator would stall). The planted bug returns (q, v, k).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import blas_reference_bound, dot_bound
from mschecker.kernels.entries.matmul import with_underflow
from mschecker.dtypes import round_to
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import linalg as ref
from mschecker.optimized_kernels import qkv as opt


def _abs_terms(i: int):
    """|x||W_i| + |b_i| for output i (0 = q, 1 = k, 2 = v)."""
    def terms(case: Case):
        x, ws = case.inputs[0], case.inputs[1:4]
        t = np.abs(np.asarray(x, np.float64)) @ np.abs(np.asarray(ws[i], np.float64))
        bias = case.inputs[4 + i] if len(case.inputs) > 4 + i else None
        return t if bias is None else t + np.abs(np.asarray(bias, np.float64))
    return terms


def _inner(case: Case) -> int:
    return case.inputs[0].shape[-1] + 1


_PER_OUTPUT = [with_underflow(dot_bound(_abs_terms(i), _inner), _inner) for i in range(3)]


def _qkv_bound(case: Case, refs, variant):
    return tuple(c.bound(case, r, variant) for c, r in zip(_PER_OUTPUT, refs))


QKV_CONTRACT = Contract(_qkv_bound, "per output, the GEMM bound with the bias as one more term: "
                        "gamma_{D+1}(u_acc)(|x||W| + |b|) + u_storage|y| (Higham 3.5, exact fp16 products)")


def _exact(x):
    return round_to(x, "float16").astype(np.float64)


@st.composite
def _qkv_case(draw, kind: str):
    rng = np.random.default_rng(draw(S.seeds()))
    batch = draw(st.sampled_from([(), (3,), (2, 5)]))
    tokens = draw(st.integers(1, 20))
    width = draw(st.integers(1, 48))
    if kind == "generic":
        d = draw(st.integers(1, 128))
        sx = draw(st.sampled_from([1e-2, 1.0, 30.0]))
        x = rng.standard_normal(batch + (tokens, d)) * sx
        ws = [rng.standard_normal((d, width)) / np.sqrt(d) for _ in range(3)]
    else:  # long_inner
        d = draw(st.integers(2049, 3000))
        tokens, width = min(tokens, 3), min(width, 4)
        x = np.abs(1.0 + 0.1 * rng.standard_normal(batch + (tokens, d)))
        ws = [np.abs(1.0 + 0.1 * rng.standard_normal((d, width))) / 8.0 for _ in range(3)]
    inputs = [_exact(x)] + [_exact(w) for w in ws]
    if draw(st.booleans()):
        inputs += [_exact(rng.standard_normal(width)) for _ in range(3)]
    return Case(tuple(inputs), {}, label=f"{kind} x {inputs[0].shape} W ({d}, {width}) x3"
                                         f"{' + bias' if len(inputs) > 4 else ''}")


def _golden():
    rng = np.random.default_rng(20261133)
    d, width = 320, 64  # an SD 1.x attention block (320 channels) with a 64-wide slice of heads
    x = _exact(rng.standard_normal((2, 16, d)))
    ws = [_exact(rng.standard_normal((d, width)) / np.sqrt(d)) for _ in range(3)]
    bs = [_exact(0.1 * rng.standard_normal(width)) for _ in range(3)]
    return [Case((x, *ws), {}, "x (2,16,320), W 320x64 x3, no bias"),
            Case((x[0], *ws, *bs), {}, "x (16,320), W 320x64 x3, with biases")]


register_kernel(D.attach(KernelInfo(
    name="qkv_projection",
    family="linalg",
    reference=ref.qkv_projection,
    reference_bits_bound=blas_reference_bound(ref.qkv_projection),
    variants={
        "fp32": Variant("fp32", opt.qkv_projection_fp32, "float32", QKV_CONTRACT, doc="fused, fp32"),
        "fp16_fp32acc": Variant("fp16_fp32acc", opt.qkv_projection_fp16_fp32acc, "float16", QKV_CONTRACT,
                                doc="fused GEMM, fp16 in, fp32 accumulation and bias, fp16 out"),
        "bf16_fp32acc": Variant("bf16_fp32acc", opt.qkv_projection_bf16_fp32acc, "bfloat16", QKV_CONTRACT,
                                doc="fused GEMM, bf16 in, fp32 accumulation and bias, bf16 out"),
        "bug_swapped_split": Variant("bug_swapped_split", opt.qkv_projection_bug_swapped_split, "float16", None,
                                     planted_bug="split returns (q, v, k)", bug_of="fp16_fp32acc",
                                     catch_with="generic"),
    },
    strategies={"generic": lambda: _qkv_case("generic"), "long_inner": lambda: _qkv_case("long_inner")},
    golden_cases=_golden,
    doc="Fused self-attention input projection: (x W_q + b_q, x W_k + b_k, x W_v + b_v), W as (D, D_out).",
), {"fp32": D.qkv_projection("float32"), "fp16_fp32acc": D.qkv_projection("float16"),
    "bf16_fp32acc": D.qkv_projection(D.BF16)}, dict.fromkeys(("fp32", "fp16_fp32acc", "bf16_fp32acc"), D.BLAS_FP32)))
