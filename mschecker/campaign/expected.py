"""Expected results: the cells a campaign knows to fail or to be flaky, each with its reason, versioned beside the
campaign file (as PyTorch's nightly accuracy keeps expected-accuracy CSVs in the repository: a model that starts
passing fails the job until the file is updated, so a fix is recorded and a later relapse is caught).

Formats (by the file's suffix; docs/CAMPAIGN.md, "Expected results"):

  TOML (.toml)                                   CSV (.csv; the header line is optional, `#` starts a comment)
    [[cell]]                                       cell,status,reason
    key = 'sd | prompt="a cat" | seed=0 | ...'     "sd | prompt=""a cat"" | seed=0 | ...",fail,fp16 GroupNorm NaN
    status = "fail"          # or "flaky"
    reason = "fp16 GroupNorm overflows in the VAE"

Every entry needs a key naming a cell of the campaign, a status (`fail` or `flaky`) and a non-empty reason; a
key named twice, an unknown key, or a key that is no cell of the campaign is bad input: one line naming the file,
the line and the key (exit 2).

What it changes (`compare.apply_expected`): a cell *fails* when its own check failed (status fail) or it got worse than the
baseline / its history (verdict worse).
  fail  + fails        -> "expected failure": reported, not a regression
  fail  + passes       -> "unexpected pass": reported; with --strict-expected the run fails (exit 1) until the
                          file is updated (the fix is recorded, and a relapse is then caught as a regression)
  flaky + fails        -> "flaky (failure tolerated)": reported, not a regression
  flaky + passes       -> "flaky (passed)"
A cell that did not finish (crashed, timeout, killed) keeps that status: an expectation never hides a crash.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from mschecker.errors import InputError
from mschecker.untrusted import plain

STATUSES = ("fail", "flaky")
# A file of more than this many entries is no list of known failures (and a hostile one would fill memory).
MAX_ENTRIES = 1_000_000
MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class Expectation:
    key: str
    status: str      # fail / flaky
    reason: str
    line: int        # 1-based line of the entry in the file (0: unknown)


@dataclass
class ExpectedResults:
    path: Path
    entries: dict[str, Expectation]

    def get(self, key: str) -> Expectation | None:
        return self.entries.get(key)

    def check_cells(self, keys: Iterable[str], campaign: str) -> None:
        """InputError naming the file, line and key of the first entry that is no cell of the campaign."""
        known = set(keys)
        for e in self.entries.values():
            if e.key not in known:
                close = _closest(e.key, known)
                raise InputError(f"expected results {self.path}:{e.line}: cell {plain(e.key)[:200]!r} is not a cell "
                                 f"of campaign {plain(campaign)!r}" + (f" (did you mean {plain(close)[:200]!r}?)"
                                                                       if close else ""))


def _closest(key: str, known: set[str]) -> str | None:
    import difflib

    if len(known) > 20000:
        return None
    m = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    return m[0] if m else None


def load_expected(path) -> ExpectedResults:
    """Read an expected-results file (TOML or CSV by suffix); InputError naming the file and line otherwise."""
    path = Path(path)
    where = f"expected results {path}"
    if not path.is_file():
        raise InputError(f"{where}: not found" if not path.exists() else f"{where}: not a regular file")
    if path.suffix.lower() not in (".toml", ".csv"):
        raise InputError(f"{where}: expected a .toml or .csv file")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise InputError(f"{where}: larger than {MAX_BYTES >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc.strerror or exc})") from None
    rows = _toml_rows(text, where) if path.suffix.lower() == ".toml" else _csv_rows(text, where)
    entries: dict[str, Expectation] = {}
    for line, key, status, reason in rows:
        at = f"{where}:{line}" if line else where
        if not isinstance(key, str) or not key.strip():
            raise InputError(f"{at}: the cell key is missing (a non-empty string)")
        if status not in STATUSES:
            raise InputError(f"{at}: cell {plain(key)[:200]!r}: status must be \"fail\" or \"flaky\", got "
                             f"{plain(repr(status))[:60]}")
        if not isinstance(reason, str) or not reason.strip():
            raise InputError(f"{at}: cell {plain(key)[:200]!r}: the reason is missing (say why it is expected to "
                             f"{status if status == 'fail' else 'be flaky'})")
        if key in entries:
            raise InputError(f"{at}: cell {plain(key)[:200]!r} is listed twice (also line {entries[key].line})")
        if len(entries) >= MAX_ENTRIES:
            raise InputError(f"{where}: more than {MAX_ENTRIES} entries")
        entries[key] = Expectation(key, status, reason.strip(), line)
    return ExpectedResults(path, entries)


_CELL_HEADER = re.compile(r"^\s*\[\[\s*cell\s*\]\]")


def _toml_rows(text: str, where: str):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    unknown = sorted(set(raw) - {"cell"})
    if unknown:
        raise InputError(f"{where}: unknown key {plain(unknown[0])[:60]!r} (known: [[cell]] tables)")
    cells = raw.get("cell", [])
    if not isinstance(cells, list):
        raise InputError(f"{where}: cell must be an array of tables ([[cell]])")
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if _CELL_HEADER.match(ln)]
    out = []
    for i, entry in enumerate(cells):
        line = lines[i] if len(lines) == len(cells) else 0
        at = f"{where}:{line}" if line else f"{where}: [[cell]] #{i + 1}"
        if not isinstance(entry, dict):
            raise InputError(f"{at}: must be a table (key, status, reason)")
        extra = sorted(set(entry) - {"key", "status", "reason"})
        if extra:
            raise InputError(f"{at}: unknown key {plain(extra[0])[:60]!r} (known: key, reason, status)")
        out.append((line, entry.get("key"), entry.get("status"), entry.get("reason")))
    return out


def _csv_rows(text: str, where: str):
    out = []
    reader = csv.reader(io.StringIO(text, newline=""))
    start = 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            cells = [c.strip() for c in row]
            if not out and [c.lower() for c in cells] == ["cell", "status", "reason"]:
                continue
            if len(cells) != 3:
                raise InputError(f"{where}:{line}: expected 3 fields (cell,status,reason), got {len(cells)} (quote a "
                                 f"field holding a comma)")
            out.append((line, row[0], cells[1], cells[2]))
    except csv.Error as exc:
        raise InputError(f"{where}:{reader.line_num}: not valid CSV ({exc})") from None
    return out
