"""Convert tensors between Ascend device layouts (as stored in ACL/GE dump files) and the host layout.

Why: an Ascend dump holds each tensor as the kernel saw it in device memory, in the device format the graph
compiler chose (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...): axes split into blocks of C0/16 elements, reordered, and
padded with zeros up to whole blocks. To compare a dumped tensor with a host (ONNX-order) reference, the
padding has to be removed using the tensor's original (host) shape, and the axes put back in ND / NCHW / NCDHW
order; the reverse direction (host -> device, zero padding added) builds dump-like buffers for tests.

Design: every layout is ONE function that, for a host shape, computes the flat device-buffer index of every host
element (an int64 array of the host shape, built with numpy broadcasting, no Python loop over elements) and the
device shape. Then ``to_host`` is ``flat[index]`` and ``to_device`` is ``zeros; flat[index] = host``. Memory is
O(host size) int64.

Element mappings follow the semantics of msprobe's C++ converter,
Ascend/mstt:debug/accuracy_tools/msprobe/ccsrc/core/AclTensor.cpp@99c2e0f (C0 default from its
``GetCubeSizeByType``), cross-checked against GraphEngine's format transfers
(mindspore-ai/graphengine: ge/common/formats/format_transfers/format_transfer_fractal_z.cc). Where the two
disagree, the GE (CANN) definition is implemented and a comment says so.

Pass-through formats (host order equals ONNX order: a plain reshape): ND, NCHW, NCDHW, NC, NCL. Other non-fractal
formats (NHWC, HWCN, ...) and FRACTAL_Z_C04 (GE lays it out as (N, H*W*C) rows, not as FRACTAL_Z with C0=4) are
not supported: ``is_supported`` says so and the callers list them as unsupported.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "LayoutError", "SUPPORTED", "PASS_THROUGH", "is_supported", "cube_size", "device_shape", "host_index",
    "to_host", "to_device",
]

CUBE_N = 16  # N0 / H0: the 16-row side of a cube fractal


class LayoutError(ValueError):
    """A layout conversion that cannot be done; the message is one sentence naming format and shapes."""


Shape = tuple  # tuple[int, ...]
# (host_shape, c0, n0, groups) -> (int64 index array of host_shape, device shape)
LayoutFn = Callable[[Shape, int, int, int], "tuple[np.ndarray, Shape]"]


def cube_size(dtype) -> int:
    """C0 by element type, as msprobe's GetCubeSizeByType: 32 for int8/uint8, 64 for int4, else 16."""
    if dtype is None:
        return 16
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise LayoutError(f"unknown element type {dtype!r} for a device layout.") from exc
    if name in ("int8", "uint8"):
        return 32
    if name in ("int4", "uint4"):
        return 64
    return 16


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _grid(shape: Shape) -> tuple:
    """Open int64 index grids (np.ix_) over `shape`: broadcasting them yields arrays of the full shape."""
    return np.ix_(*[np.arange(s, dtype=np.int64) for s in shape])


# ---- one function per layout: (host_shape, c0, n0, groups) -> (index, device_shape) ----

def _pass_through(shape, c0, n0, groups):
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape), shape


