"""The element rules of a comparison: what makes one element (and one tensor) pass.

The streaming engine (engine.py) computes every metric the same way whatever the rule; the rule only decides,
chunk by chunk, which elements mismatch. Two rules exist:

* `ToleranceRule`: the numpy.isclose / torch.testing.assert_close convention (atol, rtol, ULPs, cosine): the CLI,
  goldens, the pytest plugin's tolerance checks, the SD check, bisection.
* `BoundRule`: an elementwise error bound that is an array streaming with the data (a kernel's error contract,
  derived per element from its inputs): `mschecker kernels`, the kernel suite, `assert_close_to_reference(contract=)`.

Both are siblings under `ElementRule`, the protocol the engine asks: `count_finite_mismatches` (pairs where both
sides are finite), `nonfinite_matches` (pairs where at least one side is NaN/inf), per-comparison state
(begin/merge/finish) and `fast_path_params` (what the C kernel needs, None when it cannot apply the rule).
docs/TOLERANCE.md states the rules in prose.
"""
from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from mschecker.dtypes import dtype_name, float_format, resolve_dtype, round_to
from mschecker.errors import InputError
from mschecker.compare.results import BoundStats

#: Defaults when no elementwise option is given: Polygraphy's defaults (atol = rtol = 1e-5), also torch's fp32
#: atol. A user checking fp16/bf16 outputs should pass a tolerance derived from the format (docs/TOLERANCE.md).
DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-5


class ChunkView:
    """What the engine hands a rule for one chunk of finite pairs.

    ad: |actual - expected| in float64 (exact per element); e64: expected in float64; ulp: (distances, mask of
    pairs still finite in the ULP format or None) or None when the tensors have no ULP format; start: the chunk's
    flat offset; sel: positions within the chunk of the pairs in `ad` (None: all); scratch(key, m, dtype): a
    reusable work buffer."""

    __slots__ = ("ad", "e64", "ulp", "start", "sel", "scratch", "max_abs")

    def __init__(self, ad, e64, ulp, start, sel, scratch, max_abs):
        self.ad, self.e64, self.ulp, self.start, self.sel = ad, e64, ulp, start, sel
        self.scratch, self.max_abs = scratch, max_abs

    def flat(self) -> np.ndarray | slice:
        """Flat positions of the chunk's pairs in the tensor: a slice, or an index array."""
        if self.sel is None:
            return slice(self.start, self.start + self.ad.size)
        return self.start + self.sel


class FastPathParams(NamedTuple):
    """What the C kernel (_fastcompare.c) needs to apply an element rule: |d| > atol + rtol*|e| and, when
    ulp_tol >= 0, more than ulp_tol fp32 ULPs apart; ulp_tol = -1: no ULP clause."""

    atol: float
    rtol: float
    ulp_tol: int


def _ulp_format_name(ulp_format: str | None) -> str | None:
    """The canonical name of a forced ULP format (None: not forced), as reports show it."""
    return dtype_name(resolve_dtype(ulp_format)) if ulp_format else None


def _check_ulp_format(ulp_format: str | None) -> None:
    """A forced ULP format must be a float format: a bad name is a user's input error, said before any work."""
    if ulp_format is not None:
        try:
            float_format(resolve_dtype(ulp_format))
        except ValueError:
            raise InputError(f"tolerance: ulp format must be fp16, bf16, fp32 or fp64, got {ulp_format!r}")


