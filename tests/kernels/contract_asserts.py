"""A test helper (not shipped: the package's user API is mschecker.testing.check_kernel)."""
from __future__ import annotations

from mschecker.kernels.check import CheckResult, check_case
from mschecker.kernels.registry import Case, KernelInfo, Variant


def assert_meets_contract(info: KernelInfo, variant: Variant | str, case: Case) -> CheckResult:
    """check_case, raising AssertionError with the per-output description when the contract is broken."""
    result = check_case(info, variant, case)
    if not result.passed:
        why = info.contract_of(info.variant(variant) if isinstance(variant, str) else variant).why
        raise AssertionError(result.describe() + f"\n  contract: {why}")
    return result
