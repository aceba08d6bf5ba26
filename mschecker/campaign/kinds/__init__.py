"""The campaign's cell kinds, registered once: `KINDS` maps a kind's name (its `[[table]]` in the campaign file
and `Cell.kind` in the store) to the object that validates, expands, runs, ships, plots and declares the metrics
of its cells (mschecker.campaign.kinds.base.CellKind). spec, cells, engine, report and compare dispatch through
this table; a new kind is one module here and one entry below (CONTRIBUTING.md: "Add a campaign cell kind").
"""
from __future__ import annotations

from mschecker.campaign.kinds.base import CellKind, MetricInfo
from mschecker.campaign.kinds.check import CheckKind
from mschecker.campaign.kinds.kernels import KernelsKind
from mschecker.campaign.kinds.sd import SDKind
from mschecker.errors import InputError

KINDS: dict[str, CellKind] = {kind.name: kind for kind in (CheckKind(), SDKind(), KernelsKind())}


def declared_metrics() -> dict[str, MetricInfo]:
    """Every registered kind's metrics by name (the first kind's declaration where two declare one name; a test
    holds them to agree, since compare reads a direction without the kind)."""
    table: dict[str, MetricInfo] = {}
    for kind in KINDS.values():
        for info in kind.metrics:
            table.setdefault(info.name, info)
    return table


def metric_info(metric: str) -> MetricInfo:
    """The declaration of a recorded metric, by its last dotted part (`logits.cosine` -> `cosine`). A name no kind
    declares is an error, never a guess: its direction would decide verdicts."""
    table = declared_metrics()
    info = table.get(metric.rsplit(".", 1)[-1])
    if info is None:
        raise InputError(f"metric {metric!r}: no campaign cell kind declares it (mschecker.campaign.kinds; "
                         f"declared: {', '.join(sorted(table))})")
    return info
