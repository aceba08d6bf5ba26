"""The op registry: per kernel, its float64 reference, its optimized variants and their error contracts.

Reads like PyTorch's OpInfo: one declarative `KernelInfo` per kernel (see mschecker/kernels/entries/*.py). Adding a
kernel is one entry plus its two implementations (reference/ and optimized_kernels/). The kernel suite, the
`mschecker kernels` command, the golden store and the graph executor all read this one table.

Conventions every entry follows
- A kernel function takes positional arrays then keyword parameters: ``fn(*case.inputs, **case.params)``.
- The reference takes float64 arrays and returns float64 (or a tuple of them for multi-output kernels).
- A variant receives its inputs already rounded to ``variant.dtype`` (its storage format) and returns arrays of
  that dtype. The harness computes the reference on the *same rounded inputs* upcast to float64, so a contract
  bounds the kernel's own error, never the input rounding.
- A contract maps (case, reference output, variant) to an elementwise absolute bound (broadcastable to the
  output). `why` records the derivation or the measured baseline it rests on.
- A planted-bug variant (``planted_bug`` set) is checked against ``bug_of``'s contract; the suite asserts that
  the search finds an input that breaks it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

KernelFn = Callable[..., Any]


@dataclass(frozen=True)
class Case:
    """One kernel invocation: positional arrays plus keyword parameters (attributes, shapes)."""

    inputs: tuple[np.ndarray, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def cast(self, dtype) -> "Case":
        """The same case with every floating input rounded to `dtype` (integer inputs untouched)."""
        from mschecker.dtypes import round_to  # lazy: start-up (ml_dtypes, mschecker.dtypes)

        return Case(
            tuple(round_to(x, dtype) if np.issubdtype(np.asarray(x).dtype, np.floating) or _is_bf16(x) else x
                  for x in self.inputs),
            self.params,
            self.label,
        )


def _is_bf16(x) -> bool:
    from mschecker.dtypes import bfloat16  # lazy: start-up (ml_dtypes, mschecker.dtypes)

    return np.asarray(x).dtype == bfloat16


BoundFn = Callable[["Case", Any, "Variant"], Any]


@dataclass(frozen=True)
class Contract:
    """An elementwise absolute error bound and the reason it is what it is."""

    bound: BoundFn
    why: str


@dataclass(frozen=True)
class Variant:
    """One optimized implementation of a kernel, with its numerics described."""

    name: str
    fn: KernelFn
    dtype: str  # storage dtype of inputs and outputs: "float16", "bfloat16", "float32"
    contract: Contract | None = None  # None only for planted bugs (they borrow bug_of's contract)
    accumulate: str = "float32"  # dtype of accumulators inside the kernel
    implmode: str = "high_precision"  # "high_precision" | "high_performance" (what ATC's implmode would pick)
    planted_bug: str | None = None  # what is wrong, for planted-bug variants
    bug_of: str | None = None  # the correct variant whose contract the bug must break
    catch_with: str | None = None  # the strategy name that exposes the bug (defaults to every strategy)
    doc: str = ""
    # Positional operands the variant may receive as float32 arrays holding values of its storage dtype (a constant
    # staged once by the graph executor instead of upcast on every call). Set only where the arithmetic upcasts
    # that operand to fp32 exactly and reads nothing else from its dtype, so both forms give the same bits
    # (tests/graph/test_weight_staging.py checks every variant that sets it).
    staged_f32_operands: tuple[int, ...] = ()
    # Two-sided emulation check (optimized_kernels/definitions.py): an independently written definition of the
    # documented algorithm (accumulation order, rounding points) the variant must match bit for bit; None where
    # the variant has none yet (tests/kernels/test_emulation.py lists those).
    definition: KernelFn | None = None
    # What sets the variant's last bits besides our own code, where something does ("fp32 BLAS summation order"):
    # such bits differ between CPUs, so goldens hold the variant to its contract, not to stored bits. None: the
    # bits are ours, and the golden pins them exactly.
    platform_bits: str | None = None

    @property
    def is_planted_bug(self) -> bool:
        return self.planted_bug is not None


# A strategy factory returns a hypothesis SearchStrategy[Case]; factories keep hypothesis import lazy.
StrategyFactory = Callable[[], Any]


@dataclass
class KernelInfo:
    """The declarative entry of one kernel."""

    name: str
    family: str
    reference: KernelFn
    variants: Mapping[str, Variant]
    strategies: Mapping[str, StrategyFactory]  # "generic" first, then adversarial ones by name
    golden_cases: Callable[[], Sequence[Case]]  # fixed seeds: inputs stored in golden/kernels/
    doc: str = ""
    # For a reference backed by BLAS (float64 GEMMs whose summation order is the CPU's BLAS kernel's): the
    # elementwise bound (case, reference outputs) -> bound(s) within which two evaluations may differ; its golden
    # outputs are compared within it. None: the reference is our own code path and its goldens are bit-exact.
    reference_bits_bound: Callable[["Case", Any], Any] | None = None
    # The variants the NPU policy runs when several correct ones share (dtype, accumulate, implmode): one name per
    # such group (checked at registration), so adding a variant never silently changes what an emulated NPU run
    # computes (npu/policy.select_variant).
    defaults: tuple[str, ...] = ()
    # How many leading positional operands feed the matrix unit: a cube op given fp16 operands into an fp32 result
    # rounds these (npu/policy.py), not a bias or a mask.
    cube_operands: int = 2
    # Kernels whose calls this one may serve instead, where an NPU profile switch turns it on (npu/profile.py's
    # KERNEL_SWITCHES) and the node's op allows it (graph/ops/table.py's OpSpec.substitutes): the switch is the
    # kernel's whole use, so the policy never names a kernel to hook it in.
    substitutes: tuple[str, ...] = ()
    # A lossy storage round trip (value -> value as read back) rather than an op's arithmetic: a profile switch
    # passes every low-precision float output through it (NodeContext.compress).
    stores_outputs: bool = False

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise KeyError(f"kernel {self.name!r} has no variant {name!r} (has {sorted(self.variants)})") from None

    def contract_of(self, variant: Variant) -> Contract:
        """The contract a variant is held to (a planted bug is held to its correct twin's)."""
        if variant.contract is not None:
            return variant.contract
        if variant.bug_of is None:
            raise ValueError(f"{self.name}/{variant.name}: a variant needs a contract or bug_of")
        return self.contract_of(self.variant(variant.bug_of))

    @property
    def correct_variants(self) -> list[Variant]:
        return [v for v in self.variants.values() if not v.is_planted_bug]

    @property
    def planted_bugs(self) -> list[Variant]:
        return [v for v in self.variants.values() if v.is_planted_bug]


_REGISTRY: dict[str, KernelInfo] = {}
_LOADED = False


def register_kernel(info: KernelInfo, *, replace: bool = False) -> KernelInfo:
    """Add a kernel entry. Users call this for their own kernels; ours register on import of their module."""
    if info.name in _REGISTRY and not replace and _REGISTRY[info.name] is not info:
        raise ValueError(f"kernel {info.name!r} is already registered")
    for key, v in info.variants.items():
        if key != v.name:
            raise ValueError(f"{info.name}: variant registered as {key!r} is named {v.name!r}; key variants by "
                             "their own name")
        if v.contract is None and v.bug_of is None:
            raise ValueError(f"{info.name}/{v.name}: a variant needs a contract or bug_of")
    _check_defaults(info)
    _REGISTRY[info.name] = info
    return info


def _check_defaults(info: KernelInfo) -> None:
    """Each group of correct variants sharing (dtype, accumulate, implmode) names exactly one default when it has
    more than one member (KernelInfo.defaults): the policy's choice is then declared, not derived from names."""
    groups: dict[tuple, list[Variant]] = {}
    for v in info.correct_variants:
        groups.setdefault((v.dtype, v.accumulate, v.implmode), []).append(v)
    for (dtype, acc, mode), members in groups.items():
        defaults = [v.name for v in members if v.name in info.defaults]
        if len(members) > 1 and len(defaults) != 1:
            raise ValueError(f"{info.name}: variants {[v.name for v in members]} share ({dtype}, accumulate {acc}, "
                             f"{mode}); exactly one must be named in defaults= (has {defaults or 'none'})")
    unknown = sorted(set(info.defaults) - {v.name for v in info.correct_variants})
    if unknown:
        raise ValueError(f"{info.name}: defaults= names {unknown}, which are not correct variants")


def _load_builtin() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from mschecker.kernels import entries as kernel_entries  # lazy: start-up (mschecker.kernels.entries)

    for mod in pkgutil.iter_modules(kernel_entries.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{kernel_entries.__name__}.{mod.name}")


def registry() -> dict[str, KernelInfo]:
    """All registered kernels, loading the built-in families on first use."""
    _load_builtin()
    return dict(_REGISTRY)


def get_kernel(name: str) -> KernelInfo:
    reg = registry()
    try:
        return reg[name]
    except KeyError:
        raise KeyError(f"no kernel named {name!r} (known: {', '.join(sorted(reg))})") from None
