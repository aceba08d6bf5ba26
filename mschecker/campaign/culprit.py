"""`campaign bisect`: name the change that made one cell regress between two stored runs.

Three steps, each honest about what it can tell:

1. factors(): what differs between BASE's and RUN's records of the cell (the versions, the model file's sha256,
   the profile hash, the machine facts, the cell's spec hash). Read from the store alone.
2. rerun_here(): the cell is rebuilt from RUN's stored campaign (runs.spec_json, parsed again; relative paths are
   resolved from the current folder) and run now, in this process, with the model file as it is on disk. Its
   metrics are judged against both stored records with compare's own rule (judge_metric: noise 0 on bit-exact
   devices, any change real; the repeats' spread on onnxruntime; [compare] allow) -> reproduces BASE / RUN /
   both / neither. With which factors this environment shares with each record, a single-cause reading names
   the change: the factors that take the reproduced record's value here are the candidates, those that take the
   other record's value are cleared; one candidate left is the cause. A version cannot be switched in-process:
   when the candidates are versions, the report says which environment to run the same command in.
3. bisect_model_repo(): with a git work tree holding the model file, the commits between the one whose blob is
   BASE's model and the one whose blob is RUN's are bisected (binary search, about log2(n) re-runs): each
   revision's model file is written to a temporary folder and the cell is run on it. "Good" = reproduces BASE
   (the same judgement); any departure is "bad" (git bisect's convention). BASE's revision is run first: if this
   environment does not reproduce BASE with BASE's model, the model is not the only change and nothing is
   bisected. Only the model file is taken from each revision (external-data files are not).
4. switch_versions() (`--switch-versions`): a version candidate this process cannot switch (onnxruntime, numpy)
   is installed at the other record's version into an overlay folder (`pip install --no-deps --target`, cached
   per package, version and Python) and the cell is run again in a child interpreter with the overlay first on
   its path (the technique ci/oldest_deps.sh uses), one candidate at a time; the child reports the version it
   imported, so an overlay that did not take effect is said, never counted. The candidate whose switch alone
   reproduces the other record is the cause. mschecker and Python themselves are not switched (another checkout
   or interpreter): the report says where to run the same command.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import math
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mschecker.errors import InputError
from mschecker.campaign.cells import machine_facts, run_cell, versions
from mschecker.campaign.kinds import KINDS
from mschecker.campaign.kinds.base import FINISHED, STATUS_CRASHED, cell_from_dict
from mschecker.campaign.compare import SAME, WORSE, allowance, judge_metric, judged
from mschecker.campaign.spec import Cell, parse_campaign
from mschecker.campaign.store import CellRecord, Store
from mschecker.fsio import file_sha256, os_reason

BASE, RUN, BOTH, NEITHER = "base", "run", "both", "neither"
# Recorded but never a cause: the host name differs between any two machines.
INFORMATIONAL = ("host",)
VERSION_FACTORS = ("mschecker", "onnxruntime", "numpy", "python")


@dataclass
class Factor:
    name: str
    kind: str            # version | machine | model | profile | spec
    base: str | None
    run: str | None
    now: str | None = None       # this environment's value (None: unknown until re-run, or not knowable)

    @property
    def now_is(self) -> str:
        if self.now is None:
            return "unknown"
        return BASE if self.now == self.base else RUN if self.now == self.run else NEITHER

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "base": self.base, "run": self.run, "now": self.now,
                "now_is": self.now_is}


def _samples(store: Store, run_id: str, key: str) -> list[CellRecord]:
    store.run(run_id)  # InputError naming an unknown run id
    recs = store.cells(run_id)
    out = [r for r in recs if r.key == key]
    if not out:
        keys = sorted({r.key for r in recs})
        near = difflib.get_close_matches(key, keys, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f" ({len(keys)} cell(s) in the run)"
        raise InputError(f"--cell {key!r}: not a cell of run {run_id!r} in store {store.path}{hint}")
    return sorted(out, key=lambda r: r.repeat)


def _one(values) -> str | None:
    vals = sorted({str(v) for v in values if v is not None})
    return ",".join(vals) if vals else None


def _record_values(samples: list[CellRecord]) -> dict[str, tuple[str, str | None]]:
    """{factor: (kind, value)} of one run's samples of the cell."""
    out: dict[str, tuple[str, str | None]] = {}
    for name in sorted({k for s in samples for k in s.versions}):
        out[name] = ("version" if name in VERSION_FACTORS else "machine", _one(s.versions.get(name) for s in samples))
    out["model_sha256"] = ("model", _one(s.model_sha256 for s in samples))
    out["profile_hash"] = ("profile", _one(s.profile_hash for s in samples))
    for fact in sorted({k for s in samples for k in s.machine}):
        out[fact] = ("machine", _one(s.machine.get(fact) for s in samples))
    out["spec_hash"] = ("spec", _one(s.spec_hash for s in samples))
    return out


