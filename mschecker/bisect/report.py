"""The bisection's report: JSON document (schema in docs/BISECT.md), Rich console view, error-vs-depth plot,
HTML page, and write_outputs, which puts every file into --out as one set (fsio.write_file_set: all staged in a
hidden folder there, then moved in; bisect's own files from an earlier run that this run does not write are
removed, so a PASS never sits next to an old fix; fix files only for a fix whose proof re-run passed: an
unproven recommendation is never written or printed as a fix).

Node, tensor and output names come from the model: untrusted. The console shows them through
mschecker.untrusted.plain inside Text (control characters as escapes, markup inert), the plot through
untrusted.plot_text (no mathtext), the HTML through html.escape.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import warnings
from pathlib import Path

from mschecker.compare import json_float
from mschecker.fsio import write_file_set
from mschecker.untrusted import plain, plot_text
from mschecker.bisect.engine import BisectResult
from mschecker.bisect.islands import islands
from mschecker.bisect.search import members
from mschecker.bisect.writers import FILES, fix_files, serialize
from mschecker.graph.loader import load_model
from mschecker.bisect.policy import npu_policy

SCHEMA_VERSION = 1
PLOT_FILE = "error_by_depth.png"
JSON_FILE = "bisect_report.json"
HTML_FILE = "bisect_report.html"
FRONTIER_FILE = "frontier.png"
RESCALED_FILE, RESCALE_REPORT = "model_rescaled.onnx", "rescale_report.txt"
TOP = 10
#: Every file bisect writes into --out: a run removes the ones it does not write this time (write_outputs).
OWN_FILES = (*FILES.values(), PLOT_FILE, JSON_FILE, HTML_FILE, FRONTIER_FILE, RESCALED_FILE, RESCALE_REPORT)


def _islands(result: BisectResult):
    rec = result.recommendation
    if rec is None or not rec.config.keep_dtype:
        return []
    if not Path(result.model).is_file():
        return []
    # the graph the NPU runs, whose node names the analysis uses (a device profile's fused ops included)
    graph = npu_policy(result.profile).transform(load_model(result.model)).graph
    floats = {o.tensor for n in result.analysis.nodes for o in n.outputs} | set(result.samples[0].feeds)
    kept = {m for item in rec.config.keep_dtype for m in members(item, result.analysis)}
    return islands(graph, kept, [n.name for n in result.analysis.nodes], floats)


def to_dict(result: BisectResult, files: dict[str, str] | None = None) -> dict:
    a, s = result.analysis, result.search
    first = a.first_crossing(result.rule.rtol)
    attribution = {x.node: x for x in result.attribution}
    culprits = []
    for rank, n in enumerate(result.ranking[:max(TOP, len(result.culprits))], 1):
        att = attribution.get(n.name)
        culprits.append({"rank": rank, "name": n.name, "op_type": n.op_type, "own_rel_l2": json_float(n.own_error),
                         "inherited_rel_l2": json_float(n.inherited), "rel_l2": json_float(n.error), "overflow": n.overflow, "in_fix": n in result.culprits,
                         "output_rel_l2_without_its_move": json_float(att.without_rel_l2) if att else None,
                         "fix_passes_without_it": att.passes_without if att else None})
    doc = {
        "schema_version": SCHEMA_VERSION, "tool": "mschecker bisect", "verdict": result.verdict,
        "exit_code": result.exit_code, "model": result.model, "profile": result.profile.name,
        "overflow_mode": result.profile.overflow_mode, "npu_side": result.npu_side,
        "tolerance": result.rule.to_dict(), "samples": [x.label for x in result.samples],
        "outputs": {name: st.to_dict() for name, st in a.outputs.items()},
        "first_crossing": ({"name": first.name, "op_type": first.op_type, "index": first.index,
                            "overflow": first.overflow, "rel_l2": json_float(first.error)} if first else None),
        "first_low_headroom": _headroom_entry(a.first_low_headroom()),
        "culprits": culprits,
        "nodes": [n.to_dict() for n in a.nodes],
        "search": None, "recommendation": None, "islands": [], "rule_of_thumb": None, "proof": None,
        "onnx_check": result.onnx_check.to_dict() if result.onnx_check else None,
        "dump": a.dump.to_dict() if a.dump else None,
        "timings_s": {k: round(v, 3) for k, v in result.timings.items()}, "files": files or {},
        "cost": _cost_entry(result), "frontier": result.frontier.to_dict() if result.frontier is not None else None,
        "rescale": result.rescale.to_dict() if result.rescale is not None else None,
    }
    if s is not None:
        doc["search"] = {"candidates": len(s.candidates), "culprits_found": s.culprits, "regime": s.regime,
                         "move": s.move, "high_precision_probe": s.hp_probe,
                         "evaluations": s.evaluations, "located_in": s.located_in, "bound": s.bound, "budget_exhausted": s.exhausted,
                         "order": result.ordering.to_dict() if result.ordering is not None else None,
                         "log": [e.to_dict() for e in s.log]}
        if s.rule_of_thumb is not None:
            t = s.rule_of_thumb
            doc["rule_of_thumb"] = {"rule": "fp32 after every 5 fp16 layers", "layers": len(s.layers),
                                    "changes": t.config.changes, "passed": t.passed,
                                    "worst_rel_l2": json_float(t.worst_rel_l2), "overflow_nodes": t.overflow_nodes[:20]}
        if s.best is not None and result.verdict == "FAIL":
            doc["closest"] = s.best.to_dict()
    if result.recommendation is not None and result.proof is not None:
        proven = result.proof.passed
        doc["proof"] = {"passed": proven, "samples": _before_after(result)}
        if proven:
            doc["recommendation"] = result.recommendation.to_dict()
            doc["islands"] = [i.to_dict() for i in _islands(result)]
    return doc


def _headroom_entry(node) -> dict | None:
    if node is None:
        return None
    peak = max(node.outputs, key=lambda o: o.headroom.fraction_of_max if o.headroom else -1)
    return {"name": node.name, "op_type": node.op_type, "index": node.index, "tensor": peak.tensor,
            "fraction_of_max": json_float(peak.headroom.fraction_of_max), "peak": json_float(peak.headroom.peak),
            "overflow": node.overflow}


def _before_after(result: BisectResult) -> list[dict]:
    """Per sample and graph output: the error as given (of the model as given, also when the fix includes the
    rescale) and under the fix (the proof)."""
    rows = []
    given = result.analysis_before_rescale or result.analysis
    for label, before, after in zip([x.label for x in result.samples], given.per_sample,
                                    result.proof.per_sample):
        rows.append({"sample": label, "outputs": [{"name": k, "before": before[k].to_dict(),
                                                   "after": after[k].to_dict()} for k in before]})
    return rows


# ------------------------------------------------------------------------------------------- console
def render_console(result: BisectResult, console=None, files: dict[str, str] | None = None,
                   frontier_table: bool = False) -> None:
    from rich.text import Text

    from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)

    console = console or make_console()  # outside a terminal: wide, no escapes (names and numbers never cut)
    s = result.search
    _print_verdict(console, result)
    console.print(_culprit_table(result))
    if result.analysis.dump is not None:
        _print_dump(console, result.analysis.dump)
    if s is not None:
        stopped = f"; stopped: {s.exhausted}" if s.exhausted else ""
        console.print(_search_line(s) + f", {s.evaluations} in all" + stopped)
        if result.ordering is not None and result.ordering.order != "error":
            console.print(Text(_order_line(result.ordering)))
    cost = _cost_entry(result)
    if cost is not None and cost.get("fix_estimated_seconds") is not None:
        console.print(f"estimated device time (npu.cost model, ranking only): profile as given "
                      f"{_ms(cost['baseline_estimated_seconds'])}, the fix {_ms(cost['fix_estimated_seconds'])}"
                      f" (the fix with the fewest moves: {_ms(cost['fewest_moves_estimated_seconds'])})",
                      markup=False, highlight=False)
    if result.frontier is not None and frontier_table:
        console.print(_frontier_table(result.frontier))
    if result.rescale is not None:
        _print_rescale(console, result.rescale)
    if result.verdict == "FIXED" and result.recommendation is not None:
        _print_fix(console, result)
    elif s is not None and result.verdict == "FAIL" and s.best is not None:
        console.print(Text(plain(f"no passing configuration; closest: {s.best.config.describe()}, worst output "
                                 f"rel L2 {s.best.worst_rel_l2:.3g}, failing outputs "
                                 f"{', '.join(s.best.failing_outputs) or '-'}, "
                                 f"overflowing nodes {', '.join(s.best.overflow_nodes[:5]) or '-'}")))
    if s is not None and s.rule_of_thumb is not None:
        t = s.rule_of_thumb
        mine = result.recommendation.changes if result.recommendation is not None and result.verdict == "FIXED" \
            else None
        console.print(f"rule of thumb (fp32 after every 5 fp16 layers): {t.config.changes} nodes in fp32, "
                      f"{'passes' if t.passed else 'fails'} (worst rel L2 {t.worst_rel_l2:.3g})"
                      + (f"; the minimal set found: {mine} change(s)" if mine is not None else ""))
    if files:
        console.print(Text("written: " + ", ".join(plain(f) for f in files.values())))


def _print_verdict(console, result: BisectResult) -> None:
    """The verdict line, then where the error first crosses the tolerance and where headroom first runs low."""
    from rich.text import Text

    a = result.analysis
    style = {"PASS": "bold green", "FIXED": "bold yellow", "FAIL": "bold red"}[result.verdict]
    console.print(Text.assemble(("bisect ", "bold"), (result.verdict, style), "  ", Text(plain(result.model)),
                                f"  profile {result.profile.name}  tolerance {result.rule.describe()}"))
    first = a.first_crossing(result.rule.rtol)
    if first is not None:
        why = "overflows" if first.overflow else f"breaks the tolerance (rel L2 {first.error:.3g})"
        console.print(Text.assemble("first node past the threshold: ", (plain(first.label), "bold"), f" {why}"))
    low = a.first_low_headroom()
    if low is not None and low is not first:
        head = _headroom_entry(low)
        console.print(Text.assemble("first node near the format's max: ", (plain(low.label), "bold"),
                                    f" (max |x| = {head['fraction_of_max']:.3g} of the max)"
                                    if not low.overflow else " (overflows)"))


def _culprit_table(result: BisectResult):
    """The top of the culprit ranking, with each node's part in the fix."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="culprits by own error (own = the node on the reference's inputs)")
    table.add_column("#")
    table.add_column("node (op type)", overflow="fold", ratio=3)  # the model's own name, never cut
    for col in ("own rel L2", "inherited", "rel L2", "peak/max", "overflow", "in fix", "outputs without it"):
        table.add_column(col, ratio=1)
    attribution = {x.node: x for x in result.attribution}
    culprit_names = {c.name for c in result.culprits}
    for rank, n in enumerate(result.ranking[:TOP], 1):
        head = max((o.headroom.fraction_of_max for o in n.outputs if o.headroom), default=0.0)
        att = attribution.get(n.name)
        table.add_row(str(rank), Text(plain(n.label)), f"{n.own_error:.3g}", f"{n.inherited:.3g}", f"{n.error:.3g}",
                      f"{head:.3g}",
                      "yes" if n.overflow else "", "yes" if n.name in culprit_names else "",
                      "" if att is None else f"{att.without_rel_l2:.3g}" + ("" if att.passes_without else " fail"))
    return table


