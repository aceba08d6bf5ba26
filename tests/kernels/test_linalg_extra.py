"""Family-specific checks for matmul/gemm, the fused QKV projection and attention (beyond test_contracts.py).

Each test states a numerical fact the contracts rest on, or a finding the registry documents.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.kernels.check import check_case, run_reference
from tests.kernels.contract_asserts import assert_meets_contract
from mschecker.kernels.registry import Case, get_kernel
from mschecker.optimized_kernels import attention as attn
from mschecker.optimized_kernels import matmul as mm
from mschecker.optimized_kernels import qkv
from mschecker.reference import attention as ref_attn


def _f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16)


# ------------------------------------------------------------------------------------------------ matmul
def test_fp16_accumulation_stalls_at_2048():
    """docs/NUMERICS.md §2.1: a sequential fp16 sum of ones stops at 2048; fp32 accumulation does not."""
    a, b = np.ones((1, 4096), np.float16), np.ones((4096, 1), np.float16)
    assert mm.matmul_fp16_fp16acc(a, b)[0, 0] == 2048
    assert mm.matmul_fp16_fp32acc(a, b)[0, 0] == 4096
    assert mm.matmul_fp16_fp32acc_kblocked(a, b, kb=100)[0, 0] == 4096


def test_fp16_accumulation_overflows_in_partial_sums():
    """Finding: an fp16 running sum overflows to inf while the exact result (0) is tiny. Higham's bound presumes
    no overflow, which is why the cancellation strategy keeps partial sums under 65504."""
    a = np.full((1, 64), -4096.0)
    b = np.concatenate([np.ones(32), -np.ones(32)])[:, None]  # partial sums reach 32 * 4096 = 131072
    assert np.isinf(mm.matmul_fp16_fp16acc(_f16(a), _f16(b))[0, 0])
    assert mm.matmul_fp16_fp32acc(_f16(a), _f16(b))[0, 0] == 0


@pytest.mark.parametrize("kb", [1, 7, 64, 10_000])
def test_kblocked_meets_contract_for_any_block(kb):
    info = get_kernel("matmul")
    v = info.variant("fp16_fp32acc_kblocked")
    rng = np.random.default_rng(kb)
    case = Case((_f16(rng.standard_normal((3, 9, 300))).astype(np.float64),
                 _f16(rng.standard_normal((300, 5))).astype(np.float64)), {}, f"kb={kb}")
    blocked = type(v)(v.name, lambda a, b: mm.matmul_fp16_fp32acc_kblocked(a, b, kb=kb), v.dtype, v.contract)
    assert_meets_contract(info, blocked, case)


def test_bf16_inputs_stay_bf16():
    x = np.ones((2, 3), dtype=mm.BF16)
    assert mm.matmul_bf16_fp32acc(x, x.T).dtype == mm.BF16
    assert mm.gemm_bf16_fp32acc(x, x, trans_b=True).dtype == mm.BF16


# ---------------------------------------------------------------------------------------------------- qkv
@pytest.mark.parametrize("tokens,d,width", [(16, 320, 64), (77, 768, 96), (5, 33, 7)])
def test_fused_qkv_within_bound_of_three_gemms(tokens, d, width):
    """Fused vs three separate matmul/fp16_fp32acc GEMMs: both are within the GEMM bound B of the truth, so they
    differ by at most 2B (triangle inequality). Measured with OpenBLAS 0.3.31: the fp32 sums are NOT
    bit-identical (OpenBLAS picks its summation order by the N width: 31-92% of fp32 values equal for the widths
    here, 100% at 4096x320x320), but after rounding to fp16, >= 99.9% of the outputs are identical."""
    rng = np.random.default_rng(d)
    x = _f16(rng.standard_normal((2, tokens, d)))
    ws = [_f16(rng.standard_normal((d, width)) / np.sqrt(d)) for _ in range(3)]
    bs = [_f16(0.1 * rng.standard_normal(width)) for _ in range(3)]
    fused = qkv.qkv_projection_fp16_fp32acc(x, *ws, *bs)
    separate = [(mm._acc_fp32(x, w) + b.astype(np.float32)).astype(np.float16) for w, b in zip(ws, bs)]
    info = get_kernel("qkv_projection")
    case = Case(tuple(a.astype(np.float64) for a in (x, *ws, *bs)), {}, "fused vs separate")
    variant = info.variant("fp16_fp32acc")
    refs = run_reference(info, case)
    bounds = variant.contract.bound(case, refs, variant)
    identical = []
    for f, s, bound in zip(fused, separate, bounds):
        diff = np.abs(f.astype(np.float64) - s.astype(np.float64))
        assert np.all(diff <= 2 * bound), f"max |fused - separate| / B = {np.max(diff / bound):.3g} > 2"
        identical.append(float(np.mean(f == s)))
    print(f"fp16 outputs bit-identical fused vs separate (q, k, v): {identical}")
    assert min(identical) > 0.9  # a gross split or bias error would make most values differ


# ---------------------------------------------------------------------------------------------- attention
def _wide_case():
    rng = np.random.default_rng(7)
    q = rng.standard_normal((1, 16, 64)) * 400
    k = rng.standard_normal((1, 24, 64)) * 400
    v = rng.standard_normal((1, 24, 32))
    return Case(tuple(_f16(t).astype(np.float64) for t in (q, k, v)), {}, "wide logits")


def test_fp16_naive_overflows_where_upcast_and_flash_do_not():
    """Finding (docs/NUMERICS.md §8, SD 2.x): logits beyond 65504 become inf in fp16 and the softmax returns NaN
    while the reference is finite; the fp32-upcast and flash kernels keep the logits in fp32 and meet their
    contracts on the same input. fp16_naive's contract makes no promise on such rows (bound +inf)."""
    info = get_kernel("attention")
    case = _wide_case()
    logits = ref_attn.attention_logits(*case.inputs[:2])
    assert np.max(np.abs(logits)) > 65504
    (reference,) = run_reference(info, case)
    assert np.all(np.isfinite(reference))
    naive = attn.attention_fp16_naive(*(_f16(t) for t in case.inputs))
    assert np.isnan(naive).mean() > 0.5
    for name in ("fp32_upcast", "flash_fp16_fp32acc"):
        assert_meets_contract(info, name, case)
    bound = info.variant("fp16_naive").contract.bound(case.cast("float16"), reference, info.variant("fp16_naive"))
    assert np.all(np.isinf(bound[np.isnan(naive)]))


