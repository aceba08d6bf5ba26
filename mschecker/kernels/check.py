"""Check one optimized variant against its float64 reference and its error contract, on one case.

The rule (see registry.py for the conventions):
- inputs are rounded to the variant's storage dtype; the reference runs in float64 on those same values;
- where the reference, rounded to the storage dtype, is finite, the variant's output must be finite and within
  the contract's elementwise absolute bound;
- where the rounded reference is ±inf (true overflow) or NaN, the variant must produce the same non-finite value:
  an overflow a correct kernel cannot avoid is not charged to it, and a NaN a kernel invents is always caught.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mschecker.compare import BoundRule, TensorComparison, compare_arrays
from mschecker.kernels.registry import Case, KernelInfo, Variant
from mschecker.kernels.twosided import emulation_problems


@dataclass
class OutputCheck:
    """Outcome of the contract check for one output tensor."""

    max_abs_err: float
    bound_at_worst: float
    worst_ratio: float  # max over elements of err / bound (inf if an element breaks a zero bound)
    worst_index: tuple
    violations: int
    nonfinite_mismatches: int
    ulp_p99: float
    size: int

    @property
    def passed(self) -> bool:
        return self.violations == 0 and self.nonfinite_mismatches == 0

    @classmethod
    def from_comparison(cls, tc: TensorComparison) -> "OutputCheck":
        """The contract summary of a BoundRule comparison: violations are the elements whose expected value is
        finite and whose output is not within the bound (a NaN/inf output there counts, with an infinite error);
        nonfinite_mismatches those whose expected value is NaN/inf and whose output differs. ULP p99 is the
        engine's nearest-rank percentile (compare.ulp), the one definition every report uses."""
        b = tc.bound
        violations = tc.mismatches - b.expected_nonfinite_mismatches
        invented = tc.nonfinite_mismatches - b.expected_nonfinite_mismatches
        max_err = math.inf if invented else (tc.max_abs_err or 0.0)
        return cls(max_abs_err=max_err, bound_at_worst=b.bound_at_worst, worst_ratio=b.worst_ratio,
                   worst_index=b.worst_index or (), violations=violations,
                   nonfinite_mismatches=b.expected_nonfinite_mismatches, ulp_p99=float(tc.ulp_p99 or 0),
                   size=tc.size)


@dataclass
class CheckResult:
    kernel: str
    variant: str
    dtype: str
    outputs: list[OutputCheck] = field(default_factory=list)
    label: str = ""
    emulation: list[str] = field(default_factory=list)  # two-sided check problems (twosided.emulation_problems)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs) and not self.emulation

    @property
    def max_abs_err(self) -> float:
        return max((o.max_abs_err for o in self.outputs), default=0.0)

    @property
    def worst_ratio(self) -> float:
        return max((o.worst_ratio for o in self.outputs), default=0.0)

    @property
    def bound_at_worst(self) -> float:
        worst = max(self.outputs, key=lambda o: o.worst_ratio, default=None)
        return worst.bound_at_worst if worst else 0.0

    @property
    def ulp_p99(self) -> float:
        return max((o.ulp_p99 for o in self.outputs), default=0.0)

    def describe(self) -> str:
        parts = [f"{self.kernel}/{self.variant} ({self.dtype}) on {self.label or 'case'}:"]
        for i, o in enumerate(self.outputs):
            verdict = "ok" if o.passed else "FAIL"
            parts.append(
                f"  output {i}: {verdict}; max |err| {o.max_abs_err:.3e}, worst err/bound {o.worst_ratio:.3g} "
                f"at {o.worst_index} (bound there {o.bound_at_worst:.3e}), {o.violations}/{o.size} over bound, "
                f"{o.nonfinite_mismatches} non-finite mismatches, ULP p99 {o.ulp_p99:g}"
            )
        parts += [f"  two-sided: {p}" for p in self.emulation]
        return "\n".join(parts)


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def run_reference(info: KernelInfo, case: Case) -> tuple[np.ndarray, ...]:
    """The float64 reference on the case's inputs upcast to float64 (integer inputs untouched)."""
    inputs = tuple(_to_f64(x) for x in case.inputs)
    return tuple(np.asarray(r, dtype=np.float64) for r in as_tuple(info.reference(*inputs, **case.params)))


def run_variant(variant: Variant, case: Case) -> tuple[Case, tuple[np.ndarray, ...]]:
    """Round the inputs to the variant's storage dtype and run it; returns (rounded case, outputs)."""
    rounded = case.cast(variant.dtype)
    with np.errstate(all="ignore"):
        out = as_tuple(variant.fn(*rounded.inputs, **rounded.params))
    return rounded, out


def _to_f64(x):
    a = np.asarray(x)
    if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
        return a
    return a.astype(np.float64)


def compare_to_contract(out, ref, bound, dtype: str, *, name: str = "output", why: str = "",
                        topk: int = 0) -> TensorComparison:
    """The streaming engine's comparison of a variant's output with the float64 reference under the contract's
    elementwise bound (compare.BoundRule: the conventions of the module docstring), with every metric."""
    out = np.asarray(out)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise AssertionError(f"variant output shape {out.shape} != reference shape {ref.shape}")
    rule = BoundRule(ulp_format=dtype, bound=bound, dtype=dtype, why=why)
    return compare_arrays(out, BoundRule.expected_of(ref, dtype), rule, name=name, topk=topk)


def check_output(out: np.ndarray, ref: np.ndarray, bound, dtype: str) -> OutputCheck:
    """Hold one output to its contract (compare_to_contract) and summarise it for the kernel suite."""
    return OutputCheck.from_comparison(compare_to_contract(out, ref, bound, dtype))


def check_outputs(info: KernelInfo, variant: Variant, rounded: Case, outs: tuple, refs: tuple) -> CheckResult:
    """Hold a variant's outputs on `rounded` to its contract around the reference outputs `refs` (computed here,
    or stored in a golden)."""
    if len(outs) != len(refs):
        raise AssertionError(f"{info.name}/{variant.name}: {len(outs)} outputs, reference has {len(refs)}")
    with np.errstate(all="ignore"):
        bounds = info.contract_of(variant).bound(rounded, refs if len(refs) > 1 else refs[0], variant)
    bounds = as_tuple(bounds) if len(refs) > 1 else (bounds,)
    result = CheckResult(info.name, variant.name, variant.dtype, label=rounded.label)
    for out, ref, bound in zip(outs, refs, bounds):
        result.outputs.append(check_output(out, ref, bound, variant.dtype))
    return result


def check_case(info: KernelInfo, variant: Variant | str, case: Case) -> CheckResult:
    """Run `variant` and the reference on `case` and hold the variant to its contract."""
    if isinstance(variant, str):
        variant = info.variant(variant)
    rounded, outs = run_variant(variant, case)
    result = check_outputs(info, variant, rounded, outs, run_reference(info, rounded))
    result.emulation = emulation_problems(info, variant, rounded, outs)
    return result
