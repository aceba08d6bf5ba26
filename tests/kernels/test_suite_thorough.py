"""The kernel suite at 10x the default example count (the `thorough` routine): every contract must hold for every
input the strategies can draw, not only for the first 20 per strategy. `mschecker kernels --examples 200` once
failed on correct code (fp16_naive attention: an overflowing score of a masked-out key made its row NaN while the
contract promised a finite bound); this run is what finds such holes. Slow (about 4-5 minutes on two cores):
`python -m pytest -m slow tests/kernels/test_suite_thorough.py`.
"""
from __future__ import annotations

import pytest

from mschecker.commands.kernels import DEFAULT_EXAMPLES
from mschecker.kernel_suite import run_suite

THOROUGH_EXAMPLES = 10 * DEFAULT_EXAMPLES


@pytest.mark.slow
def test_kernel_suite_at_ten_times_the_default_examples():
    report = run_suite(examples=THOROUGH_EXAMPLES)
    problems = [o.first_failure or f"{o.kernel}/{o.variant}: {o.verdict}" for o in report.outcomes if not o.ok]
    assert not problems, "\n".join(problems)