def factors(store: Store, base: str, run: str, key: str) -> list[Factor]:
    """The factors that differ between BASE's and RUN's records of the cell (a machine fact recorded on one side
    only, an older store, is not a difference). InputError naming an unknown run or cell."""
    b, r = _record_values(_samples(store, base, key)), _record_values(_samples(store, run, key))
    out = []
    for name in dict.fromkeys([*b, *r]):
        kind, bv = b.get(name, (r[name][0], None))
        rv = r.get(name, (kind, None))[1]
        if bv == rv or (kind == "machine" and name not in ("cpu", "host") and (bv is None or rv is None)):
            continue
        out.append(Factor(name, kind, bv, rv))
    return out


# ------------------------------------------------------------------------------------------------ re-running
def rebuild_cell(store: Store, run_id: str, key: str) -> tuple[Cell, int]:
    """The cell (repeat 0) rebuilt from the run's stored campaign, and how many samples the run recorded."""
    info = store.run(run_id)
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in info.spec.items()}
    if isinstance(raw.get("campaign"), dict):
        raw["campaign"].pop("expected", None)  # the expected-results file does not change what a cell computes
    try:
        spec = parse_campaign(raw, Path.cwd() / f"{info.campaign}.toml")
    except InputError as exc:
        raise InputError(f"run {run_id!r}: its stored campaign cannot be rebuilt here ({exc}; relative paths are "
                         f"read from the current folder: run bisect from the campaign file's folder)") from None
    cells = [c for c in spec.cells() if c.key == key]
    if not cells:
        raise InputError(f"--cell {key!r}: run {run_id!r}'s stored campaign has no such cell")
    return cells[0], len(cells)


def run_samples(cell: Cell, repeats: int, model: str | None = None) -> list[dict]:
    """Run the cell `repeats` times in this process (model: another model file in place of the cell's)."""
    params = dict(cell.params, model=model) if model is not None else cell.params
    return [run_cell(dataclasses.replace(cell, params=params, repeat=r)) for r in range(repeats)]


@dataclass
class Match:
    """A re-run judged against one stored record of the cell."""

    against: str                    # base | run
    reproduces: bool
    worse: bool                     # worse than the stored record (a regression against it)
    status: tuple[str, str]         # (stored, re-run)
    metrics: list = field(default_factory=list)   # compare.MetricVerdict
    bit_exact: bool = True

    def to_dict(self) -> dict:
        return {"against": self.against, "reproduces": self.reproduces, "worse": self.worse,
                "status": list(self.status), "bit_exact": self.bit_exact,
                "metrics": [m.to_dict() for m in self.metrics]}


def _status(statuses: list[str]) -> str:
    bad = [s for s in statuses if s not in FINISHED]
    return bad[0] if bad else ("fail" if "fail" in statuses else "pass")


