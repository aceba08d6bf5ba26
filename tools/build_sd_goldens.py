"""(Re)generate golden/sd/tiny/: the bundled SD pipeline's stage inputs, float64 reference outputs, and the
emulated NPU's outputs (mschecker.sd.goldens says what and why).

Refuses to replace existing goldens without --update (nothing is written then). Exit codes: 0 ok, 2 bad input.
    python tools/build_sd_goldens.py [--dir DIR] [--update]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mschecker.tensors import golden_store
from mschecker.errors import InputError
from mschecker.sd.goldens import GOLDEN_DIR, compute_pinned


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=GOLDEN_DIR, help=f"golden directory (default {GOLDEN_DIR})")
    ap.add_argument("--update", action="store_true", help="replace existing goldens")
    args = ap.parse_args(argv)
    if golden_store.manifest_path(args.dir).is_file() and not args.update:
        print(f"build_sd_goldens: error: {args.dir} already holds goldens (pass --update to replace them)",
              file=sys.stderr)
        return 2
    tensors, extra = compute_pinned()
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        manifest = golden_store.record(args.dir, tensors, producer="mschecker.sd.goldens (reference + npu emulator)",
                                 extra=extra, update=args.update)
    except InputError as exc:
        print(f"build_sd_goldens: error: {exc}", file=sys.stderr)
        return 2
    size = sum((args.dir / e["file"]).stat().st_size for e in manifest["tensors"].values())
    print(f"{len(manifest['tensors'])} tensors, {size / 1024:.1f} KiB in {args.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
