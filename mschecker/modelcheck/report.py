"""Reports of a CheckReport: Rich console, plain text, JSON and self-contained HTML.

One set of renderables feeds both the console and the plain text (`render_text` renders them with styles off),
so what a user sees in the terminal and what a pytest failure message shows never drift apart. JSON is
`CheckReport.to_dict()` verbatim (schema: docs/REPORT_SCHEMA.md). File writes are atomic (temp file in the same
directory + os.replace, via mschecker.fsio.atomic_write_text).
"""
from __future__ import annotations

import html
import io
import json
import os

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mschecker.compare import CheckReport, TensorComparison
from mschecker.errors import InputError
from mschecker.console import no_color
from mschecker.untrusted import markup, plain
from mschecker.fsio import atomic_write_text

#: Detail sections (metrics, worst elements, histogram) are shown for every tensor up to this many outputs,
#: and only for failed tensors beyond it, so a 200-output model does not print 200 sections.
DETAIL_ALL_UP_TO = 4
_HIST_BAR = 40


# --------------------------------------------------------------------------------------------------------------
# Formatting helpers
# --------------------------------------------------------------------------------------------------------------

def fmt_num(v, spec: str = ".4g") -> str:
    """A metric for display: N/A for None, nan/inf spelled out, else `spec`."""
    if v is None:
        return "N/A"
    if isinstance(v, str):
        return v
    v = float(v)
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return format(v, spec)


def fmt_index(idx) -> str:
    return "-" if idx is None else "(" + ", ".join(str(int(i)) for i in idx) + ")"


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def metric_rows(t: TensorComparison) -> list[tuple[str, str]]:
    """(label, value) pairs of one tensor's metrics, in display order (shared by console and HTML)."""
    ulp = "N/A" if t.ulp_max is None else f"{t.ulp_max} / {t.ulp_p50} / {t.ulp_p99} ({t.ulp_format})"
    return [
        ("max |err|", f"{fmt_num(t.max_abs_err)} at {fmt_index(t.max_abs_index)}"),
        ("max rel err", f"{fmt_num(t.max_rel_err)} at {fmt_index(t.max_rel_index)}"),
        ("mean |err|", fmt_num(t.mean_abs_err)),
        ("RMSE", fmt_num(t.rmse)),
        ("cosine", fmt_num(t.cosine, ".8f")),
        ("rel. Euclidean", fmt_num(t.rel_euclidean)),
        ("SNR dB", fmt_num(t.snr_db, ".2f")),
        ("PSNR dB", f"{fmt_num(t.psnr_db, '.2f')} (peak {fmt_num(t.psnr_peak)})"),
        ("KL divergence", fmt_num(t.kl_div) if t.kl_div is not None else (t.kl_note or "N/A")),
        ("ULP max / p50 / p99", ulp),
        ("rel err < 1e-3", fmt_num(None if t.frac_rel_lt_1e3 is None else 100 * t.frac_rel_lt_1e3, ".4f") + " %"),
        ("rel err < 5e-3", fmt_num(None if t.frac_rel_lt_5e3 is None else 100 * t.frac_rel_lt_5e3, ".4f") + " %"),
        ("mismatches", f"{t.mismatches} / {t.size} ({100 * t.mismatch_frac:.4g} %)"
                       + (f", {t.nonfinite_mismatches} non-finite" if t.nonfinite_mismatches else "")),
    ]


def nonfinite_lines(t: TensorComparison) -> list[str]:
    """Human sentences about NaN/inf in either tensor (empty when there is none)."""
    lines = []
    for side, st in (("actual", t.actual_nonfinite), ("expected", t.expected_nonfinite)):
        parts = [f"{n} {label} (first at {fmt_index(first)})"
                 for n, label, first in ((st.nan, "NaN", st.first_nan), (st.posinf, "+inf", st.first_posinf),
                                         (st.neginf, "-inf", st.first_neginf)) if n]
        if parts:
            lines.append(f"{side}: " + ", ".join(parts))
    if t.nonfinite_mismatches:
        lines.append(f"{t.nonfinite_mismatches} element(s) where NaN/inf does not match the other side")
    return lines


def histogram_rows(t: TensorComparison) -> list[tuple[str, int]]:
    """The |err| histogram trimmed to the span between its first and last non-empty bucket."""
    rows = t.abs_err_histogram
    nz = [i for i, (_, c) in enumerate(rows) if c]
    return rows[nz[0]: nz[-1] + 1] if nz else []


def _detail_tensors(report: CheckReport, details) -> list[TensorComparison]:
    if details == "all" or (details is None and len(report.tensors) <= DETAIL_ALL_UP_TO):
        return list(report.tensors)
    return [t for t in report.tensors if not t.passed]


