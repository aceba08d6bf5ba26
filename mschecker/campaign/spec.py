"""The campaign file (TOML): parsing and validation, and its expansion into independent cells.

A campaign declares a matrix; every combination is one *cell*, the unit the engine runs, the store records and
`compare` judges. Why validate everything here, before a cluster starts: a typo in a key found after an hour of
SD runs is an hour lost, so every key is checked against the known ones (an unknown key is named with the known
ones), every value's type is checked, and every path must exist, with one InputError line naming
`FILE: [[block]] #N "name": key`.

Layout (docs/CAMPAIGN.md has the reference):

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

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mschecker.commands._args import COUNT_MAX, ULP_MAX
from mschecker.errors import InputError
from mschecker.campaign.shipping import check_cell_files

DEVICES = ("ort", "reference", "npu")
# Devices whose results are bit-for-bit reproducible (the graph executor's float64 reference and emulated NPU
# are deterministic by construction, the kernel suite draws derandomized cases): any change is real.
# onnxruntime may pick thread-dependent reduction orders, so its cells are repeated and noise is measured.
BIT_EXACT_DEVICES = frozenset({"reference", "npu"})
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_REPEATS = 3
# Upper bounds on every number that sizes work (a value past them is a typo or hostile, and expanding it would
# exhaust memory before anything runs): repeats are samples for a noise estimate, where a handful suffices;
# examples and topk take the same bound as the kernels / check commands' flags (commands._args.COUNT_MAX);
# seeds are numpy.random.RandomState seeds (the SD check's initial noise and synthetic weights), [0, 2**32 - 1];
# SD steps are bounded by the scheduler's num_train_timesteps (the SD check's own rule, applied here).
REPEATS_MAX = 1000
SEED_MAX = 2**32 - 1
BASELINE_PREVIOUS = "previous"

_CAMPAIGN_KEYS = {"name": str, "baseline": str, "timeout_s": (int, float), "repeats": int, "ship_files": bool,
                  "description": str, "expected": str}
_COMPARE_KEYS = {"allow": dict, "metrics": list}
# apply_knobs' keyword arguments, inline (no file paths: a cell runs on a worker that has only the shipped files)
_NPU_OPTION_KEYS = {"precision_mode": str, "precision_mode_v2": str, "keep_dtype": list, "customize_dtypes": list,
                    "overflow_mode": str, "implmode": str, "optypelist_for_implmode": list,
                    "implmode_by_op_type": dict, "implmode_by_node": dict, "modify_mixlist": dict, "fusion": dict,
                    "bracket": str}
_TOLERANCE_KEYS = {"tolerance": (int, float), "atol": (int, float), "rtol": (int, float), "ulp": int,
                   "cosine": (int, float)}
# mschecker.modelcheck.referee: a second low-precision run as the yardstick (docs/REFEREE.md); a cell's params carry them only
# when given, so a block without them keeps its cells' spec_hash.
_REFEREE_KEYS = {"referee": str, "referee_k": (int, float), "judge": str}
_BLOCK_KEYS = {
    "check": {"name": str, "timeout_s": (int, float), "model": str, "inputs": (str, list), "golden": str,
              "devices": list, "profiles": list, "npu_options": dict, "tolerance": dict, "topk": int,
              **_REFEREE_KEYS},
    "sd": {"name": str, "timeout_s": (int, float), "preset": str, "pipelines": list, "prompts": list, "seeds": list,
           "sizes": list, "negative_prompts": list, "steps": int, "scheduler": str, "guidance_scale": (int, float),
           "guidance_rescale": (int, float), "eta": (int, float), "num_images_per_prompt": int,
           "force_upcast": str, "profiles": list, "npu_options": dict, "stage_options": dict,
           "psnr_min": (int, float), "search_fix": bool, "weights_seed": int, **_REFEREE_KEYS},
    "kernels": {"name": str, "timeout_s": (int, float), "kernels": list, "examples": int},
}
_REQUIRED = {"check": ("name", "model", "inputs", "golden"), "sd": ("name", "prompts"), "kernels": ("name",)}
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "an array",
               dict: "a table"}


@dataclass(frozen=True)
class Cell:
    """One independent unit of work: a check of one kind with fixed parameters.

    key: stable identity across runs (block name + matrix coordinates); params: everything the worker needs
    (JSON-ready; file paths absolute); repeat: the sample index on non-bit-exact devices (0..repeats-1)."""

    key: str
    kind: str
    block: str
    coords: dict
    params: dict
    bit_exact: bool
    device: str
    repeat: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S   # from the cell's start on its worker (not part of spec_hash)

    @property
    def spec_hash(self) -> str:
        """sha256 of what the cell computes (kind + params, paths excluded: file contents are hashed by the
        worker as model_sha256), so a moved file keeps the hash and a changed option changes it."""
        payload = {k: v for k, v in self.params.items() if k not in _PATH_PARAMS}
        return _sha256_json({"kind": self.kind, "params": payload})

    @property
    def task_key(self) -> str:
        return f"{self.key}#{self.repeat}"


_PATH_PARAMS = ("model", "inputs", "golden", "pipeline")


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
        return _sha256_json(self.raw)

    def cells(self) -> list[Cell]:
        """Every cell of the matrix, in file order (the order the engine submits them)."""
        out: list[Cell] = []
        for kind, block in self.blocks:
            out += _EXPAND[kind](block, self.repeats)
        keys = [c.task_key for c in out]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise InputError(f"{self.path}: two cells share the key {dup.rsplit('#', 1)[0]!r} (give the blocks "
                             f"distinct names)")
        return out


def _sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
    _known(raw, {"campaign": dict, "compare": dict, **{k: list for k in _BLOCK_KEYS}}, where)
    if "campaign" not in raw:
        raise InputError(f"{where}: missing the [campaign] table (it needs at least name = \"...\")")
    head = raw["campaign"]
    _known(head, _CAMPAIGN_KEYS, f"{where}: [campaign]")
    if "name" not in head or not head["name"].strip():
        raise InputError(f"{where}: [campaign] name is missing (a non-empty string)")
    timeout = _timeout(head, DEFAULT_TIMEOUT_S, f"{where}: [campaign]")
    repeats = _int_in(head, "repeats", DEFAULT_REPEATS, 1, REPEATS_MAX, f"{where}: [campaign]")
    compare = raw.get("compare", {})
    _known(compare, _COMPARE_KEYS, f"{where}: [compare]")
    allow = {}
    for metric, value in compare.get("allow", {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or math.isinf(value):
            raise InputError(f"{where}: [compare] allow.{metric} must be a finite number >= 0, got {value!r}")
        allow[metric] = float(value)
    judged = _list_of(compare, "metrics", str, f"{where}: [compare]", ["*"])
    spec = CampaignSpec(name=head["name"].strip(), path=path, baseline=head.get("baseline"), timeout_s=timeout,
                        repeats=repeats, ship_files=head.get("ship_files", True), allow=allow, metrics=judged,
                        raw=raw)
    base = path.resolve().parent
    names: set[tuple[str, str]] = set()
    for kind in [k for k in raw if k in _BLOCK_KEYS]:  # in the file's order (of each kind's first block)
        for i, block in enumerate(raw[kind]):
            label = f"{where}: [[{kind}]] #{i + 1}"
            if not isinstance(block, dict):
                raise InputError(f"{label}: must be a table")
            if isinstance(block.get("name"), str):
                label += f" {block['name']!r}"
            _known(block, _BLOCK_KEYS[kind], label)
            for key in _REQUIRED[kind]:
                if key not in block:
                    raise InputError(f"{label}: missing required key {key!r}")
            if (kind, block["name"]) in names:
                raise InputError(f"{label}: another [[{kind}]] block has the same name")
            names.add((kind, block["name"]))
            block = _VALIDATE[kind](dict(block), label, base)
            if kind in ("check", "sd"):
                _validate_referee(block, label)
            block["timeout_s"] = _timeout(block, timeout, label)
            spec.blocks.append((kind, block))
    if not spec.blocks:
        raise InputError(f"{where}: declares no cells (add a [[check]], [[sd]] or [[kernels]] block)")
    if "expected" in head:  # read and matched against the cells now: a typo in a key is found before any run
        from mschecker.campaign.expected import load_expected

        spec.expected = Path(_path(head["expected"], base, f"{where}: [campaign]", "expected"))
        try:
            load_expected(spec.expected).check_cells({c.key for c in spec.cells()}, spec.name)
        except InputError as exc:
            raise InputError(f"{where}: [campaign] expected: {exc}") from None
    return spec


def _int_in(table: dict, key: str, default: int, lo: int, hi: int, where: str) -> int:
    """An integer value (its type checked by _known) in [lo, hi]; InputError naming the key otherwise."""
    value = table.get(key, default)
    if not lo <= value <= hi:
        raise InputError(f"{where}: {key} must be an integer in [{lo}, {hi}], got {_short_int(value)}")
    return value


def _short_int(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def _timeout(table: dict, default: float, where: str) -> float:
    timeout = float(table.get("timeout_s", default))
    if not (math.isfinite(timeout) and timeout > 0):
        raise InputError(f"{where}: timeout_s must be a positive number of seconds, got {table['timeout_s']!r}")
    return timeout


# ------------------------------------------------------------------------------------------------ key checking
def _type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    if types == (int, float):
        return "a number"
    return " or ".join(_TYPE_NAMES[t] for t in types)


def _known(table: dict, keys: dict, where: str) -> None:
    """Unknown keys are named (with the known ones); each known key's value must have its declared type."""
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise InputError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)} (known: {', '.join(sorted(keys))})")
    for key, types in keys.items():
        if key in table and not _is(table[key], types):
            raise InputError(f"{where}: {key} must be {_type_name(types)}, got {_show(table[key])}")


