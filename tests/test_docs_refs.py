"""References into docs/NUMERICS.md name sections that exist, and every pointer names the file inside the repo.

Code cites the numerics notes as `docs/NUMERICS.md §N` (or §N.M); a renumbered or deleted section would leave
docstrings pointing at nothing, and a bare `NUMERICS.md` once pointed at a file outside the project.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "NUMERICS.md"
SOURCES = [p for d in ("mschecker", "reference", "optimized_kernels", "tests", "benchmarks", "docs", "ci", "tools",
                        "examples", "golden")
           for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md", ".sh", ".c", ".toml")
           and "__pycache__" not in p.parts and "patches" not in p.parts]
SOURCES = [p for p in SOURCES if p != Path(__file__).resolve()] + [
    ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "pyproject.toml", ROOT / "setup.py"]
#: A path into this repository, as code and docs name files: `mschecker/compare/engine.py`, `docs/BISECT.md`.
#: Not preceded by `:` or `/` (another repository's file, `hicann/ge:docs/...`, or a URL) nor followed by `@`.
REPO_PATH = re.compile(r"(?<![\w/.:-])((?:mschecker|reference|optimized_kernels|tests|tools|benchmarks|docs|ci|golden|"
                       r"examples)/[\w/.-]*\w\.(?:py|md|c|sh|toml|json|proto|csv|txt))(?![\w@])")
#: Doc trees of the CANN / Ascend repositories the numerics notes cite (each citation names its repository).
EXTERNAL_DOC_TREES = ("docs/zh/", "docs/api/")
DOC_NAME = re.compile(r"(?<![\w/.-])([A-Z][A-Z_0-9]+\.md)\b")


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


def _missing_paths(path: Path, text: str) -> list[str]:
    """Repository paths `text` names that do not exist (relative to the repository, or to the naming file's
    folder: an example project names its own tests/)."""
    out = []
    for m in REPO_PATH.finditer(text):
        name = m.group(1)
        if name.startswith(EXTERNAL_DOC_TREES) or (ROOT / name).exists() or (path.parent / name).exists():
            continue
        out.append(f"{path.relative_to(ROOT)}: {name}")
    for m in DOC_NAME.finditer(text):
        if not any((d / m.group(1)).exists() for d in (ROOT / "docs", ROOT, path.parent)):
            out.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
    return out


def test_every_file_named_exists():
    """A pointer into the repository resolves: `mschecker/compare.py` outlived its split into compare/ by months."""
    missing = [m for path in SOURCES for m in _missing_paths(path, path.read_text(errors="replace"))]
    assert not missing, missing


def test_the_path_check_finds_a_planted_stale_pointer():
    here = ROOT / "docs" / "BISECT.md"
    assert _missing_paths(here, "see mschecker/compare.py and docs/NOPE.md, and NOTES.md") == [
        "docs/BISECT.md: mschecker/compare.py", "docs/BISECT.md: docs/NOPE.md", "docs/BISECT.md: NOTES.md"]
    assert _missing_paths(here, "hicann/ge:docs/zh/x.md@abc, mschecker/compare/engine.py, TOLERANCE.md") == []