def judge(rerun: list[dict], stored: list[CellRecord], against: str, allow: dict, patterns) -> Match:
    """The re-run against stored samples: compare's metric rule; a bit-exact cell whose machine facts differ from
    the record's is judged with noise, as compare does. Reproduces = same status and every judged metric same."""
    now = machine_facts()
    bit_exact = stored[0].bit_exact and not any(
        stored[0].machine.get(k) is not None and str(now.get(k)) != stored[0].machine.get(k) for k in now)
    st = (_status([s.status for s in stored]), _status([r["status"] for r in rerun]))
    if st[1] == STATUS_CRASHED:
        return Match(against, False, False, st, [], bit_exact)
    names = sorted({n for s in stored for n in s.metrics} | {n for r in rerun for n in r["metrics"]})
    metrics = []
    for name in (n for n in names if judged(n, patterns)):
        b = [s.metrics[name] for s in stored if name in s.metrics]
        r = [float(x["metrics"][name]) for x in rerun if name in x["metrics"]]
        if not (b and r):
            metrics.append(judge_metric(name, b or [math.nan], r or [math.nan], bit_exact=True, allow=0.0))
            continue
        metrics.append(judge_metric(name, b, r, bit_exact=bit_exact, allow=allowance(name, allow)))
    worse = (st == ("pass", "fail")) or any(m.verdict == WORSE for m in metrics)
    return Match(against, st[0] == st[1] and all(m.verdict == SAME for m in metrics), worse, st, metrics, bit_exact)


def _reproduces(mb: Match, mr: Match) -> str:
    return BOTH if mb.reproduces and mr.reproduces else BASE if mb.reproduces else RUN if mr.reproduces else NEITHER


@dataclass
class Evaluation:
    label: str                    # "this environment" or a commit
    model_sha256: str | None
    reproduces: str               # base | run | both | neither
    status: str
    reason: str
    vs_base: Match
    vs_run: Match
    subject: str = ""

    @property
    def good(self) -> bool:
        return self.reproduces in (BASE, BOTH)

    def to_dict(self) -> dict:
        return {"label": self.label, "subject": self.subject, "model_sha256": self.model_sha256,
                "reproduces": self.reproduces, "status": self.status, "reason": self.reason,
                "vs_base": self.vs_base.to_dict(), "vs_run": self.vs_run.to_dict()}


@dataclass
class Context:
    store: Store
    base_id: str
    run_id: str
    key: str
    cell: Cell
    repeats: int
    base: list[CellRecord]
    run: list[CellRecord]
    allow: dict
    patterns: list

    def evaluate(self, label: str, model: str | None = None, subject: str = "") -> Evaluation:
        recs = run_samples(self.cell, self.repeats, model)
        mb = judge(recs, self.base, BASE, self.allow, self.patterns)
        mr = judge(recs, self.run, RUN, self.allow, self.patterns)
        return Evaluation(label, recs[0].get("model_sha256"), _reproduces(mb, mr), _status([r["status"] for r in recs]),
                          next((r["reason"] for r in recs if r["reason"]), ""), mb, mr, subject)


def context(store: Store, base_id: str, run_id: str, key: str) -> Context:
    base, run = _samples(store, base_id, key), _samples(store, run_id, key)
    cell, repeats = rebuild_cell(store, run_id, key)
    declared = store.run(run_id).spec.get("compare") or {}
    try:
        allow = {str(k): float(v) for k, v in (declared.get("allow") or {}).items()}
        patterns = [str(p) for p in (declared.get("metrics") or ["*"])]
    except (AttributeError, TypeError, ValueError):
        raise InputError(f"store {store.path}: damaged (run {run_id!r}: runs.spec_json [compare] is not what a "
                         f"campaign file declares)") from None
    return Context(store, base_id, run_id, key, cell, repeats, base, run, allow, patterns)


def _now_values(ctx: Context, ev: Evaluation | None) -> dict[str, str | None]:
    now: dict[str, str | None] = {k: (None if v is None else str(v)) for k, v in versions().items()}
    now.update({k: (None if v is None else str(v)) for k, v in machine_facts().items()})
    kind = KINDS.get(ctx.cell.kind)
    model = kind.model_path(ctx.cell.params) if kind is not None else None
    model = Path(model) if model is not None else None
    if model is not None and model.is_file():
        now["model_sha256"] = file_sha256(model)
    elif ev is not None:
        now["model_sha256"] = ev.model_sha256
    now["spec_hash"] = ctx.cell.spec_hash
    return now


