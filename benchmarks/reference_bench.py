"""Benchmark: the float64 reference softmax and exp (reference/softmax.py, reference/exp64.py) against the numpy
formulas they replace, all measured in the same run.

Softmax on the SD-1.5 attention shapes (2, 8, 1024, 1024) (self-attention at a 32x32 latent) and (2, 8, 1024, 77)
(cross-attention over the 77 text tokens), float64, last axis:
* legacy: the previous reference, z = x - max; e = np.exp(z); e / e.sum() (numpy passes, glibc exp on AVX2);
* C: reference.softmax.softmax with mschecker._fastref built (one fused pass per row);
* numpy twin: reference.softmax.softmax_numpy (what runs without a C compiler or with MSCHECKER_NO_FASTREF=1).
Each repeat times the three in turn (the machine is shared: interleaving spreads the noise); the best of
--repeats is reported, with speedups legacy/C and legacy/numpy-twin from the best times and, more robust to
bursts of load from other jobs, the median over rounds of the per-round ratio. Each shape also checks that C and the numpy
twin agree bit for bit and gives the largest relative difference from legacy (last-bit changes).

exp on 2^22 float64 values (4 * standard normal): np.exp, exp64 (C), exp64_numpy, in ns/element.

Sigmoid (also inside silu and gelu_tanh) on the same values: scipy.special.expit (the reference sigmoid before
exp64) against reference.activations.sigmoid through the C loop and through sigmoid_numpy. The reference gelu is
erfc-based (no exp) and stays as it was.

    python benchmarks/reference_bench.py              # records benchmarks/results/reference_bench.json
    python benchmarks/reference_bench.py --out ''     # prints only
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import special

from mschecker.reference import activations as A
from mschecker.reference import exp64 as E
from mschecker.reference import softmax as S
from mschecker.fsio import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results" / "reference_bench.json"
SHAPES = ((2, 8, 1024, 1024), (2, 8, 1024, 77))


def legacy_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The reference softmax before exp64 (kept here as the peer)."""
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)


def c_softmax(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    E._fastref.softmax_rows(x, out, x.shape[-1])
    return out


def c_exp64(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    E._fastref.exp64(x, out)
    return out


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Wall times of each function over `repeats` rounds, the functions timed in turn within each round."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def bench_softmax(shape, repeats: int, rng) -> dict:
    x = rng.standard_normal(shape) * 4.0  # logits of a few units, as in attention
    fns = {"legacy numpy": lambda: legacy_softmax(x), "numpy twin": lambda: S.softmax_numpy(x)}
    if E._fastref is not None:
        fns["C"] = lambda: c_softmax(x)
    times = interleaved(fns, repeats)
    best = {k: min(v) for k, v in times.items()}
    legacy = legacy_softmax(x)
    twin = S.softmax_numpy(x)
    row = {"shape": list(shape), "elements": int(x.size), "seconds_best": best,
           "ns_per_element": {k: v / x.size * 1e9 for k, v in best.items()},
           "speedup_vs_legacy": {k: best["legacy numpy"] / v for k, v in best.items() if k != "legacy numpy"},
           "speedup_vs_legacy_median_of_rounds": {
               k: statistics.median(a / b for a, b in zip(times["legacy numpy"], v))
               for k, v in times.items() if k != "legacy numpy"},
           "max_rel_diff_vs_legacy": float(np.max(np.abs(twin - legacy) / legacy))}
    if E._fastref is not None:
        row["c_equals_numpy_twin_bits"] = bool(np.array_equal(c_softmax(x).view(np.uint64), twin.view(np.uint64)))
    return row


def c_sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    E._fastref.sigmoid64(x, out)
    return out


def bench_elementwise(repeats: int, rng) -> dict:
    x = rng.standard_normal(1 << 22) * 4.0
    fns = {"np.exp": lambda: np.exp(x), "exp64 numpy": lambda: E.exp64_numpy(x),
           "scipy expit (legacy sigmoid)": lambda: special.expit(x), "sigmoid numpy twin": lambda: A.sigmoid_numpy(x)}
    if E._fastref is not None:
        fns["exp64 C"] = lambda: c_exp64(x)
        fns["sigmoid C"] = lambda: c_sigmoid(x)
    best = {k: min(v) for k, v in interleaved(fns, repeats).items()}
    return {"elements": int(x.size), "ns_per_element": {k: v / x.size * 1e9 for k, v in best.items()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS), help="JSON path ('' to not write)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    softmax_rows = []
    for shape in SHAPES:
        row = bench_softmax(shape, args.repeats, rng)
        softmax_rows.append(row)
        print(f"softmax {tuple(shape)}: " + ", ".join(f"{k} {v:.3f} s" for k, v in row["seconds_best"].items())
              + " | speedup vs legacy (best; median of rounds): " + ", ".join(
                  f"{k} {v:.2f}x; {row['speedup_vs_legacy_median_of_rounds'][k]:.2f}x"
                  for k, v in row["speedup_vs_legacy"].items())
              + f" | C == twin bits: {row.get('c_equals_numpy_twin_bits')} | max rel diff vs legacy "
              f"{row['max_rel_diff_vs_legacy']:.2e}")
    elementwise = bench_elementwise(args.repeats, rng)
    print("elementwise ns/element: " + ", ".join(f"{k} {v:.2f}" for k, v in elementwise["ns_per_element"].items()))
    out = {"benchmark": "reference_bench", "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "c_extension_built": E._fastref is not None,
           "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                       "platform": platform.platform()},
           "load_average_before": load_before, "load_average_after": os.getloadavg(),
           "cpus_note": "2 CPU cores shared with other jobs: absolute times are noisy; ratios come from one run",
           "softmax": softmax_rows, "elementwise": elementwise,
           "command": "python benchmarks/reference_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if args.out:
        atomic_write_text(args.out, json.dumps(out, indent=2) + "\n")
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
