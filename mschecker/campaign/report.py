"""Campaign reports: the Rich tables (run summary, comparison, history), the JSON form, and the HTML page with
matplotlib plots over the run history.

Names in cells come from campaign files and models (prompts, tensor names, block names): untrusted text. Rich
output goes through mschecker.untrusted.markup (control characters shown as escapes, Rich markup escaped, so
`[/bold]x` prints as itself), the HTML through html.escape of the same plain text; plots get plain text
(matplotlib parses no markup except `$...$` mathtext, which `untrusted.plot_text` neutralises).
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mschecker.untrusted import markup, plain as _plain, plot_text as _plot_text
from mschecker.campaign.compare import (BETTER, CellComparison, Comparison, EXPECTED_FAILURE, FLAKY_FAILURE, MACHINE,
                                        MetricVerdict, SAME, UNEXPECTED_PASS, WORSE, _relative_worsening, cell_status,
                                        expected_outcome)
from mschecker.campaign.history import BLIP, STEP
from mschecker.campaign.kinds import KINDS
from mschecker.campaign.store import CellRecord, Store
from mschecker.compare import json_safe
from mschecker.fsio import atomic_write_text

_ORDER = {WORSE: 0, "crashed": 1, "timeout": 1, "killed": 1, MACHINE: 2, BETTER: 2, "changed": 3, "no baseline": 3,
          "new": 4, "missing": 4, SAME: 5}
_STYLE = {WORSE: "bold red", BETTER: "green", SAME: "dim", MACHINE: "magenta",
          "crashed": "bold yellow", "timeout": "bold yellow",
          "killed": "bold yellow", "pass": "green", "fail": "red"}
HISTORY_RUNS = 10
WORST_CELLS = 10
# Per-cell history plots in the HTML: only cells that changed, stepped, blipped or are named in the expected
# results, and at most this many (worst first; ~20 KB each): the page stays small at 500 cells.
CELL_PLOTS_MAX = 40
_EXPECTED_STYLE = {EXPECTED_FAILURE: "yellow", UNEXPECTED_PASS: "bold cyan", FLAKY_FAILURE: "yellow"}


def _html(text) -> str:
    return html.escape(_plain(text))


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def _styled(status: str | None) -> str:
    if status is None:
        return "-"
    style = _STYLE.get(status)
    return f"[{style}]{escape(status)}[/]" if style else escape(status)


def _shown_metric(c: CellComparison) -> MetricVerdict | None:
    return (c.worst() or next((m for m in c.metrics if m.verdict == BETTER), None)
            or (c.trend_metric() if c.trend in (STEP, BLIP) else None)
            or next((m for m in c.metrics if m.delta != 0.0 and not math.isnan(m.delta)), None))


def _metric_text(c: CellComparison) -> str:
    m = _shown_metric(c)
    if m is None:
        return ""
    if m.against == "history":
        return (f"{m.name}: {fmt(m.baseline)} -> {fmt(m.run)} (history median of {m.samples[0]} runs, "
                f"band +-{fmt(m.noise)})")
    noise = ""
    if m.noise or not m.noise_measured:
        noise = f" (noise {fmt(m.noise)}{'' if m.noise_measured else ', unmeasured'})"
    return f"{m.name}: {fmt(m.baseline)} -> {fmt(m.run)}{noise}"


def _trend_text(c: CellComparison) -> str:
    """step (N nights, since RUN) / blip / blip (RUN came back) / same; "" without a history."""
    m = c.trend_metric()
    if m is None or m.history is None:
        return ""
    h = m.history
    if h.trend == STEP:
        return f"step ({h.nights} runs, since {h.since})"
    if h.trend == BLIP:
        return f"blip ({h.since} came back)" if h.since else "blip (this run only)"
    return h.trend


def _expected_text(c: CellComparison) -> str:
    return f"{c.expected}: {c.expected_reason[:120]}" if c.expected else ""


def _listed(c: CellComparison, show_same: bool) -> bool:
    return show_same or c.verdict != SAME or c.trend in (STEP, BLIP) or bool(c.expected)


def _reason(c: CellComparison) -> str:
    moved = [c.first_moved.short()] if c.first_moved is not None else []
    return "; ".join([c.reason[:200]] * bool(c.reason) + c.changes + moved)


def sorted_cells(comparison: Comparison) -> list[CellComparison]:
    return sorted(comparison.cells, key=lambda c: (_ORDER.get(c.verdict, 3), c.key))


# -------------------------------------------------------------------------------------------------- console
def render_comparison(comparison: Comparison, console: Console, *, show_same: bool = False) -> None:
    counts = comparison.counts()
    against = (f"the history of {len(comparison.history)} runs (baseline {markup(comparison.baseline)})"
               if comparison.history else f"baseline {markup(comparison.baseline)}")
    table = Table(title=f"campaign {markup(comparison.campaign)}: {markup(comparison.run)} vs {against}")
    cols = ["cell", "device", "baseline", "run", "verdict", "metric (baseline -> run)"]
    cols += ["history"] * bool(comparison.history) + ["expected"] * bool(comparison.expected_file) + ["reason"]
    for col in cols:
        table.add_column(col, overflow="fold")
    shown = [c for c in sorted_cells(comparison) if _listed(c, show_same)]
    for c in shown:
        row = [markup(c.key), markup(c.device), _styled(c.baseline_status), _styled(c.run_status),
               _styled(c.verdict), markup(_metric_text(c))]
        if comparison.history:
            row.append(markup(_trend_text(c)))
        if comparison.expected_file:
            style = _EXPECTED_STYLE.get(c.expected)
            text = markup(_expected_text(c))
            row.append(f"[{style}]{text}[/]" if style and text else text)
        table.add_row(*row, markup(_reason(c)))
    if shown:
        console.print(table)
    for name, (b, r) in comparison.environment.items():
        console.print(f"changed between the runs: {markup(name)} {markup(', '.join(b))} -> {markup(', '.join(r))}",
                      highlight=False)
    hidden = len(comparison.cells) - len(shown)
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: _ORDER.get(kv[0], 3)))
    console.print(f"{len(comparison.cells)} cells: {escape(summary)}"
                  + (f" ({hidden} unchanged cells not listed)" if hidden else ""), highlight=False)
    what = "its history" if comparison.history else "the baseline"
    verdict = (f"[bold red]REGRESSED: {len(comparison.regressed)} cell(s) worse than {what}[/]"
               if comparison.regressed else f"[green]no regression against {what}[/]")
    console.print(verdict)
    if comparison.history:
        steps = sum(c.trend == STEP for c in comparison.cells)
        blips = sum(c.trend == BLIP for c in comparison.cells)
        console.print(f"history: {len(comparison.history)} finished runs ({markup(comparison.history[0])} .. "
                      f"{markup(comparison.history[-1])}); {steps} cell(s) with a step (a change over >= 2 runs), "
                      f"{blips} with a blip (one run)", highlight=False)
    if comparison.expected_file:
        by = {k: sum(c.expected == k for c in comparison.cells) for k in (EXPECTED_FAILURE, FLAKY_FAILURE)}
        console.print(f"expected results {markup(comparison.expected_file)}: {by[EXPECTED_FAILURE]} expected "
                      f"failure(s), {by[FLAKY_FAILURE]} tolerated flaky failure(s), "
                      f"{len(comparison.unexpected_passes)} unexpected pass(es)", highlight=False)
        for c in comparison.unexpected_passes:
            console.print(f"[bold cyan]unexpected pass[/]: {markup(c.key)} (expected to fail: "
                          f"{markup(c.expected_reason[:200])}); update the expected results"
                          + (" [bold red](--strict-expected: fails the run)[/]" if comparison.strict_expected else ""),
                          highlight=False)
    if counts.get(MACHINE):
        console.print(f"[magenta]{counts[MACHINE]} bit-exact cell(s) differ only with the machine (BLAS kernel or "
                      f"threads, numpy SIMD, CPU), within noise + allow: not regressions[/]")


def render_expected(statuses: dict[str, str], expected, console: Console) -> None:
    """Without a comparison (no baseline): the expected-results outcome of each listed cell that finished."""

    rows = []
    for key, status in statuses.items():
        e = expected.get(key)
        if e is not None and status in ("pass", "fail"):
            rows.append((key, expected_outcome(e, status == "fail"), e.reason))
    for key, what, reason in rows:
        style = _EXPECTED_STYLE.get(what)
        console.print(f"{f'[{style}]' if style else ''}{escape(what)}{'[/]' if style else ''}: {markup(key)} "
                      f"({markup(reason[:200])})", highlight=False)
    n = sum(w == UNEXPECTED_PASS for _, w, _ in rows)
    console.print(f"expected results {markup(expected.path)}: {len(rows)} listed cell(s) finished, {n} "
                  f"unexpected pass(es)", highlight=False)


def render_run(summary, records: list[CellRecord], console: Console) -> None:
    """The run's cells (one row per cell, repeats folded) and its counts."""
    table = Table(title=f"campaign {markup(summary.campaign)} run {markup(summary.run_id)}")
    for col in ("cell", "device", "status", "samples", "wall s", "reason"):
        table.add_column(col, overflow="fold")
    groups: dict[str, list[CellRecord]] = {}
    for r in records:
        groups.setdefault(r.key, []).append(r)
    for key, samples in groups.items():
        status = cell_status(samples)
        wall = sum(s.wall_s or 0.0 for s in samples)
        reason = next((s.reason for s in samples if s.reason and s.status == status), "")
        table.add_row(markup(key), markup(samples[0].device), _styled(status), str(len(samples)), f"{wall:.1f}",
                      markup(reason[:200]))
    console.print(table)
    counts = ", ".join(f"{summary.count(s)} {s}" for s in ("pass", "fail", "crashed", "timeout", "killed")
                       if summary.count(s))
    console.print(f"{len(summary.statuses)} cells ({counts}); ran {summary.ran} task(s), skipped {summary.skipped} "
                  f"finished in an earlier attempt; {summary.wall_s:.1f} s on {summary.engine.get('workers')} "
                  f"worker(s) ({escape(str(summary.engine.get('scheduler')))})", highlight=False)
    if summary.unfinished:
        console.print(f"[bold yellow]{len(summary.unfinished)} cell(s) did not finish; rerun with --run-id "
                      f"{markup(summary.run_id)} to run only those[/]")