def name_cause(facs: list[Factor], reproduces: str) -> tuple[Factor | None, list[Factor], str]:
    """The single-cause reading of one re-run: (the named factor or None, the remaining candidates, the sentence).
    A factor whose value here is the record reproduced is a candidate; one whose value is the other record's is
    cleared (had it mattered, the re-run would have followed it); an unknown value stays a candidate."""
    relevant = [f for f in facs if f.name not in INFORMATIONAL]
    if reproduces in (NEITHER, BOTH):
        what = ("reproduces neither record" if reproduces == NEITHER else
                "reproduces both records (the regression is within the judging noise here)")
        return None, relevant, f"this environment {what}: the re-run does not separate the factors"
    other = RUN if reproduces == BASE else BASE
    cands = [f for f in relevant if f.now_is != other]
    who = reproduces.upper()
    if not relevant:
        return None, [], (f"this environment reproduces {who}, and no recorded factor differs: the change is in "
                          f"something not recorded (an input or golden file, an unrecorded library)")
    if len(cands) == 1 and cands[0].now_is == reproduces:
        f = cands[0]
        cleared = [g.name for g in relevant if g is not f]
        rest = f"; {', '.join(cleared)} equal to {other.upper()}'s" if cleared else ""
        return f, cands, (f"{_label(f)}: this environment has {who}'s and reproduces {who}{rest} -> the "
                          f"{_label(f)} changed the cell")
    if not cands:
        return None, [], (f"this environment reproduces {who} with every differing factor at {other.upper()}'s "
                          f"value: the change is in something not recorded")
    return None, cands, (f"this environment reproduces {who}; {len(cands)} factor(s) still take {who}'s value or "
                         f"are unknown here ({', '.join(_label(f) for f in cands)}): not separated")


def _label(f: Factor) -> str:
    return {"model_sha256": "model file", "profile_hash": "profile", "spec_hash": "cell parameters"}.get(
        f.name, f.name if f.kind != "version" else f"{f.name} version")


def suggestions(ctx: Context, cands: list[Factor], store_path: str) -> list[str]:
    """How to test the candidates this process cannot switch."""
    out = []
    cmd = (f"mschecker campaign bisect {ctx.base_id} {ctx.run_id} --cell '{ctx.key}' --store {store_path}")
    for f in cands:
        if f.kind == "version" and f.name != "python":
            which = f.base if f.now_is != BASE else f.run
            how = (f"add --switch-versions (installs {f.name}=={which} into an overlay beside this environment), "
                   "or " if f.name in SWITCHABLE else "")
            out.append(f"{f.name} cannot be switched in-process: {how}run `{cmd}` in a virtual environment with "
                       f"{f.name}=={which} (everything else as here)")
        elif f.name == "python":
            out.append(f"python cannot be switched in-process: run `{cmd}` under Python {f.base if f.now_is != BASE else f.run}")
        elif f.kind == "model":
            out.append("model file: give --model-repo DIR (a git work tree holding it) to bisect its revisions, or "
                       "put the other run's model file in place and run again")
        elif f.kind == "machine":
            out.append(f"{f.name}: a machine fact; run the same command on a machine (or with the environment "
                       f"variable) that has {f.base if f.now_is != BASE else f.run}")
        elif f.kind == "profile":
            out.append("profile: the resolved profile differs; restore the other run's profile file and run again")
        elif f.kind == "spec":
            out.append("cell parameters: the campaign's parameters for this cell changed (spec hash); the cell is "
                       "rebuilt from RUN's campaign")
    return out


# ------------------------------------------------------------------------------------------------- versions
SWITCHABLE = ("onnxruntime", "numpy")   # pip distributions an overlay can replace beside this interpreter
INSTALL_TIMEOUT_S = 900                 # a wheel download on a slow registry mirror; a hung one is a failure
WORKER_TIMEOUT_S = 3600                 # one cell's re-runs, as a campaign cell's default timeout


