"""What every campaign cell kind shares: the cell, the record statuses, the metric declarations and the
`CellKind` protocol itself.

It sits below spec, cells, engine, report and compare (they dispatch through `mschecker.campaign.kinds.KINDS`)
and above nothing of the campaign but the validation helpers, so a kind module never imports the modules that
dispatch to it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS_PASS, STATUS_FAIL, STATUS_CRASHED, STATUS_TIMEOUT, STATUS_KILLED = "pass", "fail", "crashed", "timeout", "killed"
FINISHED = (STATUS_PASS, STATUS_FAIL)      # a resumed run skips these; the others are run again
DEFAULT_TIMEOUT_S = 3600.0
# Devices whose results are bit-for-bit reproducible (the graph executor's float64 reference and emulated NPU
# are deterministic by construction, the kernel suite draws derandomized cases): any change is real.
# onnxruntime may pick thread-dependent reduction orders, so its cells are repeated and noise is measured.
BIT_EXACT_DEVICES = frozenset({"reference", "npu"})
# Params holding file paths: left out of spec_hash (the worker hashes the files' contents as model_sha256).
PATH_PARAMS = ("model", "inputs", "golden", "pipeline")


@dataclass(frozen=True)
class MetricInfo:
    """One metric a kind records, declared where the kind computes it, so `compare` reads its direction instead
    of guessing it from the name. name: the metric's last dotted part (`logits.cosine` -> `cosine`); unit: for a
    reader ("" for a ratio or a flag)."""

    name: str
    higher_is_better: bool
    unit: str = ""


# mschecker.modelcheck.referee.RefereeVerdict.metrics(): what a check or sd cell with a referee records.
REFEREE_METRICS = (MetricInfo("referee_ratio", False), MetricInfo("referee_pass", True))


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
        payload = {k: v for k, v in self.params.items() if k not in PATH_PARAMS}
        return sha256_json({"kind": self.kind, "params": payload})

    @property
    def task_key(self) -> str:
        return f"{self.key}#{self.repeat}"


def sha256_json(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cell_key(block: str, coords: dict) -> str:
    """`block | k=v | ...` in the order the coordinates are declared; values as TOML would write them."""
    return " | ".join([block] + [f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in coords.items()])


def cell_from_dict(d: dict[str, Any]) -> Cell:
    """The inverse of dataclasses.asdict(cell) (cells travel to workers and into the store as plain data)."""
    return Cell(**{k: d[k] for k in ("key", "kind", "block", "coords", "params", "bit_exact", "device", "repeat",
                                     "timeout_s")})


def repeats_on(device: str, repeats: int) -> range:
    """The sample indexes of a cell on `device`: one on a bit-exact device, `repeats` elsewhere."""
    return range(1 if device in BIT_EXACT_DEVICES else repeats)


def profile_hash(profile: str | None, options: dict, stage_options: dict | None = None) -> str | None:
    """sha256 of the resolved numerics profile(s) the cell ran with (preset + options, per SD stage), so a
    preset file edited between runs shows up even when its name did not change."""
    if profile is None:
        return None
    # lazy: start-up (mschecker.npu)
    from mschecker.npu.knobs import apply_knobs  # here: the NPU emulator loads only for cells with a profile

    if stage_options is None:
        return _sha256_default(apply_knobs(profile, **options).to_dict())
    # lazy: start-up (google.protobuf, onnx, mschecker._fastfp16)
    from mschecker.sd.check import stage_npu_options  # here: only sd cells load mschecker.sd

    per_stage = stage_npu_options(options, stage_options)
    return _sha256_default({s: apply_knobs(profile, **o).to_dict() for s, o in per_stage.items()})


def _sha256_default(obj) -> str:
    """The profile hash's own JSON form (default separators, str() for the rest): stored hashes depend on it."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def referee_side(params: dict):
    """The cell's referee side (mschecker.modelcheck.referee.parse_side of its ``referee`` param), None without one."""
    if "referee" not in params:
        return None
    # lazy: start-up (mschecker.modelcheck, mschecker.untrusted)
    from mschecker.modelcheck.referee import parse_side  # here: only cells with a referee load it

    return parse_side(params["referee"], flag="referee")


class CellKind:
    """A campaign cell kind: a `[[name]]` table of the campaign file, its cells, and what the campaign does with
    them. Register an instance in `mschecker.campaign.kinds.KINDS`; spec, cells, engine, report and compare ask
    the table, never the kind's name.

    name: the TOML table and Cell.kind (stored with every cell: never rename one); keys: the block's keys and
    their types (mschecker.campaign.validation.check_keys); required: the keys a block must give; metrics: every
    metric its records carry (by last dotted part); headline: (metric, caption) plotted per group in the HTML."""

    name: str = ""
    keys: dict = {}
    required: tuple[str, ...] = ("name",)
    metrics: tuple[MetricInfo, ...] = ()
    headline: tuple[str, str] = ("", "")

    def validate(self, block: dict, where: str, base: Path) -> dict:
        """The block (a copy, its keys and types already checked) validated and normalised; InputError naming
        `where` and the key otherwise."""
        raise NotImplementedError

    def expand(self, block: dict, repeats: int) -> list[Cell]:
        """Every cell of a validated block, in the order the engine submits them."""
        raise NotImplementedError

    def run(self, cell: Cell, params: dict) -> dict:
        """Run one cell on a worker (params: the cell's, with shipped paths made local) and return the record's
        fields: status, reason, metrics, detail, profile_hash, model_sha256 and, optionally, fingerprints."""
        raise NotImplementedError

    def shipped_files(self, params: dict) -> list[Path]:
        """Every file the cell reads that the engine sends to the workers (none: they read what they need)."""
        return []

    def declared_paths(self, params: dict) -> list[str]:
        """The params' own paths among the shipped files (what a worker maps to its local copies)."""
        return []

    def localize(self, params: dict, local: dict[str, str]) -> dict:
        """params with the declared paths replaced by the worker's copies ({declared path: local path})."""
        return params

    def headline_value(self, values: list[float]) -> float:
        """One cell's headline from the values of its headline metric (one per output or variant): the worst."""
        return max(values)

    def group_label(self, block: str, coords: dict) -> str:
        """The group a cell's headline is plotted in (the HTML's history plots)."""
        return block

    def aggregate(self, values: list[float]) -> float:
        """A group's value from its cells' headlines (the HTML's history plots): the mean."""
        return sum(values) / len(values)

    def profile_hash(self, params: dict, device: str) -> str | None:
        """The profile hash this environment resolves for the cell (culprit: the profile file as it is now)."""
        return None

    def model_path(self, params: dict) -> str | None:
        """The model file the cell reads (culprit hashes it now and bisects a model repository over it); None:
        the cell reads no model file of its own."""
        return None
