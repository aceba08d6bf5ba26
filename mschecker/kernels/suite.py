"""The kernel suite: every registered kernel's variants against their contracts, on generated and golden cases.

Library side of `mschecker kernels`. For each kernel, each strategy draws `examples` cases with hypothesis
(derandomized, no example database: the same cases every run) and the kernel's golden_cases are added; every
variant runs on the same cases.
- A correct variant passes when it meets its contract on every case.
- A planted bug is "caught" when some case breaks the contract it is held to (its correct twin's). When the
  shared cases do not catch it, a targeted search on the bug's `catch_with` strategy (hypothesis `find`,
  derandomized, BUG_SEARCH_FACTOR x examples) gets one more chance, mirroring tests/kernels/test_contracts.py.
The suite passes when every correct variant passes and every planted bug is caught.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis.errors import NoSuchExample

from mschecker.kernels.check import CheckResult, check_case
from mschecker.kernels.registry import Case, KernelInfo, Variant, get_kernel, registry

BUG_SEARCH_FACTOR = 10
VERDICT_PASS, VERDICT_FAIL = "pass", "FAIL"
VERDICT_CAUGHT, VERDICT_MISSED = "bug caught", "BUG MISSED"


@contextlib.contextmanager
def reproducible_draws():
    """Draw cases as a function of the strategy alone, writing nothing to disk.

    hypothesis (>= 6.131) mixes into its draws, with probability 0.05 each, constants it collects from the
    source of every "local" module (not site-packages, not stdlib) in sys.modules at the time, and caches them
    in .hypothesis/constants/ under the current directory. So the cases of `mschecker kernels` depended on
    whether mschecker was installed editable, on which modules happened to be imported (a user --module, a
    campaign worker's imports) and wrote into the user's cwd; a derandomized run was not reproducible across
    installs and processes. For the duration, the local pool is empty (hypothesis' fixed global constants
    stay), its storage is a temporary folder, and the "random module used inside strategies" warning that
    other threads' use of `random` (Dask's) triggers is not shown. The pool hooks are hypothesis internals:
    where they are missing, only the storage and the warning are handled (tests/test_kernel_suite_draws.py
    checks the draws do not depend on the loaded modules)."""
    from hypothesis import configuration
    from hypothesis.errors import HypothesisDeprecationWarning

    try:
        from hypothesis.internal.conjecture import providers
        pool_hooks = callable(getattr(providers, "_get_local_constants", None)) \
            and hasattr(providers, "CONSTANTS_CACHE") and hasattr(providers, "Constants")
    except ImportError:  # pragma: no cover - a hypothesis without the constants pool
        providers, pool_hooks = None, False
    home = getattr(configuration, "_configuration__hypothesis_home_directory", None)
    with tempfile.TemporaryDirectory(prefix="mschecker-hypothesis-") as tmp, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*random module.*", category=HypothesisDeprecationWarning)
        configuration.set_hypothesis_home_dir(tmp)
        if pool_hooks:
            saved = providers._get_local_constants
            empty = providers.Constants()
            providers._get_local_constants = lambda: empty
            providers.CONSTANTS_CACHE.cache.clear()
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(home)
            if pool_hooks:
                providers._get_local_constants = saved
                providers.CONSTANTS_CACHE.cache.clear()


def _settings(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck),
                    print_blob=False)


def draw_cases(strategy, examples: int) -> list[Case]:
    """Up to `examples` cases from a hypothesis strategy, the same ones on every run (derandomized)."""
    cases: list[Case] = []

    @_settings(examples)
    @given(strategy)
    def collect(case):
        cases.append(case)

    with reproducible_draws():
        collect()
    return cases[:examples]


@dataclass
class VariantOutcome:
    """One variant's result over all cases of the suite."""

    kernel: str
    variant: str
    dtype: str
    implmode: str
    planted_bug: str | None
    cases: int = 0
    failures: int = 0
    crashes: int = 0  # failures that were exceptions: a crashing planted bug is mis-wired, not caught
    no_claim: int = 0  # passing cases whose worst element lies outside the contract's domain (bound inf)
    max_abs_err: float = 0.0
    bound_at_worst: float = 0.0
    worst_ratio: float = 0.0
    ulp_p99: float = 0.0
    worst_case: str = ""
    first_failure: str | None = None

    @property
    def verdict(self) -> str:
        if self.planted_bug is not None:
            return VERDICT_CAUGHT if self.failures > self.crashes else VERDICT_MISSED
        return VERDICT_PASS if not self.failures else VERDICT_FAIL

    @property
    def ok(self) -> bool:
        return self.verdict in (VERDICT_PASS, VERDICT_CAUGHT)

    def add(self, result: CheckResult) -> None:
        self.cases += 1
        if result.passed and math.isinf(result.bound_at_worst):
            # The contract makes no claim at the worst element (outside its domain: overflowing statistics,
            # gamma_n with n u >= 1); counted, but kept out of the error columns.
            self.no_claim += 1
            return
        self.max_abs_err = max(self.max_abs_err, result.max_abs_err)
        self.ulp_p99 = max(self.ulp_p99, result.ulp_p99)
        if result.worst_ratio >= self.worst_ratio:
            self.worst_ratio = result.worst_ratio
            self.bound_at_worst = result.bound_at_worst
            self.worst_case = result.label
        if not result.passed:
            self.failures += 1
            if self.first_failure is None:
                self.first_failure = result.describe()

    def add_crash(self, case: Case, exc: Exception) -> None:
        self.cases += 1
        self.failures += 1
        self.crashes += 1
        self.worst_ratio = float("inf")
        if self.first_failure is None:
            self.first_failure = f"{self.kernel}/{self.variant} on {case.label or 'case'}: raised {exc!r}"

    def to_dict(self) -> dict:
        """JSON-ready: non-finite floats become the strings "inf"/"nan" (a bound of inf means "no claim")."""
        d = {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in asdict(self).items()}
        d["verdict"] = self.verdict
        return d


