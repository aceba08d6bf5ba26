"""mschecker bisect against its peers, one run, ratios in the same run (results: benchmarks/results/bisect_bench.json).

1. Search effort: model evaluations and wall time of `bisect_model` (lockstep pass + fix search + proof) against
   onnxconverter-common's `auto_convert_mixed_precision` (fp16 conversion on onnxruntime, bisecting node
   segments, judging the final outputs only) on the same model, inputs and tolerance (its rtol = atol = ours).
   Its evaluations are counted as its calls of onnxruntime on a converted model. Where it raises, the error is
   recorded. The two do not search the same space (the NPU emulator's fp16 with its kernels vs onnxruntime's
   fp16 kernels), so a "fix" differs; the comparison is the work each spends to reach a verdict.
2. Memory: peak RSS (VmHWM) of the lockstep pass (reference float64 + NPU + own-error runs, every tensor
   compared as it is produced) against a plain emulator run of the same model (target: <= 2x) and against
   onnxruntime with every tensor marked as a graph output (what Polygraphy's debug precision and ait do to see
   inner tensors), and a plain onnxruntime run. Each runner in its own subprocess, so each peak is its own.

    python benchmarks/bisect_bench.py [--cases NAME,...] [--memory NAME,...] [--no-write]
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_sd"

GENERIC_FP16 = str(ROOT / "tests" / "fixtures" / "profiles" / "generic_fp16.toml")
# name -> (model source, tolerance, NPU profile). Sources: "real:<fixture>", "planted:<builder in
# tests/bisect/models.py>", "sd:<preset>:vae" (the bundled VAE decoder).
CASES = {
    # the planted hazards (the poor-polynomial GELU, fp16 LayerNorm statistics) are the generic emulator's
    # kernels, which no device preset runs since issue 21: they are benchmarked on that generic profile
    "planted_gelu": ("planted:gelu_branches", 1e-2, GENERIC_FP16),
    "planted_layernorm": ("planted:layernorm_pair", 1e-2, GENERIC_FP16),
    "planted_chain": ("planted:deep_chain", 2e-3, "ascend910b"),
    "sd_tiny_vae": ("sd:tiny:vae", 1e-2, "ascend910b"),
    "vae_decoder_ts17": ("real:vae_decoder_ts17", 1e-3, "ascend910b"),
    "vae_decoder_dynamo23": ("real:vae_decoder_dynamo23", 1e-3, "ascend910b"),
    "text_encoder_dynamo18": ("real:text_encoder_dynamo18", 1e-3, "ascend910b"),
    "unet_ts17": ("real:unet_ts17", 1e-3, "ascend910b"),
}
# memory cases: the bundled small VAE decoder at a 64x64 latent (256x256 image: 4 M-element activations, an
# attention over 4,096 positions) where activations dominate, and a real UNet export where they do not
MEMORY = ("sd_small_vae_64", "unet_dynamo18")


def materialize(source: str, folder: Path) -> tuple[Path, dict]:
    """(model path, feeds) for a case source, written under `folder`."""
    import numpy as np
    import onnx

    kind, _, rest = source.partition(":")
    if kind == "real":
        src = REAL / rest
        model = onnx.load(str(src / "model.onnx"), load_external_data=False)
        inits = {i.name for i in model.graph.initializer}
        feeds = {i.name: np.load(src / f"{i.name}.npy") for i in model.graph.input if i.name not in inits}
        return src / "model.onnx", feeds
    if kind == "planted":
        sys.path.insert(0, str(ROOT))
        from tests.bisect import models

        model = getattr(models, rest)()
        feeds = models.feeds(model, 10)
    else:  # sd:<preset>:vae[:<latent size>]
        from mschecker.sd.presets import get_preset
        from mschecker.sd.vae import build_vae_decoder

        parts = rest.split(":")
        preset = get_preset(parts[0])
        model = build_vae_decoder(preset, 0)
        shape = tuple(preset.latent_shape)
        if len(parts) > 2:  # the decoder's height and width are dynamic: a larger latent, larger activations
            shape = (shape[0], int(parts[2]), int(parts[2]))
        rng = np.random.default_rng(0)
        feeds = {"latent_sample": (rng.standard_normal((1,) + shape) / preset.scaling_factor).astype(np.float32)}
    path = folder / f"{kind}_{rest.replace(':', '_')}.onnx"
    onnx.save(model, str(path))
    return path, feeds


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------------------------------- child processes
def child_bisect(source, tolerance, profile, folder):
    from mschecker.bisect import Sample, bisect_model

    path, feeds = materialize(source, Path(folder))
    t0 = time.perf_counter()
    r = bisect_model(path, [Sample("s", feeds)], profile=profile, tolerance=tolerance)
    wall = time.perf_counter() - t0
    s = r.search
    return {"verdict": r.verdict, "wall_s": wall, "evaluations": s.evaluations, "located_in": s.located_in,
            "bound": s.bound, "regime": s.regime, "candidates": len(s.candidates),
            "changes": r.recommendation.changes if r.recommendation else 0,
            "nodes_moved": len(r.culprits), "proof_passes": 1 if r.proof is not None else 0,
            "attribution_evaluations": len(r.attribution),
            "onnx_check": r.onnx_check.to_dict() if r.onnx_check else None,
            "timings_s": r.timings, "peak_rss_mb": _peak_rss_mb()}


def child_amp(source, tolerance, profile, folder):
    import contextlib
    import io

    import onnx
    from onnxconverter_common import auto_mixed_precision as amp

    path, feeds = materialize(source, Path(folder))
    model = onnx.load(str(path))
    calls = {"n": 0}
    original = amp.get_tensor_values_using_ort

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)
    amp.get_tensor_values_using_ort = counted
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints every attempt
            out = amp.auto_convert_mixed_precision(model, feeds, rtol=tolerance, atol=tolerance, keep_io_types=True)
        kept = sum(1 for n in out.graph.node if n.op_type == "Cast")
        result = {"ok": True, "cast_nodes": kept}
    except Exception as exc:  # noqa: BLE001 - recorded: "where it crashes, say so"
        result = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    result.update({"wall_s": time.perf_counter() - t0, "evaluations": max(0, calls["n"] - 1),
                   "ort_calls_including_fp32_reference": calls["n"], "peak_rss_mb": _peak_rss_mb()})
    return result


def memory_source(name):
    return {"sd_small_vae_64": "sd:small:vae:64", "unet_dynamo18": "real:unet_dynamo18"}[name]


def child_memory(name, mode, folder):
    import numpy as np

    path, feeds = materialize(memory_source(name), Path(folder))
    base = _peak_rss_mb()
    t0 = time.perf_counter()
    if mode == "emulator":
        from mschecker.graph.executor import Executor
        from mschecker.npu.policy import NpuPolicy
        Executor(str(path), NpuPolicy("ascend910b")).run(feeds)
    elif mode == "lockstep":
        from mschecker.bisect import Sample
        from mschecker.bisect.engine import _plan, tolerance_rule
        from mschecker.bisect.lockstep import analyse
        from mschecker.graph.loader import load_model
        from mschecker.npu.profile import load_profile
        ref, npu = _plan(load_model(path), load_profile("ascend910b"))
        analyse(ref, npu, [Sample("s", feeds)], tolerance_rule(1e-2))
    else:
        import onnx
        import onnxruntime as ort
        model = onnx.load(str(path))
        if mode == "ort_all_outputs":
            model = onnx.shape_inference.infer_shapes(model)
            have = {o.name for o in model.graph.output}
            known = {v.name: v for v in model.graph.value_info}
            for node in model.graph.node:
                for o in node.output:
                    if o and o not in have:
                        model.graph.output.append(known.get(o) or onnx.helper.make_empty_tensor_value_info(o))
                        have.add(o)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        sess.run(None, {k: np.asarray(v) for k, v in feeds.items()})
    return {"wall_s": time.perf_counter() - t0, "peak_rss_mb": _peak_rss_mb(), "rss_after_setup_mb": base}


def _child(kind, *args):
    code = (f"import json,sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            f"import bisect_bench as b; print('RESULT' + json.dumps(b.child_{kind}(*{list(args)!r})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        return {"ok": False, "error": f"child exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}
    return json.loads(line[len("RESULT"):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--memory", default=",".join(MEMORY))
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    results = {"machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()},
               "search": {}, "memory": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in [c for c in args.cases.split(",") if c]:
            source, tol, profile = CASES[name]
            ours = _child("bisect", source, tol, profile, tmp)
            peer = _child("amp", source, tol, profile, tmp)
            row = {"tolerance": tol, "profile": profile, "bisect": ours, "auto_convert_mixed_precision": peer}
            if peer.get("evaluations") and ours.get("evaluations"):
                row["evaluations_ratio"] = ours["evaluations"] / peer["evaluations"]
            if peer.get("wall_s") and ours.get("wall_s"):
                row["wall_ratio"] = ours["wall_s"] / peer["wall_s"]
            results["search"][name] = row
            print(f"{name}: bisect {ours.get('verdict')} {ours.get('evaluations')} evals {ours.get('wall_s', 0):.2f} s"
                  f" | auto_convert_mixed_precision "
                  f"{'ok' if peer.get('ok') else 'FAILED: ' + peer.get('error', '')[:120]} "
                  f"{peer.get('evaluations')} evals {peer.get('wall_s', 0):.2f} s", flush=True)
        for name in [m for m in args.memory.split(",") if m]:
            row = {mode: _child("memory", name, mode, tmp)
                   for mode in ("emulator", "lockstep", "ort_plain", "ort_all_outputs")}
            peak = {m: r.get("peak_rss_mb") for m, r in row.items()}
            if all(peak.values()):
                row["lockstep_over_emulator"] = peak["lockstep"] / peak["emulator"]
                row["lockstep_over_ort_all_outputs"] = peak["lockstep"] / peak["ort_all_outputs"]
                row["ort_all_outputs_over_ort_plain"] = peak["ort_all_outputs"] / peak["ort_plain"]
            results["memory"][name] = row
            print(f"{name}: peak RSS MB " + ", ".join(f"{m} {v:.0f}" for m, v in peak.items() if v)
                  + f" | lockstep/emulator {row.get('lockstep_over_emulator', float('nan')):.2f}", flush=True)
    if not args.no_write:
        from mschecker.fsio import atomic_write_text
        out = ROOT / "benchmarks" / "results" / "bisect_bench.json"
        if out.is_file():  # a partial run (--cases / --memory) updates its rows, keeps the others
            old = json.loads(out.read_text())
            for part in ("search", "memory"):
                results[part] = {**old.get(part, {}), **results[part]}
        atomic_write_text(out, json.dumps(results, indent=1) + "\n")
        print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
