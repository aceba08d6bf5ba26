"""Executor benchmark: emulated NPU and float64 reference vs onnxruntime fp32 and onnx.reference, one run.

Graph: an SD-UNet-like block stack built here with onnx.helper (until the bundled SD UNet exists): per block
Conv3x3 -> GroupNorm(32) -> SiLU (Sigmoid*Mul) -> Conv3x3 -> residual Add, then a self-attention (MatMul QK^T,
Softmax, MatMul PV) over the flattened spatial positions. Each runner runs in its own subprocess so that its
peak RSS (ru_maxrss) is its own; wall time is the best of --repeat runs after a warm-up.
Targets (issue 4): NPU <= 1.5x ORT, reference <= 2.5x ORT, both >= 4x faster than onnx.reference.

    python benchmarks/executor_bench.py [--channels 128] [--size 32] [--blocks 4] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def build(path: Path, c: int, s: int, blocks: int) -> None:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def w(name, *shape, scale=None):
        fan = np.prod(shape[1:]) if len(shape) > 1 else 1
        inits.append(nh.from_array((rng.standard_normal(shape) * (scale or fan ** -0.5)).astype(np.float32), name))
        return name

    x = "x"
    for b in range(blocks):
        p = f"b{b}_"
        nodes += [h.make_node("Conv", [x, w(p + "w1", c, c, 3, 3), w(p + "b1", c, scale=0.1)], [p + "c1"], pads=[1] * 4,
                              kernel_shape=[3, 3]),
                  h.make_node("GroupNormalization", [p + "c1", w(p + "g", c, scale=1.0), w(p + "be", c, scale=0.1)],
                              [p + "n1"], num_groups=32),
                  h.make_node("Sigmoid", [p + "n1"], [p + "s1"]), h.make_node("Mul", [p + "n1", p + "s1"], [p + "a1"]),
                  h.make_node("Conv", [p + "a1", w(p + "w2", c, c, 3, 3)], [p + "c2"], pads=[1] * 4, kernel_shape=[3, 3]),
                  h.make_node("Add", [x, p + "c2"], [p + "r"]),
                  h.make_node("Reshape", [p + "r", "shp"], [p + "f"]),                  # (1, c, s*s)
                  h.make_node("Transpose", [p + "f"], [p + "t"], perm=[0, 2, 1]),     # (1, s*s, c)
                  h.make_node("MatMul", [p + "t", w(p + "wq", c, c)], [p + "q"]),
                  h.make_node("MatMul", [p + "t", w(p + "wk", c, c)], [p + "k"]),
                  h.make_node("MatMul", [p + "t", w(p + "wv", c, c)], [p + "v"]),
                  h.make_node("Transpose", [p + "k"], [p + "kt"], perm=[0, 2, 1]),
                  h.make_node("MatMul", [p + "q", p + "kt"], [p + "qk"]),
                  h.make_node("Mul", [p + "qk", "scale"], [p + "qks"]),
                  h.make_node("Softmax", [p + "qks"], [p + "pr"], axis=-1),
                  h.make_node("MatMul", [p + "pr", p + "v"], [p + "o"]),
                  h.make_node("Transpose", [p + "o"], [p + "ot"], perm=[0, 2, 1]),
                  h.make_node("Reshape", [p + "ot", "shp4"], [p + "o4"]),
                  h.make_node("Add", [p + "r", p + "o4"], [p + "out"])]
        x = p + "out"
    inits += [nh.from_array(np.array([1, c, s * s], np.int64), "shp"), nh.from_array(np.array([1, c, s, s], np.int64), "shp4"),
              nh.from_array(np.array(c ** -0.5, np.float32), "scale")]
    g = h.make_graph(nodes, "sd_unet_like", [h.make_tensor_value_info("x", T.FLOAT, [1, c, s, s])],
                     [h.make_tensor_value_info(x, T.FLOAT, [1, c, s, s])], initializer=inits)
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 21)]), str(path))


CHILD = r"""
import json, resource, sys, time
import numpy as np
kind, model, inp, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
x = {"x": np.load(inp)}
if kind == "ort":
    import onnxruntime as ort
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    run = lambda: sess.run(None, x)
elif kind == "onnx_reference":
    from onnx.reference import ReferenceEvaluator
    ev = ReferenceEvaluator(model)
    run = lambda: ev.run(None, x)
else:
    from mschecker.graph import Executor, ReferencePolicy
    from mschecker.npu import NpuPolicy
    ex = Executor(model, ReferencePolicy() if kind == "reference" else NpuPolicy(kind.split(":")[1]))
    run = lambda: ex.run(x)
run()
times = []
for _ in range(repeat):
    t = time.perf_counter(); run(); times.append(time.perf_counter() - t)
print(json.dumps({"best_s": min(times), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "executor_bench.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model, inp = Path(tmp) / "m.onnx", Path(tmp) / "x.npy"
        build(model, args.channels, args.size, args.blocks)
        np.save(inp, np.random.default_rng(1).standard_normal((1, args.channels, args.size, args.size)).astype(np.float32))
        res = {}
        for kind in ("ort", "npu:ascend910b", "reference", "onnx_reference"):
            r = subprocess.run([sys.executable, "-c", CHILD, kind, str(model), str(inp),
                                str(1 if kind == "onnx_reference" else args.repeat)], capture_output=True, text=True)
            if r.returncode:
                raise SystemExit(f"{kind} failed:\n{r.stderr[-2000:]}")
            res[kind] = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{kind:16s} {res[kind]['best_s']:.3f} s  peak RSS {res[kind]['peak_rss_mb']:.0f} MB", flush=True)
        model_mb = model.stat().st_size / 1e6
    ort_t, ev_t = res["ort"]["best_s"], res["onnx_reference"]["best_s"]
    ratios = {"npu_vs_ort": res["npu:ascend910b"]["best_s"] / ort_t, "reference_vs_ort": res["reference"]["best_s"] / ort_t,
              "onnx_reference_vs_npu": ev_t / res["npu:ascend910b"]["best_s"],
              "onnx_reference_vs_reference": ev_t / res["reference"]["best_s"]}
    targets = {"npu_vs_ort <= 1.5": ratios["npu_vs_ort"] <= 1.5, "reference_vs_ort <= 2.5": ratios["reference_vs_ort"] <= 2.5,
               "onnx_reference_vs_npu >= 4": ratios["onnx_reference_vs_npu"] >= 4,
               "onnx_reference_vs_reference >= 4": ratios["onnx_reference_vs_reference"] >= 4}
    for k, v in ratios.items():
        print(f"{k:28s} {v:.2f}")
    out = {"graph": f"sd_unet_like c={args.channels} s={args.size} blocks={args.blocks} ({model_mb:.1f} MB)",
           "runs": res, "ratios": ratios, "targets_met": targets, "machine": platform.platform(),
           "cpus_note": "2 CPU cores shared with other jobs: absolute times are noisy, ratios are from one run"}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