@pytest.mark.parametrize("block_q,block_k", [(1, 1), (3, 7), (16, 5), (64, 64), (1000, 1000)])
def test_flash_meets_contract_for_any_block_sizes(block_q, block_k):
    info = get_kernel("attention")
    flash = info.variant("flash_fp16_fp32acc")
    rng = np.random.default_rng(block_q * 100 + block_k)
    q, k = rng.standard_normal((2, 37, 16)) * 2, rng.standard_normal((2, 50, 16)) * 2
    v = rng.standard_normal((2, 50, 8))
    bias = rng.uniform(-3, 3, (37, 50))
    bias[rng.random((37, 50)) < 0.2] = -np.inf
    bias[:, 0] = 0.0
    blocked = type(flash)(flash.name, lambda *a, **p: attn.attention_flash(*a, block_q=block_q, block_k=block_k,
                                                                            **p), flash.dtype, flash.contract)
    for inputs, params in [((q, k, v), {"causal": True}), ((q, k, v, bias), {"scale": 0.3})]:
        case = Case(tuple(_f16(t).astype(np.float64) for t in inputs), params, f"blocks {block_q}x{block_k}")
        assert_meets_contract(info, blocked, case)


def test_causal_is_bottom_right_aligned_and_empty_rows_are_nan():
    """Lq > Lk under causal: the first Lq - Lk queries see no key (NaN everywhere, as the reference); the last
    query sees every key. Lq < Lk (KV cache): the last query still sees all keys."""
    info = get_kernel("attention")
    rng = np.random.default_rng(3)
    for lq, lk in [(9, 5), (4, 11)]:
        q, k, v = (_f16(rng.standard_normal((lq if i == 0 else lk, 8))) for i in range(3))
        case = Case((q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)), {"causal": True})
        (reference,) = run_reference(info, case)
        full = ref_attn.attention(q[-1:], k, v)  # the last query, no mask
        np.testing.assert_allclose(reference[-1:], full, rtol=1e-12)
        empty = max(lq - lk, 0)
        assert np.all(np.isnan(reference[:empty])) and np.all(np.isfinite(reference[empty:]))
        for variant in info.correct_variants:
            assert check_case(info, variant, case).passed, variant.name


def test_flash_without_rescale_is_wrong_when_max_grows():
    """The planted flash bug in isolation: keys in two blocks, the second holding the larger logit."""
    q = np.ones((1, 4), np.float16)
    k = np.concatenate([np.zeros((4, 4)), np.full((4, 4), 2.0)]).astype(np.float16)
    v = np.concatenate([np.ones((4, 1)), np.zeros((4, 1))]).astype(np.float16)
    good = attn.attention_flash(q, k, v, block_k=4)
    bad = attn.attention_bug_flash_norescale(q, k, v, block_k=4)
    expected = ref_attn.attention(q, k, v)
    assert abs(float(good[0, 0]) - expected[0, 0]) < 1e-3
    assert abs(float(bad[0, 0]) - expected[0, 0]) > 0.01
