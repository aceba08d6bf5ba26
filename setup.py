"""Declares only the optional C extensions; all other metadata is in pyproject.toml.

Each extension is a compiled fast path of a numpy implementation that stays in the package and gives the same
results (bit for bit where the numpy twin says so); mschecker/native.py loads them, checks the constants each
shares with its Python side, and makes a missing one an error under MSCHECKER_REQUIRE_NATIVE=1 (set in CI):
- mschecker._fastcompare: the one-pass kernel of the streaming comparison (mschecker/compare/engine.py);
- mschecker._fastfp16: fp16 loops of the emulated NPU (sequential fp16 sums, fp16 softmax, fp16 binary ops;
  mschecker/fastfp16.py, optimized_kernels/softmax.py);
- mschecker._fastref: the float64 reference's exp and softmax (reference/exp64.py, reference/softmax.py).
They are optional: when no C compiler is available their build fails quietly (optional=True) and numpy runs;
`mschecker --version` says which are active. _fastfp16 makes its results with numpy's C API (an array made in C
costs ~0.1 us, np.empty from Python ~0.4 us: much of a small fp16 node), so its build needs numpy's headers:
pyproject.toml's build requirements name numpy >= 2.0, whose headers target the numpy 1.23 ABI by default, so the
extension loads with every numpy the package allows (>= 1.24).
-ffp-contract=off keeps a*b + c from becoming a fused multiply-add, so every operation rounds exactly as numpy
computes it; no -march=native (portable builds), no -ffast-math (IEEE semantics are required).
"""
import sys

from setuptools import Extension, setup

_args = [] if sys.platform == "win32" else ["-O3", "-std=c99", "-ffp-contract=off"]
_FAST = ("_fastcompare", "_fastfp16", "_fastref")



def _numpy_include() -> list[str]:
    """numpy's C headers (_fastfp16 allocates its results with numpy's C API); none without numpy, and then that
    extension's build fails quietly like any other (optional=True)."""
    try:
        import numpy
    except ImportError:
        return []
    return [numpy.get_include()]


setup(ext_modules=[Extension(f"mschecker.{name}", [f"mschecker/{name}.c"], extra_compile_args=_args, optional=True,
                             include_dirs=_numpy_include())
                   for name in _FAST])
