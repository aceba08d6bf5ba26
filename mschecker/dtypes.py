"""Floating-point formats mschecker speaks: names, unit roundoff, range, and ULP distance.

One place for format facts (docs/NUMERICS.md §1) so that every tolerance derives from the same numbers.
bf16 comes from ml_dtypes; numpy's own testing helpers reject it, so ULP distance maps bit patterns to a
sign-magnitude ordinal here.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class FloatFormat:
    """Facts about one binary floating-point format."""

    name: str
    dtype: np.dtype
    bits: int
    mantissa_bits: int  # explicit fraction bits

    @property
    def u(self) -> float:
        """Unit roundoff (half the machine epsilon) for round-to-nearest."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def max(self) -> float:
        return float(_finfo(self.dtype).max)

    @property
    def smallest_normal(self) -> float:
        return float(_finfo(self.dtype).smallest_normal)

    @property
    def uint(self) -> np.dtype:
        return np.dtype(f"uint{self.bits}")


def _finfo(dtype: np.dtype):
    return ml_dtypes.finfo(dtype) if dtype == bfloat16 else np.finfo(dtype)


FORMATS: dict[str, FloatFormat] = {
    "float16": FloatFormat("float16", np.dtype(np.float16), 16, 10),
    "bfloat16": FloatFormat("bfloat16", bfloat16, 16, 7),
    "float32": FloatFormat("float32", np.dtype(np.float32), 32, 23),
    "float64": FloatFormat("float64", np.dtype(np.float64), 64, 52),
}

_ALIASES = {
    "fp16": "float16", "half": "float16", "f16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32", "float": "float32", "single": "float32", "f32": "float32",
    "fp64": "float64", "double": "float64", "f64": "float64",
}

# Non-float dtypes accepted where a tensor dtype is named (tensor I/O, --dtype).
_OTHER = {
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "bool",
}


def resolve_dtype(spec) -> np.dtype:
    """Return the numpy dtype for a name ('fp16', 'bf16', 'float32', 'int64', ...) or a dtype-like object.

    Raises ValueError naming the spec when it is not a dtype mschecker handles.
    """
    if isinstance(spec, str):
        key = spec.strip().lower()
        key = _ALIASES.get(key, key)
        if key in FORMATS:
            return FORMATS[key].dtype
        if key in _OTHER:
            return np.dtype(key)
        raise ValueError(f"unknown dtype {spec!r} (expected one of {sorted(set(FORMATS) | _OTHER)} or an alias such as fp16/bf16)")
    try:
        return np.dtype(spec)
    except TypeError as exc:
        raise ValueError(f"unknown dtype {spec!r}") from exc


def dtype_name(dtype) -> str:
    """Canonical name of a dtype ('bfloat16' for ml_dtypes' bf16, numpy's name otherwise)."""
    dtype = resolve_dtype(dtype)
    return "bfloat16" if dtype == bfloat16 else dtype.name


def float_format(dtype) -> FloatFormat:
    """The FloatFormat of a floating dtype; ValueError for non-float dtypes."""
    name = dtype_name(dtype)
    if name not in FORMATS:
        raise ValueError(f"{name} is not a floating-point format")
    return FORMATS[name]


_IS_FLOAT: dict = {}  # dtype-like -> bool: the executor asks for every node input and output


def is_float(dtype) -> bool:
    """True for the floating formats of FORMATS (fp16, bf16, fp32, fp64; ml_dtypes' bf16 has numpy kind 'V').
    Cached: the graph executor asks for every node input and output."""
    try:
        return _IS_FLOAT[dtype]
    except (KeyError, TypeError):  # TypeError: an unhashable dtype-like, answered without the cache
        pass
    answer = dtype_name(dtype) in FORMATS
    try:
        _IS_FLOAT[dtype] = answer
    except TypeError:
        pass
    return answer


def unit_roundoff(dtype) -> float:
    return float_format(dtype).u


def gamma(n, u: float):
    """Higham's gamma_n = n*u / (1 - n*u); inf where n*u >= 1 (the bound says nothing there)."""
    nu = np.asarray(n, dtype=np.float64) * u
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(nu < 1.0, nu / (1.0 - nu), np.inf)
    return g if g.ndim else float(g)


def round_to(x, dtype) -> np.ndarray:
    """Round (round-to-nearest-even) to a storage format; overflow becomes ±inf as IEEE says."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(resolve_dtype(dtype))


def ordinal(x: np.ndarray) -> np.ndarray:
    """Map floats to sign-magnitude ordinals in the format's own signed integer width.

    Adjacent representable numbers differ by 1 and +0 == -0 == 0. Branch-free: s ^ ((s >> (b-1)) & mag_mask)
    maps a negative bit pattern s to -magnitude - 1; subtracting the sign (s >> (b-1) = -1) adds the 1 back.
    """
    fmt = float_format(x.dtype)
    x = np.asarray(x)
    s = np.ascontiguousarray(x).view(np.dtype(f"int{fmt.bits}"))  # 1-d for a 0-d x: reshaped back below
    sign = s >> (fmt.bits - 1)  # 0 or -1
    out = sign & np.array((1 << (fmt.bits - 1)) - 1, dtype=s.dtype)
    out ^= s
    out -= sign
    return out.reshape(x.shape)


def ulp_distance_exact(a: np.ndarray, b: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """|ordinal(a) - ordinal(b)| as fmt's unsigned integer type, exact for every pair of non-NaN values.

    a and b must already be arrays of fmt's dtype. The true difference of two ordinals is below 2^bits (the
    widest is +inf - (-inf)), so the wrapping signed subtraction max - min, read as unsigned, is exact.
    """
    oa = ordinal(a)
    ob = ordinal(b)
    hi = np.maximum(oa, ob)
    np.minimum(oa, ob, out=oa)
    hi -= oa
    return hi.view(fmt.uint)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype=None) -> np.ndarray:
    """Number of representable values of `dtype` between a and b (after rounding both to it), as int64.

    0 only for equal values (+0 and -0 count as equal). Distances beyond the int64 range (opposite-sign fp64
    extremes) saturate at the int64 maximum; NaN anywhere gives the int64 maximum too, so that it is never
    mistaken for a small distance. dtype defaults to a's dtype.
    """
    dtype = resolve_dtype(dtype if dtype is not None else np.asarray(a).dtype)
    fmt = float_format(dtype)
    fa = np.require(round_to(a, dtype), requirements="C")  # keeps 0-d 0-d (ascontiguousarray won't)
    fb = np.require(round_to(b, dtype), requirements="C")
    fa, fb = np.broadcast_arrays(fa, fb)
    d = ulp_distance_exact(np.array(fa, ndmin=1), np.array(fb, ndmin=1), fmt).reshape(fa.shape)
    imax = np.iinfo(np.int64).max
    d = np.minimum(d.astype(np.uint64), np.uint64(imax)).astype(np.int64)
    nan = np.isnan(fa.astype(np.float64)) | np.isnan(fb.astype(np.float64))
    return np.where(nan, imax, d)
