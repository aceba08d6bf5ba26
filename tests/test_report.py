"""Reports: plain text and console without ANSI under NO_COLOR / non-TTY, strict JSON documented field by field,
escaped self-contained HTML, atomic writes that leave nothing behind on failure."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from mschecker.compare import CheckReport, ToleranceRule, compare_arrays
from mschecker.errors import InputError
from mschecker.modelcheck.report import render_console, render_html, render_text, write_html, write_json

ANSI = re.compile(r"\x1b\[")
SCHEMA_DOC = Path(__file__).resolve().parents[1] / "docs" / "REPORT_SCHEMA.md"


def make_report(name="out<script>&"):
    rng = np.random.default_rng(0)
    e = rng.standard_normal((4, 50)).astype(np.float32)
    a = (e + rng.standard_normal(e.shape).astype(np.float32) * 1e-2).astype(np.float32)
    a[1, 2] = np.nan
    e[3, 4] = np.inf
    rule = ToleranceRule.from_args(tolerance=1e-3, cosine=0.99)
    good = compare_arrays(e, e.copy(), rule, name="same")
    bad = compare_arrays(a, e, rule, name=name)
    return CheckReport([bad, good], rule, {"model": "m.onnx", "runner": "ort", "timings": {"run": 0.5}})


def test_render_text_has_verdict_tables_histogram_and_findings():
    text = render_text(make_report())
    assert not ANSI.search(text)
    assert "FAIL" in text and "1/2 outputs within tolerance" in text
    assert "worst elements" in text and "histogram" in text and "#" in text
    assert "actual: 1 NaN (first at (1, 2))" in text
    assert "expected: 1 +inf (first at (3, 4))" in text
    assert "cosine" in text and "ULP max / p50 / p99" in text
    ok = CheckReport([compare_arrays(np.ones(3), np.ones(3), name="x")], ToleranceRule())
    assert "PASS" in render_text(ok) and "FAIL" not in render_text(ok)


def _console_output(monkeypatch, *, no_color: bool, tty: bool) -> str:
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    else:
        monkeypatch.delenv("NO_COLOR", raising=False)
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)

    class FakeStdout(io.StringIO):
        def isatty(self):
            return tty

    buf = FakeStdout()
    monkeypatch.setattr("sys.stdout", buf)
    monkeypatch.setenv("TERM", "xterm-256color")
    render_console(make_report())
    return buf.getvalue()


def test_console_is_plain_when_not_a_tty(monkeypatch):
    assert not ANSI.search(_console_output(monkeypatch, no_color=False, tty=False))


def test_console_is_plain_under_no_color_even_on_a_tty(monkeypatch):
    assert not ANSI.search(_console_output(monkeypatch, no_color=True, tty=True))


def test_console_is_coloured_on_a_tty(monkeypatch):
    """The check above can fail: on a TTY without NO_COLOR the same report does carry escape codes."""
    assert ANSI.search(_console_output(monkeypatch, no_color=False, tty=True))


def test_render_console_accepts_a_console():
    buf = io.StringIO()
    render_console(make_report(), Console(file=buf, width=100, color_system=None))
    assert "worst elements" in buf.getvalue()


def _keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


def test_json_is_strict_and_every_field_is_documented(tmp_path):
    rep = make_report()
    path = tmp_path / "r.json"
    write_json(rep, path)
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert data["schema_version"] == 1 and data["verdict"] == "FAIL" and data["passed"] is False
    bad = data["tensors"][0]
    assert bad["nonfinite"]["actual"]["first_nan"] == [1, 2]
    assert "inf" in json.dumps(bad["worst"])  # the inf golden element is encoded as the string "inf"
    assert bad["metrics"]["kl_div"] is None  # N/A is null
    doc = SCHEMA_DOC.read_text()
    documented = set(re.findall(r"`([a-z_0-9]+)`", doc))
    without_meta = {k: v for k, v in data.items() if k != "meta"}  # meta holds the caller's own keys
    undocumented = sorted(k for k in set(_keys(without_meta)) if k not in documented)
    assert not undocumented, f"fields missing from docs/REPORT_SCHEMA.md: {undocumented}"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_html_is_self_contained_and_escaped(tmp_path):
    rep = make_report()
    path = tmp_path / "r.html"
    write_html(rep, path)
    page = path.read_text()
    assert "<script>" not in page and "out&lt;script&gt;&amp;" in page
    assert "FAIL" in page and "Worst elements" in page and 'class="bar"' in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # nothing external
    assert page == render_html(rep)


def test_writes_are_atomic_and_fail_cleanly(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(InputError, match="missing"):
        write_json(make_report(), tmp_path / "missing" / "r.json")

    def boom(*args, **kwargs):
        raise RuntimeError("crash while rendering")

    monkeypatch.setattr("mschecker.modelcheck.report.render_html", boom)
    with pytest.raises(RuntimeError):
        write_html(make_report(), tmp_path / "r.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"] and path.read_text() == "old"
    monkeypatch.undo()

    # a failure after the temp file was opened and filled (the disk fills up at fsync): the old report survives
    # under its name and the half-written temp file is removed
    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mschecker.fsio.os.fsync", disk_full)
    with pytest.raises(InputError, match="No space left"):
        write_json(make_report(), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"] and path.read_text() == "old"
    monkeypatch.undo()
    write_json(make_report(), path)  # replaces the old file
    assert json.loads(path.read_text())["schema_version"] == 1
