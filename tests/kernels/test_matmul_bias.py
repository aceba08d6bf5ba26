"""matmul_bias (issue 21): MatMul/BatchMatMul + 1-D bias as GE's MatMulBiasAddFusionPass fuses it, the bias added
inside the fp32 accumulator and ONE rounding to storage (hicann/ops-nn
matmul/mat_mul_v3/docs/MatMulBiasAddOpenFusionPass.md@3599d1ee38b6f503d27a85061040eaa52251f38a).

- shapes: np.matmul broadcasting, bias (N,) over the rows, a wrong bias shape refused;
- one rounding, bit for bit and independently of any BLAS order: on exactly summable inputs the fused fp16/bf16
  result is the float64 result rounded once; the unfused one (rounded product, then an fp16 add) is not;
- the contract (gamma_{K+1}(u32)(|A||B| + |bias|) + u_storage|C|) is broken by the unfused bug by orders of
  magnitude on bias_cancel, and the bug invents inf where A B overflows fp16 and A B + bias does not;
- the fp32 variant's HF32-style bug breaks the contract on full-precision fp32 operands.
"""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.dtypes import bfloat16
from mschecker.kernels.suite import draw_cases, find_breaking_case
from mschecker.kernels.check import check_case
from mschecker.optimized_kernels import matmul as opt
from mschecker.reference import linalg as ref
from mschecker.kernels.registry import Case, get_kernel

INFO = get_kernel("matmul_bias")
F16 = np.float16


def test_reference_shapes_and_broadcasting():
    rng = np.random.default_rng(0)
    bias = rng.standard_normal(5)
    for a_shape, b_shape, out in [((3, 4), (4, 5), (3, 5)), ((2, 3, 4), (4, 5), (2, 3, 5)),
                                  ((2, 3, 4), (2, 4, 5), (2, 3, 5)), ((4,), (4, 5), (5,))]:
        a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
        y = ref.matmul_bias(a, b, bias)
        assert y.shape == out
        assert np.allclose(y, np.matmul(a, b) + bias, rtol=0, atol=1e-12)
        for v in INFO.correct_variants:
            assert v.fn(a.astype(v.dtype), b.astype(v.dtype), bias.astype(v.dtype)).shape == out


@pytest.mark.parametrize("bias_shape", [(4,), (1, 5), (5, 1), ()])
def test_bias_must_be_one_row_of_n(bias_shape):
    a, b = np.ones((3, 4), F16), np.ones((4, 5), F16)
    with pytest.raises(ValueError, match="bias"):
        opt.matmul_bias_fp16_fp32acc(a, b, np.ones(bias_shape, F16))


@pytest.mark.parametrize("storage,fused,unfused", [
    (F16, opt.matmul_bias_fp16_fp32acc, opt.bug_matmul_bias_after_rounding),
    (bfloat16, opt.matmul_bias_bf16_fp32acc, opt.bug_matmul_bias_bf16_after_rounding)])
def test_one_rounding_on_exactly_summable_inputs(storage, fused, unfused):
    """a, b on a 2^-3 grid up to 4 and bias on a 2^-6 grid: every fp32 partial sum (K <= 64) is exact in any order,
    so the fused result must be fl_storage(A B + bias) exactly, whatever the BLAS; the unfused one rounds A B first
    and differs somewhere."""
    rng = np.random.default_rng(11)
    a = (rng.integers(-32, 33, (16, 48)) / 8).astype(storage)
    b = (rng.integers(-32, 33, (48, 24)) / 8).astype(storage)
    bias = (rng.integers(-4096, 4097, 24) / 64).astype(storage)
    exact = ref.matmul_bias(a, b, bias)
    assert np.array_equal(fused(a, b, bias), exact.astype(storage))
    assert not np.array_equal(unfused(a, b, bias), exact.astype(storage))


def test_unfused_bug_breaks_the_contract_on_both_cancel_flavours():
    """residual: bias = -fl16(row 0 of A B), so row 0 of C is A B's own fp16 rounding residue, which the unfused
    kernel loses entirely (err/bound in the hundreds); rescue: A B > 65504 but A B + bias < 65504: the unfused
    product is inf."""
    bug = INFO.variant("bug_bias_after_rounding")
    cases = draw_cases(INFO.strategies["bias_cancel"](), 40)
    flavours = {"residual": [], "rescue": []}
    for case in cases:
        flavours["rescue" if "rescue" in case.label else "residual"].append(case)
    assert flavours["residual"] and flavours["rescue"]
    residual = [check_case(INFO, bug, c) for c in flavours["residual"]]
    assert max(r.worst_ratio for r in residual) > 100
    for case in flavours["rescue"]:
        r = check_case(INFO, bug, case)
        assert not all(o.passed for o in r.outputs) and r.worst_ratio == np.inf, r.describe()
        good = check_case(INFO, "fp16_fp32acc", case)
        assert good.passed, good.describe()


def test_rescue_golden_case_is_finite_only_when_fused():
    case = INFO.golden_cases()[4]
    a, b, bias = (x.astype(F16) for x in case.inputs)
    assert np.max(np.matmul(a.astype(np.float64), b.astype(np.float64))) > 65504
    assert np.all(np.isfinite(opt.matmul_bias_fp16_fp32acc(a, b, bias)))
    with np.errstate(all="ignore"):
        assert np.any(np.isinf(opt.bug_matmul_bias_after_rounding(a, b, bias)))


def test_fp32_bug_needs_full_precision_operands():
    """fp16-exact operands have 11 significant bits, which a 12-bit cut keeps: the HF32-style bug is invisible on
    them and caught (by the contract, not only the bits) on fp32 operands."""
    bug = INFO.variant("bug_fp32_hf32")
    for case in draw_cases(INFO.strategies["generic"](), 10):
        assert check_case(INFO, bug, case).passed
    case = find_breaking_case(INFO, bug, 50)
    assert case is not None
    assert not all(o.passed for o in check_case(INFO, bug, case).outputs)


def test_contract_counts_the_bias_term():
    """The bound grows with |bias| (one more fp32 term) and K + 1: the same case with a 1000x bias is allowed more,
    and a bias of 0 gives matmul's own bound with K + 1."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((4, 32)).astype(F16), rng.standard_normal((32, 3)).astype(F16)
    small = Case((a, b, np.ones(3, F16)))
    big = Case((a, b, np.full(3, 1000.0, F16)))
    v = INFO.variant("fp16_fp32acc")
    contract = INFO.contract_of(v)
    b_small = contract.bound(small, ref.matmul_bias(*small.inputs), v)
    b_big = contract.bound(big, ref.matmul_bias(*big.inputs), v)
    assert np.all(b_big > b_small)
