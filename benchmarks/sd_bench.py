"""SD benchmark: the `small` pipeline on the float64 reference and the emulated NPU (onnxruntime fp32 as the peer),
and one `sd15` UNet evaluation on the emulated NPU vs onnxruntime fp32 on the same graph.

Every measurement runs in its own subprocess (`--worker`), so peak RSS (ru_maxrss) is that runner's own and
one runner's caches do not help another. Reported per run: wall seconds, CPU seconds (user + system of the
worker: the number that does not depend on how busy the shared machine is), peak RSS, and the 1-minute load
average at the start (context for the wall time). Ratios are emulator / onnxruntime in the same run.

`small`: the whole pipeline (text encoder, --steps guided UNet steps at batch 2, VAE decoder), profile ascend910b
as `mschecker sd` runs it. `sd15`: the real SD-1.5 UNet dimensions (860M parameters, 3.4 GB fp32) built on demand
into a temporary folder with external data (deleted afterwards), one evaluation at batch 2 (classifier-free
guidance), 64x64 latents, 77 context tokens. A worker that runs past --timeout or is killed (memory) is
recorded as such, with what it had reached.

`real`: the executor on real exports of small width (tests/fixtures/real_sd: diffusers UNet / VAE decoder and
transformers CLIP text encoder, TorchScript opset 17 and dynamo opset 18/23, 60-870 nodes) against onnxruntime
fp32 and onnx.reference's ReferenceEvaluator, one subprocess per model holding all four runners, 1 thread each
(ORT intra-op 1, BLAS 1), --rounds interleaved rounds (each round runs every runner once, in turn, so a burst
of load on the shared machine hits all of them); the median of the per-round ratios is reported, with the load
average before and after. Targets (issue 13): NPU no slower than the float64 reference, both >= 2x faster than
onnx.reference.

`sd15_pipeline` (memory-heavy, not part of `all`): the full-size sd15 preset written as a diffusers folder
(`mschecker sd --preset sd15 --save-pipeline`, external data, 3.4 GB UNet) into a temporary folder, then one
`mschecker sd --pipeline DIR --steps 2 --no-fix` check (reference vs NPU; the fix search, which re-runs the
failing stage once per round, is left out to bound the run on a shared machine), each as a subprocess:
wall time and the process's peak RSS, and from the check's JSON each stage's wall time, peak RSS (the stage's
own: the high-water mark is reset before it) and the seconds of each UNet evaluation (the cost of one more
step), per side.

    python benchmarks/sd_bench.py [--part small|sd15|real|sd15_pipeline|all] [--steps 10] [--timeout 1200]
                                  [--rounds 7]
Results: benchmarks/results/sd_bench.json (merged per part, so the parts can be run separately).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mschecker.heap import KEEP_FREED_ENV

RESULTS = Path(__file__).resolve().parent / "results" / "sd_bench.json"
PROMPT = "a photo of an astronaut riding a horse on the moon"


def _usage() -> dict:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": r.ru_utime + r.ru_stime, "peak_rss_mib": r.ru_maxrss / 1024}


# ---------------------------------------------------------------------------------------------- workers
def worker_small(device: str, steps: int) -> dict:
    import numpy as np

    from mschecker.sd import SDModels, run_pipeline, stage_runner_factory

    models = SDModels.build("small")
    factory = stage_runner_factory(device, "ascend910b" if device == "npu" else None)
    before = _usage()["cpu_s"]
    t0 = time.perf_counter()
    r = run_pipeline(PROMPT, preset="small", steps=steps, models=models, make_stage_runner=factory)
    wall = time.perf_counter() - t0
    u = _usage()
    return {"wall_s": wall, "cpu_s": u["cpu_s"] - before, "peak_rss_mib": u["peak_rss_mib"],
            "image_mean": float(np.asarray(r.image).mean())}


def worker_sd15(device: str, model_path: str) -> dict:
    import numpy as np

    from mschecker.sd import get_preset, ort_stage_runner, stage_runner_factory

    p = get_preset("sd15")
    c, h, w = p.latent_shape
    rng = np.random.default_rng(0)
    feeds = {"sample": rng.standard_normal((2, c, h, w)).astype(np.float32),
             "timestep": np.full(2, 981.0, np.float32),
             "encoder_hidden_states": (rng.standard_normal((2, p.clip.max_length, p.clip.width)) * 0.5
                                       ).astype(np.float32)}
    t0 = time.perf_counter()
    run = ort_stage_runner(model_path, "unet") if device == "ort" else \
        stage_runner_factory("npu", "ascend910b")(model_path, "unet")
    load = time.perf_counter() - t0
    before = _usage()["cpu_s"]
    t0 = time.perf_counter()
    out = next(iter(run(feeds).values()))
    wall = time.perf_counter() - t0
    u = _usage()
    x = np.asarray(out, np.float64)
    return {"load_s": load, "wall_s": wall, "cpu_s": u["cpu_s"] - before, "peak_rss_mib": u["peak_rss_mib"],
            "output_std": float(np.std(x[np.isfinite(x)])) if np.isfinite(x).any() else None,
            "output_nonfinite": int((~np.isfinite(x)).sum())}


REAL_SD = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "real_sd"


def worker_real(name: str, rounds: int) -> dict:
    """All four runners on one real export, interleaved rounds; seconds per run and per-round ratios."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from mschecker.modelcheck.runners import make_runner

    folder = REAL_SD / name
    model = onnx.load(str(folder / "model.onnx"))
    names = [i.name for i in model.graph.input]
    feeds = {n: np.load(folder / f"{n}.npy") for n in names}
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    session = ort.InferenceSession(str(folder / "model.onnx"), sess_options=so, providers=["CPUExecutionProvider"])
    reference = make_runner(str(folder / "model.onnx"), device="reference")
    npu = make_runner(str(folder / "model.onnx"), device="npu", profile="ascend910b")
    evaluator = ReferenceEvaluator(model)
    runs = {"ort": lambda: session.run(None, feeds), "reference": lambda: reference.run(dict(feeds)),
            "npu": lambda: npu.run(dict(feeds)), "onnx_reference": lambda: evaluator.run(None, feeds)}
    for run in runs.values():  # warm-up: plan caches, first-touch pages
        run()
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[k].append(time.perf_counter() - t0)
    t = {k: np.asarray(v) for k, v in times.items()}

    def ratio(a, b):
        return float(np.median(t[a] / t[b]))
    return {"nodes": len(model.graph.node), "median_s": {k: float(np.median(v)) for k, v in t.items()},
            "ratios": {"npu_vs_ort": ratio("npu", "ort"), "reference_vs_ort": ratio("reference", "ort"),
                       "npu_vs_reference": ratio("npu", "reference"),
                       "onnx_reference_vs_npu": ratio("onnx_reference", "npu"),
                       "onnx_reference_vs_reference": ratio("onnx_reference", "reference")}}