class ElementRule(abc.ABC):
    """The protocol the streaming engine (engine.py) asks, chunk by chunk, which elements pass.

    Subclasses state the element rule (count_finite_mismatches, nonfinite_matches) and how a report shows it
    (describe, to_dict). Per-comparison state: `begin(shape)` returns it (None by default), every call gets it,
    `merge` folds a worker's state into another's, `finish` adds the rule's own results to the
    TensorComparison. Attributes the engine reads: `finite_rule_name` (the name of a finite mismatch in
    failed_rules), `cosine` (a tensor-level minimum cosine, None: off) and `ulp_format` (the format ULP metrics
    are counted in, None: the coarser dtype). `fast_path_params` says whether the C kernel implements the rule.
    """

    finite_rule_name: str = "elementwise"
    cosine: float | None = None
    ulp_format: str | None = None

    def begin(self, shape):
        """State for one comparison (None: the rule has none)."""
        return None

    @abc.abstractmethod
    def count_finite_mismatches(self, state, chunk: ChunkView) -> int:
        """How many of the chunk's finite pairs mismatch."""

    @abc.abstractmethod
    def nonfinite_matches(self, state, a64: np.ndarray, e64: np.ndarray, flat) -> np.ndarray:
        """Which pairs with a NaN/inf side match (a bool array); flat: their flat positions in the tensor."""

    def merge(self, state, other_state) -> None:
        """Fold another worker's state (disjoint chunks of the same tensors) into `state`."""
        return None

    def finish(self, state, result) -> None:
        """Add the rule's own results to the TensorComparison (none by default)."""
        return None

    def fast_path_params(self) -> FastPathParams | None:
        """The C kernel's parameters when it implements this rule exactly on float32 chunks, else None (the
        default: the numpy path, which asks count_finite_mismatches, runs)."""
        return None

    @abc.abstractmethod
    def describe(self) -> str:
        """One line that states the rule exactly."""

    @abc.abstractmethod
    def to_dict(self) -> dict:
        """The rule's JSON form (docs/REPORT_SCHEMA.md, `rule`)."""


