"""Scaled dot-product attention in float64: softmax(q k^T * scale + mask) v.

Conventions (every attention variant follows them):
- q (..., Lq, d), k (..., Lk, d), v (..., Lk, dv); batch dims broadcast as in np.matmul.
- scale defaults to 1/sqrt(d).
- mask: boolean (True = keep) or additive float, broadcastable to (..., Lq, Lk).
- causal: query i sees key j iff j <= i + (Lk - Lq), the *bottom-right* alignment (FlashAttention >= 2.1,
  PyTorch's causal_lower_right): with a KV cache (Lk > Lq) the last query sees every key. For Lq == Lk this is
  the usual lower triangle.
- A query row that keeps no key (all masked, or Lq > Lk under causal) has no softmax: its output is NaN, and
  every variant must produce NaN there too (as PyTorch's SDPA does).
"""
from __future__ import annotations

import numpy as np

from mschecker.reference.softmax import softmax


def default_scale(d: int, scale=None) -> float:
    return 1.0 / np.sqrt(d) if scale is None else float(scale)


def causal_keep(lq: int, lk: int) -> np.ndarray:
    """Boolean (Lq, Lk): True where query i may see key j (bottom-right aligned)."""
    return np.tril(np.ones((lq, lk), dtype=bool), k=lk - lq)


def attention_logits(q, k, mask=None, scale=None, causal: bool = False) -> np.ndarray:
    """q k^T * scale + mask, with -inf where a boolean or causal mask drops a key."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    s = (q @ np.swapaxes(k, -1, -2)) * default_scale(q.shape[-1], scale)
    if mask is not None:
        mask = np.asarray(mask)
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask.astype(np.float64)
    if causal:
        s = np.where(causal_keep(s.shape[-2], s.shape[-1]), s, -np.inf)
    return s


def attention_probs(q, k, mask=None, scale=None, causal: bool = False) -> np.ndarray:
    """softmax over keys of attention_logits (NaN rows where no key is kept)."""
    with np.errstate(invalid="ignore"):
        return softmax(attention_logits(q, k, mask, scale, causal), axis=-1)


def attention(q, k, v, mask=None, scale=None, causal: bool = False) -> np.ndarray:
    return attention_probs(q, k, mask, scale, causal) @ np.asarray(v, dtype=np.float64)
