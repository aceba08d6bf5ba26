"""fusedkern's kernels in the mschecker op registry: reference, variant, error contract, input strategies.

Importing this module registers "fused_rmsnorm"; then ``mschecker.testing.check_kernel("fused_rmsnorm")``
checks it like mschecker's own kernels, and ``mschecker kernels`` lists it when this module is imported.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import gamma, unit_roundoff
from mschecker.kernels.registry import Case, Contract
from mschecker.testing import planted_bug, register_user_kernel

from .reference import rmsnorm_reference
from .rmsnorm import rmsnorm, rmsnorm_fp16_accumulate

EPS = 1e-6


def _rmsnorm_bound(case: Case, y, variant) -> np.ndarray:
    """|y_hat - y| <= ((1/2) gamma_n(u_acc) + 6 u_acc + u_storage) |y| + subnormal floor, per element.

    Derivation (first order, Higham ch. 3), inputs exact in fp16: squares of fp16 numbers are exact in fp32
    (11-bit significands, 22-bit products); the n-term sum of nonnegative squares has relative error
    <= gamma_{n-1}(u_acc) (recursive worst case; pairwise is smaller); dividing by n, adding eps, sqrt, the
    reciprocal and the two products each add one u_acc, and sqrt halves the relative error of its argument
    (so 1/2 gamma_n + 6 u_acc, one u_acc of margin for second-order terms); rounding the output to fp16 adds
    u_storage |y|; results in fp16's subnormal range are off by at most one subnormal spacing.
    """
    n = case.inputs[0].shape[-1]
    ua = unit_roundoff(variant.accumulate)
    rel = 0.5 * gamma(n, ua) + 6 * ua + unit_roundoff(variant.dtype)
    return rel * np.abs(y) + subnormal_floor(variant)


RMSNORM_CONTRACT = Contract(_rmsnorm_bound, "RMSNorm forward error, fp16 storage with fp32 arithmetic: "
                            "(gamma_n(u_acc)/2 + 6u_acc + u_storage)|y| + subnormal floor (Higham ch. 3)")


def _near_one(w):
    """1 + w, rounded to fp16 again so the weight stays exact in the kernel's storage format."""
    return S.to_storage(1.0 + w, "float16").astype(np.float64)


def rmsnorm_cases(x_family, max_side: int = 64):
    """Cases (x, weight) with x drawn from an mschecker strategy family and weight near 1 (as trained)."""
    def build(shape):
        return S.cases(x_family(shape=shape, dtype="float16"),
                       S.tensors(shape=shape[-1:], dtype="float16", scale=0.5, dist="normal").map(_near_one),
                       eps=EPS, label="rmsnorm")
    return S.shapes(min_dims=1, max_dims=3, max_side=max_side).flatmap(build)


FUSED_RMSNORM = register_user_kernel(
    "fused_rmsnorm",
    reference=rmsnorm_reference,
    variants={
        "fp16_fp32acc": rmsnorm,
        # Registered as a planted bug so the suite proves, on every run, that its contract and strategies can
        # fail: check_planted_bugs must find an input where the fp16 sum of squares breaks the contract.
        "bug_fp16acc": planted_bug(rmsnorm_fp16_accumulate, of="fp16_fp32acc",
                                   what="squares and their mean in fp16: overflow for |x| >= 256",
                                   catch_with="large_norm_inputs"),
    },
    contract=RMSNORM_CONTRACT,
    strategies={
        "generic": rmsnorm_cases(S.tensors),
        "large_norm_inputs": rmsnorm_cases(S.large_norm_inputs),
        "cancellation": rmsnorm_cases(S.cancellation),
    },
    doc="RMSNorm over the last axis, fp16 in/out, fp32 arithmetic (fusedkern.rmsnorm).",
)
