"""The float64 reference's Winograd F(2x2, 3x3) route (reference/winograd64.py, driven by reference/conv.py).

- Bound: against an exactly rounded convolution (`exact_conv`: one math.fsum per output over exact products of
  fp32-exact inputs), every output obeys the componentwise bound derived in reference/winograd64.py,
      |y - exact| <= gamma_{C_in/g + 21} (S + |b|) + 2^-53 |exact|,
  S = |A^T| (sum_c (|G||g_c||G^T|) o (|B^T||d_c||B|)) |A| computed here independently (np.pad + per-tile einsum on
  the absolute matrices); the extra gamma_1 and 2^-53|exact| are the bias addition's rounding. Geometries cover
  pads on any side (wider than the kernel too), odd output sizes (cropped padding tiles), groups, several images,
  and tiny budgets that force one tile row per chunk and one output channel per filter block.
- SD-like accuracy (C_in = 320, x ~ N(0, 1), w ~ N(0, 1/(9 C_in)), fp32-exact): on sampled outputs against fsum,
  Winograd's max error < 1e-13 of max|y| (the reference must stay 9+ orders of magnitude more accurate than the
  fp16 kernels it judges) and <= 10x the im2col route's error (the brief's budget for a larger-constant route).
- Planted bugs the bound check catches: a flipped sign in B^T, a dropped 1/2 in G, a flipped sign in A^T, and
  the input tiles taken one column off.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from mschecker.dtypes import gamma
from mschecker.reference import conv as ref
from mschecker.reference import winograd64 as wg

from .test_conv_fastpath import exact_conv

U64 = 2.0 ** -53


def winograd_abs_term(x, w, pads, group):
    """S of the bound: |A^T| (sum_c (|G||g_c||G^T|) o (|B^T||d_c||B|)) |A| per output, shape of the conv output."""
    n, _, h, wd = x.shape
    c_out, cg = w.shape[:2]
    cog = c_out // group
    pt, pl, pb, pr = pads
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    xp = np.pad(np.abs(x), ((0, 0), (0, 0), (pt, 2 * th + 2 - h - pt), (pl, 2 * tw + 2 - wd - pl)))
    d = sliding_window_view(xp, (4, 4), axis=(2, 3))[:, :, ::2, ::2]  # (n, C, th, tw, 4, 4)
    bt, g_, at = np.abs(wg.BT), np.abs(wg.G), np.abs(wg.AT)
    v = np.einsum("ak,ncijkl,bl->ncijab", bt, d, bt)
    u = np.einsum("ak,ockl,bl->ocab", g_, np.abs(w), g_)
    s = np.empty((n, c_out, 2 * th, 2 * tw))
    for g in range(group):
        m = np.einsum("ocab,ncijab->noijab", u[g * cog:(g + 1) * cog], v[:, g * cg:(g + 1) * cg])
        t = np.einsum("ra,noijab,sb->noirjs", at, m, at)
        s[:, g * cog:(g + 1) * cog] = t.reshape(n, cog, 2 * th, 2 * tw)
    return s[:, :, :oh, :ow]


def _inputs(seed, n, c_in, c_out, hw, group=1, bias=True, w_scale=1.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c_in) + hw).astype(np.float32).astype(np.float64)
    w = (rng.standard_normal((c_out, c_in // group, 3, 3)) * w_scale).astype(np.float32).astype(np.float64)
    b = rng.standard_normal(c_out).astype(np.float32).astype(np.float64) if bias else None
    return x, w, b


@pytest.fixture
def winograd_always(monkeypatch):
    """Every 3x3 stride-1 conv takes the Winograd route, and the test can see that it did."""
    monkeypatch.setattr(ref, "WINOGRAD_MIN_TILES", 1)
    monkeypatch.setattr(ref, "WINOGRAD_MIN_CHANNELS", 1)
    calls = []
    real = ref._winograd_gemms
    monkeypatch.setattr(ref, "_winograd_gemms", lambda *a: calls.append(1) or real(*a))
    return calls


def excess(x, w, b, pads, group) -> float:
    """max |conv2d - exact| / bound (<= 1 passes), bound as in the module docstring."""
    want = exact_conv(x, w, b, (1, 1), pads, (1, 1), group)
    got = ref.conv2d(x, w, b, pads=pads, group=group)
    if got.shape != want.shape:
        return np.inf
    s = winograd_abs_term(x, w, pads, group) + (np.abs(b).reshape(1, -1, 1, 1) if b is not None else 0)
    bound = gamma(w.shape[1] + 21, U64) * s + U64 * np.abs(want) + 1e-300
    return float(np.max(np.abs(got - want) / bound))


CASES = [  # (n, C_in, C_out, (H, W), pads, group)
    (2, 4, 6, (6, 6), (1, 1, 1, 1), 1),
    (1, 3, 5, (7, 8), (1, 1, 1, 1), 1),  # odd output height: the last tile row is cropped
    (3, 4, 6, (9, 9), (0, 1, 2, 0), 2),  # odd width too, asymmetric pads, groups
    (2, 8, 4, (5, 5), (2, 0, 1, 3), 4),
    (1, 2, 3, (3, 4), (0, 0, 0, 0), 1),  # a single output row
    (1, 2, 3, (2, 2), (4, 1, 1, 4), 1),  # pads wider than the kernel: whole tiles of zeros
]


@pytest.mark.parametrize("budgets", [None, 1])
@pytest.mark.parametrize("case", CASES)
def test_winograd_within_bound_of_exact(case, budgets, winograd_always, monkeypatch):
    if budgets:  # one tile row per chunk, one output channel per filter block
        monkeypatch.setattr(ref, "PATCH_CHUNK_BYTES", budgets)
        monkeypatch.setattr(ref, "FILTER_BLOCK_BYTES", budgets)
    n, c_in, c_out, hw, pads, group = case
    x, w, b = _inputs(sum(hw) + c_in, n, c_in, c_out, hw, group)
    assert excess(x, w, b, pads, group) <= 1
    assert excess(x, w, None, pads, group) <= 1
    assert winograd_always


def test_winograd_medium_shape_within_bound(monkeypatch):
    """Default thresholds: 64 input channels, 2 x 8 x 8 tiles take the route on their own."""
    x, w, b = _inputs(7, 2, 64, 3, (16, 15), w_scale=1 / 24)
    assert ref.takes_winograd(w, (1, 1), (1, 1), 2, 16, 15)
    calls = []
    real = ref._winograd_gemms
    monkeypatch.setattr(ref, "_winograd_gemms", lambda *a: calls.append(1) or real(*a))
    assert excess(x, w, b, (1, 1, 1, 1), 1) <= 1
    assert calls


def test_route_choice():
    w3, w1 = np.zeros((8, 64, 3, 3)), np.zeros((8, 64, 1, 1))
    assert ref.takes_winograd(w3, (1, 1), (1, 1), 2, 32, 32)
    assert not ref.takes_winograd(w3, (2, 2), (1, 1), 2, 32, 32)
    assert not ref.takes_winograd(w3, (1, 1), (2, 1), 2, 32, 32)
    assert not ref.takes_winograd(w1, (1, 1), (1, 1), 2, 32, 32)
    assert not ref.takes_winograd(w3, (1, 1), (1, 1), 1, 4, 4)  # 4 tiles: im2col is faster
    assert not ref.takes_winograd(np.zeros((8, 4, 3, 3)), (1, 1), (1, 1), 2, 32, 32)  # 4 channels: likewise


def _sampled_errors(x, w, positions):
    """max |route - fsum| over the sampled outputs for im2col and Winograd, and max |y| there."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    exact = np.array([math.fsum((xp[i, :, p:p + 3, q:q + 3] * w[o]).ravel()) for i, o, p, q in positions])
    idx = tuple(np.array(positions).T)
    out = {}
    for name, tiles in (("direct", 10 ** 9), ("winograd", 1)):
        ref.WINOGRAD_MIN_TILES = tiles
        out[name] = float(np.max(np.abs(ref.conv2d(x, w, pads=(1, 1, 1, 1))[idx] - exact)))
    return out, float(np.max(np.abs(exact)))


