"""Two-sided emulation checks across the registry: the variant is not only close enough, it computes the bits of
its documented algorithm.

check_case (and so tests/kernels/test_contracts.py and `mschecker kernels`) already applies the two-sided check to
every drawn case (mschecker/kernels/twosided.py). Here: the registry-wide bookkeeping (which correct variants have a
definition, and why the others do not), the elementwise kernels on every fp16 and bf16 input, the convolutions
(whose fp32 sums the BLAS orders by GEMM shape) on inputs whose fp32 sums are exact in any order, and the planted
"too accurate" bugs: each meets its twin's one-sided contract and only the two-sided check catches it.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mschecker.dtypes import resolve_dtype
from mschecker.kernels.suite import draw_cases
from mschecker.kernels.check import check_case, run_variant
from mschecker.kernels.entries.conv import conv_cases
from mschecker.kernels.registry import Case, get_kernel, registry
from mschecker.kernels.twosided import definition_mismatches, emulation_problems, storage_violations

_REG = registry()

# Correct variants without a bit-level definition, and why. A new variant must not join this list silently.
NO_DEFINITION = {
    **{("conv2d", v): "fp32 sums ordered by the BLAS per GEMM shape: bit-checked on exactly summable inputs below"
       for v in ("fp16_fp32acc", "bf16_fp32acc", "fp32")},
    ("conv2d_winograd", "fp16_fp32acc"): "direct conv, as conv2d: exactly summable inputs below",
    ("conv2d_winograd", "winograd_f2x3_fp32"): "F(2x2,3x3)'s transforms (entries 0, +-1, +-1/2) are exact in fp32 "
    "on exactly summable inputs: bit-checked below",
    **{("conv2d_winograd", v): "transform intermediates round (F(4x4,3x3)'s 1/6, 1/12, 1/24; fp16 transforms past 11 "
       "bits): held to storage dtype and contract only" for v in ("winograd_f2x3_fp16", "winograd_f4x3_fp32",
                                                                   "winograd_f4x3_fp16")},
    **{("conv_transpose2d", v): "GEMM + scatter-add in fp32: exactly summable inputs below"
       for v in ("fp16_fp32acc_scatter", "bf16_fp32acc_scatter", "fp32_scatter", "fp16_fp32acc_zero_insert")},
}


def test_every_correct_variant_has_a_definition_or_a_reason():
    missing = {(k.name, v.name) for k in _REG.values() for v in k.correct_variants if v.definition is None}
    assert missing == set(NO_DEFINITION), (
        f"new variants without a definition: {sorted(missing - set(NO_DEFINITION))}; "
        f"listed but now defined (drop them from NO_DEFINITION): {sorted(set(NO_DEFINITION) - missing)}")


# ------------------------------------------------------------------------- elementwise: every fp16/bf16 input
ELEMENTWISE = [pytest.param(k.name, v.name, id=f"{k.name}-{v.name}") for k in _REG.values()
               if k.family == "activations" for v in k.correct_variants if v.dtype in ("float16", "bfloat16")]


@pytest.mark.parametrize("kernel,variant", ELEMENTWISE)
def test_elementwise_bits_on_every_16_bit_input(kernel, variant):
    """All 65,536 bit patterns of the storage format (NaNs, infs, subnormals, -0 included)."""
    info = get_kernel(kernel)
    v = info.variant(variant)
    x = np.arange(65536, dtype=np.uint16).view(resolve_dtype(v.dtype))
    rounded, outs = run_variant(v, Case((x,)))
    assert emulation_problems(info, v, rounded, outs) == []


# ----------------------------------------------------------------------------- convolutions: exact fp32 sums
def _exactly_summable(case: Case, seed: int) -> Case:
    """The case's shapes and attributes with values whose products and every partial sum are exact in fp32 (and
    float64): x in 2^-2 steps up to 2, w in 2^-3 steps up to 1, bias in 2^-5 steps; with K <= 12 * 9 terms the
    sums stay below 2^8 with 2^-5 resolution, 13 bits. fp32 results are then order-independent, and the output's
    rounding to storage (fp16 keeps 11 bits, bf16 8) is where a dropped or moved rounding shows."""
    rng = np.random.default_rng(seed)
    steps = (2.0 ** -2, 2.0 ** -3, 2.0 ** -5)
    inputs = tuple((rng.integers(-8, 9, np.shape(a)) * s).astype(np.float16) for a, s in zip(case.inputs, steps))
    return Case(inputs, case.params, case.label)


def _exact_definition(info, case: Case, storage):
    """fp32(exact conv without bias) + bias in fp32, one rounding to storage: the documented rounding points.
    The float64 reference is exact on these inputs (its sums stay far below 2^53)."""
    x, w = (a.astype(np.float64) for a in case.inputs[:2])
    y = info.reference(x, w, None, **case.params).astype(np.float32)  # exact: 13-bit values
    if len(case.inputs) > 2:
        y = y + case.inputs[2].astype(np.float32).reshape(1, -1, 1, 1)
    return y.astype(storage)


CONVS = [pytest.param(k, v, id=f"{k}-{v}") for k, v in NO_DEFINITION
         if k in ("conv2d", "conv_transpose2d") or v in ("fp16_fp32acc", "winograd_f2x3_fp32")]


@pytest.mark.parametrize("kernel,variant", CONVS)
@settings(max_examples=25, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_conv_bits_on_exactly_summable_inputs(kernel, variant, data):
    info = get_kernel(kernel)
    v = info.variant(variant)
    case = data.draw(conv_cases(transpose=kernel == "conv_transpose2d", winograd=variant.startswith("winograd"),
                                max_cg=4))
    case = _exactly_summable(case, data.draw(st.integers(0, 2 ** 32 - 1)))
    rounded, outs = run_variant(v, case)
    want = _exact_definition(info, rounded, resolve_dtype(v.dtype))
    assert storage_violations(outs[0], v.dtype) == 0
    assert definition_mismatches(outs[0], want) == 0, f"{kernel}/{variant} on {case.label}"


# ------------------------------------------------------------------------------ planted "too accurate" bugs
TOO_ACCURATE = [("attention", "bug_p_unrounded"), ("matmul", "bug_fp32acc_as_fp16acc"),
                ("gemm", "bug_fp32acc_as_fp16acc"), ("reduce_sum", "bug_pairwise_sold_as_recursive"),
                ("reduce_mean", "bug_pairwise_sold_as_recursive"), ("layer_norm", "bug_fp32stats_as_fp16stats"),
                ("group_norm", "bug_fp32stats_as_fp16stats"), ("softmax", "bug_no_final_rounding")]


@pytest.mark.parametrize("kernel,variant", [pytest.param(k, v, id=f"{k}-{v}") for k, v in TOO_ACCURATE])
def test_too_accurate_bug_passes_its_contract_and_fails_two_sided(kernel, variant):
    """The class of bug a one-sided contract cannot see: on every drawn case the planted bug meets the contract it
    is held to; the two-sided check flags it on some case."""
    info = get_kernel(kernel)
    bug = info.variant(variant)
    flagged = 0
    for case in draw_cases(info.strategies["generic"](), 12):
        result = check_case(info, bug, case)
        assert all(o.passed for o in result.outputs), result.describe()
        flagged += bool(result.emulation)
    assert flagged, f"{kernel}/{variant}: the two-sided check never flagged the planted bug"