def _is(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):  # TOML booleans are not numbers
        return bool in types
    return isinstance(value, types)


def _show(value) -> str:
    text = json.dumps(value, default=str)
    return f"{type(value).__name__} {text[:60]}"


def _list_of(block: dict, key: str, types, where: str, default: list) -> list:
    values = block.get(key, default)
    if not values:
        raise InputError(f"{where}: {key} must not be empty")
    for j, v in enumerate(values):
        if not _is(v, types):
            raise InputError(f"{where}: {key}[{j}] must be {_type_name(types)}, got {_show(v)}")
    if len(set(map(json.dumps, values))) != len(values):
        raise InputError(f"{where}: {key} lists the same value twice")
    return list(values)


def _path(value: str, base: Path, where: str, key: str) -> str:
    p = Path(value).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.exists():
        raise InputError(f"{where}: {key} {value!r}: {p} does not exist")
    return str(p)


def _profiles(block: dict, where: str) -> list[str]:
    from mschecker.npu.profile import load_profile

    profiles = _list_of(block, "profiles", str, where, ["ascend910b"])
    for j, name in enumerate(profiles):
        try:
            load_profile(name)
        except InputError as exc:
            raise InputError(f"{where}: profiles[{j}]: {exc}") from None
    return profiles


def _npu_options(block: dict, key: str, where: str, table=None) -> dict:
    table = block.get(key, {}) if table is None else table
    _known(table, _NPU_OPTION_KEYS, f"{where}: {key}")
    from mschecker.npu.knobs import apply_knobs

    try:  # the options are checked by the code that will apply them, on the default preset
        apply_knobs("ascend910b", **table)
    except InputError as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
    return dict(table)


