"""Benchmark: every registered kernel's optimized variants against the naive numpy fp32 implementation.

Part 1 iterates the registry (so kernel families added later appear without edits): for each kernel, on its
largest golden case, each correct variant and the fp32 peer are timed in the same run (median of repeats), their
peak extra memory is measured (tracemalloc: numpy reports its buffers to it; a separate call, so tracing does
not slow the timing), and their error is taken against the float64 reference with kernels.check.check_case (max
|err|, err/bound of the variant's contract, verdict). The peer is the kernel's "fp32" variant, else the
float64 reference itself (marked as such). Golden cases are small: there the times show per-call overhead more
than throughput; Part 2 gives realistic sizes.

Part 2, showcases at Stable Diffusion 1.5 sizes (first UNet stage: 64x64 latent = 4096 tokens, 320 channels):
- matmul (4096 x 320) @ (320 x 320): every variant vs fp32;
- fused QKV projection (one GEMM over [Wq|Wk|Wv]) vs three separate GEMMs, fp16 storage and fp32;
- attention at seq 4096, d = 64, 1 head: blocked flash vs the naive kernels (the fp32 score matrix alone is
  4096^2 * 4 B = 64 MiB). Errors against float64 here are max |err| only (contracts' bounds at this size would
  cost more memory than the kernels).

Part 3, SD layers (`sd_layers`): the Conv and MatMul shapes of the SD-1.5 UNet at a 32x32 latent, batch 2 (the
sd15_l32 model of the executor benchmark), each timed in one run for onnxruntime fp32 (one node, one thread:
the executor's peer), the float64 reference (the route conv2d picks; for 3x3 stride-1 convs also each route
forced: im2col "direct" and Winograd F(2x2,3x3), with the largest difference between the two relative to
max|y|), the emulated NPU's fp16 kernel, and that kernel's definition (the implementation before the
copy-saving fast path; the fast path's bits equal it, checked here too). The inputs are fp16 values, whose
products and sums fit float64's 53 bits here, so both reference routes are usually exact and their difference
0; the routes' errors on non-fp16 data are measured in tests/kernels/test_winograd64.py. Times are
the minimum CPU time over interleaved repeats: on a shared 2-core machine the least disturbed run.

    python benchmarks/kernels_bench.py            # prints a Rich table, writes benchmarks/results/kernels_bench.json
    python benchmarks/kernels_bench.py --only-sd-layers   # re-measures Part 3 alone, keeps the other sections
    python benchmarks/kernels_bench.py --kernel attention --no-showcases --out ''   # quick look, no file
"""
from __future__ import annotations

import os

# One BLAS thread for every contender: on a shared machine OpenBLAS' threads thrash (measured here: flash
# attention with 128x128 tiles took 15 s threaded vs 1.0 s single-threaded), and the ratios compare algorithms,
# not thread scheduling. Set before numpy loads BLAS; an explicit environment setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from mschecker.dtypes import round_to
from mschecker.kernels.check import as_tuple, check_case
from mschecker.kernels.registry import Case, get_kernel, registry

RESULTS = Path(__file__).resolve().parent / "results" / "kernels_bench.json"


def time_call(fn, args, kwargs, *, min_time: float = 0.2, max_reps: int = 20) -> float:
    """Median seconds of fn(*args, **kwargs) over repeats (at least 3 calls, until min_time spent)."""
    times: list[float] = []
    start = time.perf_counter()
    with np.errstate(all="ignore"):
        while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < max_reps):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            times.append(time.perf_counter() - t0)
            if times[-1] > 2.0 and len(times) >= 1:
                break  # a slow emulation (fp16 running sums): one or two calls are enough
    return statistics.median(times)


