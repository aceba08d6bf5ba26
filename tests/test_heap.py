"""mschecker.heap: freed memory kept for the next run (glibc), measured by the page faults of a repeated allocation.

Each case runs in a fresh interpreter (the setting is process-wide): allocate and fill a 256 MB array, free it,
allocate and fill it again. With glibc's defaults the second fill faults every page in again (the block was an
mmap, returned on free); with keep_freed_memory() the heap block is reused and the second fill faults (almost) none.
numpy's transparent-huge-page advice is turned off in the child so that faults count 4 KiB pages.
"""
import subprocess
import sys

import pytest

CHILD = r"""
import resource, sys
import numpy as np
from mschecker.heap import keep_freed_memory
np._core.multiarray._set_madvise_hugepage(False)
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
a = np.empty(1 << 25); a.fill(1.0); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.empty(1 << 25); b.fill(2.0)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

PAGES = (1 << 25) * 8 // 4096  # 65,536 pages of 4 KiB


def _second_fill_faults(mode: str, env=None) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, env=env)
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_reused_without_faults():
    applied, faults = _second_fill_faults("keep")
    if not applied:
        pytest.skip("not glibc: keep_freed_memory does nothing here")
    assert faults < PAGES // 100, faults
    _, default_faults = _second_fill_faults("default")  # the comparison can fail: glibc's default refaults
    assert default_faults > PAGES // 2, default_faults


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_users_own_malloc_variables_win():
    import os

    applied, _ = _second_fill_faults("keep", env={**os.environ, "MALLOC_MMAP_MAX_": "65536"})
    assert applied is False


def test_the_cli_applies_it(monkeypatch):
    from mschecker import cli, heap

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    assert cli.main(["kernels", "--help"]) == 0  # dispatched (then argparse's --help)
    assert calls == [1]


TOP_CHILD = r"""
import sys
import numpy as np
from mschecker.heap import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
def rss_mib():
    return int([l for l in open("/proc/self/status") if l.startswith("VmRSS:")][0].split()[1]) // 1024
a = np.empty(5 << 26); a.fill(1.0); del a  # 2.5 GiB, the last block of the heap: its free top
print(rss_mib())
"""


@pytest.mark.parametrize("how", ["keep", "env"])
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_free_top_above_2_gib_is_kept(how):
    """The free top of the heap stays in the process however large it is (a 2 GiB trim threshold gave a 2.5 GiB
    one back, and the float64 reference's 64x64 step faulted its attention tensors in again on every run);
    through keep_freed_memory() and through KEEP_FREED_ENV (the benchmarks' runners)."""
    import os

    from mschecker import heap

    env = {**os.environ, **heap.KEEP_FREED_ENV} if how == "env" else None
    out = subprocess.run([sys.executable, "-c", TOP_CHILD, "keep" if how == "keep" else "none"],
                         capture_output=True, text=True, check=True, env=env)
    probe = subprocess.run([sys.executable, "-c", "from mschecker.heap import keep_freed_memory as k; print(k())"],
                           capture_output=True, text=True, check=True)
    if probe.stdout.strip() != "True":
        pytest.skip("not glibc: keep_freed_memory does nothing here")
    assert int(out.stdout) > 2 * 1024, out.stdout
    if how == "env":
        return
    trimmed = subprocess.run([sys.executable, "-c", TOP_CHILD, "none"], capture_output=True, text=True, check=True,
                             env={**os.environ, "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2 ** 31 - 1)})
    assert int(trimmed.stdout) < 1024, trimmed.stdout  # the comparison can fail: a 2 GiB threshold gives it back