def _utc(t: float) -> str:
    try:  # a tampered store's created_at (inf, 1e300) is shown as it is, not a crash
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    except (OverflowError, ValueError, OSError):
        return str(t)


def render_history(store: Store, runs, console: Console) -> None:
    table = Table(title=f"runs in {markup(store.path)}")
    for col in ("run id", "campaign", "created (UTC)", "status", "cells", "pass", "fail", "unfinished"):
        table.add_column(col)
    for r in runs:
        groups: dict[str, list] = {}
        for rec in store.cells(r.run_id):
            groups.setdefault(rec.key, []).append(rec)
        statuses = [cell_status(v) for v in groups.values()]
        table.add_row(markup(r.run_id), markup(r.campaign),
                      _utc(r.created_at), markup(r.status),
                      str(len(statuses)), str(statuses.count("pass")), str(statuses.count("fail")),
                      str(sum(s not in ("pass", "fail") for s in statuses)))
    console.print(table)


# ----------------------------------------------------------------------------------------------------- JSON
def to_json(obj) -> str:
    """A comparison or run summary as JSON (non-finite numbers as the strings "nan"/"inf"/"-inf")."""
    return dumps(obj.to_dict())


def dumps(data: dict) -> str:
    return json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"


# ----------------------------------------------------------------------------------------------------- HTML
# The headline metric of each cell kind (CellKind.headline), plotted per group over the run history: what a
# reader checks first.
def _headline(kind: str, metrics: dict[str, float]) -> float | None:
    name = KINDS[kind].headline[0]
    values = [v for k, v in metrics.items() if k.rsplit(".", 1)[-1] == name]
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return KINDS[kind].headline_value(values)