def peak_bytes(fn, args, kwargs) -> int:
    """Peak bytes allocated during one call beyond what was allocated before it (tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with np.errstate(all="ignore"):
            fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _size(case: Case) -> int:
    return sum(int(np.asarray(x).size) for x in case.inputs)


def bench_registry(names: list[str]) -> list[dict]:
    rows = []
    for name in names:
        info = get_kernel(name)
        case = max(info.golden_cases(), key=_size)
        peer = info.variants.get("fp32")
        entries = [(v, "optimized") for v in info.correct_variants if v is not peer]
        entries.insert(0, (peer, "fp32 peer") if peer else (None, "reference peer"))
        peer_time = None
        for variant, role in entries:
            if variant is None:
                rounded = case.cast("float64")
                fn, dtype = info.reference, "float64"
            else:
                rounded = case.cast(variant.dtype)
                fn, dtype = variant.fn, variant.dtype
            secs = time_call(fn, rounded.inputs, dict(rounded.params))
            peak = peak_bytes(fn, rounded.inputs, dict(rounded.params))
            peer_time = secs if peer_time is None else peer_time
            row = {"kernel": name, "case": case.label, "variant": variant.name if variant else "reference",
                   "role": role, "dtype": dtype, "implmode": variant.implmode if variant else "",
                   "time_ms": secs * 1e3, "vs_peer": secs / peer_time, "peak_mib": peak / 2**20}
            if variant is not None:
                result = check_case(info, variant, case)
                row.update(max_abs_err=result.max_abs_err, err_over_bound=result.worst_ratio,
                           passed=result.passed)
            rows.append(row)
    return rows


def _err_vs(ref: np.ndarray, out) -> dict:
    out = np.asarray(out).astype(np.float64)
    finite = np.isfinite(out)
    err = np.abs(out - ref)
    return {"max_abs_err": float(np.max(err)) if finite.all() else float("inf"),
            "max_rel_err": float(np.max(err) / np.max(np.abs(ref))) if finite.all() else float("inf"),
            "nonfinite": int((~finite).sum())}


def _showcase(title: str, inputs64: tuple, reference, contenders: list[tuple[str, str, object, dict]],
              note: str) -> dict:
    """contenders: (label, storage dtype, fn(*inputs) -> output or tuple, kwargs); first is the peer."""
    refs = as_tuple(reference(*inputs64))
    rows = []
    peer = None
    for label, dtype, fn, kwargs in contenders:
        args = tuple(round_to(x, dtype) for x in inputs64)
        secs = time_call(fn, args, kwargs, min_time=0.5)
        peak = peak_bytes(fn, args, kwargs)
        with np.errstate(all="ignore"):
            outs = as_tuple(fn(*args, **kwargs))
        errs = [_err_vs(r, o) for r, o in zip(refs, outs)]
        peer = secs if peer is None else peer
        rows.append({"variant": label, "dtype": dtype, "time_ms": secs * 1e3, "vs_peer": secs / peer,
                     "peak_mib": peak / 2**20, "max_abs_err": max(e["max_abs_err"] for e in errs),
                     "max_rel_err": max(e["max_rel_err"] for e in errs),
                     "nonfinite": sum(e["nonfinite"] for e in errs)})
    return {"name": title, "note": note, "rows": rows}


def showcases() -> list[dict]:
    from mschecker.optimized_kernels import attention as attn
    from mschecker.optimized_kernels import matmul as mm
    from mschecker.optimized_kernels import qkv
    from mschecker.reference import attention as ref_attn
    from mschecker.reference import linalg as ref_lin

    rng = np.random.default_rng(2026)
    out = []
    x = rng.standard_normal((4096, 320))
    w = rng.standard_normal((320, 320)) / np.sqrt(320)
    x16 = round_to(x, "float16").astype(np.float64)
    w16 = round_to(w, "float16").astype(np.float64)
    out.append(_showcase(
        "matmul (4096x320) @ (320x320)", (x16, w16), ref_lin.matmul,
        [("fp32", "float32", mm.matmul_fp32, {}), ("fp16_fp32acc", "float16", mm.matmul_fp16_fp32acc, {}),
         ("bf16_fp32acc", "bfloat16", mm.matmul_bf16_fp32acc, {}),
         ("fp16_fp32acc_kblocked", "float16", mm.matmul_fp16_fp32acc_kblocked, {}),
         ("fp16_fp16acc (emulated, K loop)", "float16", mm.matmul_fp16_fp16acc, {})],
        "inputs exact in fp16 (the reference runs on them); the bf16 variant runs on their bf16 rounding, so "
        "its error includes that input rounding"))

    xs = round_to(rng.standard_normal((2, 4096, 320)), "float16").astype(np.float64)
    ws = tuple(round_to(rng.standard_normal((320, 320)) / np.sqrt(320), "float16").astype(np.float64)
               for _ in range(3))

    def three_gemms(fn):
        def run(x, wq, wk, wv):
            return fn(x, wq), fn(x, wk), fn(x, wv)
        return run

    out.append(_showcase(
        "fused QKV vs three GEMMs: x (2,4096,320), W 320x320 x3", (xs, *ws), ref_lin.qkv_projection,
        [("three fp32 GEMMs", "float32", three_gemms(mm.matmul_fp32), {}),
         ("fused fp32", "float32", qkv.qkv_projection_fp32, {}),
         ("three fp16_fp32acc GEMMs", "float16", three_gemms(mm.matmul_fp16_fp32acc), {}),
         ("fused fp16_fp32acc", "float16", qkv.qkv_projection_fp16_fp32acc, {})],
        "peak of the fused kernel includes the concatenated weight (fp32) and the full (.., 960) output"))

    q, k, v = (round_to(rng.standard_normal((1, 4096, 64)), "float16").astype(np.float64) for _ in range(3))
    out.append(_showcase(
        "attention seq 4096, d 64, 1 head", (q, k, v), ref_attn.attention,
        [("naive fp32", "float32", attn.attention_fp32, {}),
         ("naive fp16 (fp16_naive)", "float16", attn.attention_fp16_naive, {}),
         ("naive fp32_upcast", "float16", attn.attention_fp32_upcast, {}),
         ("flash_fp16_fp32acc 64x64", "float16", attn.attention_flash, {}),
         ("flash_fp16_fp32acc 128x256", "float16", attn.attention_flash, {"block_q": 128, "block_k": 256})],
        "one fp32 score matrix is 64 MiB; flash keeps fp32 K, V copies and one tile"))
    return out


#: (name, x shape, w shape, Conv attributes): the distinct Conv shapes of the SD-1.5 UNet at a 32x32 latent, batch 2.
SD_CONVS = [
    ("conv_in 4->320 @32", (2, 4, 32, 32), (320, 4, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("resnet 320 3x3 @32", (2, 320, 32, 32), (320, 320, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("proj 1x1 320 @32", (2, 320, 32, 32), (320, 320, 1, 1), {}),
    ("downsample 320 s2 @32", (2, 320, 32, 32), (320, 320, 3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}),
    ("resnet 640 3x3 @16", (2, 640, 16, 16), (640, 640, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("resnet 1280 3x3 @8", (2, 1280, 8, 8), (1280, 1280, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("resnet 1280 3x3 @4", (2, 1280, 4, 4), (1280, 1280, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("up resnet 2560->1280 @8", (2, 2560, 8, 8), (1280, 2560, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("up resnet 2560->1280 @4", (2, 2560, 4, 4), (1280, 2560, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("up resnet 1920->640 @16", (2, 1920, 16, 16), (640, 1920, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("up skip 1x1 2560->1280 @4", (2, 2560, 4, 4), (1280, 2560, 1, 1), {}),
    ("up resnet 960->320 @32", (2, 960, 32, 32), (320, 960, 3, 3), {"pads": (1, 1, 1, 1)}),
]
#: (name, a shape, b shape, b is a weight, which operands are transposed views): the MatMul shapes of the first
#: stage (1024 tokens, 320 channels, 8 heads), with the layouts the SD graph hands the kernel (q and k^T come out
#: of Transpose nodes as views; the softmax output is contiguous).
SD_MATMULS = [
    ("linear 320->320", (2, 1024, 320), (320, 320), True, ""),
    ("attention q @ k^T", (2, 8, 1024, 40), (2, 8, 40, 1024), False, "ab"),
    ("attention p @ v", (2, 8, 1024, 1024), (2, 8, 1024, 40), False, "b"),
    ("ff 320->2560", (2, 1024, 320), (320, 2560), True, ""),
]


def _maybe_transposed(rng, shape, transposed: bool) -> np.ndarray:
    """fp16 array of `shape`, C-contiguous or a transposed view of a C-contiguous array."""
    if not transposed:
        return rng.standard_normal(shape).astype(np.float16)
    return rng.standard_normal(shape[:-2] + shape[-2:][::-1]).astype(np.float16).swapaxes(-1, -2)


def _ort_single_node(op: str, feeds: dict, weights: dict, attrs: dict):
    """A no-argument callable running one onnxruntime fp32 node (weights as initializers), one thread."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    names = list(feeds) + list(weights)
    node = helper.make_node(op, names, ["y"], **{k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()})
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds32 = {k: v.astype(np.float32) for k, v in feeds.items()}
    return lambda: session.run(None, feeds32)


