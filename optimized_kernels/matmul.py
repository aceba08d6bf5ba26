"""NPU-style MatMul and Gemm kernels: how a cube unit (and its lower-precision modes) computes a @ b.

Every kernel is an *accumulator* (how the K-term sums are formed, in which format) followed by an *epilogue*
(Gemm's alpha/beta/C in the accumulator format, then one rounding to the storage format).

Accumulators
- BLAS fp32 (`_acc_fp32`): fp16/bf16 inputs upcast to fp32 (exact) and multiplied with numpy's sgemm. A product
  of two fp16 numbers has at most 22 significant bits (two bf16: 16), so it is exact in fp32, exactly as on a
  cube unit; what remains is fp32 summation of the K products. OpenBLAS sums in fp32 registers (FMA, in its own
  blocked order), so the emulation matches a cube unit's fp32 accumulation up to summation order, and Higham's
  bound gamma_K(u_fp32)|A||B| holds for every order (Blanchard et al., SIAM J. Sci. Comput. 42(3), 2020).
- fp16 sequential (`_acc_fp16_sequential`): the lower-precision mode. The running sum is an fp16 number and is
  rounded to fp16 after every add, over K in order (vectorized over the output). Each step adds the exact
  product to the fp16 partial sum in float64 (exact unless the operands are > 2^31 apart, then within 2^-53
  relative) and rounds once to fp16: the per-add error is u_fp16 (+ a negligible 2^-53), the model of
  gamma_K(u_fp16). This is the kernel whose sum of K > 2048 ones stalls at 2048.
- K-blocked fp32 (`_acc_fp32_kblocked`): K split in blocks of kb; each block's partial product is formed in
  fp32 (BLAS), partials are added one after another in fp32 (what a cube unit does when K exceeds its L0 tile:
  partial results are written out in fp32 and accumulated). Blocked summation error is at most
  gamma_{kb + K/kb}(u) <= gamma_K(u) (Higham 4.2), so the fp32 GEMM contract covers it.
"""
from __future__ import annotations

import numpy as np

from mschecker.dtypes import bfloat16
from mschecker.reference.linalg import gemm_operands
from mschecker.fastfp16 import ORT_MIN_ELEMS, as_f32, astype, fast_fp16, to_f16, to_f16_into, to_f32

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = bfloat16

#: Default K block of the blocked kernel (a cube unit's K tile is a few tens to hundreds of fp16 values).
DEFAULT_KB = 64

#: Working set (bytes) of one chunk of `_rounded_fp32_product`: the fp32 copies of a few of the batch's matrices
#: and their fp32 product stay in this machine's caches (1 MiB L2 per core, 32 MiB L3) between the upcast, the
#: sgemm and the output rounding. Measured on SD attention shapes (one BLAS thread, scratch O_mm2.py, a quiet
#: moment of the shared box): 1 MiB and 4 MiB both ~25% faster than the whole-batch passes, 16 MiB no faster.
CHUNK_BYTES = 4 << 20


def _acc_fp32(a: np.ndarray, b: np.ndarray, storage=None) -> np.ndarray:
    """The fp32 product. storage: the operands' storage dtype where one may come staged as float32 holding
    storage values (Variant.staged_f32_operands): as_f32 takes such an operand as it is (the values and layout
    to_f32 gives its storage form, so the same sgemm and bits) and upcasts the others exactly like to_f32."""
    if storage is None:
        return np.matmul(to_f32(a), to_f32(b))  # to_f32: astype(float32), fast for fp16 (fastfp16.py)
    return np.matmul(as_f32(a, storage), as_f32(b, storage))


def _acc_fp32_kblocked(a: np.ndarray, b: np.ndarray, kb: int = DEFAULT_KB) -> np.ndarray:
    if kb < 1:
        raise ValueError(f"kb must be >= 1, got {kb}")
    k = a.shape[-1]
    acc = None
    for k0 in range(0, max(k, 1), kb):
        a_s = a[..., k0:k0 + kb]
        b_s = b[k0:k0 + kb] if b.ndim == 1 else b[..., k0:k0 + kb, :]
        part = np.matmul(a_s.astype(F32), b_s.astype(F32))
        acc = part if acc is None else acc + part  # fp32 + fp32 -> fp32: one rounding per block
    return acc