def history_series(store: Store, campaign: str, last: int = HISTORY_RUNS) -> tuple[list[str], dict]:
    """(run ids oldest first, {kind: {group: {run_id: value}}}) over the last runs of a campaign. A group's value
    is the mean (kernels: max) over its cells' headline metric; NaN when any cell's is NaN."""
    runs = store.runs(campaign, limit=last)[::-1]
    series: dict[str, dict[str, dict]] = {}
    for run in runs:
        per_group: dict[tuple, list[float]] = {}
        for rec in store.cells(run.run_id):
            if rec.status not in ("pass", "fail"):
                continue
            v = _headline(rec.kind, rec.metrics)
            if v is not None:
                per_group.setdefault((rec.kind, KINDS[rec.kind].group_label(rec.block, rec.coords)), []).append(v)
        for (kind, group), values in per_group.items():
            agg = KINDS[kind].aggregate(values)
            series.setdefault(kind, {}).setdefault(group, {})[run.run_id] = agg
    return [r.run_id for r in runs], series


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _run_label(run_id: str) -> str:
    return _plot_text(run_id if len(run_id) <= 40 else "..." + run_id[-37:])


def history_plots(run_ids: list[str], series: dict[str, dict[str, dict]]) -> list[tuple[str, str]]:
    """(caption, base64 PNG) per cell kind: the headline metric per group over the runs (x: runs, oldest
    first). +-inf (e.g. the PSNR of identical images) is drawn at the plot's edge with a triangle marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for kind, groups in series.items():
        metric, caption = KINDS[kind].headline
        finite = [v for pts in groups.values() for v in pts.values() if math.isfinite(v)]
        hi, lo = (max(finite), min(finite)) if finite else (1.0, 0.0)
        span = (hi - lo) or abs(hi) or 1.0
        top, bottom = hi + 0.15 * span, lo - 0.15 * span
        fig, ax = plt.subplots(figsize=(8, 3.6))
        for group, pts in sorted(groups.items()):
            xs = [i for i, r in enumerate(run_ids) if r in pts]
            ys = [pts[run_ids[i]] for i in xs]
            drawn = [top if v == math.inf else bottom if v == -math.inf else v for v in ys]
            line, = ax.plot(xs, [d if not math.isnan(d) else math.nan for d in drawn], marker="o",
                            label=_plot_text(group))
            inf_x = [x for x, v in zip(xs, ys) if math.isinf(v)]
            for x in inf_x:
                y = top if ys[xs.index(x)] > 0 else bottom
                ax.plot([x], [y], marker="^" if y == top else "v", markersize=10, color=line.get_color())
                ax.annotate("inf" if y == top else "-inf", (x, y), textcoords="offset points", xytext=(8, -3),
                            fontsize=7, color=line.get_color())
        ax.set_xticks(range(len(run_ids)))
        ax.set_xticklabels([_run_label(r) for r in run_ids], rotation=30, ha="right", fontsize=7)
        ax.set_xlim(-0.5, len(run_ids) - 0.5)
        ax.set_ylabel(_plot_text(metric))
        ax.set_title(_plot_text(f"{kind}: {caption}"), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        out.append((f"{kind}: {caption}, last {len(run_ids)} runs (triangles at the edge: +-inf, "
                    f"e.g. identical images; gaps: NaN or no finished cell)", _png(fig)))
    return out


def worst_cells_plot(comparison: Comparison, n: int = WORST_CELLS) -> tuple[str, str] | None:
    """A bar per regressed cell: how much its worst metric got worse, relative to the baseline value."""
    worst = sorted((c for c in comparison.regressed if c.worst() is not None),
                   key=lambda c: -_relative_worsening(c.worst()))[:n]
    if not worst:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.45 * len(worst) + 1))
    values = [min(_relative_worsening(c.worst()), 1e6) for c in worst]
    labels = [_plot_text(f"{c.key[:60]} :: {c.worst().name}") for c in worst]
    ax.barh(range(len(worst)), values, color="#c0392b")
    ax.set_yticks(range(len(worst)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("|change| / |baseline| of the worst metric (NaN shown at 1e6)")
    return (f"the {len(worst)} worst regressed cells", _png(fig))


def _plot_priority(c: CellComparison) -> tuple:
    return (c.verdict != WORSE, c.expected != UNEXPECTED_PASS, c.trend != STEP, c.verdict == SAME, c.key)


def cell_history_plots(comparison: Comparison, limit: int = CELL_PLOTS_MAX) -> list[tuple[str, str, str]]:
    """(cell key, caption, base64 PNG) per cell judged with a history that changed, stepped, blipped or is named
    in the expected results (worse first, at most `limit`): its shown metric over the window and this run, the
    band (history median +- band) shaded."""
    picked = []
    for c in sorted(comparison.cells, key=_plot_priority):
        if not (c.verdict not in (SAME,) or c.trend in (STEP, BLIP) or c.expected):
            continue
        m = _shown_metric(c) or c.trend_metric()
        if m is None or m.history is None or not m.history.series:
            continue
        picked.append((c, m))
        if len(picked) >= limit:
            break
    if not picked:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    for c, m in picked:
        h = m.history
        ys = [v for _, v in h.series] + [m.run]
        xs = list(range(len(ys)))
        finite = [v for v in ys if math.isfinite(v)]
        lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
        span = (hi - lo) or abs(hi) or 1.0
        top, bottom = hi + 0.1 * span, lo - 0.1 * span
        drawn = [top if v == math.inf else bottom if v == -math.inf else v for v in ys]
        fig, ax = plt.subplots(figsize=(5.5, 1.9))
        if math.isfinite(h.center):
            ax.axhspan(h.center - h.band, h.center + h.band, color="#3498db", alpha=0.15, lw=0)
            ax.axhline(h.center, color="#3498db", lw=0.8)
        ax.plot(xs[:-1], drawn[:-1], marker="o", markersize=3, lw=1, color="#555")
        color = {WORSE: "#c0392b", BETTER: "#27ae60"}.get(m.verdict, "#555")
        ax.plot([xs[-1]], [drawn[-1]] if not math.isnan(drawn[-1]) else [top], marker="D", markersize=6,
                color=color)
        ax.set_xticks([0, len(ys) - 1])
        ax.set_xticklabels([_run_label(h.series[0][0]), _run_label(comparison.run)], fontsize=6)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(_plot_text(f"{c.key[:80]} :: {m.name}"), fontsize=7)
        ax.grid(alpha=0.3)
        caption = (f"{c.key}: {m.name} over {h.points} runs and this run ({m.verdict}, {_trend_text(c) or 'same'}; "
                   f"shaded: history median +- band {fmt(h.band)})")
        out.append((c.key, caption, _png(fig)))
    return out


def write_html(comparison: Comparison, store: Store, path, *, last: int = HISTORY_RUNS) -> None:
    counts = comparison.counts()
    rows = []
    extra_heads = ("<th>history</th>" * bool(comparison.history)
                   + "<th>expected</th>" * bool(comparison.expected_file))
    for c in sorted_cells(comparison):
        extra = ((f"<td>{_html(_trend_text(c))}</td>" if comparison.history else "")
                 + (f"<td>{_html(_expected_text(c))}</td>" if comparison.expected_file else ""))
        rows.append("<tr class='{cls}'><td>{key}</td><td>{dev}</td><td>{b}</td><td>{r}</td><td><b>{v}</b></td>"
                    "<td>{m}</td>{extra}<td>{reason}</td></tr>".format(
                        cls=html.escape(c.verdict.replace(" ", "-")), key=_html(c.key), dev=_html(c.device),
                        b=_html(c.baseline_status or "-"), r=_html(c.run_status or "-"), v=_html(c.verdict),
                        m=_html(_metric_text(c)), extra=extra, reason=_html(_reason(c))))
    cell_plots = cell_history_plots(comparison) if comparison.history else []
    cell_figs = "\n".join(f"<figure class='cell'><img alt='{_html(cap)}' src='data:image/png;base64,{png}'>"
                          f"<figcaption>{_html(cap)}</figcaption></figure>" for _, cap, png in cell_plots)
    if cell_plots:
        cell_figs = (f"<h2>history per cell ({len(cell_plots)} cell(s) that changed, stepped, blipped or are in the "
                     f"expected results; at most {CELL_PLOTS_MAX})</h2>\n" + cell_figs)
    figures = history_plots(*history_series(store, comparison.campaign, last))
    worst = worst_cells_plot(comparison)
    if worst:
        figures.append(worst)
    figs = "\n".join(f"<figure><img alt='{_html(cap)}' src='data:image/png;base64,{png}'>"
                     f"<figcaption>{_html(cap)}</figcaption></figure>" for cap, png in figures)
    what = f"its history of {len(comparison.history)} runs" if comparison.history else "the baseline"
    verdict = (f"REGRESSED: {len(comparison.regressed)} cell(s) worse than {what}" if comparison.regressed
               else f"no regression against {what}")
    if comparison.expected_file:
        verdict += (f"; expected results {comparison.expected_file}: {len(comparison.unexpected_passes)} "
                    f"unexpected pass(es)")
    env = "".join(f"<p>changed between the runs: {_html(k)} {_html(', '.join(b))} -&gt; "
                  f"{_html(', '.join(r))}</p>\n" for k, (b, r) in comparison.environment.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>mschecker campaign {_html(comparison.campaign)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;vertical-align:top}} tr.worse{{background:#fdd}}
tr.better{{background:#dfd}} tr.machine{{background:#f3e5f5}}
tr.crashed,tr.timeout,tr.killed{{background:#ffd}} figure{{margin:1em 0}}
figure.cell{{display:inline-block;margin:0.5em;max-width:560px;font-size:11px}}</style>
</head><body>
<h1>campaign {_html(comparison.campaign)}</h1>
<p>run <code>{_html(comparison.run)}</code> against baseline <code>{_html(comparison.baseline)}</code>:
<b>{_html(verdict)}</b>. {_html(', '.join(f'{n} {v}' for v, n in counts.items()))}.</p>
{env}<p>worse = beyond the run-to-run noise (0 on bit-exact devices) plus the declared allowance; machine = a
bit-exact cell that differs only with the machine it ran on (BLAS kernel or threads, numpy SIMD, CPU), within noise
plus allowance: not a regression; see docs/CAMPAIGN.md.</p>
{figs}
{cell_figs}
<table><tr><th>cell</th><th>device</th><th>baseline</th><th>run</th><th>verdict</th><th>metric (baseline -&gt; run)</th>
{extra_heads}<th>reason</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    atomic_write_text(path, page)
