"""Check one optimized variant against its float64 reference and its error contract, on one case.

The rule (see registry.py for the conventions):
- inputs are rounded to the variant's storage dtype; the reference runs in float64 on those same values;
- where the reference, rounded to the storage dtype, is finite, the variant's output must be finite and within
  the contract's elementwise absolute bound;
- where the rounded reference is ±inf (true overflow) or NaN, the variant must produce the same non-finite value:
  an overflow a correct kernel cannot avoid is not charged to it, and a NaN a kernel invents is always caught.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .dtypes import float_format, round_to, ulp_distance
from .registry import Case, KernelInfo, Variant
from .twosided import emulation_problems


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


def check_output(out: np.ndarray, ref: np.ndarray, bound, dtype: str) -> OutputCheck:
    out64 = np.asarray(out).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out64.shape != ref.shape:
        raise AssertionError(f"variant output shape {out64.shape} != reference shape {ref.shape}")
    ref_stored = round_to(ref, dtype).astype(np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), ref.shape)
    finite_ref = np.isfinite(ref_stored)
    # Non-finite expectations: same inf sign, NaN for NaN.
    nf = ~finite_ref
    nonfinite_bad = nf & ~((np.isnan(ref_stored) & np.isnan(out64)) | (ref_stored == out64))
    # Finite expectations: finite output within bound.
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite_ref, np.abs(out64 - ref), 0.0)
    err = np.where(finite_ref & ~np.isfinite(out64), np.inf, err)
    # A result within the bound of the reference may lie past the overflow threshold and round to inf: allowed
    # when the inf has the reference's sign and |ref| + bound reaches the threshold.
    fmt = float_format(dtype)
    threshold = fmt.max + 2.0 ** (np.floor(np.log2(fmt.max)) - fmt.mantissa_bits - 1)
    with np.errstate(invalid="ignore", over="ignore"):
        overflow_ok = (finite_ref & np.isinf(out64) & (np.sign(out64) == np.sign(ref))
                       & (np.abs(ref) + bound >= threshold))
    err = np.where(overflow_ok, 0.0, err)
    violations = finite_ref & ~(err <= bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / bound)
    # An infinite bound means "no promise here" (outside a variant's domain): ratio 0, never inf or NaN.
    ratio = np.where(np.isposinf(bound), 0.0, np.where(np.isnan(ratio), np.inf, ratio))
    if ref.size:
        flat = int(np.argmax(ratio))
        worst_index = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
        worst_ratio = float(ratio.reshape(-1)[flat])
        bound_at_worst = float(bound.reshape(-1)[flat])
        max_err = float(err.max())
    else:
        worst_index, worst_ratio, bound_at_worst, max_err = (), 0.0, 0.0, 0.0
    fin = finite_ref & np.isfinite(out64)
    if fin.any():
        ulps = ulp_distance(out64[fin], ref[fin], dtype)
        ulp_p99 = float(np.percentile(ulps, 99))
    else:
        ulp_p99 = 0.0
    return OutputCheck(
        max_abs_err=max_err,
        bound_at_worst=bound_at_worst,
        worst_ratio=worst_ratio,
        worst_index=worst_index,
        violations=int(violations.sum()),
        nonfinite_mismatches=int(nonfinite_bad.sum()),
        ulp_p99=ulp_p99,
        size=int(ref.size),
    )


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


def assert_meets_contract(info: KernelInfo, variant: Variant | str, case: Case) -> CheckResult:
    """check_case, raising AssertionError with the per-output description when the contract is broken."""
    result = check_case(info, variant, case)
    if not result.passed:
        why = info.contract_of(info.variant(variant) if isinstance(variant, str) else variant).why
        raise AssertionError(result.describe() + f"\n  contract: {why}")
    return result
