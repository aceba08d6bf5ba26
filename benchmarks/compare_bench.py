"""Benchmark: streaming comparison of two float32 files vs a bare `np.max(np.abs(a - b))` held in memory.

Creates two float32 files of --size-gib GiB each in a temporary directory (deleted afterwards): `expected` is
standard-normal activations (signed, so KL divergence is N/A after the first chunk), and every other metric has work to
do. `actual` = expected * (1 + N(0, rel_noise)) rounded to float32; the default rel_noise 1e-6 (~17 fp32 ULPs)
models two fp32 implementations that differ in summation order, the usual golden-vs-runtime case;
`--rel-noise 1e-3` is a badly-off tensor whose ULP p99 lies above the exact histogram bins, so the comparison
makes its extra refinement pass (see mschecker.compare._UlpHistogram). Then, in the same run:

* baseline: both files loaded into memory (np.fromfile), best of --repeats timings of np.max(np.abs(a - b));
* streaming: in a child process (so the in-memory baseline does not pollute its peak RSS), np.memmap of both
  files and `mschecker.compare.compare_arrays` with the full metric set (default workers: one thread per CPU,
  up to 8), best of --repeats; the child reports its resource.getrusage(RUSAGE_SELF).ru_maxrss and /proc VmHWM.

Throughput is bytes of both inputs / seconds. Targets (issue 2 item 9): streaming throughput >= 0.5x the bare
expression's, peak RSS of the streaming process < 300 MB. Results go to benchmarks/results/compare_bench.json when
--out is given (the full-size run records there by default).

    python benchmarks/compare_bench.py                 # 1 GiB per file, records the JSON
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


def stream_child(pa: str, pe: str, n: int, repeats: int, chunk: int | None, workers: int | None) -> dict:
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
            "mismatches": result.mismatches, "metrics": m, "pass_costs": pass_costs(pa, pe, n, chunk)}


def pass_costs(pa: str, pe: str, n: int, chunk: int | None) -> dict:
    """ns per element of each step of one streaming chunk (mschecker.compare._Accumulator), best of 7, on the
    first chunk of the benchmark files, single-threaded: where the per-chunk time goes. The steps run in
    isolation, so their working sets are smaller than in the full update; the sum is below 'full update'."""
    from mschecker import compare as C

    m = min(n, chunk or C.DEFAULT_CHUNK_ELEMS)
    a = np.fromfile(pa, dtype=np.float32, count=m)
    e = np.fromfile(pe, dtype=np.float32, count=m)
    rule = bench_rule()
    acc = C._Accumulator("bench", (m,), a.dtype, e.dtype, rule, 10)
    with np.errstate(all="ignore"):
        a64, e64 = acc._f64("a64", a), acc._f64("e64", e)
        d = np.subtract(a64, e64, out=acc._scratch("d", m))
        ad = np.abs(d)
        ulp = acc._ulps(a, e)[0]
        tmp = np.empty(m)
        hist = C._UlpHistogram()
        steps = {
            "to_float64 (a and e)": lambda: (acc._f64("a64", a), acc._f64("e64", e)),
            "difference a-e": lambda: np.subtract(a64, e64, out=tmp),
            "4 float64 dot products": lambda: [C._dot(x, y) for x, y in ((d, d), (a64, a64), (e64, e64), (a64, e64))],
            "abs, sum, argmax of |d|": lambda: (np.abs(d, out=tmp), tmp.sum(), np.argmax(tmp)),
            "peak max|e| (float32 max/min)": lambda: C._max_abs_value(e),
            "max relative error": lambda: acc._max_rel(ad, e64),
            "relative-error array (only when a threshold is reached)": lambda: acc._rel_errors(ad, e64),
            "mismatch count (only when max|d| > atol)": lambda: acc._count_mismatches(ad, e64, (ulp, None)),
            "ULP distances": lambda: acc._ulps(a, e),
            "ULP histogram": lambda: hist.add(ulp),
            "decade histogram of |d|": lambda: acc._histogram(ad, float(ad.max())),
            "top-k": lambda: acc._top(ad, a64, e64, None, 0),
            "full update (all of the above that apply)": lambda: acc.update(a, e, 0),
        }
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size-gib", type=float, default=1.0, help="size of each file in GiB (default 1)")
    p.add_argument("--repeats", type=int, default=3, help="timings per side; the best counts (default 3)")
    p.add_argument("--rel-noise", type=float, default=1e-6, help="relative noise of actual (default 1e-6)")
    p.add_argument("--workers", type=int, default=None, help="compare_arrays workers (default: its own)")
    p.add_argument("--chunk", type=int, default=None, help="chunk_elems for compare_arrays (default: its own)")
    p.add_argument("--out", default=None, help="write the results JSON here (default: the results file for "
                   "a full 1 GiB run, nowhere for smaller runs)")
    p.add_argument("--child", nargs=3, metavar=("ACTUAL", "EXPECTED", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        pa, pe, n = args.child
        print(json.dumps(stream_child(pa, pe, int(n), args.repeats, args.chunk, args.workers)))
        return 0

    load = os.getloadavg()
    n = int(args.size_gib * (1 << 30)) // 4
    nbytes = 2 * 4 * n
    with tempfile.TemporaryDirectory(prefix="mschecker-bench-") as tmp:
        pa, pe = make_files(Path(tmp), n, args.rel_noise)
        # The streaming child runs first, while this process is small: Linux carries ru_maxrss across fork+exec,
        # so a child spawned after loading the baseline arrays would report the parent's peak.
        cmd = [sys.executable, __file__, "--child", str(pa), str(pe), str(n), "--repeats", str(args.repeats)]
        if args.chunk:
            cmd += ["--chunk", str(args.chunk)]
        if args.workers:
            cmd += ["--workers", str(args.workers)]
        child = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        bare_times, bare_value = bare_baseline(pa, pe, args.repeats)
    bare_s, stream_s = min(bare_times), min(child["seconds"])
    ratio = bare_s / stream_s
    ratio_median = statistics.median(bare_times) / statistics.median(child["seconds"])
    rss_mb = max(child["ru_maxrss_kb"], child["vm_hwm_kb"] or 0) * 1024 / 1e6
    if abs(child["metrics"]["max_abs_err"] - bare_value) > 0:
        print(f"warning: max |err| differs: streaming {child['metrics']['max_abs_err']} vs bare {bare_value}")
    results = {
        "benchmark": "compare_bench",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "size_gib_per_file": args.size_gib,
        "elements": n,
        "rel_noise": args.rel_noise,
        "bare_expression": "np.max(np.abs(a - b)) over float32 arrays in memory",
        "bare_seconds": bare_times,
        "bare_gb_per_s": nbytes / bare_s / 1e9,
        "stream_seconds": child["seconds"],
        "stream_gb_per_s": nbytes / stream_s / 1e9,
        "throughput_ratio": ratio,
        "throughput_ratio_of_medians": ratio_median,
        "target_ratio": TARGET_RATIO,
        "stream_peak_rss_mb": rss_mb,
        "stream_ru_maxrss_kb": child["ru_maxrss_kb"],
        "stream_vm_hwm_kb": child["vm_hwm_kb"],
        "load_average_before": load,
        "load_average_after": os.getloadavg(),
        "target_rss_mb": TARGET_RSS_MB,
        "chunk_elems": args.chunk,
        "workers": args.workers,
        "metrics_of_streaming_run": child["metrics"],
        "pass_costs_ns_per_element": child["pass_costs"],
        "meets_targets": bool(ratio >= TARGET_RATIO and rss_mb < TARGET_RSS_MB),
    }
    print(f"elements {n:,} per file ({args.size_gib:g} GiB), both files {nbytes / 1e9:.2f} GB")
    print(f"bare np.max(np.abs(a-b)) in memory: best {bare_s:.3f} s  = {results['bare_gb_per_s']:.2f} GB/s")
    print(f"streaming compare_arrays (memmap):  best {stream_s:.3f} s  = {results['stream_gb_per_s']:.2f} GB/s")
    for step, ns in child["pass_costs"].items():
        print(f"  {ns:7.3f} ns/element  {step}")
    print(f"load average before {load[0]:.2f}, after {results['load_average_after'][0]:.2f}; "
          f"ratio of medians {ratio_median:.2f}x")
    print(f"throughput ratio {ratio:.2f}x (target >= {TARGET_RATIO}x); peak RSS {rss_mb:.0f} MB "
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