@dataclass(frozen=True)
class ToleranceRule(ElementRule):
    """The pass/fail rule, following the numpy.isclose / torch.testing.assert_close convention.

    Element rule (expected e, actual a; asymmetric: the tolerance scales with the *expected* value):
      * both finite: the element matches when |a - e| <= atol + rtol * |e|, or, when `ulp` is set, when
        a and e rounded to the ULP format are both finite and at most `ulp` representable values apart;
      * NaN matches only NaN (at the same position); +inf matches only +inf and -inf only -inf;
      * a NaN or inf where the other side has a finite value (or the other infinity) is a mismatch.
    Tensor rule: every element matches, and, when `cosine` is set, the cosine similarity over the finite pairs
    is >= `cosine` (a tensor with no finite pair fails a cosine rule: the similarity cannot be computed).

    `ulp_format` names the format ULPs are counted in (fp16, bf16, fp32, fp64); None means the coarser (fewer
    mantissa bits) of the two tensors' float dtypes, the expected one on a tie; integer tensors then have no ULP
    and `ulp` accepts nothing extra there. Unlike Polygraphy (an element fails only when it breaks
    both atol and rtol) the bound here is the sum atol + rtol*|e|, as numpy and torch define it.
    """

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    ulp: int | None = None
    cosine: float | None = None
    ulp_format: str | None = None

    def __post_init__(self):
        for name in ("atol", "rtol"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v) and v >= 0):
                raise InputError(f"tolerance: {name} must be a finite number >= 0, got {v!r}")
        if self.ulp is not None and (isinstance(self.ulp, bool) or int(self.ulp) != self.ulp or self.ulp < 0):
            raise InputError(f"tolerance: ulp must be an integer >= 0, got {self.ulp!r}")
        if self.cosine is not None and not (-1.0 <= float(self.cosine) <= 1.0):
            raise InputError(f"tolerance: cosine must lie in [-1, 1], got {self.cosine!r}")
        _check_ulp_format(self.ulp_format)

    @classmethod
    def from_args(cls, tolerance=None, atol=None, rtol=None, ulp=None, cosine=None, ulp_format=None):
        """Build the rule from command-line style options.

        * `tolerance=T` alone means atol = rtol = T; an explicit `atol`/`rtol` overrides its half.
        * When any elementwise option (tolerance, atol, rtol, ulp) is given, the unspecified ones are 0 / off:
          `--atol 1e-3` alone is a pure absolute rule and `--ulp 4` alone a pure ULP rule.
        * When none is given: atol = rtol = 1e-5 (DEFAULT_ATOL/DEFAULT_RTOL).
        * `cosine` is a tensor-level rule added on top; it does not change the element rule.
        """
        def num(name, v):
            try:
                return float(v)
            except (TypeError, ValueError):
                raise InputError(f"tolerance: {name} must be a number, got {v!r}") from None

        any_elementwise = any(v is not None for v in (tolerance, atol, rtol, ulp))
        base = num("tolerance", tolerance) if tolerance is not None else (0.0 if any_elementwise else None)
        a = num("atol", atol) if atol is not None else (base if base is not None else DEFAULT_ATOL)
        r = num("rtol", rtol) if rtol is not None else (base if base is not None else DEFAULT_RTOL)
        if ulp is not None:
            u = num("ulp", ulp)
            if not u.is_integer():
                raise InputError(f"tolerance: ulp must be an integer >= 0, got {ulp!r}")
            ulp = int(u)
        c = num("cosine", cosine) if cosine is not None else None
        return cls(atol=a, rtol=r, ulp=ulp, cosine=c, ulp_format=ulp_format)

    # -- the element rule, as the streaming engine applies it (no per-comparison state) -----------------------
    def count_finite_mismatches(self, state, chunk: ChunkView) -> int:
        """Finite pairs outside |d| <= atol + rtol*|e| and, when the rule has a ULP clause, not within `ulp` ULPs
        with both sides finite in the ULP format.

        The bound is >= atol for every element (rtol*|e| >= 0 and float64 rounding is monotone), so a chunk whose
        largest |d| is <= atol has no mismatch and needs no bound."""
        if chunk.max_abs <= self.atol:
            return 0
        ad = chunk.ad
        bound = np.abs(chunk.e64, out=chunk.scratch("bound", ad.size))
        bound *= self.rtol
        bound += self.atol
        over = np.greater(ad, bound, out=chunk.scratch("over", ad.size, np.bool_))
        if chunk.ulp is not None and self.ulp is not None and over.any():
            dist, fin_fmt = chunk.ulp
            # Outside the ULP clause as well: more than `ulp` apart, or not both finite in the ULP format.
            far = np.greater(dist, self.ulp, out=chunk.scratch("far", ad.size, np.bool_))
            if fin_fmt is not None:
                far |= ~fin_fmt
            over &= far
        return int(np.count_nonzero(over))

    def nonfinite_matches(self, state, a64: np.ndarray, e64: np.ndarray, flat: np.ndarray) -> np.ndarray:
        """Pairs where a side is NaN/inf: NaN matches NaN, inf matches same-sign inf, anything else mismatches."""
        return (np.isnan(a64) & np.isnan(e64)) | (a64 == e64)

    def fast_path_params(self) -> FastPathParams | None:
        """atol, rtol and the ULP clause: all the C kernel needs. A subclass that redefines the element rule is
        not what the kernel computes, so it gets None unless it declares its own."""
        if type(self).count_finite_mismatches is not ToleranceRule.count_finite_mismatches:
            return None
        return FastPathParams(float(self.atol), float(self.rtol), -1 if self.ulp is None else int(self.ulp))

    @classmethod
    def from_hint(cls, hint, cosine=None) -> "ToleranceRule | None":
        """The rule a golden manifest's tolerance hint states (its tolerance/atol/rtol/ulp/cosine/ulp_format keys,
        from_args conventions); `cosine`, when given, adds to or replaces the hint's. None when the hint states
        no rule (absent, or every key null)."""
        keys = ("tolerance", "atol", "rtol", "ulp", "cosine", "ulp_format")
        kwargs = {k: hint[k] for k in keys if isinstance(hint, dict) and hint.get(k) is not None}
        if cosine is not None:
            kwargs["cosine"] = cosine
        if not any(k in kwargs for k in ("tolerance", "atol", "rtol", "ulp", "cosine")):
            return None
        return cls.from_args(**kwargs)

    def describe(self) -> str:
        """One line that states the rule exactly."""
        parts = [f"|actual - expected| <= {self.atol:g} + {self.rtol:g}*|expected|"]
        if self.ulp is not None:
            fmt = dtype_name(resolve_dtype(self.ulp_format)) if self.ulp_format else "the coarser dtype"
            parts.append(f"or within {self.ulp} ULP of {fmt}")
        text = " ".join(parts) + " (numpy.isclose convention); NaN matches NaN, inf matches same-sign inf"
        if self.cosine is not None:
            text += f"; cosine >= {self.cosine:g}"
        return text

    def to_dict(self) -> dict:
        return {
            "convention": "numpy.isclose",
            "atol": float(self.atol),
            "rtol": float(self.rtol),
            "ulp": self.ulp,
            "ulp_format": _ulp_format_name(self.ulp_format),
            "cosine": None if self.cosine is None else float(self.cosine),
            "text": self.describe(),
        }


#: The keys a stated tolerance may have (flags, a campaign's [tolerance] table, the golden helpers' keywords);
#: the first four are the element rule's, cosine is the tensor rule added on top.
TOLERANCE_KEYS = ("tolerance", "atol", "rtol", "ulp", "cosine")
ELEMENTWISE_KEYS = TOLERANCE_KEYS[:4]