def _print_dump(console, d) -> None:
    """How the device dump matched the graph's tensors (the first eight of each kind of mismatch)."""
    from rich.text import Text

    console.print(Text(f"device dump {plain(d.folder)}: {len(d.matched)} tensors matched, "
                       f"{len(d.missing)} missing, {len(d.extra)} extra, {len(d.misshaped)} misshaped"))
    for label, items in (("missing", d.missing), ("extra", d.extra), ("misshaped", d.misshaped)):
        if items:
            console.print(Text(f"  {label}: " + ", ".join(plain(i) for i in items[:8])
                               + (" ..." if len(items) > 8 else "")))


def _search_line(s) -> str:
    """What the fix search located and in how many evaluations, against its bound."""
    if s.baseline is not None and s.baseline.passed:
        return "fix search: the profile as given passes (1 evaluation: the lockstep pass)"
    probe = {None: "", True: "; every capable node in high_precision passes: searched with that move",
             False: "; +1 for the high_precision probe that failed"}[s.hp_probe]
    if s.regime == "accumulation":
        what = ("one fp32 island searched against the ranked prefix" if s.move == "keep_dtype" else
                "the passing ranked prefix kept")
        return (f"fix search: the error accumulates over many nodes, {what}: {s.located_in} evaluations "
                f"(bound {s.bound}, n = {len(s.candidates)} candidates{probe})")
    return (f"fix search: {len(s.culprits)} culprit(s) located in {s.located_in} evaluations (bound "
            f"2 + (k+1)*ceil(log2 n) = {s.bound} for k = {len(s.culprits)}, n = {len(s.candidates)}"
            f"{probe})")


