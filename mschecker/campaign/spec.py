"""The campaign file (TOML): parsing and validation, and its expansion into independent cells.

A campaign declares a matrix; every combination is one *cell*, the unit the engine runs, the store records and
`compare` judges. Why validate everything here, before a cluster starts: a typo in a key found after an hour of
SD runs is an hour lost, so every key is checked against the known ones (an unknown key is named with the known
ones), every value's type is checked, and every path must exist, with one InputError line naming
`FILE: [[block]] #N "name": key`.

Layout (docs/CAMPAIGN.md has the reference; each block's keys are its kind's, mschecker.campaign.kinds.KINDS):

    [campaign]  name (required), baseline ("previous" | a run id), timeout_s, repeats, ship_files,
                expected (an expected-results file, relative to the campaign file: mschecker.campaign.expected)
    [compare]   allow = {metric = allowed worsening}, metrics = [judged metric patterns]
    [[check]]   name, timeout_s, model, inputs, golden, devices, profiles, npu_options, tolerance, topk,
                referee, referee_k, judge
    [[sd]]      name, timeout_s, preset | pipelines, prompts, seeds, sizes, negative_prompts, steps, scheduler,
                guidance_scale, guidance_rescale, eta, num_images_per_prompt, force_upcast, profiles,
                npu_options, stage_options, psnr_min, search_fix, weights_seed, referee, referee_k, judge
    [[kernels]] name, timeout_s, kernels, examples

Paths are relative to the campaign file's folder. Cell keys are built from the block name and the matrix
coordinates only (never from file paths or options), so the same cell keeps its key when the file moves; what
a cell computes (its full parameters) is hashed separately (`Cell.spec_hash`) so that `compare` can tell a
changed cell from a regressed one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from mschecker.campaign.expected import load_expected
from mschecker.campaign.kinds import KINDS
from mschecker.campaign.kinds.base import DEFAULT_TIMEOUT_S, Cell, sha256_json
from mschecker.campaign.validation import check_keys, existing_path, int_in, list_of, timeout_of
from mschecker.errors import InputError

DEFAULT_REPEATS = 3
# Upper bounds on every number that sizes work (a value past them is a typo or hostile, and expanding it would
# exhaust memory before anything runs): repeats are samples for a noise estimate, where a handful suffices;
# examples and topk take the same bound as the kernels / check commands' flags (mschecker.limits.COUNT_MAX);
# seeds and SD steps are bounded by the sd kind (mschecker.campaign.kinds.sd.SEED_MAX, the scheduler's rule).
REPEATS_MAX = 1000
BASELINE_PREVIOUS = "previous"

_CAMPAIGN_KEYS = {"name": str, "baseline": str, "timeout_s": (int, float), "repeats": int, "ship_files": bool,
                  "description": str, "expected": str}
_COMPARE_KEYS = {"allow": dict, "metrics": list}


@dataclass
class CampaignSpec:
    """A validated campaign file."""

    name: str
    path: Path
    baseline: str | None
    timeout_s: float
    repeats: int
    ship_files: bool
    allow: dict[str, float]
    metrics: list[str]                                              # fnmatch patterns of the judged metrics
    blocks: list[tuple[str, dict]] = field(default_factory=list)   # (kind, validated block) in file order
    raw: dict = field(default_factory=dict)
    expected: Path | None = None    # [campaign] expected: the expected-results file (validated against the cells)

    @property
    def sha256(self) -> str:
        return sha256_json(self.raw)

    def cells(self) -> list[Cell]:
        """Every cell of the matrix, in file order (the order the engine submits them)."""
        out: list[Cell] = []
        for kind, block in self.blocks:
            out += KINDS[kind].expand(block, self.repeats)
        keys = [c.task_key for c in out]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise InputError(f"{self.path}: two cells share the key {dup.rsplit('#', 1)[0]!r} (give the blocks "
                             f"distinct names)")
        return out


def load_campaign(path) -> CampaignSpec:
    """Read and validate a campaign file; InputError naming the file and the key on any problem."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"campaign file {path}: not found" if not path.exists() else
                         f"campaign file {path}: not a regular file")
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"campaign file {path}: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"campaign file {path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"campaign file {path}: not valid TOML ({exc})") from None
    return parse_campaign(raw, path)