def resolve_rule(stated: Mapping | None, hint: Mapping | None = None, *,
                 default: ToleranceRule | None = None) -> tuple[ToleranceRule, str]:
    """The one precedence of a tolerance: what the user stated > a golden manifest's hint > the default.

    `stated` maps TOLERANCE_KEYS to values (None = not given). An elementwise key stated decides the element rule
    (ToleranceRule.from_args); otherwise the hint's element rule applies, a stated cosine added to (or replacing)
    its own; otherwise `default` (ToleranceRule's documented 1e-5 when None; the golden helpers pass exact), with
    a stated cosine on top. Returns (rule, source), the source as the report names it: "flags",
    "golden manifest hint", "golden manifest hint + --cosine" or "default".
    """
    given = {k: stated[k] for k in TOLERANCE_KEYS if stated and stated.get(k) is not None}
    if any(k in given for k in ELEMENTWISE_KEYS):
        return ToleranceRule.from_args(**given), "flags"
    cosine = given.get("cosine")
    if ToleranceRule.from_hint(hint) is not None:  # the hint states a rule of its own
        return ToleranceRule.from_hint(hint, cosine=cosine), "golden manifest hint" + (" + --cosine" if cosine is not None else "")
    if default is None:
        return ToleranceRule.from_args(cosine=cosine), "flags" if cosine is not None else "default"
    if cosine is None:
        return default, "default"
    return dataclasses.replace(default, cosine=ToleranceRule.from_args(cosine=cosine).cosine), "flags"


@dataclass
class _BoundState:
    """Running results of a BoundRule over one comparison (merged across the engine's workers)."""

    flat_bound: np.ndarray  # the bound in the tensor's flat C order (one element: the same bound everywhere)
    worst_ratio: float = 0.0
    worst_flat: int | None = None
    bound_at_worst: float = 0.0
    expected_nonfinite_mismatches: int = 0