# --------------------------------------------------------------------------------------------------------------
# Rich rendering
# --------------------------------------------------------------------------------------------------------------

def _banner(report: CheckReport) -> Panel:
    failed = [t for t in report.tensors if not t.passed]
    style = "bold white on green" if report.passed else "bold white on red"
    head = Text(f" {_verdict(report.passed)} ", style=style)
    head.append(f"  {len(report.tensors) - len(failed)}/{len(report.tensors)} outputs within tolerance")
    if referee_of(report) is not None:
        judged = referee_of(report).judged
        head.append(f", {sum(bool(o.passed) for o in judged)}/{len(judged)} pass the referee")
    body = [head, Text(f"rule: {report.rule.describe()}")]
    for t in failed:
        body.append(Text(plain(f"failed: {t.name} ({', '.join(t.failed_rules)})"), style="red"))
    body += _referee_lines(report)
    for key, value in report.meta.items():
        body.append(Text(plain(f"{key}: {_meta_value(value)}"), style="dim"))
    return Panel(Group(*body), title="mschecker", border_style="green" if report.passed else "red",
                 box=box.ROUNDED)


def referee_of(report):
    """The report's referee verdict (mschecker.modelcheck.check.RefereedReport), None for a plain CheckReport."""
    return getattr(report, "referee", None)


def referee_summary(report) -> list[str]:
    """The referee verdict beside the tolerance one, in plain sentences (console banner and HTML)."""
    v = referee_of(report)
    if v is None:
        return []
    judged = v.judged
    return [f"tolerance verdict: {_verdict(report.tolerance_passed)}; referee verdict: {_verdict(v.passed)} "
            f"({sum(bool(o.passed) for o in judged)}/{len(judged)} outputs); the exit code follows "
            f"{'both' if report.judge == 'both' else 'the ' + report.judge + ' verdict'} (--judge {report.judge})",
            f"referee: {v.spec} = {v.side}",
            f"referee rule: {v.describe_rule()}"]


def _referee_lines(report) -> list[Text]:
    v = referee_of(report)
    if v is None:
        return []
    out = [Text(plain(line)) for line in referee_summary(report)]
    out += [Text(plain(line), style="red") for line in v.failure_reasons()]
    out += [Text("note: " + plain(n), style="yellow") for n in v.notes]
    return out


def referee_rows(v) -> list[tuple[str, str, str, str, str, str]]:
    """(output, verdict, err run, err referee, ratio, k) per output (console and HTML)."""
    label = {True: "PASS", False: "FAIL", None: None}
    return [(o.name, label[o.passed] or o.status, fmt_num(o.err_npu, ".4g"), fmt_num(o.err_referee, ".4g"),
             fmt_num(o.ratio, ".3g"), fmt_num(o.k, "g")) for o in v.outputs]


def referee_table(v) -> Table:
    tab = Table(title="referee: RMSE against float64", box=box.SIMPLE_HEAVY, title_justify="left", pad_edge=False)
    tab.add_column("output", overflow="fold", min_width=16)
    tab.add_column("referee", no_wrap=True)
    for col in ("err run", "err referee", "ratio", "k"):
        tab.add_column(col, justify="right", overflow="fold")
    for name, verdict, *rest in referee_rows(v):
        style = "green" if verdict == "PASS" else "bold red" if verdict == "FAIL" else "yellow"
        tab.add_row(Text(plain(name)), Text(verdict, style=style), *rest)
    return tab


