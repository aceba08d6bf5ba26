"""Images of the SD check: PNG writing, the side-by-side panel, a line plot of error per step, PSNR and SSIM.

Why no imaging library: neither Pillow nor matplotlib is a dependency, and what we need is small -- an 8-bit RGB
PNG is a zlib stream of filtered rows with three chunks (PNG spec, ISO/IEC 15948), and the per-step error plot
is a handful of polylines, ticks and short labels drawn with a 3x5 bitmap font. Pulling matplotlib (and its
transitive freetype/kiwisolver wheels) into a numerics checker for one plot is not worth it.

Image metrics are on the uint8 images the user sees (H, W, 3), data range L = 255:
- PSNR = 10 log10(L^2 / MSE) over all channels (inf for identical images);
- SSIM (Wang, Bovik, Sheikh, Simoncelli 2004, "Image quality assessment: from error visibility to structural
  similarity"): 11x11 Gaussian window with sigma 1.5 (normalised to sum 1), K1 = 0.01, K2 = 0.03,
  C1 = (K1 L)^2, C2 = (K2 L)^2, computed on each RGB channel separately over the 'valid' window positions (no
  padding, as the paper's reference implementation and scikit-image's gaussian_weights mode do), and averaged
  over positions and channels. Per channel rather than on luminance so that a colour shift in one channel is not
  hidden by the luma weights. Images smaller than the window use a window cropped to the image (documented
  below); the tiny preset's 16x16 images are larger than 11x11, so this only matters for odd inputs.
"""
from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..tensorio import atomic_write_bytes

SSIM_WINDOW, SSIM_SIGMA, SSIM_K1, SSIM_K2 = 11, 1.5, 0.01, 0.03


# ---------------------------------------------------------------------------------------------- PNG writing
def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(image: np.ndarray) -> bytes:
    """(H, W, 3) or (H, W) uint8 -> PNG bytes (8-bit RGB or greyscale, filter 0 on every row)."""
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] != 3) or 0 in img.shape:
        raise InputError(f"PNG writer takes a non-empty (H, W, 3) or (H, W) uint8 image, got {img.shape} {img.dtype}")
    h, w = img.shape[:2]
    colour = 2 if img.ndim == 3 else 0
    rows = np.ascontiguousarray(img).reshape(h, -1)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()
    header = struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + \
        _chunk(b"IEND", b"")


def decode_png(data: bytes) -> np.ndarray:
    """Inverse of encode_png (filter 0 only): used by the tests to prove the files are what we meant."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise InputError("not a PNG file")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]:
            raise InputError(f"PNG chunk {kind!r} has a bad CRC")
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    w, h, _, colour = header[:4]
    ch = 3 if colour == 2 else 1
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * ch)
    if rows[:, 0].any():
        raise InputError("PNG uses row filters this decoder does not implement")
    return rows[:, 1:].reshape(h, w, ch) if ch == 3 else rows[:, 1:].reshape(h, w)


def write_png(path: str | Path, image: np.ndarray) -> Path:
    """Atomic PNG write (temp file in the same folder + os.replace)."""
    return write_atomic(path, encode_png(image))


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (tensorio.atomic_write_bytes); returns the path."""
    atomic_write_bytes(path, data)
    return Path(path)