def _min_interleaved(fns: dict, reps: int) -> dict:
    """Minimum CPU seconds of each callable over `reps` rounds, the callables interleaved within every round.
    CPU time of the process (every contender runs on this thread: one BLAS thread, onnxruntime intra-op 1), so
    other jobs on the shared machine inflate it less than wall time."""
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t0 = time.process_time()
            fn()
            times[k].append(time.process_time() - t0)
    return {k: min(v) for k, v in times.items()}


def _reference_route(ref_conv, route: str, fn):
    """fn() with the float64 reference conv forced onto one route ("direct": im2col, "winograd": F(2x2,3x3))."""
    saved = ref_conv.WINOGRAD_MIN_TILES, ref_conv.WINOGRAD_MIN_CHANNELS
    ref_conv.WINOGRAD_MIN_TILES = ref_conv.WINOGRAD_MIN_CHANNELS = 1 if route == "winograd" else 1 << 62
    try:
        return fn()
    finally:
        ref_conv.WINOGRAD_MIN_TILES, ref_conv.WINOGRAD_MIN_CHANNELS = saved


def sd_layers(reps: int = 5) -> list[dict]:
    """Part 3: onnxruntime vs float64 reference vs NPU fp16 kernel (and its definition) per SD layer shape."""
    from mschecker.optimized_kernels import conv as npu_conv
    from mschecker.optimized_kernels import matmul as mm
    from mschecker.reference import conv as ref_conv
    from mschecker.reference import linalg as ref_lin

    rng = np.random.default_rng(2026)
    rows = []
    for name, xs, ws, attrs in SD_CONVS:
        x = rng.standard_normal(xs).astype(np.float16)
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float16)
        b = (rng.standard_normal(ws[0]) * 0.1).astype(np.float16)
        x64, w64, b64 = (a.astype(np.float64) for a in (x, w, b))
        kw = {"strides": attrs.get("strides", (1, 1)), "pads": attrs.get("pads", (0, 0, 0, 0))}
        fns = {"ort_fp32": _ort_single_node("Conv", {"x": x64}, {"w": w64, "b": b64}, attrs),
               "reference_f64": lambda: ref_conv.conv2d(x64, w64, b64, **kw),
               "npu_fp16": lambda: npu_conv.conv2d_fp16_fp32acc(x, w, b, **kw),
               "npu_fp16_definition": lambda: npu_conv.conv2d_definition(
                   x, w, b, kw["strides"], kw["pads"], (1, 1), 1, np.float32, np.float16)}
        extra = {}
        if ws[2:] == (3, 3) and kw["strides"] == (1, 1):
            call = fns["reference_f64"]
            fns["reference_direct_f64"] = lambda: _reference_route(ref_conv, "direct", call)
            fns["reference_winograd_f64"] = lambda: _reference_route(ref_conv, "winograd", call)
            y_direct = fns["reference_direct_f64"]()
            extra["winograd_vs_direct_max_rel_diff"] = float(
                np.max(np.abs(fns["reference_winograd_f64"]() - y_direct)) / np.max(np.abs(y_direct)))
            extra["reference_route"] = ("winograd" if ref_conv.takes_winograd(w64, (1, 1), (1, 1), xs[0], xs[2], xs[3])
                                        else "direct")
        same = np.array_equal(fns["npu_fp16"]().view(np.uint16), fns["npu_fp16_definition"]().view(np.uint16))
        rows.append(_sd_row("Conv", name, f"x {xs} w {ws} {attrs}", _min_interleaved(fns, reps), same) | extra)
    for name, sa, sb, weight, views in SD_MATMULS:
        a = _maybe_transposed(rng, sa, "a" in views)
        b = (_maybe_transposed(rng, sb, "b" in views) / np.float16(np.sqrt(sb[-2]))).astype(np.float16)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        ort_fn = (_ort_single_node("MatMul", {"a": a64}, {"b": b64}, {}) if weight
                  else _ort_single_node("MatMul", {"a": a64, "b": b64}, {}, {}))
        fns = {"ort_fp32": ort_fn, "reference_f64": lambda: ref_lin.matmul(a64, b64),
               "npu_fp16": lambda: mm.matmul_fp16_fp32acc(a, b),
               "npu_fp16_definition": lambda: mm._round(mm._acc_fp32(a, b), mm.F16)}
        same = np.array_equal(fns["npu_fp16"]().view(np.uint16), fns["npu_fp16_definition"]().view(np.uint16))
        rows.append(_sd_row("MatMul", name, f"{sa} @ {sb}" + (f" (transposed views: {views})" if views else ""),
                            _min_interleaved(fns, reps), same))
    return rows