def _meta_value(value) -> str:
    """meta values for display: dicts as k=v pairs, lists comma-separated, everything else as str()."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_meta_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_meta_value(v) for v in value)
    return str(value)


def _summary_table(report: CheckReport) -> Table:
    """One row per output; kept to seven short columns so that it fits an 80-column terminal."""
    tab = Table(title="outputs", box=box.SIMPLE_HEAVY, title_justify="left", pad_edge=False)
    tab.add_column("output", overflow="fold", min_width=16)
    tab.add_column("verdict", no_wrap=True)
    for col in ("mismatches", "max |err|", "cosine"):
        tab.add_column(col, justify="right", overflow="fold")
    for col in ("dtype", "shape"):  # least important last: a narrow terminal crops these first
        tab.add_column(col, overflow="fold")
    for t in report.tensors:
        dtype = t.dtype if t.dtype == t.expected_dtype else f"{t.dtype}/{t.expected_dtype}"
        tab.add_row(Text(plain(t.name)), Text(_verdict(t.passed), style="green" if t.passed else "bold red"),
                    str(t.mismatches), fmt_num(t.max_abs_err, ".3g"), fmt_num(t.cosine, ".6f"), dtype,
                    "x".join(str(s) for s in t.shape) or "scalar")
    return tab


def _detail(t: TensorComparison) -> Group:
    parts = [Text(plain(t.name) + f": {_verdict(t.passed)}" + (f" ({', '.join(t.failed_rules)})" if t.failed_rules else ""),
                  style="bold " + ("green" if t.passed else "red"))]
    grid = Table(box=box.SIMPLE, show_header=False, padding=(0, 1))
    grid.add_column("metric", style="cyan")
    grid.add_column("value")
    for label, value in metric_rows(t):
        grid.add_row(label, value)
    parts.append(grid)
    if t.worst:
        wt = Table(title=f"{markup(t.name)}: worst elements", box=box.SIMPLE, title_justify="left")
        for col in ("index", "actual", "expected", "|err|", "rel err"):
            wt.add_column(col, justify="left" if col == "index" else "right")
        for w in t.worst:
            wt.add_row(fmt_index(w.index), fmt_num(w.actual, ".7g"), fmt_num(w.expected, ".7g"),
                       fmt_num(w.abs_err), fmt_num(w.rel_err))
        parts.append(wt)
    rows = histogram_rows(t)
    if rows:
        top = max(c for _, c in rows)
        ht = Table(title=f"{markup(t.name)}: |err| histogram (log10 buckets)", box=box.SIMPLE, show_header=False,
                   title_justify="left")
        ht.add_column("bucket")
        ht.add_column("count", justify="right")
        ht.add_column("bar")
        for label, count in rows:
            bar = "#" * (max(1, round(_HIST_BAR * count / top)) if count else 0)
            ht.add_row(label, str(count), bar)
        parts.append(ht)
    for line in nonfinite_lines(t):
        parts.append(Text("NaN/inf: " + plain(line), style="yellow"))
    return Group(*parts)


def _renderables(report: CheckReport, details=None) -> list:
    out = [_banner(report), _summary_table(report)]
    if referee_of(report) is not None:
        out.append(referee_table(referee_of(report)))
    out.extend(_detail(t) for t in _detail_tensors(report, details))
    return out


def render_console(report: CheckReport, console: Console | None = None, *, details=None) -> None:
    """Print the report with Rich. Without `console`: stdout, colours only on a TTY and never under NO_COLOR.

    details: None (all tensors when there are at most DETAIL_ALL_UP_TO, else only failed ones), "all", "failed".
    """
    if console is None:
        console = Console(color_system=None) if no_color() else Console()  # mschecker.console's NO_COLOR rule
    for r in _renderables(report, details):
        console.print(r)


def render_text(report: CheckReport, *, width: int = 110, details=None) -> str:
    """The same report as plain text (no ANSI escapes), e.g. for a pytest assertion message."""
    buf = io.StringIO()
    console = Console(file=buf, color_system=None, width=width, force_terminal=False, legacy_windows=False,
                      emoji=False, highlight=False)
    for r in _renderables(report, details):
        console.print(r)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


# --------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------

def _write_atomic(path, text: str, what: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise InputError(f"cannot write {what} report {os.fspath(path)!r}: {exc.strerror or exc}") from None


def write_json(report: CheckReport, path) -> None:
    """Write `report.to_dict()` as JSON (strict: NaN/inf are already strings), atomically."""
    text = json.dumps(report.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    _write_atomic(path, text, "JSON")


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222}
.banner{padding:.8em 1.2em;border-radius:6px;color:#fff;font-size:1.4em;font-weight:bold}
.pass{background:#2e7d32}.fail{background:#c62828}
table{border-collapse:collapse;margin:.6em 0 1.2em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right;font-variant-numeric:tabular-nums}
th{background:#f3f3f3}td.l,th.l{text-align:left}
.bar{display:inline-block;height:.8em;background:#1565c0}
.ok{color:#2e7d32;font-weight:bold}.bad{color:#c62828;font-weight:bold}
.nf{color:#8d6e00}code{background:#f6f6f6;padding:0 .2em}
"""


def _h(v) -> str:
    return html.escape(str(v), quote=True)


