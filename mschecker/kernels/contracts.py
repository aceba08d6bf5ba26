"""Builders for error contracts: the bounds of docs/NUMERICS.md §2-§6 turned into elementwise bound functions.

Every builder returns a `Contract` whose `why` names the bound and its source, so a reader of the registry sees
why a tolerance is what it is. Bounds take (case, reference output, variant) as registry.py describes.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mschecker.dtypes import gamma, is_float, unit_roundoff
from mschecker.kernels.registry import Case, Contract, Variant
from mschecker.dtypes import float_format


def output_rounding(ref, variant: Variant) -> np.ndarray:
    """u_storage * |ref|: the error of rounding an exact result once to the storage format."""
    return unit_roundoff(variant.dtype) * np.abs(ref)


def subnormal_floor(variant: Variant) -> float:
    """One subnormal step (2^-24 in fp16): twice the rounding error u*N below the normal range (docs/NUMERICS.md
    §1), the absolute floor for results rounding to ~0."""
    fmt = float_format(variant.dtype)
    return fmt.smallest_normal * 2.0 ** -fmt.mantissa_bits


def dot_bound(abs_product: Callable[[Case], np.ndarray], inner: Callable[[Case], int],
              *, slack: float = 1.0) -> Contract:
    """|C_hat - C| <= gamma_K(u_acc) |A||B| + u_out |C| (+ subnormal floor).

    abs_product(case) returns |A||B| (elementwise, same shape as the output); inner(case) returns K. Products of
    two fp16 (or bf16) numbers are exact in fp32 (Blanchard et al. 2020), so the accumulation term uses the
    accumulator's u. `slack` multiplies the whole bound and must be justified where it is not 1.
    """

    def bound(case: Case, ref, variant: Variant):
        k = inner(case)
        acc = gamma(k, unit_roundoff(variant.accumulate)) * abs_product(case)
        return slack * (acc + output_rounding(ref, variant)) + subnormal_floor(variant)

    return Contract(bound, "Higham 3.5 with exact fp16/bf16 products (Blanchard et al. 2020): "
                    "gamma_K(u_acc)|A||B| + u_storage|C|" + (f", x{slack}" if slack != 1 else ""))


def baseline_bound(naive: Callable[..., np.ndarray], reference: Callable[..., np.ndarray], *, factor: float = 2.0,
                   why: str) -> Contract:
    """FlashAttention-style contract: error <= factor * (max error of a naive implementation of the same maths).

    The naive implementation runs on the same rounded inputs; its max abs error against the float64 reference
    (over the whole output) sets the scale, plus one storage-ulp floor of the output so that a naive error of 0
    does not demand exactness. docs/NUMERICS.md §9.
    """

    def bound(case: Case, ref, variant: Variant):
        with np.errstate(all="ignore"):
            naive_out = np.asarray(naive(*case.inputs, **case.params), dtype=np.float64)
        finite = np.isfinite(naive_out) & np.isfinite(ref)
        naive_err = float(np.max(np.abs(naive_out - ref)[finite], initial=0.0))
        return factor * naive_err + output_rounding(ref, variant) + subnormal_floor(variant)

    return Contract(bound, why)


def blas_reference_bound(reference: Callable[..., np.ndarray], *, slack: float = 1.0):
    """KernelInfo.reference_bits_bound for a multilinear float64 reference (sums of products: MatMul, Gemm, Conv)
    computed by BLAS, whose summation order is the CPU's BLAS kernel's. Each evaluation is within
    gamma_K(u64) |A||B| of the exact result (Higham 3.5), so two evaluations differ by at most 2 gamma_K(u64)
    |A||B|, and |A||B| is the reference itself on absolute inputs (|alpha|, |beta| for Gemm). K is bounded by the
    largest input's size (every sum has fewer terms) plus 20 roundings of transforms (the float64 Winograd route
    of reference/conv.py, whose transform magnitudes `slack` covers). About 1e-11 relative for the golden
    shapes: a dropped rounding or a wrong epsilon in a reference moves results by far more."""

    def bound(case: Case, refs):
        absolute = tuple(np.abs(np.asarray(x).astype(np.float64)) if is_float(np.asarray(x).dtype) else x
                         for x in case.inputs)
        params = {k: (abs(v) if k in ("alpha", "beta") else v) for k, v in case.params.items()}
        scale = reference(*absolute, **params)
        k = max((np.size(x) for x in case.inputs), default=1) + 20
        factor = 2 * slack * gamma(k, unit_roundoff("float64"))
        if isinstance(scale, (tuple, list)):
            return tuple(factor * np.asarray(s) for s in scale)
        return factor * np.asarray(scale)

    return bound
