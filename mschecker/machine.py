"""The machine facts that decide bits mschecker does not compute itself, in one place: the CPU model, numpy's SIMD
level, the BLAS library with its CPU kernel and thread count. `mschecker --version` prints them (CI's log says
what it ran on) and every campaign cell records them (docs/CAMPAIGN.md, "Machine facts")."""
from __future__ import annotations

import functools
import os
import platform
from pathlib import Path


# The machine facts that decide a bit-exact cell's bits beyond the CPU model (docs/CAMPAIGN.md, "Machine facts"):
# reference/elementary.py made the elementary functions CPU-independent, but OpenBLAS picks its GEMM kernel (and
# so the summation order of float64/fp32 matrix products) by core type and splits the work by thread count, and
# numpy dispatches its other loops by the SIMD extensions it finds. Text values; "" = an environment variable
# not set; None = not known (threadpoolctl or numpy's CPU tables unavailable; an older store).
MACHINE_FACTS = ("numpy_simd", "npy_disable_cpu_features", "blas_library", "blas_version", "blas_coretype",
                 "blas_threads", "openblas_coretype")


def machine_facts() -> dict:
    """This process's machine facts now (the BLAS thread count can change at run time, so not cached)."""
    facts = {"numpy_simd": numpy_simd(), "npy_disable_cpu_features": os.environ.get("NPY_DISABLE_CPU_FEATURES", ""),
             "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "")}
    facts.update(blas_facts())
    return facts


@functools.lru_cache(maxsize=1)
def numpy_simd() -> str | None:
    """numpy's SIMD level: its baseline and dispatch targets that this CPU has and that are not disabled
    (NPY_DISABLE_CPU_FEATURES), in numpy's order, e.g. "X86_V2 X86_V3 X86_V4 AVX512_ICL" (the tables behind
    `numpy.show_runtime()`); None when numpy does not expose them."""
    try:
        try:
            from numpy._core import _multiarray_umath as umath
        except ImportError:  # numpy 1.x
            from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
        found = umath.__cpu_features__
        targets = [*umath.__cpu_baseline__, *umath.__cpu_dispatch__]
        return " ".join(t for t in dict.fromkeys(targets) if found.get(t))
    except (ImportError, AttributeError, TypeError):
        return None


def blas_facts() -> dict:
    """The BLAS libraries loaded in this process (threadpoolctl): library (internal_api, e.g. openblas), version,
    core type (OpenBLAS's `architecture`, e.g. Haswell, SkylakeX) and thread count; several libraries are
    joined with "+" in a stable order. None each when threadpoolctl is missing or finds no BLAS."""
    out = {"blas_library": None, "blas_version": None, "blas_coretype": None, "blas_threads": None}
    try:
        from threadpoolctl import threadpool_info

        libs = sorted((i for i in threadpool_info() if i.get("user_api") == "blas"),
                      key=lambda i: (str(i.get("internal_api")), str(i.get("filepath"))))
    except Exception:  # noqa: BLE001 - a fact we cannot read is recorded as unknown, the cell still runs
        return out
    if libs:
        for fact, key in (("blas_library", "internal_api"), ("blas_version", "version"),
                          ("blas_coretype", "architecture"), ("blas_threads", "num_threads")):
            out[fact] = "+".join(str(i.get(key)) for i in libs)
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> list[str]:
    """The facts as lines for `mschecker --version`."""
    f = machine_facts()
    blas = " ".join(str(f[k]) for k in ("blas_library", "blas_version", "blas_coretype") if f[k]) or "unknown"
    return [f"  cpu: {cpu_model()}", f"  numpy SIMD: {f['numpy_simd'] or 'unknown'}"
            + (f" (NPY_DISABLE_CPU_FEATURES={f['npy_disable_cpu_features']})" if f['npy_disable_cpu_features'] else ""),
            f"  BLAS: {blas}, {f['blas_threads'] or '?'} thread(s)"
            + (f" (OPENBLAS_CORETYPE={f['openblas_coretype']})" if f['openblas_coretype'] else "")]
