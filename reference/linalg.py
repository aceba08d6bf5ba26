"""MatMul, Gemm and the fused QKV projection in float64 (ONNX MatMul / Gemm semantics).

Inputs that hold fp16/bf16 values have products that are exact in float64 (11 + 11 or 8 + 8 significant bits),
so the only reference error is float64 summation, gamma_K(2^-53)|A||B|: some 1e-13 relative for K = 4096,
invisible next to any reduced-precision kernel's bound. np.matmul is used (BLAS dgemm): deterministic on one
machine and thread count, which is what the golden store's bit-exact check relies on.
"""
from __future__ import annotations

import numpy as np


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b with np.matmul semantics (batched, broadcast batch dims, 1-D operands promoted and squeezed)."""
    return np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))


def gemm_operands(a, b, trans_a: bool = False, trans_b: bool = False):
    """A' and B' of ONNX Gemm (2-D only): A' = A^T if trans_a, B' = B^T if trans_b."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm takes 2-D A and B, got shapes {a.shape} and {b.shape}")
    return (a.T if trans_a else a), (b.T if trans_b else b)


def gemm(a, b, c=None, alpha: float = 1.0, beta: float = 1.0, trans_a: bool = False,
         trans_b: bool = False) -> np.ndarray:
    """Y = alpha * A' B' + beta * C (C unidirectionally broadcast to (M, N)), ONNX Gemm."""
    ap, bp = gemm_operands(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), trans_a, trans_b)
    y = float(alpha) * (ap @ bp)
    if c is not None:
        y = y + float(beta) * np.asarray(c, dtype=np.float64)
    return y


def qkv_projection(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    """(x @ W_q + b_q, x @ W_k + b_k, x @ W_v + b_v).

    x is (..., D); each W is (D, D_out) as in an exported ONNX MatMul (the transpose of torch.nn.Linear's
    weight); biases are (D_out,) or None.
    """
    x = np.asarray(x, dtype=np.float64)
    outs = []
    for w, bias in ((w_q, b_q), (w_k, b_k), (w_v, b_v)):
        y = x @ np.asarray(w, dtype=np.float64)
        if bias is not None:
            y = y + np.asarray(bias, dtype=np.float64)
        outs.append(y)
    return tuple(outs)


def matmul_bias(a, b, bias) -> np.ndarray:
    """a @ b + bias with np.matmul semantics for a @ b and the 1-D bias (N,) broadcast over the rows: the fused
    MatMul + BiasAdd/Add (GE's MatMulBiasAddFusionPass). Products of fp16/bf16 values are exact in float64; the
    error is float64 summation of K + 1 terms, gamma_{K+1}(2^-53)(|A||B| + |bias|)."""
    return np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)) \
        + np.asarray(bias, dtype=np.float64)
