"""Flash attention's guard for a block in which a row keeps no key (optimized_kernels/attention.py:
``m_safe = where(m_new == -inf, 0, m_new)``). Without it a row whose first key block is fully masked computes
exp(-inf - -inf) = NaN, and the NaN poisons the row even though later blocks keep keys. The reference
(attention_fp32, one softmax over the whole row) gives finite values there; and a fully masked leading block must
contribute exactly nothing, so the result equals flash attention on the kept keys alone, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.optimized_kernels.attention import attention_flash, attention_fp32

F16, F32 = np.float16, np.float32


def _inputs(dtype, lq=6, lk=12, d=8, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, n, d)).astype(dtype) for n in (lq, lk, lk))
    return q, k, v


def _masks(lq, lk, masked_keys):
    keep = np.ones((lq, lk), bool)
    keep[:, :masked_keys] = False
    return {"bool": keep, "additive": np.where(keep, 0.0, -np.inf).astype(F32)}


@pytest.mark.parametrize("dtype", [F16, F32])
@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("block_k,masked", [(4, 4), (4, 8), (3, 6), (5, 5), (4, 6)])
def test_leading_fully_masked_key_blocks_contribute_nothing(dtype, kind, block_k, masked):
    q, k, v = _inputs(dtype)
    lq, lk = q.shape[-2], k.shape[-2]
    mask = _masks(lq, lk, masked)[kind]
    with np.errstate(all="raise"):  # no invalid operation anywhere (-inf - -inf would raise here)
        got = attention_flash(q, k, v, mask=mask, block_q=4, block_k=block_k)
    assert got.dtype == dtype and np.isfinite(got).all()
    ref = attention_fp32(q.astype(F32), k.astype(F32), v.astype(F32), mask=mask)
    tol = 2e-3 if dtype == F16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=tol, rtol=tol)
    if masked % block_k == 0:  # whole blocks masked: the same blocks of kept keys as running on them alone
        alone = attention_flash(q, k[:, masked:], v[:, masked:], block_q=4, block_k=block_k)
        np.testing.assert_array_equal(got, alone)


def test_only_some_rows_fully_masked_in_the_first_block():
    """Row 0 keeps keys only in the second block, row 1 in both, row 2 none at all (NaN, as the reference)."""
    q, k, v = _inputs(F32, lq=3, lk=8)
    keep = np.ones((3, 8), bool)
    keep[0, :4] = False
    keep[2, :] = False
    with np.errstate(invalid="ignore"):
        got = attention_flash(q, k, v, mask=keep, block_q=3, block_k=4)
        ref = attention_fp32(q, k, v, mask=keep)
    assert np.isnan(got[:, 2]).all() and np.isnan(ref[:, 2]).all()
    assert np.isfinite(got[:, :2]).all()
    np.testing.assert_allclose(got[:, :2], ref[:, :2], atol=1e-5, rtol=1e-5)


def test_causal_with_a_masked_leading_block():
    q, k, v = _inputs(F16, lq=8, lk=8)
    keep = np.ones((8, 8), bool)
    keep[4:, :4] = False  # rows 4.. keep keys 4..i only: their first block is fully masked
    got = attention_flash(q, k, v, mask=keep, causal=True, block_q=4, block_k=4)
    ref = attention_fp32(q.astype(F32), k.astype(F32), v.astype(F32), mask=keep, causal=True)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=2e-3, rtol=2e-3)