def render_html(report: CheckReport) -> str:
    """A self-contained HTML page (inline CSS, no scripts, no external resources); every name is escaped."""
    p = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
         f"<title>mschecker {_verdict(report.passed)}</title><style>{_CSS}</style></head><body>"]
    cls = "pass" if report.passed else "fail"
    failed = [t for t in report.tensors if not t.passed]
    p.append(f'<div class="banner {cls}">{_verdict(report.passed)}: '
             f"{len(report.tensors) - len(failed)}/{len(report.tensors)} outputs within tolerance</div>")
    p.append(f"<p>Rule: <code>{_h(report.rule.describe())}</code></p>")
    p += _referee_html(report)
    if report.meta:
        p.append('<table><tr><th class="l">meta</th><th class="l">value</th></tr>')
        for k, v in report.meta.items():
            p.append(f'<tr><td class="l">{_h(k)}</td><td class="l">{_h(json.dumps(v, default=str))}</td></tr>')
        p.append("</table>")
    p.append('<h2>Outputs</h2><table><tr><th class="l">output</th><th class="l">verdict</th><th class="l">shape</th>'
             '<th class="l">dtype</th><th>max |err|</th><th>max rel</th><th>cosine</th><th>ULP p99</th>'
             "<th>mismatches</th><th class=\"l\">failed rules</th></tr>")
    for t in report.tensors:
        v = f'<span class="{"ok" if t.passed else "bad"}">{_verdict(t.passed)}</span>'
        p.append(f'<tr><td class="l"><a href="#t{report.tensors.index(t)}">{_h(t.name)}</a></td><td class="l">{v}</td>'
                 f'<td class="l">{_h(list(t.shape))}</td><td class="l">{_h(t.dtype)} / {_h(t.expected_dtype)}</td>'
                 f"<td>{_h(fmt_num(t.max_abs_err))}</td><td>{_h(fmt_num(t.max_rel_err))}</td>"
                 f"<td>{_h(fmt_num(t.cosine, '.6f'))}</td><td>{_h(fmt_num(t.ulp_p99))}</td>"
                 f"<td>{t.mismatches}</td><td class=\"l\">{_h(', '.join(t.failed_rules))}</td></tr>")
    p.append("</table>")
    for i, t in enumerate(report.tensors):
        p.append(f'<h2 id="t{i}">{_h(t.name)} <span class="{"ok" if t.passed else "bad"}">'
                 f"{_verdict(t.passed)}</span></h2>")
        p.append('<table><tr><th class="l">metric</th><th class="l">value</th></tr>')
        for label, value in metric_rows(t):
            p.append(f'<tr><td class="l">{_h(label)}</td><td class="l">{_h(value)}</td></tr>')
        p.append("</table>")
        for line in nonfinite_lines(t):
            p.append(f'<p class="nf">NaN/inf: {_h(line)}</p>')
        if t.worst:
            p.append('<h3>Worst elements</h3><table><tr><th class="l">index</th><th>actual</th><th>expected</th>'
                     "<th>|err|</th><th>rel err</th></tr>")
            for w in t.worst:
                p.append(f'<tr><td class="l">{_h(fmt_index(w.index))}</td><td>{_h(fmt_num(w.actual, ".7g"))}</td>'
                         f"<td>{_h(fmt_num(w.expected, '.7g'))}</td><td>{_h(fmt_num(w.abs_err))}</td>"
                         f"<td>{_h(fmt_num(w.rel_err))}</td></tr>")
            p.append("</table>")
        rows = histogram_rows(t)
        if rows:
            top = max(c for _, c in rows)
            p.append('<h3>|err| histogram (log10 buckets)</h3><table><tr><th class="l">bucket</th><th>count</th>'
                     '<th class="l"></th></tr>')
            for label, count in rows:
                width = 0 if not count else max(1, round(300 * count / top))
                p.append(f'<tr><td class="l">{_h(label)}</td><td>{count}</td>'
                         f'<td class="l"><span class="bar" style="width:{width}px"></span></td></tr>')
            p.append("</table>")
    p.append("</body></html>\n")
    return "\n".join(p)


def _referee_html(report) -> list[str]:
    v = referee_of(report)
    if v is None:
        return []
    p = [f"<p>{_h(line)}</p>" for line in referee_summary(report)]
    p += [f'<p class="bad">{_h(line)}</p>' for line in v.failure_reasons()]
    p += [f'<p class="nf">note: {_h(n)}</p>' for n in v.notes]
    p.append('<h2>Referee</h2><table><tr><th class="l">output</th><th class="l">referee</th><th>err run</th>'
             "<th>err referee</th><th>ratio</th><th>k</th></tr>")
    for name, verdict, *rest in referee_rows(v):
        cls = "ok" if verdict == "PASS" else "bad" if verdict == "FAIL" else "nf"
        p.append(f'<tr><td class="l">{_h(name)}</td><td class="l"><span class="{cls}">{_h(verdict)}</span></td>'
                 + "".join(f"<td>{_h(x)}</td>" for x in rest) + "</tr>")
    p.append("</table>")
    return p


def write_html(report: CheckReport, path) -> None:
    """Write `render_html(report)` atomically."""
    _write_atomic(path, render_html(report), "HTML")