def _print_rescale(console, rs) -> None:
    """The exact rescale's outcome (or why none exists), and its changes when the fix uses it."""
    from rich.text import Text

    if rs.refused:
        console.print(Text(f"exact rescale: not possible: {plain(rs.refused)}"))
        return
    console.print(Text(f"exact rescale by 2^-{rs.k} of {len(rs.tensors)} tensor(s) beyond fp16's range: "
                       f"float64 outputs {'identical' if rs.float64_rel_diff == 0 else 'equal'} (max rel "
                       f"diff {rs.float64_rel_diff:.3g}); on the emulated device it "
                       f"{'passes' if rs.passed else 'fails'} (worst rel L2 {rs.worst_rel_l2:.3g})"
                       + ("; the fix search below ran on the rescaled model" if rs.combined else ""),
                       style="bold" if rs.passed else ""))
    if rs.used:
        for line in rs.report.lines():
            console.print(Text("  " + plain(line)))


def _print_fix(console, result: BisectResult) -> None:
    """A proven fix: its ATC settings, the outputs before / after, its fp32 islands, the patched ONNX check."""
    from rich.table import Table
    from rich.text import Text

    rec = result.recommendation
    console.print(Text("fix (proven on every sample):", style="bold"))
    for line in fix_lines(result.profile, rec.fixed):
        console.print(Text("  " + line))
    for name, item in rec.rewritten.items():
        console.print(Text(f"  (node {plain(name)} cannot be named in an ATC file: written as {plain(item)})"))
    ba = Table(title="before / after (worst over samples)")
    for col in ("output", "rel L2 before", "rel L2 after", "max abs before", "max abs after", "after passes"):
        ba.add_column(col)
    for name, before in (result.analysis_before_rescale or result.analysis).outputs.items():  # the model as given
        after = result.proof.outputs[name]
        ba.add_row(Text(plain(name)), f"{before.rel_l2:.3g}", f"{after.rel_l2:.3g}", f"{before.max_abs or 0:.3g}",
                   f"{after.max_abs or 0:.3g}", "yes" if after.passed else "no")
    console.print(ba)
    isl = _islands(result)
    if isl:
        console.print(f"fp32 islands: {len(isl)} ({sum(len(i.nodes) for i in isl)} nodes, "
                      f"{sum(len(i.cast_in) + len(i.cast_out) for i in isl)} cast points)")
    if result.onnx_check is not None:
        oc = result.onnx_check
        console.print(Text("patched ONNX on onnxruntime: " + (
            f"{'meets' if oc.passed else 'MISSES'} the tolerance (worst rel L2 {oc.worst_rel_l2:.3g})"
            if oc.ran else f"not run ({plain(oc.error)})")
            + (f"; onnxruntime's fp16 kernels needed {len(oc.extra_fp32)} more node(s) in fp32: "
               + ", ".join(plain(x) for x in oc.extra_fp32[:6]) + (" ..." if len(oc.extra_fp32) > 6 else "")
               if oc.extra_fp32 else "")))