def _timed(cmd: list[str], timeout: float) -> dict:
    """A subprocess's wall time, exit code and peak RSS (its own VmHWM via /usr/bin/time when available)."""
    load1 = os.getloadavg()[0]
    timer = ["/usr/bin/time", "-f", "MAXRSS_KB %M"] if Path("/usr/bin/time").exists() else []
    env = {**os.environ, "OPENBLAS_NUM_THREADS": BLAS_THREADS, "OMP_NUM_THREADS": BLAS_THREADS}  # the CLI: heap.py
    t0 = time.perf_counter()
    try:
        r = subprocess.run(timer + cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s", "load1_at_start": load1}
    out = {"wall_s": time.perf_counter() - t0, "exit": r.returncode, "load1_at_start": load1,
           "load1_at_end": os.getloadavg()[0], "stdout_tail": r.stdout[-1500:], "stderr_tail": r.stderr[-600:]}
    rss = [ln for ln in r.stderr.splitlines() if ln.startswith("MAXRSS_KB ")]
    if rss:
        out["peak_rss_mib"] = int(rss[-1].split()[1]) / 1024
    return out


def bench_sd15_pipeline(timeout: float, preset: str = "sd15") -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="mschecker-sd15-pipeline-"))
    cli = [sys.executable, "-m", "mschecker.cli", "sd"]
    try:
        folder = tmp / "sd15"
        save = _timed(cli + ["--preset", preset, "--save-pipeline", str(folder)], timeout)
        out = {"preset": preset, "save": save}
        if save.get("exit") != 0:
            return out
        out["folder_bytes"] = {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*")
                               if p.is_file() and p.stat().st_size > 1 << 20}
        report = tmp / "check.json"
        out["check"] = _timed(cli + ["--pipeline", str(folder), "--steps", "2", "--no-fix", "--out", str(tmp / "out"),
                                     "--json", str(report)], timeout)
        if report.is_file():
            data = json.loads(report.read_text())
            out["stage_costs"] = data["settings"]["stage_costs"]
            out["timings_s"] = data["timings_s"]
            out["verdict"] = data["verdict"]
            out["image_psnr_db"] = data["metrics"]["image_psnr_db"]
            out["fix"] = data["fix"]["cli_flags"] if data.get("fix") else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def bench_real(rounds: int, timeout: float) -> dict:
    models = sorted(p.name for p in REAL_SD.iterdir() if (p / "model.onnx").is_file())
    out = {"rounds": rounds, "threads": 1, "load_before": os.getloadavg(), "models": {}}
    for name in models:
        out["models"][name] = r = spawn(["real", name, str(rounds)], timeout)
        if r.get("status") == "ok":
            q = r["ratios"]
            r["targets_met"] = {"npu_vs_reference <= 1": q["npu_vs_reference"] <= 1.0,
                                "onnx_reference_vs_npu >= 2": q["onnx_reference_vs_npu"] >= 2.0,
                                "onnx_reference_vs_reference >= 2": q["onnx_reference_vs_reference"] >= 2.0}
            print(f"  {name:22s} " + "  ".join(f"{k} {v:.2f}" for k, v in q.items()), flush=True)
    out["load_after"] = os.getloadavg()
    return out