def _sd_row(op: str, name: str, shape: str, secs: dict, same_bits: bool) -> dict:
    ort_s = secs["ort_fp32"]
    return {"op": op, "layer": name, "shape": shape, **{f"{k}_ms": v * 1e3 for k, v in secs.items()},
            "reference_vs_ort": secs["reference_f64"] / ort_s, "npu_vs_ort": secs["npu_fp16"] / ort_s,
            "npu_vs_definition": secs["npu_fp16"] / secs["npu_fp16_definition"], "npu_bits_equal_definition": same_bits,
            **{f"{k[:-4]}_vs_ort": secs[k] / ort_s for k in ("reference_direct_f64", "reference_winograd_f64")
               if k in secs}}


def render_sd_layers(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="SD-1.5 layers at a 32x32 latent, batch 2 (CPU ms, min of interleaved repeats, one thread)")
    for col in ("op", "layer", "ORT fp32", "ref f64", "ref direct", "ref Winograd", "W-D rel", "NPU fp16",
                "NPU def.", "ref/ORT", "NPU/ORT", "NPU/def.", "same bits"):
        t.add_column(col, justify="left" if col in ("op", "layer") else "right")
    for r in rows:
        opt = {k: f"{r[k]:.1f}" if k in r else "" for k in ("reference_direct_f64_ms", "reference_winograd_f64_ms")}
        diff = f"{r['winograd_vs_direct_max_rel_diff']:.1e}" if "winograd_vs_direct_max_rel_diff" in r else ""
        t.add_row(r["op"], r["layer"], f"{r['ort_fp32_ms']:.1f}", f"{r['reference_f64_ms']:.1f}",
                  opt["reference_direct_f64_ms"], opt["reference_winograd_f64_ms"], diff, f"{r['npu_fp16_ms']:.1f}", f"{r['npu_fp16_definition_ms']:.1f}", f"{r['reference_vs_ort']:.2f}",
                  f"{r['npu_vs_ort']:.2f}", f"{r['npu_vs_definition']:.2f}", str(r["npu_bits_equal_definition"]))
    Console(width=None if sys.stdout.isatty() else 150).print(t)


