"""The fewest-moves fix against the cheapest fix (issue 24), on real exports and the bundled VAE: estimated device
time of each (mschecker/npu/cost.py; estimates for ranking, the figures' sources in that module), the frontier's
size, evaluations and wall time, and the same under each candidate order (bisect/priors.py: error, priors, cost);
and the exact rescale (bisect's first try) of the bundled, the SDXL-like and the planted real VAEs: the float64
output against the original's, the error on the emulated device before and after, and the estimated device time
against the cheapest fp32 fix. Results:
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


def _bisect(path, feeds, tol, **kw):
    from mschecker.bisect import Sample, bisect_model

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = bisect_model(path, [Sample("s", feeds)], tolerance=tol, profile="ascend910b", check_onnx=False, **kw)
    return r, time.perf_counter() - t0


def order_case(path, feeds, tol, order: str) -> dict:
    """One search in candidate order `order` (bisect.priors), no frontier: the search's own (fewest-moves) fix
    and the cheapest passing configuration it evaluated, both priced."""
    r, wall = _bisect(path, feeds, tol, choose="cost", order=order, rescale=False)
    s, rec = r.search, r.search.recommended
    return {"evaluations": s.evaluations, "located_in": s.located_in, "bound": s.bound, "regime": s.regime,
            "culprits": len(s.culprits),
            "fewest_moves": {"moves": rec.changes if rec else None, "estimated_s": r.cost_of_fewest},
            "cheapest": {"moves": r.recommendation.config.changes if r.recommendation else None,
                         "estimated_s": min((p.seconds for p in r.frontier.points if p.passed), default=None)},
            "wall_s": round(wall, 2)}


def run_case(name: str, tmp: Path) -> dict:
    make, tol = CASES[name]
    path, feeds = make(tmp)
    r, wall = _bisect(path, feeds, tol, frontier=True, choose="cost", order="error", rescale=False)
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
            "wall_s": round(wall, 2), "timings_s": {k: round(v, 3) for k, v in r.timings.items()},
            "orders": {order: order_case(path, feeds, tol, order) for order in ("error", "priors", "cost")}}


def _sdxl_like_vae(tmp: Path) -> tuple[Path, dict]:
    """The SDXL-like VAE decoder (mschecker.sd.vae.SDXL_LIKE_VAE) on unit-std latents / 0.13025, as SDXL feeds it:
    its activations pass 65504 on ordinary latents, as the real SDXL VAE's do."""
    from mschecker.sd import SDXL_SCALING_FACTOR, build_sdxl_like_vae_decoder

    path = tmp / "vae_sdxl_like.onnx"
    onnx.save(build_sdxl_like_vae_decoder(), path)
    z = np.random.default_rng(0).standard_normal((1, 4, 16, 16)) / SDXL_SCALING_FACTOR
    return path, {"latent_sample": z.astype(np.float32)}


RESCALE_CASES = {
    "bundled_small_vae_rescale": _bundled_vae,
    "sdxl_like_vae_rescale": _sdxl_like_vae,
    "real_vae_ts17_planted_rescale": lambda t: _planted_vae("ts17", t),
    "real_vae_dynamo18_planted_rescale": lambda t: _planted_vae("dynamo18", t),
}


def rescale_case(name: str, tmp: Path) -> dict:
    """bisect's default (the exact rescale first) against the fp32 moves alone (--no-rescale, --choose cost): the
    rescaled model's float64 output against the original's, its error on the emulated device, and the estimated
    device time of each fix (the rescaled model priced as given: it keeps every op in fp16)."""
    path, feeds = RESCALE_CASES[name](tmp)
    r, wall = _bisect(path, feeds, 1e-2, rescale=True)
    moves, _ = _bisect(path, feeds, 1e-2, rescale=False, choose="cost")
    rs = r.rescale
    rescaled_s = None
    if rs.model is not None:
        rescaled = tmp / f"{name}_rescaled.onnx"
        onnx.save(rs.model, rescaled)
        priced, _ = _bisect(rescaled, feeds, 1e-2, rescale=False, choose="cost")
        rescaled_s = priced.frontier.baseline_seconds if priced.frontier is not None else None
    before = max((st.rel_l2 for st in r.analysis.outputs.values()), default=None)
    before = before if before is None or before < float("inf") else "inf (NaN/inf outputs)"
    return {"verdict": r.verdict, "k": rs.k, "tensors_beyond_fp16": len(rs.tensors),
            "float64_rel_diff": rs.float64_rel_diff, "device_worst_rel_l2_before": before,
            "device_worst_rel_l2_after": rs.worst_rel_l2, "refused": rs.refused,
            "estimated_s": {"as_given": moves.frontier.baseline_seconds if moves.frontier else None,
                            "rescaled": rescaled_s,
                            "cheapest_fp32_moves": min((p.seconds for p in moves.frontier.points if p.passed),
                                                       default=None) if moves.frontier else None},
            "fp32_moves": moves.recommendation.config.changes if moves.recommendation else None,
            "wall_s": round(wall, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            results[name] = run_case(name, Path(tmp))
            print(name, json.dumps(results[name]), flush=True)
        for name in RESCALE_CASES:
            results[name] = rescale_case(name, Path(tmp))
            print(name, json.dumps(results[name]), flush=True)
    doc = {"benchmark": "bisect_cost", "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or
           platform.machine(), "python": sys.version.split()[0], "cases": results,
           "note": "estimated seconds from mschecker/npu/cost.py (ranking only; absolute within 2-5x at best)"}
    if not args.no_write:
        from mschecker.fsio import atomic_write_text

        out = ROOT / "benchmarks" / "results" / "bisect_cost.json"
        atomic_write_text(out, json.dumps(doc, indent=1) + "\n")  # all or nothing, as bisect_bench.py
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
