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

from ..untrusted import markup, plain as _plain, plot_text as _plot_text
from .compare import BETTER, MACHINE, SAME, WORSE, CellComparison, Comparison
from .store import CellRecord, Store

_ORDER = {WORSE: 0, "crashed": 1, "timeout": 1, "killed": 1, MACHINE: 2, BETTER: 2, "changed": 3, "no baseline": 3,
          "new": 4, "missing": 4, SAME: 5}
_STYLE = {WORSE: "bold red", BETTER: "green", SAME: "dim", MACHINE: "magenta",
          "crashed": "bold yellow", "timeout": "bold yellow",
          "killed": "bold yellow", "pass": "green", "fail": "red"}
HISTORY_RUNS = 10
WORST_CELLS = 10


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


def _metric_text(c: CellComparison) -> str:
    m = (c.worst() or next((m for m in c.metrics if m.verdict == BETTER), None)
         or next((m for m in c.metrics if m.delta != 0.0 and not math.isnan(m.delta)), None))
    if m is None:
        return ""
    noise = ""
    if m.noise or not m.noise_measured:
        noise = f" (noise {fmt(m.noise)}{'' if m.noise_measured else ', unmeasured'})"
    return f"{m.name}: {fmt(m.baseline)} -> {fmt(m.run)}{noise}"


def _reason(c: CellComparison) -> str:
    return "; ".join([c.reason[:200]] * bool(c.reason) + c.changes)


def sorted_cells(comparison: Comparison) -> list[CellComparison]:
    return sorted(comparison.cells, key=lambda c: (_ORDER.get(c.verdict, 3), c.key))


# -------------------------------------------------------------------------------------------------- console
def render_comparison(comparison: Comparison, console: Console, *, show_same: bool = False) -> None:
    counts = comparison.counts()
    table = Table(title=f"campaign {markup(comparison.campaign)}: {markup(comparison.run)} vs baseline "
                        f"{markup(comparison.baseline)}")
    for col in ("cell", "device", "baseline", "run", "verdict", "metric (baseline -> run)", "reason"):
        table.add_column(col, overflow="fold")
    shown = [c for c in sorted_cells(comparison) if show_same or c.verdict != SAME]
    for c in shown:
        table.add_row(markup(c.key), markup(c.device), _styled(c.baseline_status), _styled(c.run_status),
                      _styled(c.verdict), markup(_metric_text(c)), markup(_reason(c)))
    if shown:
        console.print(table)
    for name, (b, r) in comparison.environment.items():
        console.print(f"changed between the runs: {markup(name)} {markup(', '.join(b))} -> {markup(', '.join(r))}",
                      highlight=False)
    hidden = len(comparison.cells) - len(shown)
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda kv: _ORDER.get(kv[0], 3)))
    console.print(f"{len(comparison.cells)} cells: {escape(summary)}"
                  + (f" ({hidden} unchanged cells not listed)" if hidden else ""), highlight=False)
    verdict = (f"[bold red]REGRESSED: {len(comparison.regressed)} cell(s) worse than the baseline[/]"
               if comparison.regressed else "[green]no regression against the baseline[/]")
    console.print(verdict)
    if counts.get(MACHINE):
        console.print(f"[magenta]{counts[MACHINE]} bit-exact cell(s) differ only with the machine (BLAS kernel or "
                      f"threads, numpy SIMD, CPU), within noise + allow: not regressions[/]")


def render_run(summary, records: list[CellRecord], console: Console) -> None:
    """The run's cells (one row per cell, repeats folded) and its counts."""
    from .compare import cell_status

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
    from .compare import cell_status

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
    from ..compare import json_safe

    return json.dumps(json_safe(obj.to_dict()), indent=2, allow_nan=False) + "\n"


# ----------------------------------------------------------------------------------------------------- HTML
# The headline metric of each cell kind, plotted per group over the run history: what a reader checks first.
HEADLINE = {"sd": ("image_psnr_db", "image PSNR (dB), mean over prompts and seeds"),
            "check": ("rel_euclidean", "worst relative error over outputs, mean over cells"),
            "kernels": ("error_ratio", "worst error / bound over variants, max over kernels")}