@dataclass(frozen=True, eq=False)
class BoundRule(ElementRule):
    """|actual - expected| <= bound, elementwise, with `bound` an array broadcastable to the tensor's shape (a
    kernel's error contract evaluated on its inputs); it streams with the data, chunk by chunk.

    Conventions (those of the kernel contracts, registry.py):
    * expected is the float64 reference, except where the reference rounded to the storage format `dtype` is
      not finite: there it is that rounded value (an overflow a correct kernel cannot avoid; see `expected_of`);
    * a finite expected value needs a finite actual value within the bound; a NaN bound is broken by anything;
      an infinite bound means "no promise here" (outside a variant's domain) and accepts any actual value;
    * an actual inf is accepted for a finite expected value when it has its sign and |expected| + bound reaches
      the storage format's overflow threshold (a result within the bound may round to inf);
    * a non-finite expected value needs the same value (NaN for NaN, same-sign inf).
    The rule also tracks the worst err/bound ratio, where it is and the bound there (TensorComparison.bound).
    `why` is the contract's derivation, shown in reports; `ulp_format` the format the ULP metrics are counted in
    (the callers pass the storage format). The rule has no tolerance and no cosine rule.
    """

    bound: object = None
    dtype: str = "float64"
    why: str = ""
    ulp_format: str | None = None

    finite_rule_name = "contract"

    def __post_init__(self):
        _check_ulp_format(self.ulp_format)
        object.__setattr__(self, "dtype", dtype_name(resolve_dtype(self.dtype)))

    @staticmethod
    def expected_of(reference: np.ndarray, dtype) -> np.ndarray:
        """The expected tensor of a contract check: the float64 reference, with its storage-format overflows."""
        ref = np.asarray(reference, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            stored = round_to(ref, dtype).astype(np.float64)
        return np.where(np.isfinite(stored), ref, stored)

    def _bound_flat(self, shape) -> np.ndarray:
        b = np.asarray(self.bound, dtype=np.float64)
        if b.size == 1:
            return b.reshape(1)
        return np.ascontiguousarray(np.broadcast_to(b, shape)).reshape(-1)

    def begin(self, shape):
        if self.bound is None:  # a BoundRule without a bound only describes a report's rule (CheckReport.rule)
            raise ValueError("a BoundRule needs its bound array to compare")
        return _BoundState(self._bound_flat(tuple(shape)))

    def _bounds(self, state, flat) -> np.ndarray:
        b = state.flat_bound
        if b.size == 1:
            n = (flat.stop - flat.start) if isinstance(flat, slice) else len(flat)
            return np.full(n, b[0])
        return b[flat]

    def _note_worst(self, state, ratio: np.ndarray, bounds: np.ndarray, flat) -> None:
        if ratio.size == 0:
            return
        j = int(np.argmax(ratio))
        r = float(ratio[j])
        pos = (flat.start + j) if isinstance(flat, slice) else int(flat[j])
        if r > state.worst_ratio or (r == state.worst_ratio and r > 0 and
                                     (state.worst_flat is None or pos < state.worst_flat)):
            state.worst_ratio, state.worst_flat, state.bound_at_worst = r, pos, float(bounds[j])

    def count_finite_mismatches(self, state, chunk: ChunkView) -> int:
        flat = chunk.flat()
        b = self._bounds(state, flat)
        ad = chunk.ad
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(ad == 0, 0.0, ad / b)
        # An infinite bound promises nothing: ratio 0; a NaN bound is broken by anything: ratio inf.
        ratio = np.where(np.isposinf(b), 0.0, np.where(np.isnan(ratio), np.inf, ratio))
        self._note_worst(state, ratio, b, flat)
        return int(np.count_nonzero(~(ad <= b)))

    def _overflow_threshold(self) -> float:
        """The smallest magnitude that rounds to inf in the storage format (round to nearest: max + half an ulp)."""
        fmt = float_format(resolve_dtype(self.dtype))
        return fmt.max + 2.0 ** (math.floor(math.log2(fmt.max)) - fmt.mantissa_bits - 1)

    def nonfinite_matches(self, state, a64, e64, flat) -> np.ndarray:
        b = self._bounds(state, flat)
        same = (np.isnan(a64) & np.isnan(e64)) | (a64 == e64)
        fin_e = np.isfinite(e64)
        with np.errstate(invalid="ignore", over="ignore"):
            overflow_ok = (fin_e & np.isinf(a64) & (np.sign(a64) == np.sign(e64))
                           & (np.abs(e64) + b >= self._overflow_threshold()))
        ok = same | overflow_ok | (fin_e & np.isposinf(b))
        bad = ~ok
        state.expected_nonfinite_mismatches += int(np.count_nonzero(bad & ~fin_e))
        # An invented NaN/inf where a finite value is expected (and promised) is an infinite err/bound ratio.
        invented = bad & fin_e
        if invented.any():
            ratio = np.where(invented, np.inf, 0.0)
            self._note_worst(state, ratio, b, flat)
        return ok

    def merge(self, state, other) -> None:
        state.expected_nonfinite_mismatches += other.expected_nonfinite_mismatches
        if other.worst_flat is not None and (
                other.worst_ratio > state.worst_ratio
                or (other.worst_ratio == state.worst_ratio
                    and (state.worst_flat is None or other.worst_flat < state.worst_flat))):
            state.worst_ratio, state.worst_flat = other.worst_ratio, other.worst_flat
            state.bound_at_worst = other.bound_at_worst

    def finish(self, state, result) -> None:
        if state.worst_flat is None and result.size:  # every error is 0: report the first element and its bound
            state.worst_flat, state.bound_at_worst = 0, float(state.flat_bound[0])
        index = (tuple(int(i) for i in np.unravel_index(state.worst_flat, result.shape))
                 if state.worst_flat is not None else None)
        result.bound = BoundStats(worst_ratio=state.worst_ratio, worst_index=index,
                                  bound_at_worst=state.bound_at_worst,
                                  expected_nonfinite_mismatches=state.expected_nonfinite_mismatches)

    def describe(self) -> str:
        return (f"elementwise error contract |actual - reference| <= bound(inputs, reference); bound: {self.why}; "
                "where the reference overflows the storage format the same inf is expected")

    def to_dict(self) -> dict:
        # atol/rtol/ulp/cosine kept, unused: readers of the report's `rule` (docs/REPORT_SCHEMA.md) expect them
        return {"convention": "mschecker contract", "atol": 0.0, "rtol": 0.0, "ulp": None,
                "ulp_format": _ulp_format_name(self.ulp_format), "cosine": None, "text": self.describe(),
                "why": self.why, "storage_dtype": self.dtype}

