"""Two-sided emulation checks: a contract bounds a variant's error from above only, so a variant that skips a
rounding it must perform ("too accurate") passes it. These checks hold every run of a variant to its declared
storage format and, where the variant (or its correct twin, for a planted bug) has a definition
(optimized_kernels/definitions.py), to bit-equality with that definition on the same rounded inputs.
kernels.check.check_case applies them to every case it checks, so `mschecker kernels` and the tests do too.
"""
from __future__ import annotations

import numpy as np

from mschecker.dtypes import is_float, resolve_dtype
from mschecker.kernels.registry import Case, KernelInfo, Variant

def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits of a float array (NaNs canonicalized: which NaN payload numpy propagates is not ours)."""
    a = np.ascontiguousarray(a)
    if not is_float(a.dtype):
        return a
    u = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return np.where(np.isnan(a.astype(np.float64)), np.iinfo(u.dtype).max, u)


def storage_violations(out: np.ndarray, dtype: str) -> int:
    """Elements of `out` that are not values of the storage format `dtype` (an output array of another dtype
    counts whole: the kernel skipped its final rounding or changed the declared format)."""
    out = np.asarray(out)
    if out.dtype != resolve_dtype(dtype):
        return int(out.size) or 1
    return 0


def definition_mismatches(out: np.ndarray, want: np.ndarray) -> int:
    """Elements whose bits differ from the definition's (+0 and -0 differ; NaN matches NaN)."""
    out, want = np.asarray(out), np.asarray(want)
    if out.shape != want.shape or out.dtype != want.dtype:
        return int(max(out.size, want.size)) or 1
    return int(np.count_nonzero(_bits(out) != _bits(want)))


def definition_of(info: KernelInfo, variant: Variant):
    """The definition a variant must match bit for bit: its own, or (a planted bug) its correct twin's."""
    if variant.definition is not None or variant.bug_of is None:
        return variant.definition
    return definition_of(info, info.variant(variant.bug_of))


def emulation_problems(info: KernelInfo, variant: Variant, rounded: Case, outs: tuple) -> list[str]:
    """The two-sided check of one run: every output in the variant's storage format, and (where the variant or
    its correct twin has a definition) bit-equal to the definition on the same rounded inputs. A contract only
    bounds the error from above; this catches a kernel that is "too accurate" (skips a rounding it must
    perform). Empty list: both hold."""
    problems = []
    for i, out in enumerate(outs):
        bad = storage_violations(out, variant.dtype)
        if bad:
            problems.append(f"output {i}: dtype {np.asarray(out).dtype}, not the declared storage {variant.dtype}")
    definition = definition_of(info, variant)
    if definition is not None:
        with np.errstate(all="ignore"):
            wants = _as_tuple(definition(*rounded.inputs, **rounded.params))
        for i, (out, want) in enumerate(zip(outs, wants)):
            bad = definition_mismatches(out, want)
            if bad:
                problems.append(f"output {i}: {bad}/{np.asarray(want).size} elements differ in bits from the "
                                f"definition of the documented algorithm")
    return problems


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)