# ------------------------------------------------------------------------------------------------ block checks
def _validate_check(block: dict, where: str, base: Path) -> dict:
    block["model"] = _path(block["model"], base, where, "model")
    inputs = block["inputs"]
    items = [inputs] if isinstance(inputs, str) else inputs
    if not items or not all(isinstance(i, str) for i in items):
        raise InputError(f"{where}: inputs must be a path or a non-empty array of paths")
    block["inputs"] = [_path(i, base, where, "inputs") for i in items]
    block["golden"] = _path(block["golden"], base, where, "golden")
    block["devices"] = _list_of(block, "devices", str, where, ["ort"])
    for j, d in enumerate(block["devices"]):
        if d not in DEVICES:
            raise InputError(f"{where}: devices[{j}] {d!r} is not one of {', '.join(DEVICES)}")
    block["profiles"] = _profiles(block, where) if "npu" in block["devices"] else []
    block["npu_options"] = _npu_options(block, "npu_options", where)
    tol = block.get("tolerance", {})
    _known(tol, _TOLERANCE_KEYS, f"{where}: tolerance")
    from mschecker.compare import ToleranceRule

    try:
        ToleranceRule.from_args(**tol)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    if "ulp" in tol:
        _int_in(tol, "ulp", 0, 0, ULP_MAX, f"{where}: tolerance")
    block["tolerance"] = dict(tol)
    block["topk"] = _int_in(block, "topk", 5, 0, COUNT_MAX, where)
    try:  # the model's external data by the graph loader's rule, every shipped file a regular file
        check_cell_files(block)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return block


