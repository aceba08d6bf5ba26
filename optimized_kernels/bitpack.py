"""4-bit compression of intermediates: "8:1 bitpack" (eight 4-bit codes per uint32 word) and block scaling.

pack4 / unpack4 are exact: code j of word i sits in bits [4j, 4j+4) (little-endian nibble order, code 8i+j),
the last word is zero-padded, and unpack4 takes the original length so odd lengths round-trip.

Block-scaled 4-bit quantization, blocks of `block` consecutive elements of the flattened tensor (the last block
zero-padded), one fp32 scale per block:
- symmetric ("sym"): s = max|x_b| / 7, q = clip(round(x / s), -7, 7), stored as code q + 8 in 1..15 (code 0
  unused, so the grid is symmetric around zero and 0 is exact); x_hat = q * s.
- asymmetric ("asym"): s = (max x_b - min x_b) / 15, q = clip(round((x - min) / s), 0, 15), x_hat = min + q * s;
  uses all 16 codes, better for one-signed data (post-SiLU/GELU activations), but 0 is not exact.
Either way round-to-nearest gives |x_hat - x| <= s / 2 per element (plus fp32 arithmetic and the fp16 output
rounding, see mschecker/kernels/entries/bitpack.py). An all-zero block gets s = 1 (codes encode exact zeros).

Planted bug: unpack4_bug_nibble_order reads the nibbles of each word in reverse order.
"""
from __future__ import annotations

import numpy as np

_SHIFTS = np.arange(8, dtype=np.uint32) * np.uint32(4)


def pack4(codes: np.ndarray) -> np.ndarray:
    """Pack codes in 0..15 (any integer dtype, any shape: flattened) into uint32 words, eight per word."""
    c = np.asarray(codes).ravel()
    if c.size and (c.min() < 0 or c.max() > 15):
        raise ValueError(f"pack4: codes must lie in 0..15, got range [{c.min()}, {c.max()}]")
    n_words = -(-c.size // 8)
    padded = np.zeros(n_words * 8, dtype=np.uint32)
    padded[: c.size] = c
    return np.bitwise_or.reduce(padded.reshape(n_words, 8) << _SHIFTS, axis=1).astype(np.uint32)


def unpack4(words: np.ndarray, n: int) -> np.ndarray:
    """The first n codes (uint8) of packed words."""
    w = np.asarray(words, dtype=np.uint32).ravel()
    if n > w.size * 8:
        raise ValueError(f"unpack4: {w.size} words hold at most {w.size * 8} codes, asked for {n}")
    return ((w[:, None] >> _SHIFTS) & np.uint32(0xF)).astype(np.uint8).ravel()[:n]


def unpack4_bug_nibble_order(words: np.ndarray, n: int) -> np.ndarray:
    """Planted bug: nibbles read high to low."""
    w = np.asarray(words, dtype=np.uint32).ravel()
    return ((w[:, None] >> _SHIFTS[::-1]) & np.uint32(0xF)).astype(np.uint8).ravel()[:n]


def blocks(x: np.ndarray, block: int) -> np.ndarray:
    """x flattened into rows of `block` elements (fp32), the last row zero-padded."""
    flat = np.asarray(x, dtype=np.float32).ravel()
    nb = -(-flat.size // block)
    padded = np.zeros(nb * block, dtype=np.float32)
    padded[: flat.size] = flat
    return padded.reshape(nb, block)


def block_scales(x: np.ndarray, block: int, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(scales, offsets) per block, fp32; offsets are 0 for sym and the block minimum for asym."""
    b = blocks(x, block)
    if mode == "sym":
        span, off, levels = np.max(np.abs(b), axis=1), np.zeros(b.shape[0], np.float32), 7
    elif mode == "asym":
        lo = np.min(b, axis=1)
        span, off, levels = np.max(b, axis=1) - lo, lo, 15
    else:
        raise ValueError(f"block quantization mode must be 'sym' or 'asym', got {mode!r}")
    return np.where(span > 0, span / np.float32(levels), np.float32(1)).astype(np.float32), off.astype(np.float32)


def quantize4(x: np.ndarray, block: int = 32, mode: str = "sym"):
    """(packed uint32 words, scales, offsets): x compressed to 4 bits per element plus two fp32 per block."""
    b = blocks(x, block)
    s, off = block_scales(x, block, mode)
    if mode == "sym":
        codes = np.clip(np.rint(b / s[:, None]), -7, 7) + 8
    else:
        codes = np.clip(np.rint((b - off[:, None]) / s[:, None]), 0, 15)
    return pack4(codes.astype(np.uint8)), s, off


def dequantize4(words, scales, offsets, shape, block: int = 32, mode: str = "sym", dtype=np.float16,
                unpack=unpack4) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    codes = unpack(words, scales.size * block).astype(np.float32).reshape(-1, block)
    q = codes - 8 if mode == "sym" else codes
    x = q * scales[:, None] + offsets[:, None]
    return x.ravel()[:n].reshape(shape).astype(dtype)


def bitpack4_fp16_sym(x, block: int = 32):
    """Compress and decompress through the 8:1 bitpack, symmetric codes, fp16 output."""
    return dequantize4(*quantize4(x, block, "sym"), np.shape(x), block, "sym")


def bitpack4_fp16_asym(x, block: int = 32):
    return dequantize4(*quantize4(x, block, "asym"), np.shape(x), block, "asym")


def bitpack4_bug_nibble_order(x, block: int = 32):
    """Planted bug: the symmetric round trip unpacked with reversed nibble order."""
    return dequantize4(*quantize4(x, block, "sym"), np.shape(x), block, "sym", unpack=unpack4_bug_nibble_order)