def test_sd_like_accuracy_next_to_direct(monkeypatch):
    """C_in = 320 (SD's first stage), x ~ N(0,1), w ~ N(0, 1/(9*320)): products of fp32-exact inputs are exact in
    float64, so fsum over a sample of outputs is the truth rounded once."""
    monkeypatch.setattr(ref, "WINOGRAD_MIN_TILES", ref.WINOGRAD_MIN_TILES)  # restored after the test
    c_in = 320
    x, w, _ = _inputs(11, 1, c_in, 16, (16, 16), bias=False, w_scale=1 / math.sqrt(9 * c_in))
    rng = np.random.default_rng(12)
    positions = [(0, int(rng.integers(16)), int(rng.integers(16)), int(rng.integers(16))) for _ in range(256)]
    errs, ymax = _sampled_errors(x, w, positions)
    print(f"\nSD-like C_in=320: max|err|/max|y| direct {errs['direct'] / ymax:.2e}, "
          f"winograd {errs['winograd'] / ymax:.2e}")
    assert errs["winograd"] < 1e-13 * ymax
    assert errs["winograd"] <= 10 * max(errs["direct"], U64 * ymax)


PLANTED = {
    "BT sign": ("BT", (3, 3), 1.0),     # B^T[3, 3] = -1 -> +1
    "G half dropped": ("G", (1, 0), 1.0),  # G[1, 0] = 1/2 -> 1
    "AT sign": ("AT", (1, 2), 1.0),     # A^T[1, 2] = -1 -> +1
}


@pytest.mark.parametrize("bug", PLANTED)
def test_bound_check_catches_planted_transform_bugs(bug, winograd_always, monkeypatch):
    name, at, value = PLANTED[bug]
    x, w, b = _inputs(5, 2, 4, 6, (6, 7), 1)
    want = exact_conv(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    s = winograd_abs_term(x, w, (1, 1, 1, 1), 1) + np.abs(b).reshape(1, -1, 1, 1)  # the true matrices' bound
    bound = gamma(w.shape[1] + 21, U64) * s + U64 * np.abs(want)
    assert np.max(np.abs(ref.conv2d(x, w, b, pads=(1, 1, 1, 1)) - want) / bound) <= 1
    bad = getattr(wg, name).copy()
    bad[at] = value
    monkeypatch.setattr(wg, name, bad)
    assert np.max(np.abs(ref.conv2d(x, w, b, pads=(1, 1, 1, 1)) - want) / bound) > 1
    assert winograd_always


def test_bound_check_catches_planted_tile_origin_bug(winograd_always, monkeypatch):
    """The tiles read from one column too far right (odd output width: the crop then keeps a shifted map)."""
    real = ref.fill_patches

    def shifted(dst, x, kh, kw, strides, pads, *rest):  # the tiles read one column further left
        return real(dst, x, kh, kw, strides, (pads[0], pads[1] + 1) + tuple(pads[2:]), *rest)

    x, w, b = _inputs(6, 1, 3, 4, (6, 7), 1)
    assert excess(x, w, b, (1, 1, 1, 1), 1) <= 1
    monkeypatch.setattr(ref, "fill_patches", shifted)
    assert excess(x, w, b, (1, 1, 1, 1), 1) > 1