def _validate_sd(block: dict, where: str, base: Path) -> dict:
    from mschecker.sd.folder import FORCE_UPCAST, NUM_IMAGES_MAX, SIZE_MAX, XL_STAGES
    from mschecker.sd.presets import PRESET_NAMES
    from mschecker.sd.scheduler import SCHEDULERS, make_scheduler

    if "pipelines" in block:  # diffusers ONNX folders, an axis; read by path on the workers (GBs: not shipped)
        if "preset" in block:
            raise InputError(f"{where}: give preset or pipelines, not both")
        written = _list_of(block, "pipelines", str, where, [])
        block["pipeline_paths"] = {w: _path(w, base, where, "pipelines") for w in written}
        for w, path in block["pipeline_paths"].items():
            if not Path(path).is_dir():
                raise InputError(f"{where}: pipelines {w!r}: {path} is not a folder")
    else:
        block.setdefault("preset", "small")
        if block["preset"] not in PRESET_NAMES:
            raise InputError(f"{where}: preset {block['preset']!r} is not one of {', '.join(PRESET_NAMES)}")
    block["prompts"] = _list_of(block, "prompts", str, where, [])
    if "sizes" in block:  # [height, width] px pairs; the pipeline checks them against its VAE factor when it runs
        sizes = _list_of(block, "sizes", list, where, [])
        for j, size in enumerate(sizes):
            if len(size) != 2 or not all(_is(v, int) and 1 <= v <= SIZE_MAX for v in size):
                raise InputError(f"{where}: sizes[{j}] must be [height, width] in px, integers in [1, {SIZE_MAX}], "
                                 f"got {_show(size)}")
    if "negative_prompts" in block:
        _list_of(block, "negative_prompts", str, where, [])
    _int_in(block, "num_images_per_prompt", 1, 1, NUM_IMAGES_MAX, where)
    for key in ("guidance_rescale", "eta"):  # both in [0, 1]: mschecker.sd.pipeline / scheduler say why
        if key in block and not 0.0 <= block[key] <= 1.0:
            raise InputError(f"{where}: {key} must be in [0, 1], got {block[key]!r}")
    if block.get("force_upcast", "config") not in FORCE_UPCAST:
        raise InputError(f"{where}: force_upcast must be one of {', '.join(FORCE_UPCAST)}, got "
                         f"{block['force_upcast']!r}")
    block["seeds"] = _list_of(block, "seeds", int, where, [0])
    for j, seed in enumerate(block["seeds"]):
        if not 0 <= seed <= SEED_MAX:
            raise InputError(f"{where}: seeds[{j}] must be an integer in [0, {SEED_MAX}], got {_short_int(seed)}")
    _int_in(block, "weights_seed", 0, 0, SEED_MAX, where)
    if block.get("scheduler", "ddim") not in SCHEDULERS:
        raise InputError(f"{where}: scheduler must be one of {', '.join(SCHEDULERS)}, got {block['scheduler']!r}")
    steps = block.get("steps", 10)
    if steps < 1:
        raise InputError(f"{where}: steps must be >= 1, got {steps}")
    try:  # the SD check's own rule: no more steps than the scheduler's num_train_timesteps
        make_scheduler(block.get("scheduler", "ddim"), steps)
    except InputError as exc:
        raise InputError(f"{where}: steps: {exc}") from None
    for key in ("guidance_scale", "psnr_min"):
        if key in block and not math.isfinite(block[key]):
            raise InputError(f"{where}: {key} must be finite")
    block["profiles"] = _profiles(block, where)
    block["npu_options"] = _npu_options(block, "npu_options", where)
    stages = block.get("stage_options", {})
    for stage, table in stages.items():
        if stage not in XL_STAGES:
            raise InputError(f"{where}: stage_options: unknown stage {stage!r} (known: {', '.join(XL_STAGES)})")
        if not isinstance(table, dict):
            raise InputError(f"{where}: stage_options.{stage} must be a table")
        _npu_options(block, f"stage_options.{stage}", where, table)
    block["stage_options"] = {k: dict(v) for k, v in stages.items()}
    return block