# ------------------------------------------------------------------------------------------- plot
def plot_png(result: BisectResult) -> bytes:
    """Accumulated error (worst output rel L2 per node) along execution order, before and after the fix, with the
    culprits marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(analysis):
        xs, ys = [], []
        for n in analysis.nodes:
            if n.outputs and not n.folded:
                e = n.error
                xs.append(n.index)
                ys.append(min(e, 1e3) if math.isfinite(e) else 1e3)
        return xs, [max(y, 1e-12) for y in ys]

    fig, ax = plt.subplots(figsize=(10, 4.2), dpi=100)
    xs, ys = series(result.analysis)
    ax.plot(xs, ys, lw=1, color="tab:red", label="before (profile as given)")
    if result.proof is not None:
        xa, ya = series(result.proof)
        ax.plot(xa, ya, lw=1, color="tab:green", label="after the fix")
    tol = result.rule.rtol
    ax.axhline(tol, ls="--", color="gray", lw=0.8, label=f"tolerance {tol:g}")
    marked = result.culprits or result.ranking[:3]
    for n in marked[:12]:
        e = n.error if math.isfinite(n.error) else 1e3
        ax.scatter([n.index], [max(min(e, 1e3), 1e-12)], color="black", zorder=3, s=18)
        ax.annotate(plot_text(n.name[:28]), (n.index, max(min(e, 1e3), 1e-12)), fontsize=7, rotation=30,
                    xytext=(3, 4), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("node (execution order)")
    ax.set_ylabel("relative L2 error vs float64 (worst output, worst sample)")
    ax.set_title(plot_text(f"{Path(result.model).name}: error along graph depth ({result.profile.name}); "
                           "culprits marked"), fontsize=9)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    with warnings.catch_warnings():  # a name in a script the font lacks (CJK, emoji): a box in the PNG, no stderr
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        fig.tight_layout()
        fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------- html
def render_html(doc: dict, png: bytes | None) -> str:
    e = html.escape
    rows = "".join(f"<tr><td>{c['rank']}</td><td>{e(c['name'])}</td><td>{e(c['op_type'])}</td>"
                   f"<td>{c['own_rel_l2']}</td><td>{c['rel_l2']}</td><td>{'yes' if c['overflow'] else ''}</td>"
                   f"<td>{'yes' if c['in_fix'] else ''}</td></tr>" for c in doc["culprits"])
    rec = doc.get("recommendation")
    fix = "<p>no proven fix</p>" if not rec else (
        "<ul>" + "".join(f"<li>keep_dtype {e(x)}</li>" for x in rec["keep_dtype"])
        + "".join(f"<li>customize_dtypes {e(x)}</li>" for x in rec["customize_dtypes"])
        + "".join(f"<li>fusion_switch_file {e(x)}:off</li>" for x in rec["fusion_off"])
        + "".join(f"<li>modify_mixlist black-list to-add {e(x)}</li>" for x in rec["mixlist_black"])
        + "".join(f"<li>[ByOpType] {e(k)}={e(v)}</li>" for k, v in rec["op_precision"]["ByOpType"].items())
        + "".join(f"<li>[ByNodeName] {e(k)}={e(v)}</li>" for k, v in rec["op_precision"]["ByNodeName"].items())
        + "</ul>")
    img = f'<img alt="error by depth" src="data:image/png;base64,{base64.b64encode(png).decode()}">' if png else ""
    proof = doc.get("proof") or {}
    ba = "".join(f"<tr><td>{e(smp['sample'])}</td><td>{e(o['name'])}</td><td>{o['before']['rel_l2']}</td>"
                 f"<td>{o['after']['rel_l2']}</td><td>{'yes' if o['after']['passed'] else 'no'}</td></tr>"
                 for smp in proof.get("samples", []) for o in smp["outputs"])
    if ba:
        fix += ("<h3>Proof: before / after on every sample</h3><table><tr><th>sample</th><th>output</th>"
                f"<th>rel L2 before</th><th>rel L2 after</th><th>passes</th></tr>{ba}</table>")
    search = doc.get("search") or {}
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>mschecker bisect</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{border:1px solid #ccc;padding:2px 6px}}
table{{border-collapse:collapse}}</style></head><body>
<h1>mschecker bisect: {e(doc['verdict'])}</h1>
<p>model {e(doc['model'])}, profile {e(doc['profile'])}, {e(doc['tolerance']['text'])}</p>
<p>fix search: {search.get('evaluations', '-')} evaluations (bound {search.get('bound', '-')})</p>
<h2>Culprits by own error</h2><table><tr><th>#</th><th>node</th><th>op type</th><th>own rel L2</th>
<th>rel L2</th><th>overflow</th><th>in fix</th></tr>{rows}</table>
<h2>Fix</h2>{fix}{img}
<h2>Report (JSON)</h2><pre>{e(json.dumps(doc, indent=1)[:200000])}</pre></body></html>
"""


