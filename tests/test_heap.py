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
    assert heap.TRIM_THRESHOLD_BYTES == 2 ** 31 - 1  # mallopt takes an int