def render(rows: list[dict], cases: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title="kernels on their largest golden case (peer first)")
    for col in ("kernel", "variant", "dtype", "ms", "x peer", "peak MiB", "max |err|", "err/bound", "verdict"):
        table.add_column(col, justify="right" if col not in ("kernel", "variant", "dtype") else "left")
    for r in rows:
        table.add_row(r["kernel"], r["variant"] + (" (peer)" if "peer" in r["role"] else ""), r["dtype"],
                      f"{r['time_ms']:.3f}", f"{r['vs_peer']:.2f}", f"{r['peak_mib']:.3f}",
                      f"{r.get('max_abs_err', 0):.3g}", f"{r.get('err_over_bound', 0):.3g}",
                      "" if "passed" not in r else ("ok" if r["passed"] else "FAIL"))
    console.print(table)
    for c in cases:
        t = Table(title=c["name"], caption=c["note"])
        for col in ("variant", "dtype", "ms", "x peer", "peak MiB", "max |err|", "max rel err", "non-finite"):
            t.add_column(col, justify="left" if col in ("variant", "dtype") else "right")
        for r in c["rows"]:
            t.add_row(r["variant"], r["dtype"], f"{r['time_ms']:.1f}", f"{r['vs_peer']:.2f}",
                      f"{r['peak_mib']:.1f}", f"{r['max_abs_err']:.3g}", f"{r['max_rel_err']:.3g}",
                      str(r["nonfinite"]))
        console.print(t)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", action="append", help="only these kernels (repeatable); default all")
    parser.add_argument("--no-showcases", action="store_true", help="skip the SD-size showcases")
    parser.add_argument("--no-sd-layers", action="store_true", help="skip Part 3 (SD layer shapes vs onnxruntime)")
    parser.add_argument("--only-sd-layers", action="store_true",
                        help="run Part 3 alone and replace only its section of an existing JSON")
    parser.add_argument("--out", default=str(RESULTS), help="JSON path ('' to not write)")
    args = parser.parse_args(argv)
    layers = [] if args.no_sd_layers else sd_layers()
    if layers:
        render_sd_layers(layers)
    if args.only_sd_layers:
        if args.out:
            path = Path(args.out)
            doc = json.loads(path.read_text()) if path.exists() else {"schema_version": 1}
            doc["sd_layers"] = layers
            doc["sd_layers_created_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            _write_json(path, doc)
        return 0
    names = args.kernel or sorted(registry())
    rows = bench_registry(names)
    cases = [] if args.no_showcases else showcases()
    render(rows, cases)
    if args.out:
        doc = {
            "schema_version": 1,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"python": sys.version.split()[0], "numpy": np.__version__, "platform": platform.platform(),
                        "cpus": os.cpu_count(),
                        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")},
            "method": "median wall time of repeats; peak = tracemalloc peak beyond pre-call allocations, separate "
                      "call; errors vs float64 reference on the same rounded inputs",
            "kernels": rows,
            "showcases": cases,
            "sd_layers": layers,
        }
        _write_json(Path(args.out), doc)
    return 0


def _write_json(path: Path, doc: dict) -> None:
    """Atomically (a temporary file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
