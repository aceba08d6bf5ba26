"""`[[kernels]]` cells: the kernel suite (mschecker.kernels.suite.run_suite) for one kernel each, every variant and
every planted bug, derandomized (bit-exact).

A kernels cell records its variants' outputs' fingerprints (KernelFingerprints; mschecker.campaign.cells says
what and why).
"""
from __future__ import annotations

from pathlib import Path

from mschecker.campaign.fingerprints import FingerprintSum, NodeFingerprint, pack
from mschecker.campaign.kinds.base import STATUS_FAIL, STATUS_PASS, Cell, CellKind, MetricInfo, cell_key
from mschecker.campaign.validation import int_in, list_of
from mschecker.errors import InputError
from mschecker.limits import COUNT_MAX

# What a kernels cell records per variant (_run_kernels): <variant>.caught for a planted bug, the others for a
# real variant.
VARIANT_METRICS = (MetricInfo("caught", True), MetricInfo("error_ratio", False), MetricInfo("max_abs_err", False),
                   MetricInfo("ulp_p99", False, "ulp"))


class KernelsKind(CellKind):
    name = "kernels"
    keys = {"name": str, "timeout_s": (int, float), "kernels": list, "examples": int}
    required = ("name",)
    metrics = VARIANT_METRICS
    headline = ("error_ratio", "worst error / bound over variants, max over kernels")

    def validate(self, block: dict, where: str, base: Path) -> dict:
        # lazy: start-up (hypothesis, mschecker.kernels)
        from mschecker.kernels.suite import resolve_kernels  # here: only a campaign with kernels blocks pays

        names = list_of(block, "kernels", str, where, []) if "kernels" in block else []  # none listed: all
        try:
            block["kernels"] = [k.name for k in resolve_kernels(names)]
        except KeyError as exc:
            raise InputError(f"{where}: kernels: {exc.args[0]}") from None
        block["examples"] = int_in(block, "examples", 20, 1, COUNT_MAX, where)
        return block

    def expand(self, block: dict, repeats: int) -> list[Cell]:
        return [Cell(cell_key(block["name"], {"kernel": k}), "kernels", block["name"], {"kernel": k},
                     {"kernel": k, "examples": block["examples"]}, True, "kernels", 0, block["timeout_s"])
                for k in block["kernels"]]

    def run(self, cell: Cell, params: dict) -> dict:
        return _run_kernels(params)

    def aggregate(self, values: list[float]) -> float:
        return max(values)   # the worst kernel of the group


class KernelFingerprints:
    """run_suite's on_outputs hook recording a kernels cell's fingerprints: one per (variant, case group, output
    index), in the suite's order, keyed "<kernel>/<variant>/<group>:<output>", over the variant's outputs on every
    case of the group, in order (fingerprints.FingerprintSum: as one tensor; the hash over each case's bytes).
    The group is the case's strategy ("generic", "tails", ...; kernels.suite.kernel_cases labels each case
    "<strategy>: ..."), "golden" for the golden cases, "search" for the case a planted bug's targeted search
    found. Per group rather than per case: ~100 cases a variant would be 10-20x the rows, and the group already
    says which variant on which kind of input moved (the suite's own report names the case). Each output is
    fingerprinted as the hook gets it and not kept."""

    def __init__(self):
        self._sums: dict[tuple[str, int], object] = {}   # (node, output) -> FingerprintSum, in first-seen order
        self._groups: dict[str, set[str]] = {}           # kernel -> its strategies and "golden"

    def __call__(self, kernel: str, variant: str, case, outputs: tuple) -> None:
        # lazy: start-up (mschecker.kernels)
        from mschecker.kernels.registry import get_kernel  # here: the registry imports every kernel entry

        if kernel not in self._groups:
            self._groups[kernel] = {*get_kernel(kernel).strategies, "golden"}
        prefix = (case.label or "").split(": ", 1)[0]   # a searched case's own label may hold ": " too
        group = prefix if prefix in self._groups[kernel] else "search"
        for k, out in enumerate(outputs):
            key = (f"{kernel}/{variant}/{group}", k)
            if key not in self._sums:
                self._sums[key] = FingerprintSum()
            self._sums[key].add(out)

    def record(self) -> dict:
        entries = [NodeFingerprint(node, k, acc.result()) for (node, k), acc in self._sums.items()]
        return {"names": [e.key for e in entries], "data": pack(entries).tobytes()}


def _run_kernels(p: dict, *, fingerprints: bool = True) -> dict:
    """fingerprints: record the variants' outputs' fingerprints (KernelFingerprints)."""
    # lazy: start-up (hypothesis, mschecker.kernels)
    from mschecker.kernels.suite import run_suite  # here: the driver never loads the kernel suite

    recorder = KernelFingerprints() if fingerprints else None
    report = run_suite([p["kernel"]], p["examples"], on_outputs=recorder)
    metrics = {}
    for o in report.outcomes:
        if o.planted_bug is not None:
            metrics[f"{o.variant}.caught"] = 1.0 if o.ok else 0.0
        else:
            metrics[f"{o.variant}.error_ratio"] = float(o.worst_ratio)
            metrics[f"{o.variant}.max_abs_err"] = float(o.max_abs_err)
            metrics[f"{o.variant}.ulp_p99"] = float(o.ulp_p99)
    bad = [o for o in report.outcomes if not o.ok]
    reason = "; ".join(f"{o.variant}: {o.verdict}" + (f" ({o.first_failure})" if o.first_failure else "")
                       for o in bad)
    out = {"status": STATUS_PASS if report.passed else STATUS_FAIL, "reason": reason[:300], "metrics": metrics,
           "detail": {"variants": len(report.outcomes), "examples": p["examples"]}}
    fps = recorder.record() if recorder is not None else None
    if fps is not None and fps["names"]:
        out["fingerprints"] = fps
    return out


