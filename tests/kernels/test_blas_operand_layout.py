"""A BLAS-backed variant and its bit-for-bit definition hand np.matmul the same operand layouts.

OpenBLAS orders an sgemm's sums by the operands' layout on some CPU kernels (its SkylakeX kernel gave a
transposed (16, 151) x (151, 10) fp16 Gemm one other fp16 bit when the definition's operands were astype's
F-order copies and the variant's C-order ones), so `mschecker kernels --examples 200` failed on correct code on
such machines. The two-sided check is only a function of the inputs when the layouts agree; this test records
what np.matmul receives on both sides, for transposed, large and small operands of MatMul, Gemm and attention.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.kernels.registry import get_kernel

RNG = np.random.default_rng(3)


def _spy(monkeypatch):
    seen = []
    real = np.matmul

    def matmul(a, b, *args, **kwargs):
        seen.append((a.dtype.str, a.shape, a.strides, b.dtype.str, b.shape, b.strides))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(np, "matmul", matmul)
    return seen


def _layouts(monkeypatch, fn, *args, **kwargs):
    seen = _spy(monkeypatch)
    fn(*args, **kwargs)
    monkeypatch.undo()
    return seen


GEMM_CASES = [  # (a shape as stored, b shape as stored, trans_a, trans_b): large (>= 2048 elements) and small
    ((151, 16), (10, 151), True, True), ((16, 151), (151, 10), False, False), ((300, 40), (300, 20), True, False),
    ((8, 12), (6, 12), False, True)]


@pytest.mark.parametrize("a_shape,b_shape,ta,tb", GEMM_CASES)
@pytest.mark.parametrize("variant", ["fp16_fp32acc", "fp32", "bf16_fp32acc"])
def test_gemm_definition_sees_the_variants_operand_layout(monkeypatch, a_shape, b_shape, ta, tb, variant):
    info = get_kernel("gemm")
    v = info.variant(variant)
    dt = np.dtype(v.dtype)
    a, b = RNG.standard_normal(a_shape).astype(dt), RNG.standard_normal(b_shape).astype(dt)
    c = RNG.standard_normal((a_shape[1] if ta else a_shape[0], b_shape[0] if tb else b_shape[1])).astype(dt)
    kw = dict(c=c, alpha=0.5, beta=-1.0, trans_a=ta, trans_b=tb)
    assert v.definition is not None
    assert _layouts(monkeypatch, v.fn, a, b, **kw) == _layouts(monkeypatch, v.definition, a, b, **kw)


@pytest.mark.parametrize("shapes", [((64, 48), (48, 40)), ((2, 40, 64), (64, 33))])
def test_matmul_definition_sees_the_variants_operand_layout(monkeypatch, shapes):
    info = get_kernel("matmul")
    v = info.variant("fp16_fp32acc")
    a = RNG.standard_normal(shapes[0][::-1]).astype(np.float16).T if len(shapes[0]) == 2 else \
        RNG.standard_normal(shapes[0]).astype(np.float16)
    b = RNG.standard_normal(shapes[1]).astype(np.float16)
    assert _layouts(monkeypatch, v.fn, a, b) == _layouts(monkeypatch, v.definition, a, b)


def test_attention_definition_sees_the_variants_operand_layout(monkeypatch):
    info = get_kernel("attention")
    v = info.variant("fp32_upcast")
    q, k, w = (RNG.standard_normal((2, 3, 40, 64)).astype(np.float16) for _ in range(3))
    assert _layouts(monkeypatch, v.fn, q, k, w) == _layouts(monkeypatch, v.definition, q, k, w)
