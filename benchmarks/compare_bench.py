"""Benchmark: streaming comparison of two float32 files vs a bare `np.max(np.abs(a - b))` held in memory.

Creates two float32 files of --size-gib GiB each in a temporary directory (deleted afterwards): `expected` is
standard-normal activations (signed, so KL divergence is N/A after the first chunk), and every other metric has
work to do. `actual` = expected * (1 + N(0, rel_noise)) rounded to float32; the default rel_noise 1e-6 (~17 fp32
ULPs) models two fp32 implementations that differ in summation order, the usual golden-vs-runtime case, under
the rule atol = rtol = 1e-3, 4096 ULP, cosine >= 0.999. There no element comes near a threshold, so the exact
shortcuts of mschecker.compare apply (no mismatch bound, no threshold counts). `--rel-noise 1e-3` (fp16-like
errors) computes everything; `--rel-noise 1e-2` also puts the ULP p99 above the exact histogram bins, so the
comparison makes its extra refinement pass (see mschecker.compare.ulp.UlpHistogram). Then, --runs times:

* streaming: in a child process (so the in-memory baseline does not pollute its peak RSS), np.memmap of both
  files and `mschecker.compare.compare_arrays` with the full metric set (default workers: one thread per CPU,
  up to 8), --repeats timings; the child reports its peak RSS (/proc VmHWM);
* baseline: both files loaded into memory (np.fromfile), --repeats timings of np.max(np.abs(a - b)).

The first child also times each step of one chunk on its own (pass_costs: ns per element, single-threaded),
and, when the optional C kernel mschecker._fastcompare is built, the kernel and the update through it next to
the numpy path's update. MSCHECKER_NO_FASTCOMPARE=1 benchmarks the numpy path; the JSON says which path ran.
Throughput is bytes of both inputs / seconds; the ratio is best bare time / best streaming time, also given
per run and as a ratio of medians, because the machine is shared. Targets (issue 2 item 9): streaming
throughput >= 0.5x the bare expression's, peak RSS of the streaming process < 300 MB. Results go to
benchmarks/results/compare_bench.json (full 1 GiB run) or --out.

    python benchmarks/compare_bench.py                   # 1 GiB per file, 3 runs, records the JSON
    python benchmarks/compare_bench.py --size-gib 0.125  # quick run, prints only
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "compare_bench.json"
TARGET_RATIO = 0.5
TARGET_RSS_MB = 300.0


def make_files(directory: Path, n: int, rel_noise: float, seed: int = 0) -> tuple[Path, Path]:
    """Write expected/actual float32 files block by block (bounded memory)."""
    rng = np.random.default_rng(seed)
    pe, pa = directory / "expected.bin", directory / "actual.bin"
    block = 1 << 22
    with open(pe, "wb") as fe, open(pa, "wb") as fa:
        for start in range(0, n, block):
            m = min(block, n - start)
            e = rng.standard_normal(m, dtype=np.float32)
            a = (e * (1 + rng.standard_normal(m) * rel_noise)).astype(np.float32)
            e.tofile(fe)
            a.tofile(fa)
    return pa, pe


def stream_child(pa: str, pe: str, n: int, repeats: int, chunk: int | None, workers: int | None,
                 passes: bool) -> dict:
    """Runs in the child process: memmap both files and compare them `repeats` times."""
    from mschecker.compare import compare_arrays

    a = np.memmap(pa, dtype=np.float32, mode="r", shape=(n,))
    e = np.memmap(pe, dtype=np.float32, mode="r", shape=(n,))
    rule = bench_rule()
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = compare_arrays(a, e, rule, name="bench", chunk_elems=chunk, workers=workers)
        times.append(time.perf_counter() - t0)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    m = result.to_dict()["metrics"]
    return {"seconds": times, "ru_maxrss_kb": rss_kb, "vm_hwm_kb": _vm_hwm_kb(), "passed": result.passed,
            "mismatches": result.mismatches, "metrics": m, "pass_costs": pass_costs(pa, pe, n, chunk) if passes else None}


def pass_costs(pa: str, pe: str, n: int, chunk: int | None) -> dict:
    """ns per element of each step of one streaming chunk (mschecker.compare.engine._Accumulator), best of 7, on the
    first chunk of the benchmark files, single-threaded: where the per-chunk time goes. The steps run in
    isolation, so their working sets are smaller than in the full update; the sum is below 'full update'. With
    the C extension built (and not disabled), its one-pass kernel and the update through it are timed too."""
    from mschecker.compare import engine as C
    from mschecker.compare.rules import ChunkView

    m = min(n, chunk or C.DEFAULT_CHUNK_ELEMS)
    a = np.fromfile(pa, dtype=np.float32, count=m)
    e = np.fromfile(pe, dtype=np.float32, count=m)
    rule = bench_rule()
    acc = C._Accumulator("bench", (m,), a.dtype, e.dtype, rule, 10)
    acc_numpy = C._Accumulator("bench", (m,), a.dtype, e.dtype, rule, 10)
    acc_numpy._kernel = None  # the numpy path, as without the extension
    with np.errstate(all="ignore"):
        a64, e64 = acc._f64("a64", a), acc._f64("e64", e)
        d = np.subtract(a64, e64, out=acc._scratch("d", m))
        ad = np.abs(d)
        ulp = acc._ulps(a, e)[0]
        tmp = np.empty(m)
        hist = C.UlpHistogram()
        steps = {
            "to_float64 (a and e)": lambda: (acc._f64("a64", a), acc._f64("e64", e)),
            "difference a-e": lambda: np.subtract(a64, e64, out=tmp),
            "4 float64 dot products": lambda: [C._dot(x, y) for x, y in ((d, d), (a64, a64), (e64, e64), (a64, e64))],
            "abs, sum, argmax of |d|": lambda: (np.abs(d, out=tmp), tmp.sum(), np.argmax(tmp)),
            "peak max|e| (float32 max/min)": lambda: C._max_abs_value(e),
            "max relative error": lambda: acc._max_rel(ad, e64),
            "relative-error array (only when a threshold is reached)": lambda: acc._rel_errors(ad, e64),
            "mismatch count (only when max|d| > atol)": lambda: rule.count_finite_mismatches(
                None, ChunkView(ad, e64, (ulp, None), 0, None, acc._scratch, float(ad.max()))),
            "ULP distances": lambda: acc._ulps(a, e),
            "ULP histogram": lambda: hist.add(ulp),
            "decade histogram of |d|": lambda: acc._histogram(ad, float(ad.max())),
            "top-k": lambda: acc._top(ad, a64, e64, None, 0),
            "full update, numpy path (all of the above that apply)": lambda: acc_numpy.update(a, e, 0),
        }
        if acc._kernel is not None:
            low, high, hist17, cand = (np.zeros(k, np.int64) for k in (1 << 16, 64, 17, m))
            steps["C kernel finite_f32 alone (mschecker._fastcompare)"] = lambda: acc._kernel.finite_f32(
                a, e, rule.atol, rule.rtol, acc.tiny, *C.REL_THRESHOLDS, rule.ulp, C._DECADE_EDGES, low, high, hist17, 0.0, cand)
            steps["full update, C kernel path"] = lambda: acc.update(a, e, 0)
        best = {k: float("inf") for k in steps}
        for _ in range(7):
            for k, f in steps.items():
                t0 = time.perf_counter()
                for _ in range(5):
                    f()
                best[k] = min(best[k], (time.perf_counter() - t0) / 5)
    return {k: round(v / m * 1e9, 3) for k, v in best.items()}


def bench_rule():
    """The benchmark's rule: atol = rtol = 1e-3, 4096 ULP, cosine >= 0.999 (every clause active)."""
    from mschecker.compare import ToleranceRule

    return ToleranceRule.from_args(atol=1e-3, rtol=1e-3, ulp=4096, cosine=0.999)