def _validate_referee(block: dict, where: str) -> None:
    """referee / referee_k / judge checked by mschecker.modelcheck.referee's own parsers (the flags' rules). A folder of
    outputs (dir:) is refused: cells run on workers that are shipped the model, inputs and goldens only."""
    from mschecker.modelcheck.referee import check_judge, check_k, parse_side

    if "referee" not in block:
        for key in ("referee_k", "judge"):
            if key in block:
                raise InputError(f"{where}: {key} needs referee")
        return
    try:
        side = parse_side(block["referee"], flag="referee")
        if not hasattr(side, "prepare"):
            raise InputError(f"referee {block['referee']!r}: a folder of outputs is not shipped to the workers; "
                             "give ort-fp16 or ort:<ExecutionProvider>")
        block["referee"] = side.spec
        if "referee_k" in block:
            block["referee_k"] = check_k(block["referee_k"], "referee_k")
        if "judge" in block:
            check_judge(block["judge"], "judge")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _referee_params(block: dict) -> dict:
    return {k: block[k] for k in _REFEREE_KEYS if k in block}


def _validate_kernels(block: dict, where: str, base: Path) -> dict:
    from mschecker.kernels.suite import resolve_kernels

    names = _list_of(block, "kernels", str, where, []) if "kernels" in block else []  # none listed: all
    try:
        block["kernels"] = [k.name for k in resolve_kernels(names)]
    except KeyError as exc:
        raise InputError(f"{where}: kernels: {exc.args[0]}") from None
    block["examples"] = _int_in(block, "examples", 20, 1, COUNT_MAX, where)
    return block


_VALIDATE = {"check": _validate_check, "sd": _validate_sd, "kernels": _validate_kernels}


# ------------------------------------------------------------------------------------------------- expansion
def cell_key(block: str, coords: dict) -> str:
    """`block | k=v | ...` in the order the coordinates are declared; values as TOML would write them."""
    return " | ".join([block] + [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in coords.items()])


def _repeats(device: str, repeats: int) -> range:
    return range(1 if device in BIT_EXACT_DEVICES else repeats)


