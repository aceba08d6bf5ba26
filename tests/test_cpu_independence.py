"""The goldens hold on every CPU the suite can pretend to be: numpy's SIMD levels, glibc without FMA, and
OpenBLAS's CPU kernels.

The kernel and SD goldens are bit-exact for everything mschecker computes itself (reference/elementary.py and
reference/exp64.py: the transcendentals are IEEE operations, not numpy's SIMD-dispatched or glibc's ifunc'd
code) and bounded where OpenBLAS's kernel orders a sum (tests/sd/test_sd_goldens.py BLAS_KERNEL_BOUND,
KernelInfo.reference_bits_bound). Each case re-runs the golden tests in a fresh interpreter:
- every numpy SIMD level below this CPU's (NPY_DISABLE_CPU_FEATURES: the dispatch targets from the highest
  down), with OpenBLAS pinned to the goldens' Haswell kernel, so that the comparison is bit for bit;
- glibc's non-FMA code (GLIBC_TUNABLES) at numpy's baseline: what a pre-Haswell x86-64 computes;
- OpenBLAS's other kernels this CPU can run (the bound checks); the whole set under `-m slow`.
About 15 s per case on two cores.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_TESTS = ["tests/kernels/test_goldens.py", "tests/sd/test_sd_goldens.py"]
#: glibc >= 2.33 spells the CPU features without _Usable, older glibc with it; unknown names are ignored.
GLIBC_NO_FMA = "glibc.cpu.hwcaps=-AVX512F,-AVX2,-FMA,-AVX2_Usable,-FMA_Usable,-AVX512F_Usable"


def _numpy_dispatch() -> tuple[list[str], list[str]]:
    """(dispatch targets this numpy was built with and this CPU has, in ascending order; baseline targets)."""
    try:
        from numpy._core import _multiarray_umath as m  # numpy >= 2: the tables numpy.show_runtime prints
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as m

    return [t for t in m.__cpu_dispatch__ if m.__cpu_features__.get(t)], list(m.__cpu_baseline__)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def _levels() -> list[pytest.param]:
    found, _ = _numpy_dispatch()
    params = []
    for i in reversed(range(len(found))):  # disable found[i:]: the CPU seen as one of level found[i - 1]
        below = found[i - 1] if i else "baseline"
        params.append(pytest.param(" ".join(found[i:]), id=f"numpy-{below}"))
    return params


def _coretypes() -> tuple[list[str], list[str]]:
    """(OpenBLAS kernels run by default, the rest run under -m slow) that this CPU can execute."""
    flags = _cpu_flags()
    quick, slow = ["Sandybridge"], ["Nehalem", "Prescott"]
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
        quick.append("SkylakeX")
        if "avx512_bf16" in flags:
            slow.append("Cooperlake")
    return quick, slow


def _run_goldens(env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **env_extra}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           *GOLDEN_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _check(r: subprocess.CompletedProcess, what: str) -> None:
    assert r.returncode == 0, f"goldens under {what}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _cpu_flags() & {"avx2"},
                    reason="x86-64 Linux with AVX2: OpenBLAS's Haswell kernel pins the goldens' BLAS sums")
@pytest.mark.parametrize("disabled", _levels())
def test_goldens_bit_exact_at_every_numpy_simd_level(disabled):
    _check(_run_goldens({"NPY_DISABLE_CPU_FEATURES": disabled, "OPENBLAS_CORETYPE": "Haswell"}),
           f"NPY_DISABLE_CPU_FEATURES={disabled!r}")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _cpu_flags() & {"avx2"},
                    reason="glibc tunables on x86-64 Linux with AVX2 (the Haswell pin)")
def test_goldens_bit_exact_with_glibc_without_fma_at_numpy_baseline():
    found, _ = _numpy_dispatch()
    _check(_run_goldens({"NPY_DISABLE_CPU_FEATURES": " ".join(found), "OPENBLAS_CORETYPE": "Haswell",
                         "GLIBC_TUNABLES": GLIBC_NO_FMA}), "glibc without FMA, numpy baseline")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS core types: x86-64 Linux")
@pytest.mark.parametrize("coretype", _coretypes()[0] + [pytest.param(c, marks=pytest.mark.slow)
                                                        for c in _coretypes()[1]])
def test_goldens_within_their_bounds_on_other_blas_kernels(coretype):
    _check(_run_goldens({"OPENBLAS_CORETYPE": coretype}), f"OPENBLAS_CORETYPE={coretype}")


def test_levels_cover_the_baseline():
    """The level list ends at numpy's baseline (every dispatch target disabled), so a CPU with only the
    baseline features is among the machines the goldens were checked on."""
    found, baseline = _numpy_dispatch()
    assert baseline
    if found:
        assert _levels()[-1].values[0] == " ".join(found)