def _vm_hwm_kb() -> int | None:
    """Peak RSS of this process image from /proc (Linux), which, unlike ru_maxrss, is not inherited from the
    parent across fork+exec."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _peak_kb(child: dict) -> int:
    """Peak RSS of a streaming child: /proc VmHWM (this process image only). ru_maxrss is only a fallback: it
    includes what the parent held when it forked, i.e. the baseline's arrays for every run after the first."""
    return child["vm_hwm_kb"] or child["ru_maxrss_kb"]


def bare_baseline(pa: Path, pe: Path, repeats: int) -> tuple[list[float], float]:
    a = np.fromfile(pa, dtype=np.float32)
    e = np.fromfile(pe, dtype=np.float32)
    times, value = [], 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        value = float(np.max(np.abs(a - e)))
        times.append(time.perf_counter() - t0)
    del a, e
    return times, value


def fast_kernel_state() -> str:
    """Whether the streaming run used the optional C kernel (mschecker/_fastcompare.c)."""
    from mschecker.compare import engine as C

    if C._fastcompare is None:
        return "not built (numpy path)"
    return "built and used" if C._fast_kernel() is not None else "disabled by MSCHECKER_NO_FASTCOMPARE (numpy path)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-gib", type=float, default=1.0, help="size of each file in GiB (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="timings per side; the best counts (default 3)")
    p.add_argument("--rel-noise", type=float, default=1e-6, help="relative noise of actual (default 1e-6)")
    p.add_argument("--workers", type=int, default=None, help="compare_arrays workers (default: its own)")
    p.add_argument("--chunk", type=int, default=None, help="chunk_elems for compare_arrays (default: its own)")
    p.add_argument("--out", default=None, help="write the results JSON here (default: the results file for "
                   "a full 1 GiB run, nowhere for smaller runs)")
    p.add_argument("--runs", type=int, default=3, help="independent bare+streaming measurements, for the "
                   "spread on a shared machine (default 3)")
    p.add_argument("--child", nargs=3, metavar=("ACTUAL", "EXPECTED", "N"), help=argparse.SUPPRESS)
    p.add_argument("--passes", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        pa, pe, n = args.child
        print(json.dumps(stream_child(pa, pe, int(n), args.repeats, args.chunk, args.workers, args.passes)))
        return 0

    n = int(args.size_gib * (1 << 30)) // 4
    nbytes = 2 * 4 * n
    runs = []
    with tempfile.TemporaryDirectory(prefix="mschecker-bench-") as tmp:
        pa, pe = make_files(Path(tmp), n, args.rel_noise)
        for r in range(args.runs):
            load = os.getloadavg()
            # The streaming child runs first, while this process is small: Linux carries ru_maxrss across
            # fork+exec, so a child spawned after loading the baseline arrays would report the parent's peak.
            cmd = [sys.executable, __file__, "--child", str(pa), str(pe), str(n), "--repeats", str(args.repeats)]
            if args.chunk:
                cmd += ["--chunk", str(args.chunk)]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
            if r == 0:
                cmd += ["--passes"]
            child = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            bare_times, bare_value = bare_baseline(pa, pe, args.repeats)
            if abs(child["metrics"]["max_abs_err"] - bare_value) > 0:
                print(f"warning: max |err| differs: streaming {child['metrics']['max_abs_err']} vs bare {bare_value}")
            child["bare_seconds"] = bare_times
            child["load_average_before"], child["load_average_after"] = load, os.getloadavg()
            child["ratio"] = min(bare_times) / min(child["seconds"])
            runs.append(child)
            print(f"run {r + 1}: bare best {min(bare_times):.3f} s, streaming best {min(child['seconds']):.3f} s, "
                  f"ratio {child['ratio']:.3f}x, load {load[0]:.2f} -> {child['load_average_after'][0]:.2f}",
                  flush=True)
    bare_all = [t for c in runs for t in c["bare_seconds"]]
    stream_all = [t for c in runs for t in c["seconds"]]
    bare_s, stream_s = min(bare_all), min(stream_all)
    ratio = bare_s / stream_s
    ratios = [c["ratio"] for c in runs]
    rss_mb = max(_peak_kb(c) for c in runs) * 1024 / 1e6
    passes = runs[0]["pass_costs"]
    results = {
        "benchmark": "compare_bench",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "size_gib_per_file": args.size_gib,
        "elements": n,
        "rel_noise": args.rel_noise,
        "rule": "atol = rtol = 1e-3, ulp 4096, cosine >= 0.999",
        "bare_expression": "np.max(np.abs(a - b)) over float32 arrays in memory, single-threaded numpy",
        "runs": [{"bare_seconds": c["bare_seconds"], "stream_seconds": c["seconds"], "ratio_best": c["ratio"],
                  "load_average_before": c["load_average_before"], "load_average_after": c["load_average_after"],
                  "stream_peak_rss_mb": _peak_kb(c) * 1024 / 1e6, "stream_vm_hwm_kb": c["vm_hwm_kb"],
                  "stream_ru_maxrss_kb": c["ru_maxrss_kb"]}
                 for c in runs],
        "bare_best_seconds": bare_s,
        "bare_median_seconds": statistics.median(bare_all),
        "bare_gb_per_s": nbytes / bare_s / 1e9,
        "stream_best_seconds": stream_s,
        "stream_median_seconds": statistics.median(stream_all),
        "stream_gb_per_s": nbytes / stream_s / 1e9,
        "stream_ns_per_element_best": stream_s / n * 1e9,
        "throughput_ratio": ratio,
        "throughput_ratio_of_medians": statistics.median(bare_all) / statistics.median(stream_all),
        "throughput_ratio_per_run": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)},
        "target_ratio": TARGET_RATIO,
        "stream_peak_rss_mb": rss_mb,
        "target_rss_mb": TARGET_RSS_MB,
        "fast_kernel": fast_kernel_state(),
        "chunk_elems": args.chunk,
        "workers": args.workers,
        "metrics_of_streaming_run": runs[-1]["metrics"],
        "pass_costs_ns_per_element": passes,
        "meets_targets": bool(ratio >= TARGET_RATIO and rss_mb < TARGET_RSS_MB),
    }
    print(f"elements {n:,} per file ({args.size_gib:g} GiB), both files {nbytes / 1e9:.2f} GB, {args.runs} runs "
          f"x {args.repeats} repeats; C kernel: {results['fast_kernel']}")
    print(f"bare np.max(np.abs(a-b)) in memory: best {bare_s:.3f} s  = {results['bare_gb_per_s']:.2f} GB/s")
    print(f"streaming compare_arrays (memmap):  best {stream_s:.3f} s  = {results['stream_gb_per_s']:.2f} GB/s")
    for step, ns in passes.items():
        print(f"  {ns:7.3f} ns/element  {step}")
    print(f"ratio of medians {results['throughput_ratio_of_medians']:.3f}x; per-run ratio "
          f"{min(ratios):.3f}-{max(ratios):.3f}x")
    print(f"throughput ratio {ratio:.3f}x (target >= {TARGET_RATIO}x); peak RSS {rss_mb:.0f} MB "
          f"(target < {TARGET_RSS_MB:.0f} MB): {'MET' if results['meets_targets'] else 'NOT MET'}")
    out = args.out or (RESULTS if args.size_gib == 1.0 else None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        tmp_out = Path(str(out) + ".tmp")
        tmp_out.write_text(json.dumps(results, indent=2) + "\n")
        os.replace(tmp_out, out)
        print(f"recorded in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
