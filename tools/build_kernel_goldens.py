"""(Re)generate golden/kernels/<kernel>/ for every registered kernel (or the --kernel ones).

Refuses to replace existing goldens without --update (nothing is written then). Exit codes: 0 ok, 2 bad input.
    python tools/build_kernel_goldens.py [--root DIR] [--kernel NAME ...] [--update]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mschecker.errors import InputError
from mschecker.kernels.goldens import GOLDEN_ROOT, write_kernel_goldens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=GOLDEN_ROOT, help=f"golden root (default {GOLDEN_ROOT})")
    ap.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    ap.add_argument("--update", action="store_true", help="replace existing goldens")
    args = ap.parse_args(argv)
    try:
        manifests = write_kernel_goldens(args.root, args.kernel, update=args.update)
    except InputError as exc:
        print(f"build_kernel_goldens: error: {exc}", file=sys.stderr)
        return 2
    total = 0
    for name, manifest in manifests.items():
        size = sum((args.root / name / e["file"]).stat().st_size for e in manifest["tensors"].values())
        total += size
        print(f"{name:24s} {len(manifest['extra']['cases'])} case(s) {len(manifest['tensors']):3d} tensors "
              f"{size / 1024:8.1f} KiB")
    print(f"{len(manifests)} kernel(s), {total / 1024:.1f} KiB in {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
