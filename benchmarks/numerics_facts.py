"""The numbers docs/NUMERICS.md quotes, measured with this repository's own functions (not a speed benchmark).

Each entry is computed here, from the kernels and references the contracts are about, so the document can be
re-checked after a change with one command; tests pin the ones a contract rests on (named per entry).
Results go to benchmarks/results/numerics_facts.json (or --out; --no-record only prints). ~10 s on one core.

    OPENBLAS_NUM_THREADS=1 python benchmarks/numerics_facts.py
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from mschecker.dtypes import float_format, gamma, unit_roundoff
from mschecker.optimized_kernels import activations as A
from mschecker.optimized_kernels import conv as direct
from mschecker import fastfp16
from mschecker.optimized_kernels import norms as N
from mschecker.optimized_kernels import winograd as wg
from mschecker.reference import activations as R
from mschecker.reference import conv as ref_conv

RESULTS = Path(__file__).resolve().parent / "results" / "numerics_facts.json"
F16 = np.float16


def formats() -> dict:
    out = {}
    for name in ("float16", "bfloat16", "float32", "float64"):
        fmt = float_format(name)
        out[name] = {"u": unit_roundoff(name), "max": float(fmt.max), "smallest_normal": float(fmt.smallest_normal),
                     "mantissa_bits": fmt.mantissa_bits}
    return out


def fp16_thresholds() -> dict:
    """Where fp16 arithmetic stops being finite or stops moving (fastfp16's fp16 sums, numpy's fp16 rounding)."""
    xs = np.arange(0x4000, 0x7C00, dtype=np.uint16).view(F16)  # every fp16 from 2 up to 65504
    with np.errstate(over="ignore"):  # the overflow is what is measured
        exp_inf = xs[np.isinf(np.exp(xs.astype(np.float64)).astype(F16))][0]
        sq_inf = xs[np.isinf((xs.astype(np.float32) ** 2).astype(F16))][0]
    ones = fastfp16.fp16_running_sum(np.ones((1, 4096), F16), axis=-1)
    return {"exp_overflows_from_x": float(exp_inf), "ln_65520": math.log(65520.0),
            "square_overflows_from_x": float(sq_inf), "sequential_sum_of_4096_ones": float(ones.ravel()[0]),
            "rms_at_which_4096_squares_overflow_an_fp16_sum": math.sqrt(65520.0 / 4096)}


def bounds() -> dict:
    """gamma_n values the contracts and reference docstrings quote."""
    u64, u32, u16 = (unit_roundoff(d) for d in ("float64", "float32", "float16"))
    return {"reference_softmax_sum_n1024_gamma_131_u64": gamma(1024 // 8 + 3, u64),
            "cube_crossover_K_where_K_u32_equals_u16": u16 / u32,
            "gamma_4096_u32": gamma(4096, u32), "gamma_4096_u16": gamma(4096, u16)}


def variance() -> dict:
    """Relative error of the variance, fp32 statistics, n = 4096, mean 1000, std 1, seed 0 (as
    tests/kernels/test_norm_hazards.py::test_variance_algorithms_on_large_mean)."""
    x = (1000 + np.random.default_rng(0).standard_normal((1, 4096))).astype(np.float32)
    true_var = x.astype(np.float64).var()
    out = {f.__name__: abs(float(f(x, np.dtype(np.float32))[1][0, 0]) - true_var) / true_var
           for f in (N.stats_onepass, N.stats_twopass, N.stats_welford)}
    out["kappa"] = float(np.sqrt(1 + 1000.0 ** 2 / true_var))
    return out


def gelu() -> dict:
    """max |approximation - erf GELU| over [-10, 10] (step 1e-5) in float64, and where (as
    tests/kernels/test_exhaustive_fp16.py)."""
    x = np.linspace(-10.0, 10.0, 2_000_001)
    exact = R.gelu(x)
    out = {}
    for name, fn in (("tanh", A.gelu_tanh_formula), ("quick", A.gelu_quick_formula), ("poly", A.gelu_poly_formula),
                     ("erf_nr", A.gelu_erf_formula)):
        err = np.abs(fn(x, np.float64) - exact)
        i = int(np.argmax(err))
        out[name] = {"max_abs_err": float(err[i]), "at_x": round(float(x[i]), 3)}
    f = np.linspace(-0.5, 0.5, 100_001)
    out["exp2_taylor4_rel"] = float(np.max(np.abs(A._horner(A._EXP2_TAYLOR, f, np.dtype(np.float64)) / 2.0 ** f - 1)))
    return out


def winograd(seeds: int = 3) -> dict:
    """max |err| of Winograd relative to the direct fp16-in/fp32-accumulate conv's, 64 channels, 16x16, fp16 inputs
    (as tests/kernels/test_conv_extra.py::test_winograd_error_relative_to_direct_conv_baseline)."""
    names = ("winograd_f2x3_fp16", "winograd_f4x3_fp16", "winograd_f2x3_fp32", "winograd_f4x3_fp32")
    ratios = {n: [] for n in names}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((1, 64, 16, 16)).astype(F16)
        w = (rng.standard_normal((64, 64, 3, 3)) / np.sqrt(9 * 64)).astype(F16)
        y = ref_conv.conv2d(x, w, pads=(1, 1, 1, 1))
        d = np.max(np.abs(direct.conv2d_fp16_fp32acc(x, w, pads=(1, 1, 1, 1)) - y))
        for n in names:
            ratios[n].append(round(float(np.max(np.abs(getattr(wg, n)(x, w, pads=(1, 1, 1, 1)) - y)) / d), 2))
    return ratios


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-record", action="store_true")
    args = p.parse_args(argv)
    facts = {"formats": formats(), "fp16_thresholds": fp16_thresholds(), "bounds": bounds(),
             "variance_fp32_n4096_mean1000": variance(), "gelu_vs_erf_gelu": gelu(),
             "winograd_err_over_direct_64ch": winograd()}
    text = json.dumps(facts, indent=2)
    print(text)
    if not args.no_record:
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