# ---------------------------------------------------------------------------------------------- driver
BLAS_THREADS = "1"  # what `mschecker sd` uses (see mschecker/commands/sd.py); --blas-threads changes it


def spawn(args: list[str], timeout: float) -> dict:
    load1 = os.getloadavg()[0]
    env = {**os.environ, **KEEP_FREED_ENV}  # freed memory kept for the next run, as the CLI does (mschecker/heap.py)
    if BLAS_THREADS != "default":
        env.update(OPENBLAS_NUM_THREADS=BLAS_THREADS, OMP_NUM_THREADS=BLAS_THREADS, MKL_NUM_THREADS=BLAS_THREADS)
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s", "load1_at_start": load1}
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        why = "killed (signal %d, likely out of memory)" % -r.returncode if r.returncode < 0 else \
            f"exit {r.returncode}"
        return {"status": why, "stderr_tail": r.stderr[-800:], "elapsed_s": elapsed, "load1_at_start": load1}
    result = json.loads(r.stdout.strip().splitlines()[-1])
    result.update(status="ok", load1_at_start=load1, process_s=elapsed)
    return result


def bench_small(steps: int, timeout: float) -> dict:
    runs = {d: spawn(["small", d, str(steps)], timeout) for d in ("ort", "reference", "npu")}
    out = {"steps": steps, "profile": "ascend910b", "runs": runs}
    ort = runs["ort"]
    for d in ("reference", "npu"):
        if runs[d].get("status") == "ok" and ort.get("status") == "ok":
            out[f"{d}_vs_ort_cpu_ratio"] = runs[d]["cpu_s"] / ort["cpu_s"]
            out[f"{d}_vs_ort_wall_ratio"] = runs[d]["wall_s"] / ort["wall_s"]
    return out


def bench_sd15(timeout: float) -> dict:
    from mschecker.sd import build_unet, save_model

    tmp = Path(tempfile.mkdtemp(prefix="mschecker-sd15-"))
    try:
        t0 = time.perf_counter()
        model = build_unet("sd15")
        path = save_model(model, tmp / "unet.onnx", external_data=True)
        del model
        build_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in tmp.iterdir())
        runs = {d: spawn(["sd15", d, str(path)], timeout) for d in ("ort", "npu")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"graph_bytes": size, "build_and_save_s": build_s, "batch": 2, "latent": [4, 64, 64], "runs": runs}
    if all(r.get("status") == "ok" for r in runs.values()):
        out["npu_vs_ort_cpu_ratio"] = runs["npu"]["cpu_s"] / runs["ort"]["cpu_s"]
        out["npu_vs_ort_wall_ratio"] = runs["npu"]["wall_s"] / runs["ort"]["wall_s"]
        out["npu_vs_ort_rss_ratio"] = runs["npu"]["peak_rss_mib"] / runs["ort"]["peak_rss_mib"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["small", "sd15", "real", "sd15_pipeline", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=7, help="real: interleaved rounds per model")
    ap.add_argument("--pipeline-preset", default="sd15", help="sd15_pipeline: the preset (tiny to try the script)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per worker")
    ap.add_argument("--blas-threads", default="1", help="OpenBLAS/OpenMP threads of the workers (a number or "
                    "'default'; 1 is what `mschecker sd` uses). onnxruntime keeps its own thread pool.")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global BLAS_THREADS
    BLAS_THREADS = args.blas_threads
    if args.worker:
        kind, device, rest = args.worker[0], args.worker[1], args.worker[2]
        if kind == "real":
            result = worker_real(device, int(rest))
        else:
            result = worker_small(device, int(rest)) if kind == "small" else worker_sd15(device, rest)
        print(json.dumps(result))
        return 0
    data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    data["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                       "note": "shared machine: compare cpu_s; wall_s depends on the other jobs (load1_at_start)"}
    parts = ["small", "sd15", "real"] if args.part == "all" else [args.part]
    for part in parts:
        key = part if args.blas_threads == "1" else f"{part}_blas_threads_{args.blas_threads}"
        if part == "sd15_pipeline" and args.pipeline_preset != "sd15":
            key = f"{args.pipeline_preset}_pipeline"
        bench = {"small": lambda: bench_small(args.steps, args.timeout), "sd15": lambda: bench_sd15(args.timeout),
                 "real": lambda: bench_real(args.rounds, args.timeout),
                 "sd15_pipeline": lambda: bench_sd15_pipeline(args.timeout, args.pipeline_preset)}[part]
        data[key] = bench()
        data[key]["blas_threads"] = args.blas_threads
        part = key
        data[part]["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        print(json.dumps({part: data[part]}, indent=2))
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        tmp = RESULTS.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
