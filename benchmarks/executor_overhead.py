"""Per-node overhead of the graph executor, this tree against a baseline revision, in one run.

The executor's own cost per node (rounding inputs to the node dtype, finishing outputs, bookkeeping) is measured
with the arithmetic taken out: a first run records every op's result, then every op returns its recorded result,
so the wall time of the following runs is the executor alone, on the real tensors (a replayed op costs ~0.3 us,
the same for both trees). The full run (real arithmetic) is timed too. Graph: the bundled `small` SD UNet (1,031
nodes, one step at batch 2), where ORT takes ~18 ms for everything: the per-node overhead is what bounds us there.
Each tree runs in its own process with one BLAS thread; best of --repeat runs after a warm-up.

    python benchmarks/executor_overhead.py [--baseline REV] [--repeat 15] [--graph small]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from executor_bench import build_sd_unet, extract_tree  # noqa: E402  (the benchmarks folder is not a package)

from mschecker.fsio import atomic_write_text  # noqa: E402

CHILD = r"""
import dataclasses, json, sys, time
model, feeds_path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
if len(sys.argv) > 4:  # a baseline tree: its mschecker instead of the installed (editable) one
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in str(getattr(f, "__module__", type(f).__module__))]
    sys.path.insert(0, sys.argv[4])
import numpy as np
from mschecker.graph import Executor, ReferencePolicy
from mschecker.graph.ops import OPS, _load_all
from mschecker.npu import NpuPolicy
feeds = dict(np.load(feeds_path))
_load_all()
recorded, replay = {}, [False]
def recording(fn):
    def op(ctx, attrs, *inputs, **options):  # options: out= (an input offered for the result)
        if replay[0]:
            return recorded[id(ctx)]
        out = recorded[id(ctx)] = fn(ctx, attrs, *inputs, **options)
        return out
    return op
real = dict(OPS)
def best(ex):
    ex.run(feeds)
    times = []
    for _ in range(repeat):
        t = time.perf_counter(); ex.run(feeds); times.append(time.perf_counter() - t)
    return min(times)
res = {}
for kind in ("npu:ascend910b", "reference"):
    policy = lambda: ReferencePolicy() if kind == "reference" else NpuPolicy(kind.split(":")[1])
    OPS.update(real)
    ex = Executor(model, policy())
    wall = best(ex)
    OPS.update({k: dataclasses.replace(s, fn=recording(s.fn)) for k, s in real.items()})
    ex = Executor(model, policy())
    replay[0] = False
    ex.run(feeds)
    replay[0] = True
    alone = best(ex)
    replay[0] = False
    recorded.clear()
    n = len(ex.steps)
    res[kind] = {"nodes": n, "wall_s": wall, "executor_alone_s": alone, "overhead_us_per_node": alone / n * 1e6}
print(json.dumps(res))
"""


def run_tree(model: Path, feeds: Path, repeat: int, tree: Path | None) -> dict:
    env = {**os.environ, **{k: "1" for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
    r = subprocess.run([sys.executable, "-c", CHILD, str(model), str(feeds), str(repeat)] +
                       ([str(tree)] if tree else []), capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"benchmark child failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="0fabf68", help="git revision measured in the same run (default: before "
                                                         "the per-node overhead work)")
    ap.add_argument("--graph", default="small", help="bundled SD UNet preset (small, tiny) or sd15_narrow")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "executor_overhead.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model, feeds = tmp / "unet.onnx", tmp / "feeds.npz"
        np.savez(feeds, **build_sd_unet(model, args.graph))
        base_tree = extract_tree(args.baseline, tmp / "baseline")
        runs = {}
        for label, tree in (("baseline", base_tree), ("this tree", None)):
            runs[label] = run_tree(model, feeds, args.repeat, tree)
            for kind, r in runs[label].items():
                print(f"  {label:9s} {kind:15s} wall {r['wall_s'] * 1e3:7.1f} ms   executor alone "
                      f"{r['executor_alone_s'] * 1e3:6.2f} ms = {r['overhead_us_per_node']:5.2f} us/node", flush=True)
    ratios = {kind: {"overhead_speedup": runs["baseline"][kind]["executor_alone_s"] / r["executor_alone_s"],
                     "wall_speedup": runs["baseline"][kind]["wall_s"] / r["wall_s"]}
              for kind, r in runs["this tree"].items()}
    for kind, r in ratios.items():
        print(f"  {kind:15s} overhead {r['overhead_speedup']:.2f}x faster, wall {r['wall_speedup']:.2f}x")
    out = {"graph": args.graph, "baseline": args.baseline, "runs": runs, "ratios": ratios,
           "target": "executor overhead < 5 us per node", "machine": platform.platform(),
           "load_average": os.getloadavg(),
           "cpus_note": "2 CPU cores shared with other jobs: absolute times are noisy; ratios come from one run",
           "command": "python benchmarks/executor_overhead.py " + " ".join(sys.argv[1:])}
    atomic_write_text(args.out, json.dumps(out, indent=2) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