# ---------------------------------------------------------------------------------------------- metrics
def image_psnr(actual: np.ndarray, expected: np.ndarray, peak: float = 255.0) -> float:
    """PSNR in dB of two same-shape uint8 images (inf when identical)."""
    a, e = _same_images(actual, expected)
    mse = float(np.mean((a - e) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(peak * peak / mse)


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> np.ndarray:
    """The normalised 1-D Gaussian (the 2-D window is its outer product, separable)."""
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(x * x) / (2.0 * sigma * sigma))
    return g / g.sum()


def _filter_valid(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Separable 'valid' correlation of a 2-D array with g (x) g."""
    k = g.size
    rows = np.lib.stride_tricks.sliding_window_view(x, k, axis=0) @ g
    return np.lib.stride_tricks.sliding_window_view(rows, k, axis=1) @ g


def image_ssim(actual: np.ndarray, expected: np.ndarray, peak: float = 255.0) -> float:
    """Mean SSIM (Wang et al. 2004, constants in the module docstring) over valid windows and RGB channels.

    A side shorter than 11 px uses a window of that side's length (odd, at least 1) with the same sigma, so
    small images still get a structural score instead of an error."""
    a, e = _same_images(actual, expected)
    if a.ndim == 2:
        a, e = a[..., None], e[..., None]
    size = min(SSIM_WINDOW, a.shape[0], a.shape[1])
    size -= 1 - size % 2
    g = gaussian_window(size)
    c1, c2 = (SSIM_K1 * peak) ** 2, (SSIM_K2 * peak) ** 2
    scores = []
    for ch in range(a.shape[2]):
        x, y = a[..., ch], e[..., ch]
        mx, my = _filter_valid(x, g), _filter_valid(y, g)
        sxx = _filter_valid(x * x, g) - mx * mx
        syy = _filter_valid(y * y, g) - my * my
        sxy = _filter_valid(x * y, g) - mx * my
        ssim_map = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))
        scores.append(float(ssim_map.mean()))
    return float(np.mean(scores))


def _same_images(actual, expected) -> tuple[np.ndarray, np.ndarray]:
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        raise InputError(f"images differ in shape: {a.shape} vs {e.shape}")
    return a.astype(np.float64), e.astype(np.float64)


# ---------------------------------------------------------------------------------------------- panels
def difference_image(actual: np.ndarray, expected: np.ndarray, gain: float | None = None) -> tuple[np.ndarray, float]:
    """|actual - expected| amplified to be visible: x gain (default: so the largest difference maps to 255,
    at most x50 so that 1-level rounding noise does not look like a failure). Returns (uint8 image, gain)."""
    a, e = _same_images(actual, expected)
    d = np.abs(a - e)
    if gain is None:
        top = float(d.max())
        gain = 1.0 if top == 0 else min(50.0, 255.0 / top)
    return np.clip(np.rint(d * gain), 0, 255).astype(np.uint8), float(gain)


def side_by_side(images: Sequence[np.ndarray], labels: Sequence[str], scale: int | None = None,
                 gap: int = 4) -> np.ndarray:
    """Images (H, W, 3) uint8 next to each other, each upscaled by nearest neighbour (small presets make 64 px
    images), with a label strip above each."""
    h, w = images[0].shape[:2]
    scale = scale or max(1, 256 // max(h, w))
    tiles = [np.repeat(np.repeat(img, scale, axis=0), scale, axis=1) for img in images]
    th, tw = tiles[0].shape[:2]
    label_h = 5 * 2 + 6
    canvas = np.full((label_h + th + gap, len(tiles) * (tw + gap) + gap, 3), 255, np.uint8)
    for i, (tile, label) in enumerate(zip(tiles, labels)):
        x0 = gap + i * (tw + gap)
        canvas[label_h:label_h + th, x0:x0 + tw] = tile
        draw_text(canvas, label, x0, 3, scale=2)
    return canvas


# ---------------------------------------------------------------------------------------------- plot
def line_plot(series: dict[str, Sequence[float]], *, title: str, xlabel: str, ylabel: str,
              width: int = 640, height: int = 400, log_y: bool = True) -> np.ndarray:
    """A line plot (uint8 RGB) of each series against its 1-based index; log10 y axis by default.

    Non-finite and (on a log axis) non-positive values are not drawn: a NaN step shows as a gap, and the legend
    says how many points were dropped."""
    colours = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14)]
    img = np.full((height, width, 3), 255, np.uint8)
    left, right, top, bottom = 70, 20, 48, 50
    pw, ph = width - left - right, height - top - bottom
    values = [np.asarray(v, np.float64) for v in series.values()]
    n = max((v.size for v in values), default=1)
    ok = [np.isfinite(v) & ((v > 0) if log_y else True) for v in values]
    pts = np.concatenate([np.log10(v[m]) if log_y else v[m] for v, m in zip(values, ok)] or [np.zeros(0)])
    lo, hi = (float(pts.min()), float(pts.max())) if pts.size else (0.0, 1.0)
    if log_y:
        lo, hi = math.floor(lo), math.ceil(hi)
    if hi - lo < 1e-12:
        lo, hi = lo - 1, hi + 1

    def px(i: float, y: float) -> tuple[int, int]:
        xx = left + (i - 1) / max(n - 1, 1) * pw
        yy = top + (1 - (y - lo) / (hi - lo)) * ph
        return int(round(xx)), int(round(yy))

    grey, black = (200, 200, 200), (0, 0, 0)
    ticks = list(range(int(lo), int(hi) + 1)) if log_y else list(np.linspace(lo, hi, 5))
    for t in ticks:
        _, y = px(1, t)
        _hline(img, left, left + pw, y, grey)
        draw_text(img, f"1E{int(t)}" if log_y else f"{t:.3G}", 4, y - 5, scale=2)
    for i in range(1, n + 1):
        x, _ = px(i, lo)
        _vline(img, x, top + ph, top + ph + 5, black)
        if n <= 20 or i % max(1, n // 10) == 0:
            draw_text(img, str(i), x - 3 * len(str(i)), top + ph + 9, scale=2)
    _hline(img, left, left + pw, top + ph, black)
    _vline(img, left, top, top + ph, black)
    for k, (name, v, m) in enumerate(zip(series, values, ok)):
        c = colours[k % len(colours)]
        prev = None
        for i in range(v.size):
            if not m[i]:
                prev = None
                continue
            p = px(i + 1, math.log10(v[i]) if log_y else v[i])
            _dot(img, p, c)
            if prev is not None:
                _line(img, prev, p, c)
            prev = p
        dropped = int((~m).sum())
        label = name + (f" ({dropped} NOT FINITE)" if dropped else "")
        _fill(img, left + 10, top + 8 + 14 * k, 10, 10, c)
        draw_text(img, label, left + 26, top + 8 + 14 * k, scale=2)
    draw_text(img, title, left, 4, scale=2)
    draw_text(img, xlabel, left + pw // 2 - 6 * len(xlabel) // 2, height - 18, scale=2)
    draw_text(img, ylabel, left + 6, top - 18, scale=2)
    return img


def _hline(img, x0, x1, y, c):
    if 0 <= y < img.shape[0]:
        img[y, max(x0, 0):min(x1 + 1, img.shape[1])] = c


def _vline(img, x, y0, y1, c):
    if 0 <= x < img.shape[1]:
        img[max(y0, 0):min(y1 + 1, img.shape[0]), x] = c


def _fill(img, x, y, w, h, c):
    img[max(y, 0):y + h, max(x, 0):x + w] = c


def _dot(img, p, c):
    _fill(img, p[0] - 2, p[1] - 2, 5, 5, c)


def _line(img, p0, p1, c):
    steps = max(abs(p1[0] - p0[0]), abs(p1[1] - p0[1]), 1)
    for t in np.linspace(0.0, 1.0, steps + 1):
        x = int(round(p0[0] + t * (p1[0] - p0[0])))
        y = int(round(p0[1] + t * (p1[1] - p0[1])))
        _fill(img, x, y, 2, 2, c)


# 3x5 bitmap font: each glyph is 5 rows of 3 bits (MSB = left column). Upper case only; lower case is folded.
_FONT = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 3, 1, 7), "4": (5, 5, 7, 1, 1),
    "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 2, 2), "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7),
    "A": (2, 5, 7, 5, 5), "B": (6, 5, 6, 5, 6), "C": (3, 4, 4, 4, 3), "D": (6, 5, 5, 5, 6), "E": (7, 4, 6, 4, 7),
    "F": (7, 4, 6, 4, 4), "G": (3, 4, 5, 5, 3), "H": (5, 5, 7, 5, 5), "I": (7, 2, 2, 2, 7), "J": (1, 1, 1, 5, 2),
    "K": (5, 5, 6, 5, 5), "L": (4, 4, 4, 4, 7), "M": (5, 7, 5, 5, 5), "N": (5, 7, 7, 5, 5), "O": (2, 5, 5, 5, 2),
    "P": (6, 5, 6, 4, 4), "Q": (2, 5, 5, 6, 3), "R": (6, 5, 6, 5, 5), "S": (3, 4, 2, 1, 6), "T": (7, 2, 2, 2, 2),
    "U": (5, 5, 5, 5, 7), "V": (5, 5, 5, 5, 2), "W": (5, 5, 7, 7, 5), "X": (5, 5, 2, 5, 5), "Y": (5, 5, 2, 2, 2),
    "Z": (7, 1, 2, 4, 7), " ": (0, 0, 0, 0, 0), ".": (0, 0, 0, 0, 2), "-": (0, 0, 7, 0, 0), "+": (0, 2, 7, 2, 0),
    ":": (0, 2, 0, 2, 0), "/": (1, 1, 2, 4, 4), "(": (1, 2, 2, 2, 1), ")": (4, 2, 2, 2, 4), "|": (2, 2, 2, 2, 2),
    "=": (0, 7, 0, 7, 0), "%": (5, 1, 2, 4, 5), "_": (0, 0, 0, 0, 7), ",": (0, 0, 0, 2, 4),
}


def draw_text(img: np.ndarray, text: str, x: int, y: int, *, scale: int = 1, colour=(0, 0, 0)) -> None:
    """Draw ``text`` with the 3x5 font at (x, y) (top-left), each font pixel ``scale`` px; unknown glyphs are
    drawn as '?'-boxes so that a missing character is visible rather than silently skipped."""
    for k, ch in enumerate(text.upper()):
        rows = _FONT.get(ch, (7, 5, 5, 5, 7))
        for r, bits in enumerate(rows):
            for col in range(3):
                if bits & (4 >> col):
                    _fill(img, x + (4 * k + col) * scale, y + r * scale, scale, scale, colour)