def _acc_fp16_sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ, {a.shape} @ {b.shape}")
    nd = max(a2.ndim, b2.ndim)  # equal ranks, so that the K axis moved to the front lines up in both
    a64 = a2.reshape((1,) * (nd - a2.ndim) + a2.shape).astype(np.float64)
    b64 = b2.reshape((1,) * (nd - b2.ndim) + b2.shape).astype(np.float64)
    shape = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1])
    acc = np.zeros(shape, dtype=F16)
    tmp = np.empty(shape, dtype=np.float64)
    k_total = a2.shape[-1]
    chunk = max(1, (1 << 20) // max(acc.size, 1))  # products of a K-chunk at once: <= 8 MiB of float64
    with np.errstate(over="ignore", invalid="ignore"):  # IEEE: a partial sum past 65504 becomes inf
        for k0 in range(0, k_total, chunk):
            k1 = min(k0 + chunk, k_total)
            # exact products (K-chunk, ..., M, N) in float64
            prods = (np.moveaxis(a64[..., :, k0:k1], -1, 0)[..., :, None]
                     * np.moveaxis(b64[..., k0:k1, :], -2, 0)[..., None, :])
            for p in prods:
                np.add(p, acc, out=tmp)  # exact product + fp16 partial sum, in float64 ...
                acc[...] = tmp  # ... rounded once to fp16

    if a.ndim == 1:
        acc = acc[..., 0, :]
    if b.ndim == 1:
        acc = acc[..., 0]
    return acc


# ---------------------------------------------------------------------------------------------------- matmul
def matmul_fp32(a, b):
    """fp32 storage and fp32 accumulation (the fp32 peer)."""
    return _acc_fp32(a, b)


def _round(x, storage):
    if storage == F16:
        return to_f16(x)  # x.astype(float16), bit for bit, fast (fastfp16.py)
    with np.errstate(over="ignore"):  # IEEE overflow to inf is the emulated behaviour, not an error here
        return x.astype(storage)


def _upcast_is_c_order(x: np.ndarray, storage=None) -> bool:
    """Whether the upcast _acc_fp32 makes of the whole operand (to_f32, or as_f32 for a `storage` operand) is
    C-contiguous: x already is (astype keeps the layout), or x is fp16 (or staged fp32 holding fp16 values,
    `storage` fp16) and large enough for fastfp16's onnxruntime route, which casts a C-order copy.
    Pinned by tests/kernels/test_matmul_fastpath.py (a fastfp16 change that broke it would fail there)."""
    storage = x.dtype if storage is None else np.dtype(storage)
    return x.flags.c_contiguous or (storage == F16 and x.size >= ORT_MIN_ELEMS)


def _rounded_fp32_product(a, b, storage):
    """_round(_acc_fp32(a, b), storage), bit for bit; batched products in cache-sized chunks of the batch.

    Why: attention's (B, H, S, d) @ (B, H, d, S) and (B, H, S, S) @ (B, H, S, d) make memory-sized temporaries in
    the whole-batch form (the fp32 copy of the (S, S) operand or the fp32 (S, S) product, each freshly allocated
    and page-faulted, then a rounding pass over it); per chunk of a few matrices they stay in cache.
    Bits: np.matmul runs one sgemm per matrix of the batch, and each chunk makes exactly those calls: same
    shapes, same fp32 values, and the same C-contiguous layout the whole-batch upcast hands np.matmul (chunks
    are upcast into C order, and `_upcast_is_c_order` guarantees the whole-batch upcast has that
    layout). tests/kernels/test_matmul_fastpath.py compares the bits. Everything else takes the whole-batch
    form: 2-D weights (SD's linear layers, measured no faster chunked: the SD-1.5 UNet's MatMul time went up
    ~10% in a graph A/B), broadcast batch dimensions, 1-D operands, and batches that fit one chunk anyway.
    A matrix too big to stay in cache is still done one at a time: the fp32 product of a 64x64-latent SD
    attention is 1 GiB for the whole batch (and so is the fp32 copy of its probabilities), 64 MiB per matrix;
    each chunk's rounding is written straight into the result (_round_into), so no chunk-sized fp16 temporary
    is mapped and faulted in either.
    """
    a, b = np.asarray(a), np.asarray(b)
    # small operands (their fp32 copies and the product, at most 4 * (a.size + b.size + a.size * n) bytes, fit one
    # chunk): the whole-batch form, decided before the layout checks below (~1 us of a small MatMul node)
    if 4 * (a.size + b.size + a.size * (b.shape[-1] if b.ndim else 1)) <= CHUNK_BYTES or a.ndim < 3 \
            or b.ndim != a.ndim \
            or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2] \
            or not (_upcast_is_c_order(a, storage) and _upcast_is_c_order(b, storage)):
        fast = fast_fp16() if storage == F16 else None
        y = fast.matmul_round(a, b, np.matmul, ORT_MIN_ELEMS) if fast is not None else None  # one C call, same calls
        return _round(_acc_fp32(a, b, storage), storage) if y is None else y
    (m, k), n = a.shape[-2:], b.shape[-1]
    per_matrix = 4 * (m * k + m * n + k * n)
    # the whole batch is one chunk: the same calls as the loop below would make, without its Python (the SD
    # attention of small exports, ~60 us saved)
    if per_matrix * (a.size // (m * k)) <= CHUNK_BYTES:
        return _round(_acc_fp32(a, b, storage), storage)
    a3, b3 = a.reshape(-1, m, k), b.reshape(-1, k, n)  # views where possible; _c_order_f32 orders each chunk
    step = max(1, CHUNK_BYTES // max(per_matrix, 1))
    out = np.empty((a3.shape[0], m, n), dtype=storage)
    acc = np.empty((min(step, a3.shape[0]), m, n), dtype=F32)
    for i0 in range(0, a3.shape[0], step):
        i1 = min(a3.shape[0], i0 + step)
        part = acc[: i1 - i0]
        np.matmul(_c_order_f32(a3[i0:i1], storage), _c_order_f32(b3[i0:i1], storage), out=part)
        _round_into(part, storage, out[i0:i1])
    return out.reshape(a.shape[:-2] + (m, n))


def _round_into(x: np.ndarray, storage, dst: np.ndarray) -> None:
    """dst[...] = _round(x, storage), for a C-contiguous dst: fp16 converted in place (fastfp16.to_f16_into)."""
    if storage == F16:
        to_f16_into(x, dst)
    else:
        dst[...] = _round(x, storage)


def _c_order_f32(x: np.ndarray, storage) -> np.ndarray:
    """as_f32 of a chunk (to_f32 of its storage form), C-contiguous whatever route the cast takes."""
    return np.ascontiguousarray(as_f32(x, storage))


def matmul_fp16_fp32acc(a, b):
    """Cube unit: fp16 in, exact products, fp32 accumulation, output rounded to fp16."""
    return _rounded_fp32_product(a, b, F16)


def matmul_bf16_fp32acc(a, b):
    """bf16 in, exact products, fp32 accumulation, output rounded to bf16."""
    return _rounded_fp32_product(a, b, BF16)


def matmul_fp16_fp16acc(a, b):
    """fp16 in, fp16 running sum rounded after each add (a high-performance mode)."""
    return _acc_fp16_sequential(a, b)


def matmul_fp16_fp32acc_kblocked(a, b, kb: int = DEFAULT_KB):
    """fp16 in, K split into blocks of kb with fp32 partial sums combined in fp32, output rounded to fp16."""
    return _round(_acc_fp32_kblocked(a, b, kb), F16)


# ------------------------------------------------------------------------------------------------------ gemm
def _gemm(acc_fn, storage, a, b, c, alpha, beta, trans_a, trans_b):
    """Epilogue in the accumulator's format: alpha*acc (+ beta*C), then one rounding to storage. Written into the
    fresh accumulator; a factor of 1 is skipped (x * 1 is x, bit for bit, for every value an accumulation makes)."""
    ap, bp = gemm_operands(a, b, trans_a, trans_b)
    y = acc_fn(ap, bp)
    with np.errstate(over="ignore", invalid="ignore"):
        if alpha != 1.0:
            np.multiply(y, y.dtype.type(alpha), out=y)
        if c is not None:
            cc = astype(np.asarray(c), y.dtype)  # C unidirectionally broadcast to (M, N): y keeps its shape
            np.add(y, cc if beta == 1.0 else y.dtype.type(beta) * cc, out=y)
        return _round(y, storage)


def gemm_fp32(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    return _gemm(_acc_fp32, F32, a, b, c, alpha, beta, trans_a, trans_b)


def gemm_fp16_fp32acc(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    return _gemm(lambda x, y: _acc_fp32(x, y, F16), F16, a, b, c, alpha, beta, trans_a, trans_b)


def gemm_bf16_fp32acc(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    return _gemm(lambda x, y: _acc_fp32(x, y, BF16), BF16, a, b, c, alpha, beta, trans_a, trans_b)


def gemm_fp16_fp16acc(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    """fp16 running sum, and the epilogue in fp16 too (alpha, beta rounded to fp16)."""
    return _gemm(_acc_fp16_sequential, F16, a, b, c, alpha, beta, trans_a, trans_b)


def gemm_fp16_fp32acc_kblocked(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False,
                               kb: int = DEFAULT_KB):
    return _gemm(lambda x, y: _acc_fp32_kblocked(x, y, kb), F16, a, b, c, alpha, beta, trans_a, trans_b)


# ------------------------------------------------------------------------------------------ matmul + bias
# MatMul/BatchMatMul followed by BiasAdd/Add of a 1-D bias, which GE's MatMulBiasAddFusionPass fuses into one
# MatMulV2/BatchMatMulV2 with has_bias (hicann/ops-nn:matmul/mat_mul_v3/op_graph/fusion_pass/
# matmul_biasadd_fusion_pass.cpp@b4e5851d3b75eb3b21356ca10fe36b1d6ade37b8; the 2022 canndev pass
# dengguojie/vue-element-admin:ops/built-in/fusion_pass/graph_fusion/ai_core/matmul_biasadd_fusion_pass.cc
# @affbcf8d7b5ce8977424803915d772f64efe1ffa). The pass's documentation states the numerics: "if the BiasAdd/Add
# computed in FLOAT16 before the fusion, after it the bias is added inside the MatMul in FLOAT32, raising the
# precision" (hicann/ops-nn:matmul/mat_mul_v3/docs/MatMulBiasAddOpenFusionPass.md
# @3599d1ee38b6f503d27a85061040eaa52251f38a). Modelled: the cube's fp32 product (as matmul_*_fp32acc) plus the
# bias upcast to fp32 in one fp32 add, then one rounding to storage. Where on the fp32 accumulator the bias enters
# (the cube's bias table initializing L0C, or an add at the end) is the kernel's; it moves the fp32 result by at
# most one more fp32 rounding, which the contract's gamma_{K+1} covers, and the bits of the fp32 sum are the BLAS's
# order anyway (platform_bits).
def _check_bias(a: np.ndarray, b: np.ndarray, bias: np.ndarray) -> None:
    if b.ndim < 2 or bias.shape != (b.shape[-1],):
        raise ValueError(f"matmul_bias: b must be (..., K, N) and bias (N,), got a {a.shape}, b {b.shape}, "
                         f"bias {bias.shape}")


def _matmul_bias(a, b, bias, storage):
    a, b, bias = np.asarray(a), np.asarray(b), np.asarray(bias)
    _check_bias(a, b, bias)
    # a fresh fp32 array; an fp16/bf16 operand may come staged as float32 holding storage values (as_f32 takes it)
    acc = _acc_fp32(a, b, None if storage == F32 else storage)
    with np.errstate(over="ignore", invalid="ignore"):
        np.add(acc, astype(bias, F32), out=acc)  # the bias row broadcast over every row: one fp32 add each
    return _round(acc, storage)


def matmul_bias_fp32(a, b, bias):
    """fp32 storage: fp32 product + fp32 bias, no further rounding."""
    return _matmul_bias(a, b, bias, F32)


def matmul_bias_fp16_fp32acc(a, b, bias):
    """fp16 in, fp32 accumulation, bias added in fp32, one rounding to fp16."""
    return _matmul_bias(a, b, bias, F16)


def matmul_bias_bf16_fp32acc(a, b, bias):
    """bf16 in, fp32 accumulation, bias added in fp32, one rounding to bf16."""
    return _matmul_bias(a, b, bias, BF16)


def bug_matmul_bias_after_rounding(a, b, bias):
    """Planted bug: the unfused graph (MatMul rounded to fp16, then an fp16 Add) sold as the fused kernel: two
    roundings, and an fp16 product that overflows where the biased result would not."""
    a, b, bias = np.asarray(a), np.asarray(b), np.asarray(bias)
    _check_bias(a, b, bias)
    with np.errstate(over="ignore", invalid="ignore"):
        return (matmul_fp16_fp32acc(a, b) + bias.astype(F16)).astype(F16)


def bug_matmul_bias_bf16_after_rounding(a, b, bias):
    """Planted bug: the unfused bf16 graph (MatMul rounded to bf16, then a bf16 Add) sold as the fused kernel."""
    a, b, bias = np.asarray(a), np.asarray(b), np.asarray(bias)
    _check_bias(a, b, bias)
    y = matmul_bf16_fp32acc(a, b).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (y + bias.astype(F32)).astype(BF16)


def _to_significant_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """x rounded to nearest (ties to even) with `bits` significant bits (in float64, then back to x's dtype)."""
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.rint(m * 2.0 ** bits) / 2.0 ** bits, e).astype(x.dtype)


def bug_matmul_bias_fp32_hf32(a, b, bias):
    """Planted bug: fp32 operands cut to 12 significant bits before the cube (an HF32-style reduced-mantissa mode,
    what allow_hf32 does to fp32 MatMul) sold as the fp32 kernel."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return _matmul_bias(_to_significant_bits(a, 12), _to_significant_bits(b, 12), bias, F32)
