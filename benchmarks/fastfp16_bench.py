"""Benchmark: the compiled fp16 loops (mschecker/_fastfp16.c) vs the numpy paths they replace, same inputs, same run.

Kernels of the emulated NPU's high_performance mode, each timed on both routes (MSCHECKER_NO_FASTFP16=1 selects
numpy's, read per call), best of --repeats after one warm-up call, with the outputs checked bit-identical:
* softmax_fp16_fp16acc on (2, 8, 1024, 1024) fp16 (fp16 max, x - max, exp, sequential fp16 sum, divide), and
  softmax_fp16_fp32acc on the same logits (float32 internals: two compiled passes around numpy's exp);
* group_norm_fp16stats on (2, 320, 32, 32) fp16 with 32 groups (two sequential fp16 sums per row, fp16 ops), and
  group_norm_fp32stats_twopass on the same (float32 two-pass statistics); the LayerNorm of a CLIP text encoder
  in both variants, (2, 77, 768) and the small real exports' (2, 16, 32), statistics and affine step in one
  compiled call;
* fp16 Mul of (16, 1024, 1024) by a scalar, and fp16 Add of (2, 320, 32, 32) + (1, 320, 1, 1) (f16_binary);
* fp16 -> fp32 of a transposed (2, 4096, 8, 40) view (a Transpose node's output; astype's layout below
  ORT_MIN_ELEMS, here a C-order copy), and of a small one, (2, 16, 8, 8); fastfp16.astype of an attention
  operand view, (2, 4, 16, 8) (astype's layout at every size);
* fp16_running_sum of 64 rows x 10240 (GroupNorm's shape), of 8 long rows (their chains run side by side) and of
  one row of 2^20 (one dependency chain: latency-bound on both routes).
The ratio is numpy time / compiled time; the machine is shared, so both routes alternate within each repeat.
Results go to benchmarks/results/fastfp16.json (or --out; --no-record only prints).

    OPENBLAS_NUM_THREADS=1 python benchmarks/fastfp16_bench.py
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from mschecker import fastfp16
from mschecker.optimized_kernels import norms, softmax

RESULTS = Path(__file__).resolve().parent / "results" / "fastfp16.json"
ENV = "MSCHECKER_NO_FASTFP16"


def cases(rng: np.random.Generator) -> dict:
    x_sm = (rng.standard_normal((2, 8, 1024, 1024)) * 4).astype(np.float16)
    x_gn = rng.standard_normal((2, 320, 32, 32)).astype(np.float16)
    scale = (1 + 0.1 * rng.standard_normal(320)).astype(np.float16)
    bias = (0.1 * rng.standard_normal(320)).astype(np.float16)
    x_mul = rng.standard_normal((16, 1024, 1024)).astype(np.float16)
    s = np.array(0.125, np.float16)
    ch = rng.standard_normal((1, 320, 1, 1)).astype(np.float16)
    r64 = x_gn.reshape(64, -1)
    r1 = rng.standard_normal((1, 1 << 20)).astype(np.float16)
    r8 = rng.standard_normal((8, 1 << 17)).astype(np.float16)
    view_big = rng.standard_normal((2, 4096, 8, 40)).astype(np.float16).transpose(0, 2, 1, 3)
    view_small = rng.standard_normal((2, 16, 8, 8)).astype(np.float16).transpose(0, 2, 1, 3)
    view_head = rng.standard_normal((2, 16, 4, 8)).astype(np.float16).transpose(0, 2, 1, 3)
    x_clip = rng.standard_normal((2, 77, 768)).astype(np.float16)
    w_clip, b_clip = (rng.standard_normal(768).astype(np.float16) for _ in range(2))
    x_small = rng.standard_normal((2, 16, 32)).astype(np.float16)
    w_small, b_small = (rng.standard_normal(32).astype(np.float16) for _ in range(2))
    return {
        "softmax_fp16_fp16acc (2,8,1024,1024)": lambda: softmax.softmax_fp16_fp16acc(x_sm),
        "group_norm_fp16stats (2,320,32,32) g32": lambda: norms.group_norm_fp16stats(x_gn, scale, bias, 32),
        "group_norm_fp32stats_twopass (2,320,32,32) g32":
            lambda: norms.group_norm_fp32stats_twopass(x_gn, scale, bias, 32),
        "layer_norm_fp16stats (2,77,768)": lambda: norms.layer_norm_fp16stats(x_clip, w_clip, b_clip),
        "layer_norm_fp32stats_twopass (2,77,768)": lambda: norms.layer_norm_fp32stats_twopass(x_clip, w_clip, b_clip),
        "layer_norm_fp16stats (2,16,32)": lambda: norms.layer_norm_fp16stats(x_small, w_small, b_small),
        "layer_norm_fp32stats_twopass (2,16,32)": lambda: norms.layer_norm_fp32stats_twopass(x_small, w_small, b_small),
        "fp16 mul (16,1024,1024) * scalar": lambda: fastfp16.f16_binary(np.multiply, x_mul, s),
        "fp16 add (2,320,32,32) + (1,320,1,1)": lambda: fastfp16.f16_binary(np.add, x_gn, ch),
        "softmax_fp16_fp32acc (2,8,1024,1024)": lambda: softmax.softmax_fp16_fp32acc(x_sm),
        "to_f32 of a transposed (2,4096,8,40) view": lambda: fastfp16.to_f32(view_big),
        "to_f32 of a transposed (2,16,8,8) view": lambda: fastfp16.to_f32(view_small),
        "astype of a transposed (2,4,16,8) view": lambda: fastfp16.astype(view_head, np.float32),
        "fp16_running_sum 64 x 10240": lambda: fastfp16.fp16_running_sum(r64, 1),
        "fp16_running_sum 8 x 131072": lambda: fastfp16.fp16_running_sum(r8, 1),
        "fp16_running_sum 1 x 1048576": lambda: fastfp16.fp16_running_sum(r1, 1),
    }


def timed(fn) -> tuple[float, np.ndarray]:
    t = time.perf_counter()
    y = fn()
    return time.perf_counter() - t, y


def run(repeats: int) -> dict:
    if fastfp16._fastfp16 is None:
        sys.exit("mschecker._fastfp16 is not built: `python setup.py build_ext --inplace` first")
    results = {}
    for name, fn in cases(np.random.default_rng(0)).items():
        best = {"numpy": float("inf"), "compiled": float("inf")}
        outs = {}
        for rep in range(repeats + 1):
            for route in ("numpy", "compiled"):
                os.environ[ENV] = "1" if route == "numpy" else "0"
                dt, outs[route] = timed(fn)
                if rep:  # the first round warms caches and builds lookup tables
                    best[route] = min(best[route], dt)
        os.environ.pop(ENV, None)
        a, b = outs["numpy"], outs["compiled"]
        identical = a.dtype == b.dtype and a.strides == b.strides and a.tobytes() == b.tobytes()
        results[name] = {"numpy_ms": round(best["numpy"] * 1e3, 4), "compiled_ms": round(best["compiled"] * 1e3, 4),
                         "speedup": round(best["numpy"] / best["compiled"], 2), "bit_identical": identical}
        print(f"{name:48s} numpy {best['numpy'] * 1e3:10.4f} ms  compiled {best['compiled'] * 1e3:10.4f} ms"
              f"  x{best['numpy'] / best['compiled']:5.1f}  identical={identical}")
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args(argv)
    results = run(args.repeats)
    if not args.no_record:
        doc = {"benchmark": "fastfp16", "machine": platform.machine(), "python": platform.python_version(),
               "numpy": np.__version__, "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
               "repeats": args.repeats, "kernels": results}
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, args.out)
        print(f"recorded {args.out}")
    return 0 if all(r["bit_identical"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