def _order_line(ordering, top: int = 5) -> str:
    """The search's candidate order (bisect.priors) and its first items with the priors that moved them."""
    what = {"priors": "own error x priors", "cost": "own error x priors per second of the move"}[ordering.order]
    firsts = []
    for item in ordering.items[:top]:
        flags = ordering.priors[item].flags() if item in ordering.priors else []
        extra = [*flags] + ([_ms(ordering.move_seconds[item])] if item in ordering.move_seconds else [])
        firsts.append(plain(item) + (f" [{', '.join(extra)}]" if extra else ""))
    return f"candidate order: {what}; first: " + "; ".join(firsts)


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g} ms"


def _cost_entry(result: BisectResult) -> dict | None:
    """Estimated device seconds of the profile as given, the fix, and the fix with the fewest moves."""
    front = result.frontier
    if front is None:
        return None
    rec = result.recommendation
    fix = next((p.seconds for p in front.points if rec is not None and p.config == rec.config), None)
    return {"baseline_estimated_seconds": json_float(front.baseline_seconds),
            "fix_estimated_seconds": json_float(fix) if fix is not None else None,
            "fewest_moves_estimated_seconds": json_float(result.cost_of_fewest)}


def _frontier_table(front):
    from rich.table import Table
    from rich.text import Text

    t = Table(title="accuracy-cost frontier (Pareto points; estimated device time relative to the profile as given)")
    for col in ("configuration", "moves", "time", "worst rel L2", "passes"):
        t.add_column(col)
    base = front.baseline_seconds or 1.0
    for p in front.pareto:
        t.add_row(Text(plain(p.purpose)), str(p.changes), f"{p.seconds / base:.3f}x", f"{p.worst_rel_l2:.3g}",
                  "yes" if p.passed else "no")
    return t