def _headline(kind: str, metrics: dict[str, float]) -> float | None:
    name = HEADLINE[kind][0]
    values = [v for k, v in metrics.items() if k.rsplit(".", 1)[-1] == name]
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return values[0] if kind == "sd" else max(values)


def _group_label(kind: str, record: CellRecord) -> str:
    c = record.coords
    if kind == "sd":
        return f"{record.block} / {c.get('profile')}"
    if kind == "check":
        return f"{record.block} / {c.get('device')}" + (f" {c['profile']}" if c.get("profile") else "")
    return record.block


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
                per_group.setdefault((rec.kind, _group_label(rec.kind, rec)), []).append(v)
        for (kind, group), values in per_group.items():
            agg = max(values) if kind == "kernels" else sum(values) / len(values)
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
        ax.set_ylabel(_plot_text(HEADLINE[kind][0]))
        ax.set_title(_plot_text(f"{kind}: {HEADLINE[kind][1]}"), fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        out.append((f"{kind}: {HEADLINE[kind][1]}, last {len(run_ids)} runs (triangles at the edge: +-inf, "
                    f"e.g. identical images; gaps: NaN or no finished cell)", _png(fig)))
    return out


def worst_cells_plot(comparison: Comparison, n: int = WORST_CELLS) -> tuple[str, str] | None:
    """A bar per regressed cell: how much its worst metric got worse, relative to the baseline value."""
    from .compare import _relative_worsening

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


def write_html(comparison: Comparison, store: Store, path, *, last: int = HISTORY_RUNS) -> None:
    from ..fsio import atomic_write_text

    counts = comparison.counts()
    rows = []
    for c in sorted_cells(comparison):
        rows.append("<tr class='{cls}'><td>{key}</td><td>{dev}</td><td>{b}</td><td>{r}</td><td><b>{v}</b></td>"
                    "<td>{m}</td><td>{reason}</td></tr>".format(
                        cls=html.escape(c.verdict.replace(" ", "-")), key=_html(c.key), dev=_html(c.device),
                        b=_html(c.baseline_status or "-"), r=_html(c.run_status or "-"), v=_html(c.verdict),
                        m=_html(_metric_text(c)), reason=_html(_reason(c))))
    figures = history_plots(*history_series(store, comparison.campaign, last))
    worst = worst_cells_plot(comparison)
    if worst:
        figures.append(worst)
    figs = "\n".join(f"<figure><img alt='{_html(cap)}' src='data:image/png;base64,{png}'>"
                     f"<figcaption>{_html(cap)}</figcaption></figure>" for cap, png in figures)
    verdict = (f"REGRESSED: {len(comparison.regressed)} cell(s) worse than the baseline" if comparison.regressed
               else "no regression against the baseline")
    env = "".join(f"<p>changed between the runs: {_html(k)} {_html(', '.join(b))} -&gt; "
                  f"{_html(', '.join(r))}</p>\n" for k, (b, r) in comparison.environment.items())
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>mschecker campaign {_html(comparison.campaign)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;vertical-align:top}} tr.worse{{background:#fdd}}
tr.better{{background:#dfd}} tr.machine{{background:#f3e5f5}}
tr.crashed,tr.timeout,tr.killed{{background:#ffd}} figure{{margin:1em 0}}</style>
</head><body>
<h1>campaign {_html(comparison.campaign)}</h1>
<p>run <code>{_html(comparison.run)}</code> against baseline <code>{_html(comparison.baseline)}</code>:
<b>{_html(verdict)}</b>. {_html(', '.join(f'{n} {v}' for v, n in counts.items()))}.</p>
{env}<p>worse = beyond the run-to-run noise (0 on bit-exact devices) plus the declared allowance; machine = a
bit-exact cell that differs only with the machine it ran on (BLAS kernel or threads, numpy SIMD, CPU), within noise
plus allowance: not a regression; see docs/CAMPAIGN.md.</p>
{figs}
<table><tr><th>cell</th><th>device</th><th>baseline</th><th>run</th><th>verdict</th><th>metric (baseline -&gt; run)</th>
<th>reason</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""
    atomic_write_text(path, page)
