"""Device layouts: every supported format round-trips bit-exactly, matches an independent written-out transform
(plain loops over host elements placing each one by the format's definition), matches hand-written tiny cases
spelled out literally (so a transposed axis fails), and every bad input is a one-line LayoutError."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, strategies as st

from mschecker.devdump import layouts as L
from mschecker.devdump.layouts import LayoutError

DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.int8),
          np.dtype(np.int32)]
BLOCKED = [f for f in L.SUPPORTED if f not in L.PASS_THROUGH]


def _ceil(a, b):
    return -(-a // b)


def _random(shape, dtype, seed):
    """Random bit patterns of `dtype` (NaNs included): round trips are compared bit for bit."""
    n = math.prod(shape) * dtype.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape + (a.dtype.itemsize,))


def _counting(shape):
    """1, 2, 3, ... in host (row-major) order: distinct and nonzero, so padding and misplacement both show."""
    return np.arange(1, math.prod(shape) + 1, dtype=np.float32).reshape(shape)


# ---- hypothesis shapes per format ----

_small = st.integers(1, 3)
_c = st.integers(1, 40)  # crosses C0 = 4, 16 and 32 boundaries
_n = st.integers(1, 20)  # crosses N0 = 16


def _host_shapes(fmt):
    if fmt in L.PASS_THROUGH:
        return st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
    if fmt in ("NC1HWC0", "NC1HWC0_C04", "C1HWNCoC0"):
        return st.tuples(_small, _c, _small, _small)
    if fmt == "FRACTAL_Z":
        return st.tuples(_n, _c, _small, _small)
    if fmt == "NDC1HWC0":
        return st.tuples(_small, _c, _small, st.integers(1, 2), _small)
    if fmt == "FRACTAL_Z_3D":
        return st.tuples(_n, _c, st.integers(1, 2), st.integers(1, 2), st.integers(1, 2))
    assert fmt == "FRACTAL_NZ"
    lead = st.lists(st.integers(1, 3), min_size=0, max_size=2)
    return st.one_of(st.tuples(st.integers(1, 40)),
                     st.tuples(lead, st.integers(1, 40), st.integers(1, 40)).map(lambda t: (*t[0], t[1], t[2])))


_c0s = st.sampled_from([None, 4, 16, 32])


@st.composite
def _grouped(draw):
    """(host shape, groups) of a grouped conv weight: host (groups*cout, cin, H, W)."""
    groups = draw(st.integers(2, 5))
    cout = draw(st.one_of(st.integers(1, 6), st.sampled_from([8, 16, 32])))
    cin = draw(st.one_of(st.integers(1, 6), st.sampled_from([8, 16, 32])))
    return (groups * cout, cin, draw(st.integers(1, 2)), draw(st.integers(1, 2))), groups


# ---- round trips ----

@pytest.mark.parametrize("fmt", L.SUPPORTED)
@given(data=st.data(), dtype=st.sampled_from(DTYPES), c0=_c0s, seed=st.integers(0, 2**32 - 1))
def test_round_trip_bit_exact(fmt, data, dtype, c0, seed):
    shape = data.draw(_host_shapes(fmt))
    x = _random(shape, dtype, seed)
    flat, ds = L.to_device(x, fmt, c0=c0)
    assert flat.ndim == 1 and flat.dtype == dtype and flat.size == math.prod(ds)
    assert ds == L.device_shape(fmt, shape, dtype=dtype, c0=c0)
    back = L.to_host(flat, fmt, ds, shape, dtype=dtype)
    assert back.shape == shape and back.dtype == dtype
    np.testing.assert_array_equal(_bits(back), _bits(x))
    if fmt not in L.PASS_THROUGH:  # the padding is zeros
        mask = np.ones(flat.size, bool)
        mask[L.host_index(fmt, shape, ds)] = False
        assert not _bits(flat)[mask].any()


@given(case=_grouped(), dtype=st.sampled_from(DTYPES), c0=_c0s, seed=st.integers(0, 2**32 - 1))
def test_round_trip_fractal_z_groups(case, dtype, c0, seed):
    shape, groups = case
    x = _random(shape, dtype, seed)
    flat, ds = L.to_device(x, "FRACTAL_Z", c0=c0, sub_format=groups)
    back = L.to_host(flat, "FRACTAL_Z", ds, shape, dtype=dtype, sub_format=groups)
    np.testing.assert_array_equal(_bits(back), _bits(x))


def test_default_c0_is_the_cube_size_by_dtype():
    assert L.device_shape("NC1HWC0", (1, 3, 1, 1), dtype=np.float16)[-1] == 16
    assert L.device_shape("NC1HWC0", (1, 3, 1, 1), dtype=np.float32)[-1] == 16
    assert L.device_shape("NC1HWC0", (1, 3, 1, 1), dtype=ml_dtypes.bfloat16)[-1] == 16
    assert L.device_shape("NC1HWC0", (1, 3, 1, 1), dtype=np.int8)[-1] == 32
    assert L.device_shape("NC1HWC0", (1, 3, 1, 1), dtype=np.uint8)[-1] == 32
    assert L.device_shape("NC1HWC0_C04", (1, 3, 1, 1), dtype=np.float16)[-1] == 4
    assert L.device_shape("FRACTAL_NZ", (3, 40), dtype=np.int8) == (2, 1, 16, 32)
    assert L.to_device(np.zeros((1, 3, 1, 1), np.int8), "NC1HWC0")[1] == (1, 1, 1, 1, 32)


@pytest.mark.parametrize("fmt", L.PASS_THROUGH)
def test_pass_through_rank0_and_zero_size(fmt):
    x = np.float32(7.5)
    flat, ds = L.to_device(x, fmt)
    assert ds == () and flat.tolist() == [7.5]
    back = L.to_host(flat, fmt, ds, ())
    assert back.shape == () and back == x
    z = np.zeros((2, 0, 3), np.float16)
    flat, ds = L.to_device(z, fmt)
    assert ds == (2, 0, 3) and flat.size == 0
    assert L.to_host(flat, fmt, ds, (2, 0, 3)).shape == (2, 0, 3)


@pytest.mark.parametrize("fmt", BLOCKED)
def test_blocked_zero_size_dims(fmt):
    rank = {"NDC1HWC0": 5, "FRACTAL_Z_3D": 5, "FRACTAL_NZ": 3}.get(fmt, 4)
    for zero_axis in range(rank):
        shape = tuple(0 if i == zero_axis else 3 for i in range(rank))
        flat, ds = L.to_device(np.zeros(shape, np.float16), fmt)
        assert L.to_host(flat, fmt, ds, shape).shape == shape


# ---- independent written-out transforms: loops over host elements, device position from the definition ----

def _ref_nc1hwc0(x, c0, groups):
    n, c, h, w = x.shape
    dev = np.zeros((n, _ceil(c, c0), h, w, c0), x.dtype)
    for i, j, k, l in np.ndindex(*x.shape):
        dev[i, j // c0, k, l, j % c0] = x[i, j, k, l]
    return dev.reshape(-1), dev.shape


def _ref_ndc1hwc0(x, c0, groups):
    n, c, d, h, w = x.shape
    dev = np.zeros((n, d, _ceil(c, c0), h, w, c0), x.dtype)
    for i, j, dd, k, l in np.ndindex(*x.shape):
        dev[i, dd, j // c0, k, l, j % c0] = x[i, j, dd, k, l]
    return dev.reshape(-1), dev.shape


def _ref_fractal_z(x, c0, groups):
    if groups > 1:
        return _ref_fractal_z_groups(x, c0, groups)
    n, c, h, w = x.shape
    c1, n1 = _ceil(c, c0), _ceil(n, 16)
    flat = np.zeros(c1 * h * w * n1 * 16 * c0, x.dtype)
    npad = n1 * 16
    for i, j, k, l in np.ndindex(*x.shape):
        pos = (j // c0) * (h * w * npad * c0) + k * (w * npad * c0) + l * (npad * c0) + i * c0 + j % c0
        flat[pos] = x[i, j, k, l]
    return flat, (c1 * h * w, n1, 16, c0)


def _ref_fractal_z_groups(x, cube_k, groups):
    """FRAC_Z_TO_NCHW_WITH_GROUPS written out as in GE (e_mult uses lcm(cout, 16) / cout)."""
    n, cin, h, w = x.shape
    cout = n // groups
    e_mult = min(math.lcm(math.lcm(cin, cube_k) // cin, math.lcm(cout, 16) // cout), groups)
    cin_opt = _ceil(e_mult * cin, cube_k) * cube_k
    cout_opt = _ceil(e_mult * cout, 16) * 16
    c1 = cin_opt // cube_k
    g_dim = _ceil(groups, e_mult)
    flat = np.zeros(g_dim * c1 * h * w * cout_opt * cube_k, x.dtype)
    host = x.reshape(-1)
    for g in range(groups):
        for c in range(cin):
            for hh in range(h):
                for ww in range(w):
                    for nn in range(cout):
                        e = g % e_mult
                        dst_ci, dst_co, src_co = e * cin + c, e * cout + nn, g * cout + nn
                        dst = ((g // e_mult) * c1 * h * w * cout_opt * cube_k
                               + (dst_ci // cube_k) * h * w * cout_opt * cube_k + hh * w * cout_opt * cube_k
                               + ww * cout_opt * cube_k + dst_co * cube_k + dst_ci % cube_k)
                        flat[dst] = host[src_co * cin * h * w + c * h * w + hh * w + ww]
    return flat, (g_dim * c1 * h * w, cout_opt // 16, 16, cube_k)


def _ref_fractal_z_3d(x, c0, groups):
    n, c, d, h, w = x.shape
    c1, n1 = _ceil(c, c0), _ceil(n, 16)
    dev = np.zeros((d, c1, h, w, n1 * 16, c0), x.dtype)
    for i, j, dd, k, l in np.ndindex(*x.shape):
        dev[dd, j // c0, k, l, i, j % c0] = x[i, j, dd, k, l]
    return dev.reshape(-1), (d * c1 * h * w, n1, 16, c0)


def _ref_fractal_nz(x, c0, groups):
    lead, (h, w) = (x.shape[:-2], x.shape[-2:]) if x.ndim >= 2 else ((), (1, x.shape[0]))
    x3 = x.reshape(-1, h, w)
    w1, h1 = _ceil(w, c0), _ceil(h, 16)
    flat = np.zeros(x3.shape[0] * w1 * h1 * 16 * c0, x.dtype)
    for t, k, l in np.ndindex(*x3.shape):
        flat[t * (w1 * h1 * 16 * c0) + (l // c0) * (h1 * 16 * c0) + k * c0 + l % c0] = x3[t, k, l]
    return flat, lead + (w1, h1, 16, c0)


def _ref_c1hwncoc0(x, c0, groups):
    n, c, h, w = x.shape
    dev = np.zeros((_ceil(c, c0), h, w, n, c0, c0), x.dtype)
    for i, j, k, l in np.ndindex(*x.shape):
        dev[j // c0, k, l, i, j % c0, j % c0] = x[i, j, k, l]
    return dev.reshape(-1), dev.shape


def _ref_pass_through(x, c0, groups):
    return x.reshape(-1).copy(), x.shape


REFERENCE = {
    **{f: _ref_pass_through for f in L.PASS_THROUGH},
    "NC1HWC0": _ref_nc1hwc0, "NC1HWC0_C04": _ref_nc1hwc0, "NDC1HWC0": _ref_ndc1hwc0,
    "FRACTAL_Z": _ref_fractal_z, "FRACTAL_Z_3D": _ref_fractal_z_3d, "FRACTAL_NZ": _ref_fractal_nz,
    "C1HWNCoC0": _ref_c1hwncoc0,
}


def test_reference_covers_every_supported_format():
    assert set(REFERENCE) == set(L.SUPPORTED)


def _check_against_reference(fmt, x, c0, groups=1):
    want_c0 = c0 if c0 is not None else (4 if fmt == "NC1HWC0_C04" else L.cube_size(x.dtype))
    ref_flat, ref_ds = REFERENCE[fmt](x, want_c0, groups)
    flat, ds = L.to_device(x, fmt, c0=c0, sub_format=groups)
    assert ds == tuple(ref_ds)
    np.testing.assert_array_equal(_bits(flat), _bits(ref_flat))  # data placed alike, padding zero alike
    assert np.count_nonzero(ref_flat) == np.count_nonzero(x)
    back = L.to_host(ref_flat, fmt, ref_ds, x.shape, sub_format=groups)
    np.testing.assert_array_equal(_bits(back), _bits(x))


@pytest.mark.parametrize("fmt", L.SUPPORTED)
@given(data=st.data(), c0=_c0s, dtype=st.sampled_from([np.dtype(np.float32), np.dtype(np.int8)]))
def test_matches_written_out_transform(fmt, data, c0, dtype):
    shape = data.draw(_host_shapes(fmt))
    x = _counting(shape).astype(dtype) if dtype == np.float32 else (_counting(shape) % 127 + 1).astype(dtype)
    _check_against_reference(fmt, x, c0)


@given(case=_grouped(), c0=_c0s)
def test_fractal_z_groups_matches_written_out_transform(case, c0):
    shape, groups = case
    _check_against_reference("FRACTAL_Z", _counting(shape), c0, groups)


@pytest.mark.parametrize("shape, groups, c0", [
    ((24, 2, 1, 1), 3, 4),  # e_mult = 2 < groups: two group blocks
    ((64, 16, 2, 1), 4, 16),  # cin, cout multiples of the cube: e_mult = 1, one group per block
    ((12, 3, 1, 2), 4, 16),  # cout = 3: e_mult = min(16, 4) = 4, all groups in one block
    ((10, 5, 2, 2), 2, 32),
])
def test_fractal_z_groups_fixed_cases(shape, groups, c0):
    _check_against_reference("FRACTAL_Z", _counting(shape), c0, groups)


# ---- hand-written tiny cases, expected buffers spelled out ----

def _dense(size, nonzero):
    out = np.zeros(size, np.float32)
    for pos, value in nonzero.items():
        out[pos] = value
    return out


LITERAL = [
    # host[0,c,h,w] = 1 + 4c + 2h + w; device (1, 1, 2, 2, 4), order h, w, c
    ("NC1HWC0", (1, 3, 2, 2), 4, 1, (1, 1, 2, 2, 4),
     [1, 5, 9, 0, 2, 6, 10, 0, 3, 7, 11, 0, 4, 8, 12, 0]),
    # host[0,c,0,w] = 1 + 2c + w; C1 = 2 is the outer block
    ("NC1HWC0", (1, 5, 1, 2), 4, 1, (1, 2, 1, 2, 4),
     [1, 3, 5, 7, 2, 4, 6, 8, 9, 0, 0, 0, 10, 0, 0, 0]),
    # host[0,c,h,0] = 1 + 2c + h; C1 outside H
    ("NC1HWC0", (1, 5, 2, 1), 4, 1, (1, 2, 2, 1, 4),
     [1, 3, 5, 7, 2, 4, 6, 8, 9, 0, 0, 0, 10, 0, 0, 0]),
    # host[0,c,h,0] = 1 + 2c + h; C0 = 4 by default
    ("NC1HWC0_C04", (1, 2, 2, 1), None, 1, (1, 1, 2, 1, 4), [1, 3, 0, 0, 2, 4, 0, 0]),
    # host[0,c,d,h,0] = 1 + 4c + 2d + h; device (N, D, C1, H, W, C0)
    ("NDC1HWC0", (1, 2, 2, 2, 1), 4, 1, (1, 2, 1, 2, 1, 4),
     [1, 5, 0, 0, 2, 6, 0, 0, 3, 7, 0, 0, 4, 8, 0, 0]),
    # host[0,c,d,0,0] = 1 + 2c + d; D outside C1
    ("NDC1HWC0", (1, 5, 2, 1, 1), 4, 1, (1, 2, 2, 1, 1, 4),
     [1, 3, 5, 7, 9, 0, 0, 0, 2, 4, 6, 8, 10, 0, 0, 0]),
    ("ND", (2, 3), None, 1, (2, 3), [1, 2, 3, 4, 5, 6]),
    ("NCHW", (1, 2, 1, 2), None, 1, (1, 2, 1, 2), [1, 2, 3, 4]),
    # host[n,c,0,w] = 1 + 6n + 2c + w; (C1*H*W, N1, 16, C0): pos = w*64 + n*4 + c
    ("FRACTAL_Z", (2, 3, 1, 2), 4, 1, (2, 1, 16, 4),
     {0: 1, 1: 3, 2: 5, 4: 7, 5: 9, 6: 11, 64: 2, 65: 4, 66: 6, 68: 8, 69: 10, 70: 12}),
    # host[0,c,h,0] = 1 + 2c + h; C1 outside H: pos = (c1*2 + h)*64 + c%4
    ("FRACTAL_Z", (1, 5, 2, 1), 4, 1, (4, 1, 16, 4),
     {0: 1, 1: 3, 2: 5, 3: 7, 64: 2, 65: 4, 66: 6, 67: 8, 128: 9, 192: 10}),
    # host[0,0,h,w] = 1 + 3h + w; H outside W: pos = (h*3 + w)*64
    ("FRACTAL_Z", (1, 1, 2, 3), 4, 1, (6, 1, 16, 4), {0: 1, 64: 2, 128: 3, 192: 4, 256: 5, 320: 6}),
    # 3 groups of cout=1, cin=2, cube 16: e_mult = 3, pos = g*16 (dst_co) + 2g + c (dst_ci)
    ("FRACTAL_Z", (3, 2, 1, 1), 16, 3, (1, 1, 16, 16), {0: 1, 1: 2, 18: 3, 19: 4, 36: 5, 37: 6}),
    # host[0,c,d,0,0] = 1 + 2c + d; device (D, C1, H, W, Npad, C0): pos = (d*2 + c//4)*64 + c%4
    ("FRACTAL_Z_3D", (1, 5, 2, 1, 1), 4, 1, (4, 1, 16, 4),
     {0: 1, 1: 3, 2: 5, 3: 7, 64: 9, 128: 2, 129: 4, 130: 6, 131: 8, 192: 10}),
    # host[h,w] = 1 + 5h + w; device (W1, H1, 16, W0): pos = (w//4)*64 + h*4 + w%4
    ("FRACTAL_NZ", (2, 5), 4, 1, (2, 1, 16, 4), {0: 1, 1: 2, 2: 3, 3: 4, 64: 5, 4: 6, 5: 7, 6: 8, 7: 9, 68: 10}),
    ("FRACTAL_NZ", (2, 1, 1), 4, 1, (2, 1, 1, 16, 4), {0: 1, 64: 2}),  # batch stride W1*H1*16*W0
    ("FRACTAL_NZ", (3,), 4, 1, (1, 1, 16, 4), {0: 1, 1: 2, 2: 3}),  # 1-D: one row
    ("FRACTAL_NZ", (17, 1), 4, 1, (1, 2, 16, 4), {4 * h: h + 1 for h in range(17)}),  # H1 = 2
    # host[n,c,0,0] = 1 + 2n + c; device (C1, H, W, N, Co, C0), data on the Co == C0 diagonal
    ("C1HWNCoC0", (2, 2, 1, 1), 4, 1, (1, 1, 1, 2, 4, 4), {0: 1, 5: 2, 16: 3, 21: 4}),
]


@pytest.mark.parametrize("fmt, shape, c0, groups, ds, expected", LITERAL,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in LITERAL])
def test_literal_cases(fmt, shape, c0, groups, ds, expected):
    x = _counting(shape)
    size = math.prod(ds)
    want = _dense(size, expected) if isinstance(expected, dict) else np.array(expected, np.float32)
    flat, got_ds = L.to_device(x, fmt, c0=c0, sub_format=groups)
    assert got_ds == ds
    np.testing.assert_array_equal(flat, want)
    np.testing.assert_array_equal(L.to_host(want, fmt, ds, shape, sub_format=groups), x)


def test_literal_groups_with_two_blocks():
    """24 = 3 groups x cout 8, cin 2, cube 4: e_mult = 2, so group 2 starts a second block of 16*4 elements."""
    x = _counting((24, 2, 1, 1))
    flat, ds = L.to_device(x, "FRACTAL_Z", c0=4, sub_format=3)
    assert ds == (2, 1, 16, 4) and np.count_nonzero(flat) == 48
    # pos = (g//2)*64 + (e*8 + n)*4 + e*2 + c with e = g % 2; value = (g*8 + n)*2 + c + 1
    assert flat[64 + 3 * 4 + 1] == 40  # g=2, n=3, c=1
    assert flat[(8 + 7) * 4 + 2] == 31  # g=1, n=7, c=0
    assert flat[(0 + 5) * 4 + 1] == 12  # g=0, n=5, c=1


# ---- errors: always a one-line LayoutError ----

def _raises(fn, *args, **kwargs) -> str:
    with pytest.raises(LayoutError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message
    return message


def test_layout_error_is_a_value_error():
    assert issubclass(LayoutError, ValueError)


@pytest.mark.parametrize("fmt", L.SUPPORTED)
def test_wrong_flat_size(fmt):
    shape = {"NDC1HWC0": (1, 3, 2, 2, 2), "FRACTAL_Z_3D": (1, 3, 2, 2, 2)}.get(fmt, (1, 3, 2, 2))
    flat, ds = L.to_device(_counting(shape), fmt)
    for bad in (flat[:-1], np.concatenate([flat, flat[:1]])):
        msg = _raises(L.to_host, bad, fmt, ds, shape)
        assert fmt in msg and str(ds) in msg


@pytest.mark.parametrize("fmt", [f for f in BLOCKED if f != "FRACTAL_NZ"])
def test_wrong_rank_host(fmt):
    for shape in [(), (3,), (2, 3), (1, 2, 3), (1, 2, 3, 4, 5, 6)]:
        rank = 5 if fmt in ("NDC1HWC0", "FRACTAL_Z_3D") else 4
        if len(shape) == rank:
            continue
        msg = _raises(L.to_device, np.zeros(shape, np.float16), fmt)
        assert fmt in msg and str(shape) in msg
        _raises(L.device_shape, fmt, shape)
        _raises(L.to_host, np.zeros(16, np.float16), fmt, (1, 1, 1, 1, 16), shape)


def test_fractal_nz_rank0():
    _raises(L.to_device, np.float16(1), "FRACTAL_NZ")
    _raises(L.to_host, np.zeros(256, np.float16), "FRACTAL_NZ", (1, 1, 16, 16), ())


@pytest.mark.parametrize("fmt", ["NHWC", "HWCN", "FRACTAL_Z_C04", "NDHWC", "nd", "FORMAT_ND", "", None, 3])
def test_unknown_format(fmt):
    assert not L.is_supported(fmt)
    msg = _raises(L.to_device, np.zeros((1, 2, 3, 4)), fmt)
    assert repr(fmt) in msg
    _raises(L.to_host, np.zeros(24), fmt, (1, 2, 3, 4), (1, 2, 3, 4))
    _raises(L.device_shape, fmt, (1, 2, 3, 4))
    _raises(L.host_index, fmt, (1, 2, 3, 4))


INCONSISTENT = [
    ("NC1HWC0", (1, 2, 2, 2, 16), (1, 3, 2, 2)),  # C1 = 2 for C = 3
    ("NC1HWC0", (1, 1, 2, 2, 16), (1, 17, 2, 2)),  # C1 = 1 for C = 17
    ("NC1HWC0", (1, 1, 2, 3, 16), (1, 3, 3, 2)),  # H and W swapped
    ("NC1HWC0", (1, 1, 2, 2), (1, 3, 2, 2)),  # device rank
    ("NC1HWC0", (), (1, 3, 2, 2)),
    ("NC1HWC0", (1, 1, 2, 2, 0), (1, 3, 2, 2)),  # C0 = 0
    ("NC1HWC0_C04", (1, 2, 2, 2, 4), (1, 3, 2, 2)),
    ("NDC1HWC0", (1, 1, 2, 2, 2, 16), (1, 3, 2, 2, 2)),  # D and C1 swapped
    ("FRACTAL_Z", (4, 1, 16, 16), (17, 3, 2, 2)),  # N1 = 2 for N = 17
    ("FRACTAL_Z", (8, 1, 16, 16), (16, 3, 2, 2)),  # C1*H*W = 4
    ("FRACTAL_Z", (4, 1, 0, 16), (16, 3, 2, 2)),  # N0 = 0
    ("FRACTAL_Z_3D", (8, 1, 16, 16), (16, 3, 1, 2, 2)),
    ("FRACTAL_NZ", (1, 1, 16, 16), (17, 16)),  # H1 = 2 for H = 17
    ("FRACTAL_NZ", (2, 1, 16, 16), (16, 16)),  # W1
    ("FRACTAL_NZ", (3, 1, 1, 16, 16), (2, 16, 16)),  # batch
    ("FRACTAL_NZ", (16, 16), (16, 16)),  # device rank < 4
    ("C1HWNCoC0", (1, 2, 2, 1, 16, 16), (2, 3, 2, 1)),  # N and W swapped
    ("C1HWNCoC0", (1, 2, 2, 1, 4, 16), (1, 3, 2, 2)),  # Co != C0
    ("ND", (2, 3), (3, 3)),  # element counts differ
    ("NCHW", (24,), (1, 2, 3, 5)),
]


@pytest.mark.parametrize("fmt, ds, hs", INCONSISTENT)
def test_inconsistent_device_shape(fmt, ds, hs):
    flat = np.zeros(math.prod(ds), np.float16)
    msg = _raises(L.to_host, flat, fmt, ds, hs)
    assert fmt in msg and str(tuple(ds)) in msg and str(tuple(hs)) in msg
    _raises(L.host_index, fmt, hs, ds)


def test_fractal_nz_batch_dims_may_be_merged():
    """A dump may fold the batch dims: only their element count has to agree."""
    x = _counting((2, 3, 5, 7))
    flat, ds = L.to_device(x, "FRACTAL_NZ", c0=16)
    assert ds == (2, 3, 1, 1, 16, 16)
    np.testing.assert_array_equal(L.to_host(flat, "FRACTAL_NZ", (6, 1, 1, 16, 16), x.shape), x)


def test_groups_must_divide_n():
    msg = _raises(L.to_device, np.zeros((5, 2, 1, 1), np.float16), "FRACTAL_Z", sub_format=2)
    assert "groups" in msg
    _raises(L.to_host, np.zeros(256, np.float16), "FRACTAL_Z", (1, 1, 16, 16), (5, 2, 1, 1), sub_format=2)
    _raises(L.to_device, np.zeros((4, 2, 1, 1, 1), np.float16), "FRACTAL_Z_3D", sub_format=2)


def test_bad_arguments():
    x = np.zeros((1, 3, 2, 2), np.float16)
    flat, ds = L.to_device(x, "NC1HWC0")
    _raises(L.to_device, x, "NC1HWC0", c0=0)
    _raises(L.to_device, x, "NC1HWC0", c0=-4)
    _raises(L.to_device, x, "NC1HWC0", c0=2.5)
    _raises(L.to_device, x, "NC1HWC0", dtype="no-such-type")
    _raises(L.to_host, flat, "NC1HWC0", ds, x.shape, dtype=np.float32)  # dtype disagrees with the buffer
    _raises(L.to_host, flat, "NC1HWC0", ds, (1, -3, 2, 2))
    _raises(L.to_host, flat, "NC1HWC0", ds, "1,3,2,2")
    _raises(L.to_host, flat, "NC1HWC0", (1, 1, 2, 2.0, 16), x.shape)
    _raises(L.to_host, flat, "NC1HWC0", ds, x.shape, sub_format="2")
    _raises(L.to_host, flat.tobytes()[:-1], "NC1HWC0", ds, x.shape, dtype=np.float16)


def test_bytes_buffer_is_read_as_dtype():
    x = _counting((1, 3, 2, 2)).astype(np.float16)
    flat, ds = L.to_device(x, "NC1HWC0")
    np.testing.assert_array_equal(L.to_host(flat.tobytes(), "NC1HWC0", ds, x.shape, dtype=np.float16), x)


@pytest.mark.parametrize("fmt", BLOCKED)
def test_any_perturbed_device_dim_is_rejected(fmt):
    """Change one device dim that is not C0/N0 (those are read from the dump): a LayoutError, never garbage."""
    shape = {"NDC1HWC0": (2, 3, 2, 2, 2), "FRACTAL_Z_3D": (2, 3, 2, 2, 2), "FRACTAL_NZ": (2, 17, 5)}.get(
        fmt, (2, 3, 2, 2))
    _, ds = L.to_device(_counting(shape), fmt)
    fixed = {len(ds) - 1} | ({len(ds) - 2} if fmt.startswith("FRACTAL") else set())
    for axis in set(range(len(ds))) - fixed:
        for delta in (-1, 1):
            bad = list(ds)
            bad[axis] += delta
            _raises(L.to_host, np.zeros(math.prod(bad), np.float32), fmt, tuple(bad), shape)


_fuzz_shape = st.lists(st.integers(0, 6), min_size=0, max_size=6).map(tuple)


@given(fmt=st.sampled_from(list(L.SUPPORTED) + ["NHWC", "FRACTAL_Z_C04"]), hs=_fuzz_shape, ds=_fuzz_shape,
       extra=st.sampled_from([0, 0, -1, 1]), sub_format=st.integers(0, 4))
def test_fuzz_only_layout_errors(fmt, hs, ds, extra, sub_format):
    flat = np.zeros(max(math.prod(ds) + extra, 0), np.float16)
    try:
        out = L.to_host(flat, fmt, ds, hs, sub_format=sub_format)
    except LayoutError as exc:
        assert "\n" not in str(exc)
    else:
        assert out.shape == hs and flat.size == math.prod(ds)