def fix_lines(base, fixed) -> list[str]:
    """The ATC settings a fix adds to the profile as given, one per line, in ATC's words."""
    lines = [f"keep_dtype fp32: {plain(e)}" for e in fixed.keep_dtype if e not in base.keep_dtype]
    lines += [f"customize_dtypes: {plain(e)}" for e in fixed.customize_dtypes if e not in base.customize_dtypes]
    lines += [f"op_precision_mode [ByOpType] {plain(k)}={v}" for k, v in fixed.implmode_by_op_type.items()
              if base.implmode_by_op_type.get(k) != v]
    lines += [f"op_precision_mode [ByNodeName] {plain(k)}={v}" for k, v in fixed.implmode_by_node.items()
              if base.implmode_by_node.get(k) != v]
    lines += [f"fusion_switch_file {plain(k)}:{v}" for k, v in fixed.fusion.items() if base.fusion.get(k) != v]
    added = fixed.modify_mixlist.get("black-list", {}).get("to-add", [])
    had = base.modify_mixlist.get("black-list", {}).get("to-add", [])
    lines += [f"modify_mixlist black-list to-add {plain(t)}" for t in added if t not in had]
    return lines


# ------------------------------------------------------------------------------------------- files
def write_outputs(result: BisectResult, out, *, json_report: bool = False, html_report: bool = False,
                  frontier_plot: bool = False) -> dict:
    """Everything into `out` as one set (module docstring): the plot always; the fix files when the verdict is
    FIXED (proven); the JSON and HTML reports when asked; bisect's files of an earlier run that this run does not
    write are removed. Returns kind -> path (also recorded in the JSON). Every byte is built before the first
    write, so a failure (an unplottable name, a full disk) leaves `out` as it was."""
    out = Path(out)
    data: dict[str, bytes] = {}
    files: dict[str, str] = {}
    if result.verdict == "FIXED" and result.recommendation is not None:
        fixed_profile = result.recommendation.fixed
        for kind, blob in fix_files(result.profile, fixed_profile, result.model,
                                    result.onnx_bytes if result.onnx_check and result.onnx_check.ran
                                    else None).items():
            data[FILES[kind]] = blob
            files[kind] = str(out / FILES[kind])
    png = plot_png(result)
    data[PLOT_FILE] = png
    files["plot"] = str(out / PLOT_FILE)
    if result.rescale is not None and result.rescale.used:
        data[RESCALED_FILE] = serialize(result.rescale.model)
        data[RESCALE_REPORT] = ("\n".join(result.rescale.report.lines()) + "\n").encode("utf-8")
        files["rescaled_model"], files["rescale_report"] = str(out / RESCALED_FILE), str(out / RESCALE_REPORT)
    if frontier_plot and result.frontier is not None:
        from mschecker.bisect.frontier import frontier_png  # lazy: start-up (mschecker.bisect.frontier)

        chosen = next((p for p in result.frontier.points if result.recommendation is not None
                       and p.config == result.recommendation.config), None)
        data[FRONTIER_FILE] = frontier_png(result.frontier, chosen)
        files["frontier"] = str(out / FRONTIER_FILE)
    if json_report:
        files["json"] = str(out / JSON_FILE)
    if html_report:
        files["html"] = str(out / HTML_FILE)
    doc = to_dict(result, files)
    if json_report:
        data[JSON_FILE] = (json.dumps(doc, indent=1, allow_nan=False) + "\n").encode("utf-8")
    if html_report:
        data[HTML_FILE] = render_html(doc, png).encode("utf-8")
    write_file_set(out, data, stale=OWN_FILES, prefix=".mschecker-bisect-")
    return files


def output_targets(json_report: bool = False, html_report: bool = False) -> dict[str, str]:
    """File name -> the flag that asks for it, of every file a run may write into --out (the command checks them
    before the search: a directory in the way is exit 2 before minutes of work)."""
    targets = {name: "--out" for name in (*FILES.values(), PLOT_FILE, FRONTIER_FILE, RESCALED_FILE, RESCALE_REPORT)}
    if json_report:
        targets[JSON_FILE] = "--json"
    if html_report:
        targets[HTML_FILE] = "--html"
    return targets


__all__ = ["FILES", "JSON_FILE", "HTML_FILE", "OWN_FILES", "PLOT_FILE", "output_targets", "render_console", "to_dict",
           "write_outputs"]
