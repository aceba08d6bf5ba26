"""Suite-wide settings: BLAS determinism and the hypothesis profile.

BLAS: goldens that hold BLAS results (float64 reference MatMul/Conv, fp32-accumulated NPU kernels) are recorded
with one OpenBLAS thread and its Haswell (AVX2) kernels. OpenBLAS picks its summation order by thread count and
by CPU kernel (measured: forcing the Sandybridge kernels breaks 4 bit-exact golden tests), so the suite pins both
before numpy loads, on x86-64 CPUs with AVX2; explicit user settings win.

COLUMNS is unset (pytest-xdist sets it to 80 in its workers).

Hypothesis profiles come from mschecker.testing.hypothesis_profiles: `ci` (derandomized, default here) and `thorough`.
Choose with MSCHECKER_HYPOTHESIS_PROFILE=thorough or `pytest --mschecker-hypothesis-profile=thorough`.
"""
import os
import platform
import sys


def _pin_blas() -> None:
    if "numpy" in sys.modules:  # too late to influence OpenBLAS; the goldens tests will say if bits differ
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if platform.machine() in ("x86_64", "AMD64"):
        try:
            with open("/proc/cpuinfo") as f:
                has_avx2 = " avx2" in f.read()
        except OSError:
            has_avx2 = False
        if has_avx2:
            os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")


_pin_blas()
# pytest-xdist sets COLUMNS=80 in its workers; the CLI honours COLUMNS outside a terminal, so the CLI tests (which
# read names in tables) would see them cut under -n but not without it. The suite runs as a CI log would: unset.
os.environ.pop("COLUMNS", None)

from mschecker.testing.hypothesis_profiles import load_profile  # noqa: E402  (after the BLAS pin: it may import numpy)

load_profile(default="ci")