def _nc1hwc0(shape, c0, n0, groups):
    """host (N,C,H,W) -> device (N, C1, H, W, C0): host[n,c,h,w] = dev[n, c//C0, h, w, c%C0]."""
    n, c, h, w = shape
    c1 = _ceil(c, c0)
    N, C, H, W = _grid(shape)
    index = (((N * c1 + C // c0) * h + H) * w + W) * c0 + C % c0
    return index, (n, c1, h, w, c0)


def _ndc1hwc0(shape, c0, n0, groups):
    """host (N,C,D,H,W) -> device (N, D, C1, H, W, C0): host[n,c,d,h,w] = dev[n, d, c//C0, h, w, c%C0]."""
    n, c, d, h, w = shape
    c1 = _ceil(c, c0)
    N, C, D, H, W = _grid(shape)
    index = ((((N * d + D) * c1 + C // c0) * h + H) * w + W) * c0 + C % c0
    return index, (n, d, c1, h, w, c0)


def _fractal_z(shape, c0, n0, groups):
    """host (N,C,H,W) conv weight -> device (C1*H*W, N1, N0, C0), i.e. (C1, H, W, Npad, C0) in memory."""
    if groups > 1:
        return _fractal_z_groups(shape, c0, n0, groups)
    n, c, h, w = shape
    c1, n1 = _ceil(c, c0), _ceil(n, n0)
    npad = n1 * n0
    N, C, H, W = _grid(shape)
    index = ((((C // c0) * h + H) * w + W) * npad + N) * c0 + C % c0
    return index, (c1 * h * w, n1, n0, c0)


def _e_mult(cin: int, cout: int, cube_k: int, n0: int, groups: int) -> int:
    """How many groups GE packs into one fractal block. GE's format_transfer_fractal_z.cc (the CANN definition)
    uses lcm(cout, 16) / cout; msprobe's FRAC_Z_TO_NCHW_WITH_GROUPS divides that lcm by cin_ori instead, which
    looks like a bug in msprobe: the GE definition is implemented here."""
    if cin == 0 or cout == 0:  # nothing to place; any packing gives an empty index
        return 1
    return min(math.lcm(math.lcm(cin, cube_k) // cin, math.lcm(cout, n0) // cout), groups)


def _fractal_z_groups(shape, cube_k, n0, groups):
    """FRACTAL_Z of a grouped conv weight, host (groups*cout, cin, H, W) (msprobe FRAC_Z_TO_NCHW_WITH_GROUPS)."""
    n, cin, h, w = shape
    if n % groups:
        raise LayoutError(f"FRACTAL_Z with {groups} groups needs N divisible by the groups, got host shape {shape}.")
    cout = n // groups
    e_mult = _e_mult(cin, cout, cube_k, n0, groups)
    c1 = _ceil(e_mult * cin, cube_k)
    cout_opt = _ceil(e_mult * cout, n0) * n0
    g_dim = _ceil(groups, e_mult)
    N, C, H, W = _grid(shape)
    g, nn = N // max(cout, 1), N % max(cout, 1)
    e = g % e_mult
    dst_ci, dst_co = e * cin + C, e * cout + nn
    index = (((((g // e_mult) * c1 + dst_ci // cube_k) * h + H) * w + W) * cout_opt + dst_co) * cube_k
    index = index + dst_ci % cube_k
    return index, (g_dim * c1 * h * w, cout_opt // n0, n0, cube_k)


def _fractal_z_3d(shape, c0, n0, groups):
    """host (N,C,D,H,W) -> device (D*C1*H*W, N1, N0, C0), i.e. (D, C1, H, W, Npad, C0) in memory.

    This is GE's layout. msprobe's own FRAC_Z3D loop offsets by d*c1hwn1n0c0 + c1*c1hwn1n0c0 (the D stride
    equals the C1 stride there), which would overlap blocks: the GE order D, C1, H, W, N, C0 is implemented."""
    if groups > 1:
        raise LayoutError(f"FRACTAL_Z_3D with groups (sub_format={groups}) is not supported, host shape {shape}.")
    n, c, d, h, w = shape
    c1, n1 = _ceil(c, c0), _ceil(n, n0)
    npad = n1 * n0
    N, C, D, H, W = _grid(shape)
    index = (((((D * c1 + C // c0) * h + H) * w + W) * npad + N) * c0) + C % c0
    return index, (d * c1 * h * w, n1, n0, c0)


def _fractal_nz(shape, c0, n0, groups):
    """host (..., H, W) -> device (..., W1, H1, H0, W0); a 1-D host (W,) is one row (H=1), as msprobe does."""
    lead, (h, w) = (shape[:-2], shape[-2:]) if len(shape) >= 2 else ((), (1, shape[0]))
    times = math.prod(lead)
    w1, h1 = _ceil(w, c0), _ceil(h, n0)
    T, H, W = _grid((times, h, w))
    index = T * (w1 * h1 * n0 * c0) + (W // c0) * (h1 * n0 * c0) + H * c0 + W % c0
    return index.reshape(shape), lead + (w1, h1, n0, c0)


def _c1hwncoc0(shape, c0, n0, groups):
    """host (N,C,H,W) -> device (C1, H, W, N, Co, C0), Co = C0: host[n,c,h,w] = dev[c//C0, h, w, n, c%C0, c%C0]."""
    n, c, h, w = shape
    c1 = _ceil(c, c0)
    N, C, H, W = _grid(shape)
    index = ((((C // c0) * h + H) * w + W) * n + N) * c0 * c0 + (C % c0) * (c0 + 1)
    return index, (c1, h, w, n, c0, c0)


@dataclass(frozen=True)
class _Spec:
    layout: LayoutFn
    rank: int | None  # host rank the format needs; None: any rank (pass-through), -1: at least 1 (NZ)
    c0: int | None = None  # fixed default C0 (the _C04 formats); None: the cube size by dtype
    n0_axis: int | None = None  # device axis holding N0/H0 (read back from a dump's device shape)


_PASS = _Spec(_pass_through, None)
_SPECS: dict[str, _Spec] = {
    "ND": _PASS, "NCHW": _PASS, "NCDHW": _PASS, "NC": _PASS, "NCL": _PASS,
    "NC1HWC0": _Spec(_nc1hwc0, 4),
    "NC1HWC0_C04": _Spec(_nc1hwc0, 4, c0=4),
    "NDC1HWC0": _Spec(_ndc1hwc0, 5),
    "FRACTAL_Z": _Spec(_fractal_z, 4, n0_axis=-2),
    "FRACTAL_Z_3D": _Spec(_fractal_z_3d, 5, n0_axis=-2),
    "FRACTAL_NZ": _Spec(_fractal_nz, -1, n0_axis=-2),
    "C1HWNCoC0": _Spec(_c1hwncoc0, 4),
}
SUPPORTED: tuple = tuple(_SPECS)
PASS_THROUGH: tuple = tuple(name for name, spec in _SPECS.items() if spec is _PASS)


def is_supported(fmt) -> bool:
    """Whether `fmt` (a proto enum name without FORMAT_, e.g. "FRACTAL_NZ") can be converted here."""
    return isinstance(fmt, str) and fmt in _SPECS


def _spec(fmt) -> _Spec:
    if not is_supported(fmt):
        raise LayoutError(f"unsupported device layout {fmt!r}; supported: {', '.join(SUPPORTED)}.")
    return _SPECS[fmt]


def _shape(fmt, shape, what: str) -> Shape:
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError as exc:
        raise LayoutError(f"{fmt} {what} shape {shape!r} is not a sequence of integers.") from exc
    if any(d < 0 for d in dims):
        raise LayoutError(f"{fmt} {what} shape {dims} has a negative dimension.")
    return dims


def _host_shape(fmt, spec: _Spec, host_shape) -> Shape:
    dims = _shape(fmt, host_shape, "host")
    if spec.rank == -1 and not dims:
        raise LayoutError(f"{fmt} needs a host tensor of rank >= 1, got host shape {dims}.")
    if spec.rank is not None and spec.rank >= 0 and len(dims) != spec.rank:
        raise LayoutError(f"{fmt} needs a host tensor of rank {spec.rank}, got host shape {dims}.")
    return dims


def _groups(fmt, sub_format) -> int:
    try:
        groups = operator.index(sub_format)
    except TypeError as exc:
        raise LayoutError(f"{fmt} sub_format {sub_format!r} is not an integer.") from exc
    return groups if fmt in ("FRACTAL_Z", "FRACTAL_Z_3D") and groups > 1 else 1


def _c0(fmt, spec: _Spec, dtype, c0) -> int:
    if c0 is None:
        return spec.c0 if spec.c0 is not None else cube_size(dtype)
    try:
        c0 = operator.index(c0)
    except TypeError as exc:
        raise LayoutError(f"{fmt} C0 {c0!r} is not an integer.") from exc
    if c0 <= 0:
        raise LayoutError(f"{fmt} needs a positive C0, got {c0}.")
    return c0


def _layout(fmt, host_shape, dtype=None, c0=None, sub_format=0, n0=CUBE_N):
    """(spec, host shape, index, device shape) for writing: C0 from `c0`, else the format's or the dtype's."""
    spec = _spec(fmt)
    hs = _host_shape(fmt, spec, host_shape)
    index, ds = spec.layout(hs, _c0(fmt, spec, dtype, c0), n0, _groups(fmt, sub_format))
    return spec, hs, index, tuple(int(d) for d in ds)


def _same_device_shape(fmt, spec: _Spec, given: Shape, expected: Shape) -> bool:
    if spec is _PASS:  # a plain reshape: only the element count has to agree
        return math.prod(given) == math.prod(expected)
    if spec.rank == -1:  # FRACTAL_NZ: the leading (batch) dims only have to hold the same count
        return len(given) >= 4 and given[-4:] == expected[-4:] and math.prod(given[:-4]) == math.prod(expected[:-4])
    return given == expected


def host_index(fmt, host_shape, device_shape=None, *, dtype=None, c0=None, sub_format=0) -> np.ndarray:
    """The flat device-buffer index (int64, of the host shape) of every host element.

    With `device_shape` (a dump's), C0 and N0 are read from it and it must agree with the host shape;
    without it, C0 is `c0`, else the format's fixed one (the _C04 formats: 4), else the cube size of `dtype`."""
    return _checked_layout(fmt, host_shape, device_shape, dtype, c0, sub_format)[1]


def _checked_layout(fmt, host_shape, device_shape, dtype, c0, sub_format):
    """(host shape, index, device shape); with a given device shape, C0/N0 come from it and are checked."""
    if device_shape is None:
        _, hs, index, ds = _layout(fmt, host_shape, dtype, c0, sub_format)
        return hs, index, ds
    spec = _spec(fmt)
    given = _shape(fmt, device_shape, "device")
    hs = _host_shape(fmt, spec, host_shape)
    # every host element has its own device slot: a bigger host is a mismatch (and bounds the index's memory)
    bad = math.prod(hs) > math.prod(given) or (
        spec is not _PASS and (len(given) < 4 or given[-1] <= 0 or given[spec.n0_axis or -1] <= 0))
    if bad:
        raise LayoutError(f"{fmt} device shape {given} is inconsistent with host shape {hs}.")
    c0_dev = None if spec is _PASS else given[-1]
    n0 = CUBE_N if spec.n0_axis is None else given[spec.n0_axis]
    _, hs, index, expected = _layout(fmt, hs, dtype, c0_dev, sub_format, n0)
    if not _same_device_shape(fmt, spec, given, expected):
        raise LayoutError(f"{fmt} device shape {given} is inconsistent with host shape {hs} (expected {expected}).")
    return hs, index, given


def device_shape(fmt, host_shape, *, dtype=None, c0=None, sub_format=0) -> Shape:
    """The device shape GE gives a host tensor of `host_shape` in format `fmt` (see host_index for C0)."""
    return _layout(fmt, host_shape, dtype, c0, sub_format)[3]


def _np_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise LayoutError(f"unknown element type {dtype!r} for a device buffer.") from exc


def _as_flat(flat, dtype) -> np.ndarray:
    """The device buffer as a 1-D array: a bytes-like is read as `dtype`; an array must already have it."""
    want = None if dtype is None else _np_dtype(dtype)
    if isinstance(flat, (bytes, bytearray, memoryview)):
        want = np.dtype(np.uint8) if want is None else want
        nbytes = memoryview(flat).nbytes
        if want.itemsize == 0 or nbytes % want.itemsize:
            raise LayoutError(f"device buffer of {nbytes} bytes is not a whole number of {want} elements.")
        return np.frombuffer(flat, dtype=want)
    arr = np.asarray(flat)
    if want is not None and arr.dtype != want:
        raise LayoutError(f"device buffer has dtype {arr.dtype}, not the given {want}.")
    return arr.reshape(-1)


def _check_size(fmt, arr: np.ndarray, ds: Shape) -> None:
    if arr.size != math.prod(ds):
        raise LayoutError(f"{fmt} device buffer has {arr.size} elements but device shape {ds} needs {math.prod(ds)}.")


def to_host(flat, fmt, device_shape, host_shape, *, dtype=None, sub_format=0) -> np.ndarray:
    """The host tensor (of `host_shape`, padding removed) held by the device buffer `flat` of `device_shape`.

    `flat`: the 1-D device buffer (an array, or bytes read as `dtype`). C0/N0 are read from `device_shape`, which
    must agree with `host_shape` for `fmt`; `sub_format` > 1 is the groups count of a grouped FRACTAL_Z weight.
    Any mismatch is a LayoutError."""
    spec = _spec(fmt)
    arr = _as_flat(flat, dtype)
    if device_shape is not None:  # the buffer size first: it bounds what the index may cost
        _check_size(fmt, arr, _shape(fmt, device_shape, "device"))
    hs, index, ds = _checked_layout(fmt, host_shape, device_shape, arr.dtype, None, sub_format)
    _check_size(fmt, arr, ds)
    if spec is _PASS:
        return arr.reshape(hs).copy()
    return arr[index]


def to_device(host, fmt, *, dtype=None, c0=None, sub_format=0) -> "tuple[np.ndarray, Shape]":
    """(flat device buffer, device shape) of the host tensor `host` in format `fmt`, zero padded.

    C0 is `c0`, else 4 for the _C04 formats, else the cube size of `dtype` (default: host.dtype); the buffer keeps
    host's dtype. `sub_format` > 1 is the groups count of a grouped FRACTAL_Z weight."""
    arr = np.asarray(host)
    spec, hs, index, ds = _layout(fmt, arr.shape, arr.dtype if dtype is None else dtype, c0, sub_format)
    if spec is _PASS:
        return arr.reshape(-1).copy(), ds
    flat = np.zeros(math.prod(ds), dtype=arr.dtype)
    flat[index] = arr
    return flat, ds
