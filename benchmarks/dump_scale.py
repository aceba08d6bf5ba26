"""Device dump folders at graph scale: is the reader lazy and bounded (issue: read real Ascend dump folders)?

A synthetic ACL dump of --ops device ops (default 2,000, one iteration folder), each with one input and one output
of --elements fp16 values (default 65,536: 128 KiB a tensor, 512 MiB in all); every fourth op's tensors are 4-D in
NC1HWC0 with a channel count that is not a multiple of 16 (padding to drop), the rest ND. Measured, in one run:
  (a) scan: mschecker.devdump.scan.scan_folder (headers only) vs the peer "read every file whole" (what a reader
      that parses a dump file at once does, as msprobe's AclDumpDataProcessor reads a file into memory);
  (b) load: every tensor loaded in host layout one at a time and dropped (DumpedTensor.load, what the lockstep pass
      does) vs the peer np.fromfile of the same bytes with no layout conversion;
  (c) memory: tracemalloc's peak over (b) against the largest single tensor and the whole folder.
What it shows: (c) the peak stays a small multiple of one tensor whatever --ops (the layout index is int64, 4x an
fp16 tensor, plus the padded device buffer and the result), a tiny fraction of the folder; (a) and (b) are the
cost of parsing every header in Python and converting layouts, as ratios to a raw read of the same bytes.

    python benchmarks/dump_scale.py [--ops 2000] [--elements 65536] [--keep DIR] [--no-write]
Results: benchmarks/results/dump_scale.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from mschecker.devdump import acl
from mschecker.devdump.model import OpTensors
from mschecker.devdump.scan import scan_folder

RESULTS = Path(__file__).resolve().parent / "results" / "dump_scale.json"


def build(folder: Path, ops: int, elements: int) -> int:
    """The synthetic dump; returns its size in bytes."""
    leaf = folder / "20261202000000" / "0" / "model" / "1" / "0"
    leaf.mkdir(parents=True)
    rng = np.random.default_rng(0)
    c, hw = 20, max(1, elements // 20)
    h = int(np.sqrt(hw))
    for k in range(ops):
        blocked = k % 4 == 0
        shape = (1, c, h, hw // h) if blocked else (elements,)
        x = rng.standard_normal(shape).astype(np.float16)
        op = OpTensors(f"/block{k // 10}/op{k}/Add", "Add", [x], [x + np.float16(1)], [(f"/block{k // 10}/op{k}/Add", 0)])
        fmt = (lambda io, i, a: "NC1HWC0") if blocked else None
        (leaf / acl.file_name(op, k, 10**15 + k)).write_bytes(acl.encode(op, fmt))
    return sum(p.stat().st_size for p in leaf.iterdir())


def measure(folder: Path) -> dict:
    warm = Path(tempfile.mkdtemp(prefix="dump_scale_warm_"))  # imports (onnx, protobuf) out of the timing
    try:
        scan_folder(warm)
    finally:
        shutil.rmtree(warm, ignore_errors=True)
    t0 = time.perf_counter()
    scan = scan_folder(folder)
    t_scan = time.perf_counter() - t0
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    t0 = time.perf_counter()
    for p in files:
        with open(p, "rb") as f:
            f.read()
    t_peer_scan = time.perf_counter() - t0
    largest = 0
    tracemalloc.start()
    t0 = time.perf_counter()
    for op in scan.ops:
        for t in op.inputs + op.outputs:
            a = t.load()
            largest = max(largest, a.nbytes)
            del a
    t_load = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    t0 = time.perf_counter()
    for p in files:
        np.fromfile(p, dtype=np.uint8)
    t_peer_load = time.perf_counter() - t0
    return {"ops": len(scan.ops), "scan_s": round(t_scan, 3), "peer_read_whole_s": round(t_peer_scan, 3),
            "scan_ratio": round(t_scan / t_peer_scan, 2), "load_s": round(t_load, 3),
            "peer_fromfile_s": round(t_peer_load, 3), "load_ratio": round(t_load / t_peer_load, 2),
            "peak_bytes": peak, "largest_tensor_bytes": largest, "peak_over_largest": round(peak / largest, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--elements", type=int, default=65536)
    ap.add_argument("--keep", help="build the dump here and keep it")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dump_scale_"))
    try:
        size = build(folder, args.ops, args.elements)
        result = {"date": time.strftime("%Y-%m-%d"), "machine": platform.machine(), "cpus": os.cpu_count(),
                  "folder_bytes": size, "elements": args.elements, **measure(folder)}
        result["peak_over_folder"] = round(result["peak_bytes"] / size, 5)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if not args.no_write:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
