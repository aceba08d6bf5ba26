"""The kernel suite at 10x the default example count (the `thorough` routine): every contract must hold for every
input the strategies can draw, not only for the first 20 per strategy. `mschecker kernels --examples 200` once
failed on correct code (fp16_naive attention: an overflowing score of a masked-out key made its row NaN while the
contract promised a finite bound); this run is what finds such holes. It failed on correct code a second time on
one machine only (a Gemm's two-sided check: its definition handed OpenBLAS's SkylakeX sgemm other operand
layouts than the variant, tests/kernels/test_blas_operand_layout.py), so it also runs under other OpenBLAS CPU
kernels, each in a fresh interpreter (the core type is read when OpenBLAS loads). Slow (about 3-5 minutes per
run on two cores): `python -m pytest -m slow tests/kernels/test_suite_thorough.py`.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mschecker.commands.kernels import DEFAULT_EXAMPLES
from ..test_cpu_independence import _cpu_flags
from mschecker.kernels.suite import run_suite

THOROUGH_EXAMPLES = 10 * DEFAULT_EXAMPLES


@pytest.mark.slow
def test_kernel_suite_at_ten_times_the_default_examples():
    report = run_suite(examples=THOROUGH_EXAMPLES)
    problems = [o.first_failure or f"{o.kernel}/{o.variant}: {o.verdict}" for o in report.outcomes if not o.ok]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS core types: x86-64 Linux")
@pytest.mark.parametrize("coretype", ["Sandybridge", "SkylakeX"])  # the in-process run above has Haswell's
def test_kernel_suite_thorough_on_other_blas_kernels(coretype, tmp_path):
    if coretype == "SkylakeX" and "avx512bw" not in _cpu_flags():
        pytest.skip("OpenBLAS's SkylakeX kernel needs AVX-512")
    env = {**os.environ, "OPENBLAS_CORETYPE": coretype, "OPENBLAS_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", "import sys; from mschecker.cli import main; "
                        f"sys.exit(main(['kernels', '--examples', '{THOROUGH_EXAMPLES}']))"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, f"OPENBLAS_CORETYPE={coretype}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
