"""Attention kernels: naive (scores materialized) in several precisions, and blocked "flash" attention.

Semantics (scale, masks, bottom-right causal alignment, NaN for rows that keep no key) are those of
reference/attention.py. Every kernel computes Q K^T on the cube unit (storage-format inputs upcast to fp32, exact
products, fp32 accumulation, see optimized_kernels/matmul.py) with the scale applied in the fp32 epilogue.

- attention_fp16_naive: the plain fp16 graph. Scores rounded to fp16 (they overflow to inf beyond 65504), mask
  added in fp16, softmax on fp16 logits with fp32 internals (softmax_fp16_fp32acc), P in fp16, P V on the cube
  unit, output fp16. This is "the naive fp16 implementation" of FlashAttention's tests.
- attention_fp32_upcast: diffusers' upcast_attention / upcast_softmax: fp16 storage, logits and softmax in fp32,
  P rounded to fp16 (attention_probs.to(value.dtype)), P V on the cube unit, output fp16.
- attention_fp32: fp32 storage end to end (the fp32 peer).
- attention_flash: blocked online softmax over (block_q x block_k) tiles. Never materializes Lq x Lk: per query
  block it keeps an fp32 running max m, running sum l and accumulator (block_q x dv); each key block's
  probabilities p = exp(s - m_new) are rounded to the storage format before the P V product (as FlashAttention 2
  feeds its tensor cores), the accumulator and l are rescaled by exp(m_old - m_new) when the max grows, and the
  output is acc / l rounded to storage. Extra memory: fp32 copies of K and V (O(Lk d)), the output, and one
  tile: O(L d + block_q block_k), not O(L^2).
"""
from __future__ import annotations

import functools

import numpy as np

from mschecker.reference import elementary as em

from mschecker.fastfp16 import astype
from mschecker.reference.attention import causal_keep, default_scale
from mschecker.optimized_kernels.softmax import softmax_fp16_fp32acc, softmax_fp16_nomax, softmax_fp32

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)


def _logits(q, k, mask, scale, causal, logits_dtype):
    """scale * q k^T (fp32 accumulation) rounded to logits_dtype, mask applied in logits_dtype. Conversions by
    fastfp16.astype: astype's bits and layout, compiled where the layout allows."""
    s = np.matmul(astype(q, F32), np.swapaxes(astype(k, F32), -1, -2))
    s *= F32.type(default_scale(q.shape[-1], scale))  # the fp32 epilogue, in place
    s = astype(s, logits_dtype)
    if mask is not None:
        s = astype(np.where(mask, s, -np.inf), logits_dtype) if mask.dtype == np.bool_ \
            else s + mask.astype(logits_dtype)
    if causal:
        s = astype(np.where(causal_keep(s.shape[-2], s.shape[-1]), s, -np.inf), logits_dtype)
    return s


def _naive(q, k, v, mask, scale, causal, *, storage, logits_dtype, softmax_fn, round_p=True):
    with np.errstate(over="ignore", invalid="ignore"):  # fp16 logits may overflow: IEEE inf, then NaN
        p = softmax_fn(_logits(q, k, mask, scale, causal, logits_dtype), axis=-1)
        p = astype(p, storage) if round_p else astype(p, F32)  # round_p=False: the planted "too accurate" bug
        return astype(np.matmul(astype(p, F32), astype(v, F32)), storage)


def attention_fp16_naive(q, k, v, mask=None, scale=None, causal=False):
    return _naive(q, k, v, mask, scale, causal, storage=F16, logits_dtype=F16, softmax_fn=softmax_fp16_fp32acc)


def attention_fp32_upcast(q, k, v, mask=None, scale=None, causal=False):
    return _naive(q, k, v, mask, scale, causal, storage=q.dtype, logits_dtype=F32, softmax_fn=softmax_fp32)


def attention_fp32(q, k, v, mask=None, scale=None, causal=False):
    return _naive(q, k, v, mask, scale, causal, storage=F32, logits_dtype=F32, softmax_fn=softmax_fp32)


def attention_bug_fp16_nomax(q, k, v, mask=None, scale=None, causal=False):
    """Planted bug: the fp16 graph with a softmax that skips the max subtraction (exp overflows above 11.09)."""
    return _naive(q, k, v, mask, scale, causal, storage=F16, logits_dtype=F16, softmax_fn=softmax_fp16_nomax)


def attention_bug_p_unrounded(q, k, v, mask=None, scale=None, causal=False):
    """Planted bug: fp32_upcast that feeds P V with P still in fp32 (the cast of the probabilities to the value
    dtype forgotten). Closer to float64 than the kernel it claims to be: only the two-sided check catches it."""
    return _naive(q, k, v, mask, scale, causal, storage=q.dtype, logits_dtype=F32, softmax_fn=softmax_fp32,
                  round_p=False)


def attention_flash(q, k, v, mask=None, scale=None, causal=False, *, block_q: int = 64, block_k: int = 64,
                    rescale: bool = True):
    """Blocked online-softmax attention; see the module docstring. rescale=False is a planted bug."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be >= 1, got block_q={block_q}, block_k={block_k}")
    storage = q.dtype
    lq, lk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    sc = F32.type(default_scale(q.shape[-1], scale))
    k32 = k.astype(F32)
    v32 = v.astype(F32)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                () if mask is None else np.shape(mask)[:-2])
    if mask is not None:
        mask = np.broadcast_to(mask, batch + (lq, lk))  # a view: no Lq x Lk allocation
    out = np.empty(batch + (lq, dv), dtype=storage)
    shift = lk - lq  # bottom-right causal alignment: row i keeps keys j <= i + shift
    for i0 in range(0, lq, block_q):
        i1 = min(i0 + block_q, lq)
        qb = q[..., i0:i1, :].astype(F32)
        m = np.full(batch + (i1 - i0, 1), -np.inf, F32)
        l = np.zeros(batch + (i1 - i0, 1), F32)
        acc = np.zeros(batch + (i1 - i0, dv), F32)
        for j0 in range(0, lk, block_k):
            if causal and j0 > i1 - 1 + shift:
                break  # every later key is masked for every row of this block
            j1 = min(j0 + block_k, lk)
            s = np.matmul(qb, np.swapaxes(k32[..., j0:j1, :], -1, -2)) * sc
            if mask is not None:
                mb = mask[..., i0:i1, j0:j1]
                s = np.where(mb, s, -np.inf).astype(F32) if mb.dtype == np.bool_ else s + mb.astype(F32)
            if causal:
                keep = np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None] + shift
                s = np.where(keep, s, -np.inf).astype(F32)
            m_new = np.maximum(m, np.max(s, axis=-1, keepdims=True))
            m_safe = np.where(np.isneginf(m_new), F32.type(0), m_new)  # a row with nothing kept yet stays at 0
            p = em.exp(s - m_safe)
            alpha = em.exp(m - m_safe)
            l = alpha * l + np.add.reduce(p, axis=-1, keepdims=True, dtype=F32)
            pv = np.matmul(p.astype(storage).astype(F32), v32[..., j0:j1, :])
            acc = (alpha * acc if rescale else acc) + pv
            m = m_new
        with np.errstate(invalid="ignore", divide="ignore"):
            out[..., i0:i1, :] = (acc / l).astype(storage)  # l == 0: no key kept -> 0/0 = NaN, as the reference
    return out


attention_flash_fp16_fp32acc = attention_flash
attention_bug_flash_norescale = functools.partial(attention_flash, rescale=False)
