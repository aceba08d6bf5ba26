"""Images of the SD check: PNG writing, the side-by-side panel, the error-per-step plot (matplotlib), PSNR, SSIM.

Figures are drawn with matplotlib's object API (``Figure`` + the Agg canvas: no pyplot state, no display needed)
in the Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), whose colours stay distinct under the
common colour-vision deficiencies; lines also differ in marker so that they read in greyscale. A panel whose
image holds NaN says so in its title and over the image (the uint8 rendering shows NaN as black, which alone
looks like a dark picture, not a failure). `plot_series` and `save_figure` are the shared helpers for every
plot of the project (the bisection plot uses them too).

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

import io
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from mschecker.errors import InputError
from mschecker.fsio import atomic_write_bytes

SSIM_WINDOW, SSIM_SIGMA, SSIM_K1, SSIM_K2 = 11, 1.5, 0.01, 0.03
# Okabe-Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue, yellow (black is for axes)
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


# ---------------------------------------------------------------------------------------------- files
def new_figure(width_in: float, height_in: float):
    """A matplotlib Figure on the Agg canvas (no pyplot, no display, safe to use from any thread)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def save_figure(fig, path: str | Path) -> Path:
    """The figure as a PNG at ``path``, written atomically."""
    return write_atomic(path, figure_png(fig))


def encode_png(image: np.ndarray) -> bytes:
    """(H, W, 3) or (H, W) uint8 -> PNG bytes, pixel for pixel (matplotlib's writer)."""
    from matplotlib.image import imsave

    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] != 3) or 0 in img.shape:
        raise InputError(f"PNG writer takes a non-empty (H, W, 3) or (H, W) uint8 image, got {img.shape} {img.dtype}")
    buf = io.BytesIO()
    imsave(buf, np.stack([img] * 3, axis=-1) if img.ndim == 2 else img, format="png")
    return buf.getvalue()


def decode_png(data: bytes) -> np.ndarray:
    """PNG bytes -> (H, W, 3) uint8 (alpha dropped): the tests read the files back with it."""
    from matplotlib.image import imread

    try:
        img = imread(io.BytesIO(data), format="png")
    except Exception as exc:  # noqa: BLE001 - Pillow raises several kinds
        raise InputError(f"not a readable PNG ({type(exc).__name__})") from None
    if img.dtype != np.uint8:
        img = np.rint(img * 255).astype(np.uint8)
    return img[..., :3] if img.ndim == 3 else np.stack([img] * 3, axis=-1)


def write_png(path: str | Path, image: np.ndarray) -> Path:
    """Atomic PNG write of a uint8 image."""
    return write_atomic(path, encode_png(image))


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (mschecker.fsio.atomic_write_bytes); returns the path."""
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
def nan_pixels(decoded: np.ndarray) -> np.ndarray:
    """(H, W) bool: the pixels of a (1, 3, H, W) VAE output with a NaN in any channel."""
    return np.isnan(np.asarray(decoded, np.float64)).any(axis=1)[0]


def difference_image(actual: np.ndarray, expected: np.ndarray, gain: float | None = None,
                     undefined: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """|actual - expected| amplified to be visible: x gain (default: so the largest difference maps to 255,
    at most x50 so that 1-level rounding noise does not look like a failure). Returns (uint8 image, gain).

    ``undefined``: an (H, W) mask of pixels where either image was NaN before its uint8 rendering (which draws
    NaN as 0). Their difference has no value: they are drawn 0, as the NaN image itself is, and left out of the
    gain; without the mask |0 - reference| would show the reference image as the "difference" of a NaN image.
    The panel's caller says NaN over it (side_by_side's nan_fractions)."""
    a, e = _same_images(actual, expected)
    d = np.abs(a - e)
    if undefined is not None:
        d[np.asarray(undefined, bool)] = 0.0
    if gain is None:
        top = float(d.max())
        gain = 1.0 if top == 0 else min(50.0, 255.0 / top)
    return np.clip(np.rint(d * gain), 0, 255).astype(np.uint8), float(gain)


def side_by_side(images: Sequence[np.ndarray], labels: Sequence[str], nan_fractions: Sequence[float] | None = None):
    """A figure with the uint8 images (H, W, 3) next to each other, pixels shown as blocks (nearest), each titled
    with its label; a panel whose source image held NaN (``nan_fractions[i]`` > 0, the share of NaN pixels)
    says "NaN" in its title and across the image."""
    n = len(images)
    fig = new_figure(2.6 * n + 0.4, 3.3)
    axes = fig.subplots(1, n, squeeze=False)[0]
    for i, (ax, img, label) in enumerate(zip(axes, images, labels)):
        ax.imshow(img, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        frac = nan_fractions[i] if nan_fractions is not None else 0.0
        if frac > 0:
            ax.set_title(f"{label}\nNaN in {frac:.0%} of pixels", fontsize=9, color=PALETTE[1])
            ax.text(0.5, 0.5, "NaN", transform=ax.transAxes, ha="center", va="center", fontsize=28,
                    fontweight="bold", color="white",
                    bbox={"facecolor": PALETTE[1], "alpha": 0.85, "edgecolor": "none"})
        else:
            ax.set_title(label, fontsize=9)
    return fig


# ---------------------------------------------------------------------------------------------- plot
def plot_series(series: dict[str, Sequence[float]], *, title: str, xlabel: str, ylabel: str, log_y: bool = True,
                x: Sequence[float] | None = None):
    """A line plot of each series against ``x`` (default 1, 2, ...), log y axis by default, legend, grid.

    Non-finite values (and non-positive ones on a log axis) cannot be drawn as points: they are marked with an
    'x' on the top edge of the plot in the series' colour, and the legend counts them ("2 steps NaN/inf")."""
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    if log_y:
        ax.set_yscale("log")
    for k, (name, values) in enumerate(series.items()):
        v = np.asarray(values, np.float64)
        xs = np.asarray(x, np.float64) if x is not None else np.arange(1, v.size + 1, dtype=np.float64)
        ok = np.isfinite(v) & ((v > 0) if log_y else True)
        bad = int((~ok).sum())
        colour, marker = PALETTE[k % len(PALETTE)], MARKERS[k % len(MARKERS)]
        label = name + (f" ({bad} not drawable: NaN/inf{' or <= 0' if log_y else ''})" if bad else "")
        ax.plot(xs, np.where(ok, v, np.nan), color=colour, marker=marker, markersize=4, linewidth=1.5, label=label)
        if bad:
            ax.plot(xs[~ok], np.ones(bad), linestyle="none", marker="x", markersize=8, color=colour,
                    transform=ax.get_xaxis_transform(), clip_on=False)
    drawn = np.concatenate([np.asarray(v, np.float64).ravel() for v in series.values()] or [np.zeros(0)])
    drawn = drawn[np.isfinite(drawn) & (drawn > 0)] if log_y else drawn[np.isfinite(drawn)]
    if log_y and drawn.size:  # whole decades, at least one, so the axis has labelled major ticks
        lo, hi = math.floor(math.log10(drawn.min())), math.ceil(math.log10(drawn.max()))
        ax.set_ylim(10.0 ** lo, 10.0 ** max(hi, lo + 1))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.4)
    if x is None:
        ax.xaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="best", fontsize=8)
    return fig