def default_overlay_cache() -> Path:
    import os

    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "mschecker" / "overlays"


def pip_install_target(requirement: str, target: Path) -> None:
    """``pip install --no-deps --target TARGET REQUIREMENT`` with this interpreter's pip (the overlay holds only
    the one distribution; its dependencies come from this environment). InputError with pip's last line."""
    import sys

    try:
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                            "--target", str(target), requirement], capture_output=True, text=True,
                           timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(f"pip install {requirement}: no answer within {INSTALL_TIMEOUT_S} s") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise InputError(f"pip install {requirement}: failed ({last})")


def check_overlay_cache(cache) -> Path:
    """The overlay cache folder, created if missing and writable; InputError naming it otherwise (checked before
    the first re-run, so a bad folder costs no work)."""
    import os


    path = Path(cache)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--overlay-cache {path}: cannot create ({os_reason(exc)})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise InputError(f"--overlay-cache {path}: not writable")
    return path


def overlay_for(package: str, version: str, cache: Path, installer=pip_install_target) -> Path:
    """The overlay folder holding ``package==version`` for this Python, installed once into ``cache`` (built in a
    hidden sibling and renamed into place: an interrupted install leaves no half overlay)."""
    import shutil
    import sys

    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    folder = Path(cache) / f"{package}-{version}-{tag}"
    if folder.is_dir():
        return folder
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=check_overlay_cache(cache)))
    try:
        installer(f"{package}=={version}", tmp)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def run_samples_in(overlays: list[Path], cell: Cell, repeats: int) -> tuple[list[dict], dict]:
    """The cell's re-runs in a child interpreter whose path starts with ``overlays``: (records, the child's
    versions()). The child is this interpreter running ``worker_main``; records travel as JSON."""
    import json
    import os
    import sys

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, overlays), *filter(None, [env.get("PYTHONPATH")])])
    payload = json.dumps({"cell": dataclasses.asdict(cell), "repeats": repeats})
    try:
        r = subprocess.run([sys.executable, "-c", "from mschecker.campaign.culprit import worker_main; worker_main()"],
                           input=payload, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(f"the cell's re-run with {', '.join(map(str, overlays))} gave no answer within "
                         f"{WORKER_TIMEOUT_S} s") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise InputError(f"the cell's re-run with {', '.join(o.name for o in overlays)} failed: {last}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return out["records"], out["versions"]


def worker_main() -> None:
    """The child of run_samples_in: a cell (dataclasses.asdict) and a repeat count on stdin, one JSON line out."""
    import json
    import sys

    job = json.loads(sys.stdin.read())
    cell = cell_from_dict(job["cell"])
    records = [run_cell(dataclasses.replace(cell, repeat=r)) for r in range(job["repeats"])]
    json.dump({"records": records, "versions": versions()}, sys.stdout, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(value):
    import numpy as np

    if isinstance(value, (bytes, bytearray)):
        return None  # fingerprints' packed bytes: not needed to judge the re-run
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


@dataclass
class Switch:
    """One version candidate switched to the other record's value and the cell re-run with it."""

    factor: str
    wanted: str
    imported: str | None          # what the child imported (an overlay that did not take effect differs)
    evaluation: Evaluation | None
    error: str = ""

    @property
    def took_effect(self) -> bool:
        return self.imported == self.wanted

    def to_dict(self) -> dict:
        return {"factor": self.factor, "wanted": self.wanted, "imported": self.imported,
                "took_effect": self.took_effect, "error": self.error,
                "evaluation": self.evaluation.to_dict() if self.evaluation else None}


def switch_versions(ctx: Context, cands: list[Factor], reproduces: str, cache: Path | None = None,
                    installer=pip_install_target, on_eval: Callable[[str], None] | None = None
                    ) -> tuple[Factor | None, list[Switch], str]:
    """Each switchable version candidate set, alone, to the record this environment does not reproduce; the
    one whose switch reproduces that record is the cause. Returns (cause or None, the switches, the sentence)."""
    if reproduces not in (BASE, RUN):
        return None, [], "versions not switched: this environment reproduces neither record alone"
    other = RUN if reproduces == BASE else BASE
    cache = Path(cache) if cache is not None else default_overlay_cache()
    switches = []
    for f in (f for f in cands if f.kind == "version" and f.name in SWITCHABLE):
        wanted = f.run if other == RUN else f.base
        if wanted is None or "," in wanted or f.now == wanted:  # unknown, samples disagree, or already here
            continue
        if on_eval is not None:
            on_eval(f"{f.name}=={wanted}")
        try:
            overlay = overlay_for(f.name, wanted, cache, installer)
            records, child = run_samples_in([overlay], ctx.cell, ctx.repeats)
        except InputError as exc:
            switches.append(Switch(f.name, wanted, None, None, str(exc)))
            continue
        mb = judge(records, ctx.base, BASE, ctx.allow, ctx.patterns)
        mr = judge(records, ctx.run, RUN, ctx.allow, ctx.patterns)
        ev = Evaluation(f"{f.name}=={wanted}", records[0].get("model_sha256"), _reproduces(mb, mr),
                        _status([r["status"] for r in records]), next((r["reason"] for r in records if r["reason"]),
                                                                      ""), mb, mr)
        switches.append(Switch(f.name, wanted, child.get(f.name), ev))
    effective = [s for s in switches if s.took_effect and s.evaluation is not None]
    hits = [s for s in effective if s.evaluation.reproduces == other]
    if len(hits) == 1:
        f = next(c for c in cands if c.name == hits[0].factor)
        return f, switches, (f"{_label(f)}: with {hits[0].wanted} (installed beside this environment, nothing else "
                             f"changed) the cell reproduces {other.upper()} -> the {_label(f)} changed the cell")
    if not switches:
        return None, [], "no version candidate can be switched here (" + ", ".join(SWITCHABLE) + " only)"
    done = "; ".join(f"{s.factor}=={s.wanted}: " + (s.error or (f"imported {s.imported}, not the wanted version"
                                                               if not s.took_effect else
                                                               f"reproduces {s.evaluation.reproduces}"))
                     for s in switches)
    return None, switches, f"switching one version at a time names no single cause ({done})"


# ------------------------------------------------------------------------------------------------- the model repo
def _git(repo: Path, *args: str, binary: bool = False):
    try:
        p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise InputError("--model-repo: git is not on PATH") from None
    if p.returncode != 0:
        msg = (p.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[0]
        raise InputError(f"--model-repo {repo}: git {args[0]}: {msg}")
    return p.stdout if binary else p.stdout.decode(errors="replace")


@dataclass
class Revision:
    commit: str
    subject: str
    model_sha256: str


def model_history(repo: Path, rel: str) -> list[Revision]:
    """The commits that touched `rel`, oldest first, with the sha256 of the file's blob at each (a commit where
    the file is absent is left out)."""
    log = _git(repo, "log", "--reverse", "--format=%H%x09%s", "--", rel)
    by_blob: dict[str, str] = {}
    out = []
    for line in log.splitlines():
        commit, _, subject = line.partition("\t")
        try:
            blob = _git(repo, "rev-parse", f"{commit}:{rel}").strip()
        except InputError:
            continue
        if blob not in by_blob:
            by_blob[blob] = hashlib.sha256(_git(repo, "cat-file", "blob", blob, binary=True)).hexdigest()
        out.append(Revision(commit, subject, by_blob[blob]))
    return out


def _endpoints(revs: list[Revision], base_sha: str, run_sha: str, rel: str, repo: Path) -> tuple[int, int]:
    shas = [r.model_sha256 for r in revs]
    for what, sha in (("BASE", base_sha), ("RUN", run_sha)):
        if sha not in shas:
            raise InputError(f"--model-repo {repo}: {what}'s model sha256 {sha} is not the content of {rel} at any "
                             f"commit of its history ({len(revs)} commit(s))")
    for j, s in enumerate(shas):  # the first RUN revision with a BASE revision before it; that BASE is the last
        if s == run_sha:
            before = [i for i in range(j) if shas[i] == base_sha]
            if before:
                return before[-1], j
    raise InputError(f"--model-repo {repo}: RUN's model of {rel} comes before BASE's in the history (a revert?); "
                     f"bisect needs BASE's revision first")


@dataclass
class BisectResult:
    rel: str
    commits: int                          # revisions between BASE's and RUN's (RUN's included)
    evaluations: list[Evaluation]
    culprit: Revision | None
    culprit_eval: Evaluation | None
    note: str

    def to_dict(self) -> dict:
        return {"model_path": self.rel, "candidates": self.commits, "reruns": len(self.evaluations),
                "evaluations": [e.to_dict() for e in self.evaluations],
                "culprit": None if self.culprit is None else {
                    "commit": self.culprit.commit, "subject": self.culprit.subject,
                    "model_sha256": self.culprit.model_sha256,
                    "reproduces": self.culprit_eval.reproduces if self.culprit_eval else None},
                "note": self.note}


def bisect_model_repo(ctx: Context, repo, rel: str | None = None,
                      on_eval: Callable[[str], None] | None = None) -> BisectResult:
    repo = Path(repo)
    if not repo.is_dir():
        raise InputError(f"--model-repo {repo}: not a folder")
    kind = KINDS.get(ctx.cell.kind)
    if kind is None or kind.model_path(ctx.cell.params) is None:
        raise InputError(f"--model-repo: cell {ctx.key!r} is a {ctx.cell.kind} cell; only check cells read a model file")
    if rel is None:
        top = Path(_git(repo, "rev-parse", "--show-toplevel").strip()).resolve()
        try:
            rel = Path(ctx.cell.params["model"]).resolve().relative_to(top).as_posix()
        except ValueError:
            raise InputError(f"--model-repo {repo}: the cell's model {ctx.cell.params['model']} is not inside the "
                             f"work tree: give --model-path REL") from None
    base_sha, run_sha = ctx.base[0].model_sha256, ctx.run[0].model_sha256
    if not base_sha or not run_sha:
        raise InputError(f"--cell {ctx.key!r}: a run recorded no model sha256: nothing to look up in --model-repo")
    if base_sha == run_sha:
        raise InputError(f"--model-repo: BASE and RUN ran the same model file ({base_sha[:12]}): nothing to bisect")
    revs = model_history(repo, rel)
    lo, hi = _endpoints(revs, base_sha, run_sha, rel, repo)
    span = hi - lo
    evals: list[Evaluation] = []
    name = Path(rel).name
    with tempfile.TemporaryDirectory(prefix="mschecker-bisect-") as tmp:
        def evaluate(i: int) -> Evaluation:
            rev = revs[i]
            if on_eval is not None:
                on_eval(f"{rev.commit[:10]} {rev.subject[:40]}")
            d = Path(tmp) / rev.commit
            d.mkdir()
            (d / name).write_bytes(_git(repo, "show", f"{rev.commit}:{rel}", binary=True))
            ev = ctx.evaluate(rev.commit, str(d / name), rev.subject)
            evals.append(ev)
            return ev

        first = evaluate(lo)
        if not first.good:
            return BisectResult(rel, span, evals, None, None,
                                f"BASE's model (commit {revs[lo].commit[:10]}) does not reproduce BASE here "
                                f"(reproduces {first.reproduces}): the model is not the only change; nothing bisected")
        cache: dict[str, Evaluation] = {revs[lo].model_sha256: first}
        while hi - lo > 1:
            mid = (lo + hi) // 2
            ev = cache.get(revs[mid].model_sha256) or evaluate(mid)
            cache[revs[mid].model_sha256] = ev
            lo, hi = (mid, hi) if ev.good else (lo, mid)
        culprit_eval = cache.get(revs[hi].model_sha256) or evaluate(hi)
    culprit = revs[hi]
    if culprit_eval.good:
        return BisectResult(rel, span, evals, None, culprit_eval,
                            f"RUN's model (commit {culprit.commit[:10]}) reproduces BASE here: the model did not "
                            f"cause the regression in this environment")
    note = (f"first commit that behaves like RUN: {culprit.commit[:10]} {culprit.subject}" if culprit_eval.reproduces
            in (RUN, BOTH) else f"first commit that departs from BASE: {culprit.commit[:10]} {culprit.subject} (it "
            f"does not reproduce RUN exactly: a later commit changed the cell again)")
    return BisectResult(rel, span, evals, culprit, culprit_eval, note)


# ------------------------------------------------------------------------------------------------------- driver
def _profile_now(cell: Cell) -> str | None:
    """The profile hash this environment resolves for the cell (the profile file as it is now)."""
    kind = KINDS.get(cell.kind)
    return kind.profile_hash(cell.params, cell.device) if kind is not None else None


@dataclass
class Report:
    base: str
    run: str
    key: str
    factors: list[Factor]
    here: Evaluation
    cause: Factor | None
    candidates: list[Factor]
    sentence: str
    suggestions: list[str]
    bisect: BisectResult | None = None
    switches: list[Switch] = field(default_factory=list)

    @property
    def named(self) -> bool:
        return self.cause is not None or (self.bisect is not None and self.bisect.culprit is not None)

    @property
    def exit_code(self) -> int:
        return 0 if self.named else 1

    def to_dict(self) -> dict:
        return {"schema_version": 1, "tool": "mschecker campaign bisect", "baseline": self.base, "run": self.run,
                "cell": self.key, "factors": [f.to_dict() for f in self.factors], "rerun": self.here.to_dict(),
                "cause": None if self.cause is None else {"factor": self.cause.name, "sentence": self.sentence},
                "sentence": self.sentence, "candidates": [f.name for f in self.candidates],
                "suggestions": self.suggestions, "bisect": self.bisect.to_dict() if self.bisect else None,
                "switches": [w.to_dict() for w in self.switches],
                "named": self.named, "exit_code": self.exit_code}


def investigate(store: Store, base: str, run: str, key: str, *, model_repo=None, model_path: str | None = None,
                on_eval: Callable[[str], None] | None = None, switch: bool = False, overlay_cache=None,
                installer=pip_install_target) -> Report:
    """factors(), the re-run here, name_cause(); with ``switch`` the version candidates switched one at a time
    (switch_versions); with ``model_repo`` the model's revisions bisected."""
    facs = factors(store, base, run, key)
    ctx = context(store, base, run, key)
    if switch:
        overlay_cache = check_overlay_cache(overlay_cache if overlay_cache is not None else default_overlay_cache())
    if on_eval is not None:
        on_eval("this environment")
    here = ctx.evaluate("this environment")
    now = _now_values(ctx, here)
    now["profile_hash"] = _profile_now(ctx.cell)
    for f in facs:
        f.now = now.get(f.name)
    cause, cands, sentence = name_cause(facs, here.reproduces)
    switches: list[Switch] = []
    if switch and (cause is None or (cause.kind == "version" and cause.name in SWITCHABLE)):
        # a cause named by elimination is confirmed by switching it; otherwise the candidates are tried
        tried = [cause] if cause is not None else cands
        confirmed, switches, switched = switch_versions(ctx, tried, here.reproduces, overlay_cache, installer,
                                                        on_eval)
        if confirmed is not None:
            cause, cands, sentence = confirmed, [confirmed], switched
        elif switches:
            guess = f"; elimination pointed at the {_label(cause)}, which switching did not confirm" if cause else ""
            cause, sentence = None, f"{sentence}{guess}; {switched}"
    report = Report(base, run, key, facs, here, cause, cands, sentence,
                    suggestions(ctx, cands, str(store.path)) if cause is None else [], switches=switches)
    if model_repo is not None:
        report.bisect = bisect_model_repo(ctx, model_repo, model_path, on_eval)
    return report
