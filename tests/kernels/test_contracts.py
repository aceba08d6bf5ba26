"""Every registered variant meets its contract on every strategy; every planted bug is caught.

Generic over the registry: a new kernel entry is tested here without a new test. Family-specific checks
(exhaustive fp16 sweeps, memory measurements) live beside this file.
"""
from __future__ import annotations

import pytest
from hypothesis import given

from mschecker.kernels.suite import find_breaking_case
from mschecker.kernels.check import check_case
from tests.kernels.contract_asserts import assert_meets_contract
from mschecker.kernels.registry import get_kernel, registry

_REG = registry()
CORRECT = [
    pytest.param(k.name, v.name, s, id=f"{k.name}-{v.name}-{s}")
    for k in _REG.values() for v in k.correct_variants for s in k.strategies
]
BUGS = [pytest.param(k.name, v.name, id=f"{k.name}-{v.name}") for k in _REG.values() for v in k.planted_bugs]


@pytest.mark.parametrize("kernel,variant,strategy", CORRECT)
def test_variant_meets_contract(kernel, variant, strategy):
    info = get_kernel(kernel)

    @given(info.strategies[strategy]())
    def meets(case):
        assert_meets_contract(info, variant, case)

    meets()


@pytest.mark.parametrize("kernel,variant", BUGS)
def test_planted_bug_is_caught(kernel, variant):
    info = get_kernel(kernel)
    bug = info.variant(variant)
    case = find_breaking_case(info, bug, 300)
    if case is None:
        pytest.fail(f"{kernel}/{variant} ({bug.planted_bug}) was not caught by strategy "
                    f"{bug.catch_with or 'generic'}: the contract or the strategy is too weak")
    assert not check_case(info, bug, case).passed


@pytest.mark.parametrize("kernel", sorted(_REG))
def test_golden_cases_meet_contracts(kernel):
    info = get_kernel(kernel)
    for case in info.golden_cases():
        for v in info.correct_variants:
            assert_meets_contract(info, v, case)
