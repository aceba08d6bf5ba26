"""Re-anchor mutant patches after a refactoring moved or edited the code around them.

    python tools/mutants/reanchor.py [NAME ...]     # default: every patch that no longer applies

Each hunk's removed lines (with their context, else alone) are found once in the module's current text and
replaced by the added lines; the patch is rewritten from that (same header, fresh diff). A hunk whose lines are
gone or ambiguous is reported and its patch left alone: the mutant needs to be written again by hand.
"""
from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "tools" / "mutants" / "patches"


def _hunks(patch: str) -> list[list[str]]:
    body = patch.split("\n+++ ", 1)[1].split("\n", 1)[1]
    return [h.splitlines(keepends=True) for h in re.split(r"^@@.*@@.*\n", body, flags=re.M)[1:]]


def reanchor(path: Path) -> bool:
    patch = path.read_text()
    header = "".join(line for line in patch.splitlines(keepends=True) if line.startswith("# "))
    module = re.search(r"^# module: (\S+)", patch, re.M).group(1)
    original = (ROOT / module).read_text()
    text = original
    for hunk in _hunks(patch):
        old = "".join(line[1:] for line in hunk if line[:1] in " -")
        new = "".join(line[1:] for line in hunk if line[:1] in " +")
        minus = "".join(line[1:] for line in hunk if line[:1] == "-")
        plus = "".join(line[1:] for line in hunk if line[:1] == "+")
        if text.count(old) == 1:
            text = text.replace(old, new)
        elif minus and text.count(minus) == 1:
            text = text.replace(minus, plus)
        else:
            print(f"{path.stem}: no unique anchor for {minus[:120]!r}")
            return False
    diff = difflib.unified_diff(original.splitlines(keepends=True), text.splitlines(keepends=True),
                                f"a/{module}", f"b/{module}", n=3)
    path.write_text(header + f"diff --git a/{module} b/{module}\n" + "".join(diff))
    return True


def _applies(path: Path) -> bool:
    return subprocess.run(["git", "apply", "--check", str(path)], cwd=ROOT, capture_output=True).returncode == 0


def main() -> int:
    names = sys.argv[1:]
    paths = [PATCHES / f"{n}.patch" for n in names] if names else [p for p in sorted(PATCHES.glob("*.patch"))
                                                                       if not _applies(p)]
    failed = [p.stem for p in paths if not (reanchor(p) and _applies(p))]
    print(f"re-anchored {len(paths) - len(failed)} of {len(paths)}" + (f"; by hand: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
