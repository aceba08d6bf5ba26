"""References into docs/NUMERICS.md name sections that exist, and every pointer names the file inside the repo.

Code cites the numerics notes as `docs/NUMERICS.md §N` (or §N.M); a renumbered or deleted section would leave
docstrings pointing at nothing, and a bare `NUMERICS.md` once pointed at a file outside the project.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "NUMERICS.md"
SOURCES = [p for d in ("mschecker", "reference", "optimized_kernels", "tests", "benchmarks", "docs", "ci")
           for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md", ".sh", ".c") and "__pycache__" not in p.parts]
SOURCES = [p for p in SOURCES if p != Path(__file__).resolve()] + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


def _sections() -> set[str]:
    heads = re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", DOC.read_text(), flags=re.M)
    return set(heads)


def test_numerics_sections_cited_exist():
    sections = _sections()
    assert {"1", "2", "2.1", "10"} <= sections
    missing = []
    for path in SOURCES:
        text = path.read_text(errors="replace")
        for ref in re.finditer(r"NUMERICS\.md((?:[ ,;-]*§\d+(?:\.\d+)?)+)", text):
            for num in re.findall(r"§(\d+(?:\.\d+)?)", ref.group(1)):
                if num not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: §{num}")
    assert not missing, missing


def test_pointers_name_the_file_in_the_repo():
    """`NUMERICS.md` outside docs/ is written `docs/NUMERICS.md` (inside docs/, a relative link is fine)."""
    bare = []
    for path in SOURCES:
        if path.parent == ROOT / "docs":
            continue
        for line_no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"(?<!docs/)NUMERICS\.md", line) and "numerics_facts" not in line:
                bare.append(f"{path.relative_to(ROOT)}:{line_no}")
    assert not bare, bare
