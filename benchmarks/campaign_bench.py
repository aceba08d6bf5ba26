"""Campaign scale: the same campaign on a LocalCluster of 1 and of 2 workers (wall-time ratio, per-worker peak RSS,
per-cell costs), and from those costs the on-paper size of a nightly full-size SD-1.5 matrix.

    python benchmarks/campaign_bench.py [--campaign examples/campaigns/sd_small_nightly.toml] [--workers 1,2]

Each configuration runs the whole campaign from a cold cluster (worker start-up and imports included: that is
what a nightly pays). Both runs go to one store, the second compared with the first: every cell must come out
`same` (the cells are bit-exact, whichever worker ran them). The load average is recorded before and after each
run: the machine is shared, so a ratio measured under load says less than one measured idle.
Results: benchmarks/results/campaign_bench.json (docs/CAMPAIGN.md quotes them).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# ---- on-paper sizing inputs (measured elsewhere; see docs/EXECUTOR.md "Benchmark") ------------------------------
# One UNet evaluation (batch 2: classifier-free guidance), full-width SD-1.5 UNet at a 32x32 latent, one thread:
SD15_256_NPU_S, SD15_256_REF_S = 7.53, 12.39
# ... of which Softmax (its cost grows with the attention sequence squared): NPU 0.4 s, reference 0.7 s.
SD15_256_NPU_SOFTMAX_S, SD15_256_REF_SOFTMAX_S = 0.4, 0.7
# Attention score/value MatMuls are ~4% of the UNet's FLOPs at 32x32 (QK^T and AV: 2 x 2 x seq^2 x dim per block,
# 5 blocks at seq 1024 / dim 320 and 5 at seq 256 / dim 640, batch 2: ~15 GFLOP of ~0.4 TFLOP).
ATTN_MATMUL_FLOP_SHARE = 0.04
# 512x512 images: a 64x64 latent, 4x the pixels: convs and projections x4, attention scores x16 (seq^2).
PIXELS_X, ATTN_X = 4.0, 16.0
# VAE decoder at 512x512 in units of one batch-2 UNet evaluation at 64x64 (decoder ~1.2 TMAC vs UNet ~0.4 TMAC
# per sample, i.e. ~1.5 batch-2 evaluations; rounded up to 2 for its 512x512 float64 activations).
VAE_IN_UNET_STEPS = 2.0
# Peak RSS at sd15_256 (docs/EXECUTOR.md): reference 7.2 GB (float64 weights 6.9 GB), NPU 3.8 GB.
SD15_REF_PEAK_GB = 7.2


def step_at_512(total_s: float, softmax_s: float, attn_share: float) -> float:
    """One batch-2 UNet evaluation at a 64x64 latent, scaled from the 32x32 measurement by what grows how."""
    attn_mm = attn_share * (total_s - softmax_s)
    rest = total_s - softmax_s - attn_mm
    return rest * PIXELS_X + (softmax_s + attn_mm) * ATTN_X


def sd15_sizing(prompts: int = 20, profiles: int = 3, steps: int = 25, window_h: float = 8.0) -> dict:
    npu = step_at_512(SD15_256_NPU_S, SD15_256_NPU_SOFTMAX_S, ATTN_MATMUL_FLOP_SHARE)
    ref = step_at_512(SD15_256_REF_S, SD15_256_REF_SOFTMAX_S, ATTN_MATMUL_FLOP_SHARE)
    cell_s = steps * (npu + ref) + VAE_IN_UNET_STEPS * (npu + ref)
    cells = prompts * profiles
    worker_h = cells * cell_s / 3600
    # the float64 reference does not depend on the profile: cached per (prompt, seed) it runs once, not `profiles` times
    cached_s = steps * npu + VAE_IN_UNET_STEPS * npu + (steps + VAE_IN_UNET_STEPS) * ref / profiles
    workers = -(-cells // max(1, int(window_h * 3600 // cell_s)))
    return {"prompts": prompts, "profiles": profiles, "steps": steps, "cells": cells,
            "unet_step_512_s": {"npu": round(npu, 1), "reference": round(ref, 1)},
            "cell_s": round(cell_s), "worker_hours": round(worker_h, 1),
            "workers_for_window": workers, "window_h": window_h,
            "wall_h_with_workers": round(-(-cells // workers) * cell_s / 3600, 2),
            "cell_s_with_shared_reference": round(cached_s),
            "worker_hours_with_shared_reference": round(cells * cached_s / 3600, 1),
            "memory_per_worker_gb": f">= {SD15_REF_PEAK_GB} (float64 reference weights) + 64x64 activations"}


def run_one(spec, store: Path, workers: int, tag: str) -> dict:
    from mschecker.campaign.engine import EngineConfig
    from mschecker.campaign.runner import run_campaign
    from mschecker.campaign.store import Store

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    done = [0]

    def progress(cell, record):
        done[0] += 1
        print(f"  [{workers}w] {done[0]:3d} {record['status']:8s} {record.get('wall_s') or 0:6.1f} s  {cell.key[:90]}",
              flush=True)

    summary = run_campaign(spec, store, EngineConfig(workers=workers), run_id=f"bench-{tag}-{workers}w",
                           on_result=progress)
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()
    with Store.open(store) as s:
        records = s.cells(summary.run_id)
    per_worker: dict[str, dict] = {}
    for r in records:
        w = per_worker.setdefault(r.worker or "?", {"cells": 0, "busy_s": 0.0, "peak_rss_mb": 0.0})
        w["cells"] += 1
        w["busy_s"] = round(w["busy_s"] + (r.wall_s or 0), 2)
        w["peak_rss_mb"] = max(w["peak_rss_mb"], round((r.peak_rss_bytes or 0) / 2**20, 1))
    by_kind: dict[str, list[float]] = {}
    sd_split: dict[str, list[float]] = {"reference": [], "npu": []}
    for r in records:
        by_kind.setdefault(f"{r.kind}/{r.coords.get('profile', '')}".rstrip("/"), []).append(r.wall_s or 0)
        for side in sd_split:
            if r.kind == "sd" and side in (r.detail.get("timings_s") or {}):
                sd_split[side].append(r.detail["timings_s"][side])
    busy = sum(r.wall_s or 0 for r in records)
    return {"workers": workers, "run_id": summary.run_id, "wall_s": round(wall, 2),
            "statuses": {s: list(summary.statuses.values()).count(s) for s in set(summary.statuses.values())},
            "cells": len(summary.statuses), "cell_busy_s": round(busy, 1),
            "parallel_efficiency": round(busy / (workers * wall), 3),
            "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in load_after],
            "per_worker": per_worker,
            "cell_wall_s": {k: {"n": len(v), "median": round(statistics.median(v), 2), "max": round(max(v), 2)}
                            for k, v in sorted(by_kind.items())},
            "sd_cell_split_median_s": {k: round(statistics.median(v), 2) for k, v in sd_split.items() if v},
            "sd_cells": {r.key: {"status": r.status, "image_psnr_db": round(r.metrics.get("image_psnr_db", 0.0), 2),
                                 "wall_s": round(r.wall_s or 0, 1)} for r in records if r.kind == "sd"}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campaign", default=str(ROOT / "examples" / "campaigns" / "sd_small_nightly.toml"))
    p.add_argument("--workers", default="1,2", help="comma list of LocalCluster sizes")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "campaign_bench.json"))
    args = p.parse_args()
    from mschecker.campaign.compare import compare_runs
    from mschecker.campaign.spec import load_campaign
    from mschecker.campaign.store import Store

    spec = load_campaign(args.campaign)
    sizes = [int(x) for x in args.workers.split(",")]
    tag = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.sqlite"
        runs = []
        for n in sizes:
            print(f"campaign {spec.name}: {len(spec.cells())} tasks on {n} worker(s), load {os.getloadavg()}",
                  flush=True)
            runs.append(run_one(spec, store, n, tag))
            print(json.dumps({k: runs[-1][k] for k in ("wall_s", "statuses", "parallel_efficiency",
                                                       "loadavg_after")}), flush=True)
        with Store.open(store) as s:
            cmp = compare_runs(s, runs[0]["run_id"], runs[-1]["run_id"]).counts() if len(runs) > 1 else {}
    result = {"benchmark": "campaign_bench", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
              "campaign": str(Path(args.campaign).relative_to(ROOT)) if Path(args.campaign).is_relative_to(ROOT)
              else args.campaign, "cpu_count": os.cpu_count(),
              "note": "shared 2-core machine: see loadavg_before/after next to each run",
              "runs": runs,
              "wall_ratio": {f"{runs[0]['workers']}w/{r['workers']}w": round(runs[0]["wall_s"] / r["wall_s"], 3)
                             for r in runs[1:]},
              "first_vs_last_run_comparison": cmp,
              "sd15_nightly_on_paper": sd15_sizing()}
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("wall_ratio", "first_vs_last_run_comparison")}))
    print(json.dumps(result["sd15_nightly_on_paper"], indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
