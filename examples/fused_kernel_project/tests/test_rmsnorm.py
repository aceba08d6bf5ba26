"""fusedkern's test suite: the fused fp16 RMSNorm against its float64 reference, contract and goldens.

Everything numerical comes from mschecker: the reference comparison and its report (assert_close_to_reference),
the error contract (fusedkern.checks.RMSNORM_CONTRACT), adversarial inputs (mschecker.kernels.strategies), the
registry-driven property check (check_kernel) and the goldens (the mschecker_golden fixture).
Run `FUSEDKERN_BUG=1 pytest` to watch the planted bug fail every one of them with a readable report.
"""
import numpy as np
from hypothesis import given

from mschecker.kernels import strategies as S
from mschecker.testing import assert_close_to_reference, check_kernel, check_planted_bugs

from fusedkern import rmsnorm
from fusedkern.checks import EPS, RMSNORM_CONTRACT
from fusedkern.reference import rmsnorm_reference


def llm_like_activations(seed: int, rows: int = 8, hidden: int = 512):
    """Typical transformer activations: unit-scale noise plus a few outlier channels of magnitude ~300-1000."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hidden))
    outliers = rng.choice(hidden, 4, replace=False)
    x[:, outliers] *= rng.uniform(300.0, 1000.0, 4)
    w = 1.0 + 0.1 * rng.standard_normal(hidden)
    return x.astype(np.float16), w.astype(np.float16)


def test_kernel_meets_its_contract_on_every_strategy():
    """Hypothesis search over generic, large-magnitude and cancelling inputs (strategies in fusedkern.checks)."""
    check_kernel("fused_rmsnorm")


def test_planted_bug_variant_is_caught():
    """The suite can fail: the registered fp16-accumulation variant breaks the contract on some input."""
    check_planted_bugs("fused_rmsnorm")


def test_outlier_channels_match_reference():
    x, w = llm_like_activations(seed=0)
    assert_close_to_reference(rmsnorm(x, w, EPS), rmsnorm_reference, inputs=(x, w), params={"eps": EPS},
                              contract=RMSNORM_CONTRACT, name="rmsnorm(outlier channels)")


@given(S.large_norm_inputs(shape=S.shapes(min_dims=2, max_side=32), dtype="float16"))
def test_large_magnitude_rows(x):
    """Composing a public strategy directly: rows whose squares overflow fp16 (|x| >= 256)."""
    x = x.astype(np.float16)
    w = np.ones(x.shape[-1], dtype=np.float16)
    assert_close_to_reference(rmsnorm(x, w, EPS), rmsnorm_reference, inputs=(x, w), params={"eps": EPS},
                              contract=RMSNORM_CONTRACT, name="rmsnorm(large rows)")


def test_matches_golden(mschecker_golden):
    """Pinned output for a fixed input. Tolerance: 1 fp16 ULP, because the same kernel on another CPU may sum
    the fp32 squares in another order (SIMD width), which moves the fp32 result by a few u_fp32 and can flip
    the final fp16 rounding by one step when it lands near a tie; anything larger is a real change."""
    x, w = llm_like_activations(seed=1, rows=4, hidden=256)
    mschecker_golden.check("rmsnorm_outliers_seed1", rmsnorm(x, w, EPS), ulp=1)
