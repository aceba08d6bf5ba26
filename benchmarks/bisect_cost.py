"""The fewest-moves fix against the cheapest fix (issue 24), on real exports and the bundled VAE: estimated device
time of each (mschecker/npu/cost.py; estimates for ranking, the figures' sources in that module), the frontier's
size, evaluations and wall time; and the exact rescale of the bundled VAE (bisect --rescale): its float64 output
against the original's and its error on the emulated device, before and after. Results:
benchmarks/results/bisect_cost.json.

    python benchmarks/bisect_cost.py [--no-write]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_sd"


def _planted_vae(export: str, tmp: Path) -> tuple[Path, dict]:
    """The real VAE decoder with its second Conv's weights and bias x 1e5 (the model of tests/npu/test_atc_real.py,
    built by its helper: one definition)."""
    sys.path.insert(0, str(ROOT))
    from tests.npu.test_atc_real import _overflowing_vae

    feeds = {"latent_sample": np.load(REAL / f"vae_decoder_{export}" / "latent_sample.npy")}
    return _overflowing_vae(export, tmp), feeds


def _bundled_vae(tmp: Path) -> tuple[Path, dict]:
    """The bundled small VAE decoder on latents of std 30, as the SD main job feeds it (its last conv overflows)."""
    from mschecker.sd import build_vae_decoder, get_preset

    p = get_preset("small")
    path = tmp / "vae_small.onnx"
    onnx.save(build_vae_decoder(p), path)
    z = np.random.default_rng(0).standard_normal((1, *p.latent_shape)) * 30.0 / p.scaling_factor
    return path, {"latent_sample": z.astype(np.float32)}


def _text_encoder(export: str, tmp: Path) -> tuple[Path, dict]:
    d = REAL / f"text_encoder_{export}"
    return d / "model.onnx", {"input_ids": np.load(d / "input_ids.npy")}


CASES = {
    "real_vae_ts17_planted": (lambda t: _planted_vae("ts17", t), 1e-2),
    "real_vae_dynamo18_planted": (lambda t: _planted_vae("dynamo18", t), 1e-2),
    "real_text_encoder_ts17_3e-3": (lambda t: _text_encoder("ts17", t), 3e-3),
    "bundled_small_vae": (_bundled_vae, 1e-2),
}


def run_case(name: str, tmp: Path) -> dict:
    from mschecker.bisect import Sample, bisect_model

    make, tol = CASES[name]
    path, feeds = make(tmp)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = bisect_model(path, [Sample("s", feeds)], tolerance=tol, profile="ascend910b", check_onnx=False,
                         frontier=True, choose="cost")
    wall = time.perf_counter() - t0
    front = r.frontier
    fix = next((p for p in front.points if r.recommendation is not None and p.config == r.recommendation.config),
               None) if front else None
    return {"verdict": r.verdict, "tolerance": tol, "evaluations_counted": r.search.evaluations if r.search else 0,
            "frontier_points": len(front.points) if front else 0,
            "pareto_points": len(front.pareto) if front else 0,
            "baseline_estimated_s": front.baseline_seconds if front else None,
            "fewest_moves": {"moves": r.search.recommended.changes if r.search and r.search.recommended else None,
                             "estimated_s": r.cost_of_fewest},
            "cheapest": {"moves": fix.changes if fix else None, "estimated_s": fix.seconds if fix else None},
            "wall_s": round(wall, 2), "timings_s": {k: round(v, 3) for k, v in r.timings.items()}}


def rescale_case(tmp: Path) -> dict:
    from mschecker.bisect import Sample, bisect_model

    path, feeds = _bundled_vae(tmp)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = bisect_model(path, [Sample("s", feeds)], tolerance=1e-2, profile="ascend910b", check_onnx=False,
                         rescale=True)
    rs = r.rescale
    before = max((st.rel_l2 for st in r.analysis.outputs.values()), default=None)
    before = before if before is None or before < float("inf") else "inf (NaN/inf outputs)"
    return {"verdict": r.verdict, "k": rs.k, "tensors_beyond_fp16": len(rs.tensors),
            "float64_rel_diff": rs.float64_rel_diff, "device_worst_rel_l2_before": before,
            "device_worst_rel_l2_after": rs.worst_rel_l2, "refused": rs.refused,
            "wall_s": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            results[name] = run_case(name, Path(tmp))
            print(name, json.dumps(results[name]), flush=True)
        results["bundled_small_vae_rescale"] = rescale_case(Path(tmp))
        print("bundled_small_vae_rescale", json.dumps(results["bundled_small_vae_rescale"]), flush=True)
    doc = {"benchmark": "bisect_cost", "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or
           platform.machine(), "python": sys.version.split()[0], "cases": results,
           "note": "estimated seconds from mschecker/npu/cost.py (ranking only; absolute within 2-5x at best)"}
    if not args.no_write:
        out = ROOT / "benchmarks" / "results" / "bisect_cost.json"
        out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