def parse_campaign(raw: dict, path: Path) -> CampaignSpec:
    """Validate a parsed campaign table (see the module docstring for the layout)."""
    where = str(path)
    check_keys(raw, {"campaign": dict, "compare": dict, **{k: list for k in KINDS}}, where)
    spec = _parse_head(raw, path)
    _parse_blocks(raw, spec)
    if not spec.blocks:
        tables = [f"[[{k}]]" for k in KINDS]
        raise InputError(f"{where}: declares no cells (add a {', '.join(tables[:-1])} or {tables[-1]} block)")
    if "expected" in raw["campaign"]:  # read and matched against the cells now: a typo in a key is found before any run
        _check_expected(raw["campaign"]["expected"], spec)
    return spec


def _parse_head(raw: dict, path: Path) -> CampaignSpec:
    """The [campaign] and [compare] tables: the spec without its blocks."""
    where = str(path)
    if "campaign" not in raw:
        raise InputError(f"{where}: missing the [campaign] table (it needs at least name = \"...\")")
    head = raw["campaign"]
    check_keys(head, _CAMPAIGN_KEYS, f"{where}: [campaign]")
    if "name" not in head or not head["name"].strip():
        raise InputError(f"{where}: [campaign] name is missing (a non-empty string)")
    timeout = timeout_of(head, DEFAULT_TIMEOUT_S, f"{where}: [campaign]")
    repeats = int_in(head, "repeats", DEFAULT_REPEATS, 1, REPEATS_MAX, f"{where}: [campaign]")
    compare = raw.get("compare", {})
    check_keys(compare, _COMPARE_KEYS, f"{where}: [compare]")
    allow = {}
    for metric, value in compare.get("allow", {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
            raise InputError(f"{where}: [compare] allow.{metric} must be a finite number >= 0, got {value!r}")
        allow[metric] = float(value)
    judged = list_of(compare, "metrics", str, f"{where}: [compare]", ["*"])
    return CampaignSpec(name=head["name"].strip(), path=path, baseline=head.get("baseline"), timeout_s=timeout,
                        repeats=repeats, ship_files=head.get("ship_files", True), allow=allow, metrics=judged,
                        raw=raw)


def _parse_blocks(raw: dict, spec: CampaignSpec) -> None:
    """Every [[kind]] block, validated by its kind, appended to spec.blocks in the file's order (of each kind's
    first block)."""
    where = str(spec.path)
    base = spec.path.resolve().parent
    names: set[tuple[str, str]] = set()
    for name in [k for k in raw if k in KINDS]:
        kind = KINDS[name]
        for i, block in enumerate(raw[name]):
            label = f"{where}: [[{name}]] #{i + 1}"
            if not isinstance(block, dict):
                raise InputError(f"{label}: must be a table")
            if isinstance(block.get("name"), str):
                label += f" {block['name']!r}"
            check_keys(block, kind.keys, label)
            for key in kind.required:
                if key not in block:
                    raise InputError(f"{label}: missing required key {key!r}")
            if (name, block["name"]) in names:
                raise InputError(f"{label}: another [[{name}]] block has the same name")
            names.add((name, block["name"]))
            block = kind.validate(dict(block), label, base)
            block["timeout_s"] = timeout_of(block, spec.timeout_s, label)
            spec.blocks.append((name, block))


def _check_expected(written: str, spec: CampaignSpec) -> None:
    """[campaign] expected: the expected-results file, its cell keys matched against the campaign's cells."""
    where = str(spec.path)
    spec.expected = Path(existing_path(written, spec.path.resolve().parent, f"{where}: [campaign]", "expected"))
    try:
        load_expected(spec.expected).check_cells({c.key for c in spec.cells()}, spec.name)
    except InputError as exc:
        raise InputError(f"{where}: [campaign] expected: {exc}") from None