@dataclass
class SuiteReport:
    outcomes: list[VariantOutcome] = field(default_factory=list)
    examples: int = 0
    kernels: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def to_dict(self) -> dict:
        return {"schema_version": 1, "examples_per_strategy": self.examples, "kernels": self.kernels,
                "passed": self.passed, "variants": [o.to_dict() for o in self.outcomes]}


# on_outputs(kernel, variant, case, outputs): the outputs a variant computed on a case (the tuple check_case
# judges), after the check; not called when the variant raised. Lets a caller fingerprint them (campaign cells).
OutputsHook = Callable[[str, str, Case, tuple], None]


def _check(info: KernelInfo, variant: Variant, case: Case, outcome: VariantOutcome,
           on_outputs: OutputsHook | None = None) -> None:
    produced: list[tuple] = []
    try:
        outcome.add(check_case(info, variant if on_outputs is None else _observed(variant, produced), case))
    except Exception as exc:  # a crashing kernel is a failing kernel, reported, not a crashed suite
        outcome.add_crash(case, exc)
    if on_outputs is not None and produced:  # outside the try: a failing hook is not the kernel's crash
        on_outputs(info.name, variant.name, case, produced[0])


def _observed(variant: Variant, produced: list) -> Variant:
    """The same variant whose fn also hands its outputs to `produced` (check_case runs fn once per case)."""
    fn = variant.fn

    def observed(*args, **kwargs):
        out = fn(*args, **kwargs)
        produced.append(tuple(out) if isinstance(out, (tuple, list)) else (out,))
        return out
    return dataclasses.replace(variant, fn=observed)


def find_breaking_case(info: KernelInfo, bug: Variant, max_examples: int) -> Case | None:
    """A case on which the planted bug breaks the contract it is held to, searched (derandomized) with its
    catch_with strategy; None when `max_examples` draws find none. The one search the suite, the pytest helper
    (testing.check_planted_bugs) and the registry-wide test all use. A crash is not a catch: the bug must break
    its contract on an input it accepts."""
    strategy = info.strategies[bug.catch_with or "generic"]()

    def breaks(case: Case) -> bool:
        try:
            return not check_case(info, bug, case).passed
        except Exception:  # noqa: BLE001 - see the docstring
            return False

    try:
        with reproducible_draws():
            return find(strategy, breaks, settings=_settings(max_examples))
    except NoSuchExample:
        return None


def _search_bug(info: KernelInfo, bug: Variant, examples: int, outcome: VariantOutcome,
                on_outputs: OutputsHook | None = None) -> None:
    case = find_breaking_case(info, bug, BUG_SEARCH_FACTOR * examples)
    if case is not None:
        _check(info, bug, case, outcome, on_outputs)


def kernel_cases(info: KernelInfo, examples: int) -> list[Case]:
    """The drawn cases of every strategy (labels prefixed by the strategy name) plus the golden cases."""
    cases: list[Case] = []
    for name, factory in info.strategies.items():
        cases += [Case(c.inputs, c.params, f"{name}: {c.label}") for c in draw_cases(factory(), examples)]
    cases += [Case(c.inputs, c.params, f"golden: {c.label}") for c in info.golden_cases()]
    return cases


def run_kernel(info: KernelInfo, examples: int, on_variant: Callable[[str], None] | None = None,
               on_outputs: OutputsHook | None = None) -> list[VariantOutcome]:
    cases = kernel_cases(info, examples)
    outcomes = []
    for v in info.variants.values():
        outcome = VariantOutcome(info.name, v.name, v.dtype, v.implmode, v.planted_bug)
        for case in cases:
            _check(info, v, case, outcome, on_outputs)
            if v.is_planted_bug and outcome.failures:
                break  # caught: one violating input is the evidence
        if v.is_planted_bug and not outcome.failures:
            _search_bug(info, v, examples, outcome, on_outputs)
        outcomes.append(outcome)
        if on_variant:
            on_variant(v.name)
    return outcomes


def resolve_kernels(names: Iterable[str] | None) -> list[KernelInfo]:
    """KernelInfos for the given names (all registered kernels, sorted, when None/empty); KeyError names the
    unknown one."""
    names = list(names or [])
    if not names:
        return [registry()[k] for k in sorted(registry())]
    return [get_kernel(n) for n in dict.fromkeys(names)]


def run_suite(kernels: Iterable[str] | None = None, examples: int = 20,
              progress: Callable[[str, str], None] | None = None,
              on_outputs: OutputsHook | None = None) -> SuiteReport:
    """Run the suite on the named kernels (all when None). progress(kernel, variant) is called after each
    variant, for a progress bar; on_outputs (OutputsHook) sees every variant's outputs on every case."""
    if examples < 1:
        raise ValueError("examples must be >= 1")
    infos = resolve_kernels(kernels)
    report = SuiteReport(examples=examples, kernels=[i.name for i in infos])
    for info in infos:
        report.outcomes += run_kernel(info, examples, (lambda v, k=info.name: progress(k, v)) if progress else None,
                                      on_outputs)
    return report