def _expand_check(block: dict, repeats: int) -> list[Cell]:
    out = []
    for device in block["devices"]:
        for profile in (block["profiles"] if device == "npu" else [None]):
            coords = {"device": device} | ({"profile": profile} if profile else {})
            params = {"model": block["model"], "inputs": block["inputs"], "golden": block["golden"],
                      "device": device, "profile": profile,
                      "npu_options": block["npu_options"] if device == "npu" else {},
                      "tolerance": block["tolerance"], "topk": block["topk"], **_referee_params(block)}
            key = cell_key(block["name"], coords)
            out += [Cell(key, "check", block["name"], coords, params, device in BIT_EXACT_DEVICES, device, r,
                         block["timeout_s"]) for r in _repeats(device, repeats)]
    return out


def _expand_sd(block: dict, repeats: int) -> list[Cell]:
    """One cell per (pipeline, prompt, seed, size, negative prompt, profile); an axis the block does not declare
    is left out of the coordinates, so a campaign's cell keys do not change when later versions add axes."""
    import itertools

    pipelines = list(block.get("pipeline_paths", {}).items()) or [(None, None)]
    axes = [("pipeline", pipelines), ("prompt", block["prompts"]), ("seed", block["seeds"]),
            ("size", block.get("sizes", [None])), ("negative_prompt", block.get("negative_prompts", [None])),
            ("profile", block["profiles"])]
    declared = {"pipeline": "pipelines" in block, "size": "sizes" in block,
                "negative_prompt": "negative_prompts" in block}
    out = []
    for values in itertools.product(*(v for _, v in axes)):
        point = dict(zip((k for k, _ in axes), values))
        written, path = point["pipeline"]
        coords = {k: (written if k == "pipeline" else v) for k, v in point.items() if declared.get(k, True)}
        size = point["size"]
        params = {"prompt": point["prompt"], "seed": point["seed"], "profile": point["profile"],
                  **({"pipeline": path} if path else {"preset": block["preset"]}),
                  "steps": block.get("steps", 10), "scheduler": block.get("scheduler", "ddim"),
                  "guidance_scale": float(block.get("guidance_scale", 7.5)),
                  "npu_options": block["npu_options"], "stage_options": block["stage_options"],
                  "psnr_min": float(block.get("psnr_min", 30.0)),
                  "search_fix": block.get("search_fix", False),
                  "weights_seed": block.get("weights_seed", 0)}
        # the newer call arguments only where they differ from diffusers' defaults: an older campaign's cells
        # keep their spec_hash, so compare does not call them changed
        generation = {"negative_prompt": point["negative_prompt"],
                      "num_images_per_prompt": block.get("num_images_per_prompt", 1),
                      "height": size[0] if size else None, "width": size[1] if size else None,
                      "guidance_rescale": float(block.get("guidance_rescale", 0.0)),
                      "eta": float(block.get("eta", 0.0))}
        defaults = {"negative_prompt": None, "num_images_per_prompt": 1, "height": None, "width": None,
                    "guidance_rescale": 0.0, "eta": 0.0}
        generation = {k: v for k, v in generation.items() if v != defaults[k]}
        if generation:
            params["generation"] = generation
        if block.get("force_upcast", "config") != "config":
            params["force_upcast"] = block["force_upcast"]
        params.update(_referee_params(block))
        out.append(Cell(cell_key(block["name"], coords), "sd", block["name"], coords, params, True, "npu",
                        0, block["timeout_s"]))
    return out


def _expand_kernels(block: dict, repeats: int) -> list[Cell]:
    return [Cell(cell_key(block["name"], {"kernel": k}), "kernels", block["name"], {"kernel": k},
                 {"kernel": k, "examples": block["examples"]}, True, "kernels", 0, block["timeout_s"])
            for k in block["kernels"]]


_EXPAND = {"check": _expand_check, "sd": _expand_sd, "kernels": _expand_kernels}


def cell_from_dict(d: dict[str, Any]) -> Cell:
    """The inverse of dataclasses.asdict(cell) (cells travel to workers and into the store as plain data)."""
    return Cell(**{k: d[k] for k in ("key", "kind", "block", "coords", "params", "bit_exact", "device", "repeat",
                                     "timeout_s")})
