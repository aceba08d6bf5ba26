"""Assertion helpers for users' test suites, in the spirit of numpy.testing, plus user-kernel registration.

- ``assert_close_to_reference(actual, reference, contract=... | rule=... | atol=/rtol=/ulp=)``: the actual
  tensor against a float64 reference (an array, or a callable run on the inputs), held either to a registry
  ``Contract`` (an elementwise error bound derived as in docs/NUMERICS.md) or to a ``ToleranceRule``.
- ``assert_matches_golden(name, actual, ...)`` / the ``mschecker_golden`` fixture (``GoldenDir``): the actual
  tensor against a recorded golden; with ``--mschecker-update-golden`` the golden is (re)recorded instead.
- ``register_user_kernel(...)``: a user's kernel, reference, contract and strategies join the op registry, so
  ``check_kernel(name)`` (and the kernel suite, and ``mschecker kernels``) check it exactly like ours.

A failure raises AssertionError whose message is mschecker.modelcheck.report.render_text of a CheckReport (verdict, metrics,
worst elements, which rule failed), with, for contracts, a first paragraph naming the contract and where it
broke. Inside pytest every check is also recorded for ``--mschecker-report`` (mschecker.testing.pytest_plugin).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from mschecker.compare import (TOLERANCE_KEYS, BoundRule, CheckReport, TensorComparison, ToleranceRule, compare_arrays,
                               resolve_rule)
from mschecker.dtypes import dtype_name, is_float
from mschecker.kernels.check import (OutputCheck, _to_f64, as_tuple, check_case, compare_to_contract, run_reference,
                          run_variant)
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, get_kernel, register_kernel, registry
from mschecker.testing.runstore import RunSession, active
from mschecker.fsio import file_sha256
from mschecker.kernels import registry as _registry



# ----------------------------------------------------------------------------------------------------------------
# Contracts as a reportable rule
# ----------------------------------------------------------------------------------------------------------------

#: compare.BoundRule under its historical public name (in mschecker.testing.__all__, for users); the package
#: itself says BoundRule.
ContractRule = BoundRule


def contract_comparison(actual, reference, bound, *, name: str = "output", why: str = "", dtype=None,
                        topk: int = 10) -> tuple[TensorComparison, Any]:
    """Metrics of `actual` against the float64 `reference`, with the verdict of the elementwise `bound`
    (kernels.check.compare_to_contract: one pass of the streaming engine under a BoundRule).

    Returns (TensorComparison, kernels.check.OutputCheck). The comparison's expected tensor is the reference,
    except where the reference rounded to `dtype` (the storage format, default actual's) is not finite: there
    it is that rounded value, the inf a correct kernel cannot avoid. `failed_rules` are "contract" (a finite
    expected value missed by more than the bound) and "nonfinite".
    """
    actual = np.asarray(actual)
    dtype = dtype_name(dtype if dtype is not None else actual.dtype)
    tc = compare_to_contract(actual, reference, bound, dtype, name=name, why=why, topk=topk)
    return tc, OutputCheck.from_comparison(tc)


def _contract_summary(name: str, result, why: str) -> str:
    return (f"error contract broken for {name!r}: {result.violations}/{result.size} elements exceed the bound, "
            f"{result.nonfinite_mismatches} non-finite mismatches; worst err/bound {result.worst_ratio:.3g} at "
            f"{result.worst_index} (bound there {result.bound_at_worst:.3e})\n  contract: {why}")


# ----------------------------------------------------------------------------------------------------------------
# Recording into the pytest run (no-op outside pytest)
# ----------------------------------------------------------------------------------------------------------------

def _session():
    """The active pytest run's store (None outside pytest: plain library use)."""
    return active()


def _render(report: CheckReport) -> str:
    # lazy: start-up (rich, mschecker.console, mschecker.modelcheck)
    from mschecker.modelcheck.report import render_text

    return render_text(report)


def one_line(report: CheckReport) -> str:
    """A check's one-line summary (the full Rich rendering costs ~50 ms: only failures get it)."""
    parts = []
    for t in report.tensors:
        ulp = f", ULP max {t.ulp_max} ({t.ulp_format})" if t.ulp_max is not None else ""
        err = "n/a" if t.max_abs_err is None else f"{t.max_abs_err:.3e}"
        parts.append(f"{t.name}: {'PASS' if t.passed else 'FAIL'}, max |err| {err}{ulp}")
    return "; ".join(parts) + f" [rule: {report.rule.describe()}]"


class CheckFailure(AssertionError):
    """A failed mschecker check. The message (header + render_text of the report) is rendered on first use,
    so that hypothesis, which calls a failing test many times while shrinking, does not pay for each render."""

    def __init__(self, report: CheckReport | None, header: str = ""):
        super().__init__(header)
        self.report = report
        self.header = header
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            body = _render(self.report) if self.report is not None else ""
            self._text = "\n".join(p for p in (self.header, body) if p)
        return self._text


def _severity(report: CheckReport | None) -> float:
    """How bad a check looks, to keep the worst of repeated calls: the contract's err/bound, else max |err|."""
    if report is None:
        return 0.0
    ratio = report.meta.get("worst_err_over_bound")
    if ratio is not None:
        return float(ratio)
    return max((float(t.max_abs_err) for t in report.tensors if t.max_abs_err is not None), default=0.0)


def _record(kind: str, name: str, report: CheckReport | None, text: str | None = None, passed: bool | None = None,
            nodeid: str | None = None) -> None:
    """Hand the check to the pytest run (if any); text None means one_line/render_text at report time."""
    state = _session()
    if state is not None:
        ok = report.passed if passed is None else passed
        if text is None:
            text = (lambda r=report: one_line(r)) if ok else (lambda r=report: _render(r))
        state.add_record(kind, name, ok, report, text, severity=_severity(report), nodeid=nodeid)


def _finish(kind: str, name: str, report: CheckReport, header: str = "", nodeid: str | None = None) -> CheckReport:
    """Record the check; raise CheckFailure (an AssertionError: header + plain-text report) when it failed."""
    __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
    failure = None if report.passed else CheckFailure(report, header)
    _record(kind, name, report, (lambda: str(failure)) if failure else None, nodeid=nodeid)
    if failure is not None:
        raise failure
    return report


# ----------------------------------------------------------------------------------------------------------------
# assert_close_to_reference
# ----------------------------------------------------------------------------------------------------------------

def _tolerance_as_rule(rule, tolerance):
    """`tolerance` may also be a ToleranceRule or its keyword dict ({"atol": ..., "ulp": ...})."""
    if isinstance(tolerance, ToleranceRule):
        return tolerance, None
    if isinstance(tolerance, Mapping):
        return ToleranceRule.from_args(**{k: v for k, v in tolerance.items()
                                          if k in (*TOLERANCE_KEYS, "ulp_format")}), None
    return rule, tolerance


def _rule_from(rule, tolerance, atol, rtol, ulp, cosine, actual) -> ToleranceRule | None:
    if rule is None:
        rule, tolerance = _tolerance_as_rule(rule, tolerance)
    if rule is None and all(v is None for v in (tolerance, atol, rtol, ulp, cosine)):
        return None
    if rule is None:
        rule = ToleranceRule.from_args(tolerance=tolerance, atol=atol, rtol=rtol, ulp=ulp, cosine=cosine)
    if rule.ulp_format is None and is_float(np.asarray(actual).dtype):
        # ULPs of the actual's storage format: the reference is float64, whose ULPs say nothing here.
        rule = dataclasses.replace(rule, ulp_format=dtype_name(np.asarray(actual).dtype))
    return rule


def assert_close_to_reference(actual, reference, *, inputs: Sequence = (), params: Mapping | None = None,
                              contract: Contract | None = None, rule: ToleranceRule | None = None,
                              tolerance=None, atol=None, rtol=None, ulp=None, cosine=None,
                              accumulate: str = "float32", name: str = "output", topk: int = 10,
                              meta: Mapping | None = None) -> CheckReport:
    """Assert that `actual` (one array, or a tuple for multi-output kernels) is close to the float64 truth.

    reference: the float64 reference output(s), or a callable run as ``reference(*inputs_in_float64, **params)``.
    Hold it to exactly one of:
      contract: a registry Contract; its bound is evaluated on Case(inputs, params), the reference output and a
        Variant of actual's dtype accumulating in `accumulate` (what the contract's derivation assumes);
      rule / tolerance / atol / rtol / ulp / cosine: a ToleranceRule (numpy.isclose convention, ULPs counted in
        actual's format unless the rule names one).
    There is deliberately no default tolerance: a tolerance must come from an error bound or a measured baseline.
    Returns the CheckReport; raises AssertionError with its plain-text rendering on failure.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
    params = dict(params or {})
    outs = tuple(np.asarray(a) for a in as_tuple(actual))
    if callable(reference):
        refs = tuple(np.asarray(r, dtype=np.float64)
                     for r in as_tuple(reference(*(_to_f64(x) for x in inputs), **params)))
    else:
        refs = tuple(np.asarray(r, dtype=np.float64) for r in as_tuple(reference))
    if len(outs) != len(refs):
        raise ValueError(f"{name}: {len(outs)} actual output(s) but {len(refs)} reference output(s)")
    names = [name] if len(outs) == 1 else [f"{name}[{i}]" for i in range(len(outs))]
    tol_rule = _rule_from(rule, tolerance, atol, rtol, ulp, cosine, outs[0])
    if (contract is None) == (tol_rule is None):
        raise TypeError("assert_close_to_reference needs exactly one of contract= or a tolerance "
                        "(rule=, tolerance=, atol=, rtol=, ulp=, cosine=)")
    info = {"check": "reference", **dict(meta or {})}
    if contract is None:
        tensors = [compare_arrays(o, r, tol_rule, name=n, topk=topk) for o, r, n in zip(outs, refs, names)]
        return _finish("reference", name, CheckReport(tensors, tol_rule, info))
    storage = dtype_name(outs[0].dtype)
    variant = Variant(name="user", fn=lambda *a, **k: None, dtype=storage, contract=contract, accumulate=accumulate)
    info.update({"contract": contract.why, "storage": storage, "accumulate": accumulate})
    report, header = contract_report(Case(tuple(inputs), params, label=name), outs, refs, contract, variant, names,
                                     info, topk=topk)
    return _finish("reference", name, report, header)


def contract_report(case: Case, outs, refs, contract: Contract, variant: Variant, names: Sequence[str],
                    meta: dict, topk: int = 10) -> tuple[CheckReport, str]:
    """The CheckReport of outputs held to a contract (one TensorComparison each) and the failure header.

    The bound is evaluated as kernels.check does: on the case the variant saw, the float64 reference output(s)
    and the variant (its storage and accumulator dtypes). meta gains worst_err_over_bound (max over outputs).
    """
    with np.errstate(all="ignore"):
        bounds = contract.bound(case, refs if len(refs) > 1 else refs[0], variant)
    bounds = as_tuple(bounds) if len(refs) > 1 else (bounds,)
    tensors, headers, worst = [], [], 0.0
    for o, r, b, n in zip(outs, refs, bounds, names):
        tc, result = contract_comparison(o, r, b, name=n, why=contract.why, dtype=variant.dtype, topk=topk)
        tensors.append(tc)
        worst = max(worst, result.worst_ratio)
        if not result.passed:
            headers.append(_contract_summary(n, result, contract.why))
    meta["worst_err_over_bound"] = worst
    rule = BoundRule(ulp_format=variant.dtype, why=contract.why)
    return CheckReport(tensors, rule, meta), "\n".join(headers)


# ----------------------------------------------------------------------------------------------------------------
# Goldens
# ----------------------------------------------------------------------------------------------------------------

DEFAULT_GOLDEN_DIR = Path("tests/golden")
#: A golden pins what the code produced: without a stated tolerance, any change is one to look at.
EXACT = ToleranceRule(atol=0.0, rtol=0.0)


def _golden_rule(rule, tolerance, atol, rtol, ulp, cosine, manifest: dict | None) -> ToleranceRule:
    """The stated rule; else the golden directory's tolerance hint; else exact (atol = rtol = 0).

    Exact by default because a golden pins what the code produced: without a stated tolerance any change is a
    change to be looked at (and re-recorded with --mschecker-update-golden if intended).
    """
    if rule is None:
        rule, tolerance = _tolerance_as_rule(rule, tolerance)
    if rule is not None:
        return rule
    stated = {"tolerance": tolerance, "atol": atol, "rtol": rtol, "ulp": ulp, "cosine": cosine}
    return resolve_rule(stated, (manifest or {}).get("tolerance"), default=EXACT)[0]


def _record_command(nodeid: str | None, directory: Path, default_dir: Path | None) -> str:
    if nodeid:
        extra = "" if default_dir is not None and directory == default_dir else f" --mschecker-golden-dir {directory}"
        return f"pytest --mschecker-update-golden{extra} '{nodeid}'"
    return f"assert_matches_golden(..., directory='{directory}', update=True)"


def assert_matches_golden(name: str, actual, *, rule: ToleranceRule | None = None, tolerance=None, atol=None,
                          rtol=None, ulp=None, cosine=None, directory=None, update: bool | None = None,
                          nodeid: str | None = None, topk: int = 10) -> CheckReport | None:
    """Assert that `actual` matches the golden tensor `name` in the golden directory.

    directory: default the pytest run's golden directory (ini mschecker_golden_dir / --mschecker-golden-dir),
    else tests/golden. Rule: as given, else the directory manifest's tolerance hint, else bit-exact.
    update (default: the run's --mschecker-update-golden): record `actual` instead of checking. In pytest the
    golden directory is rewritten once at session end and the changes are listed; outside pytest it is
    written at once. A missing golden, without update, fails with the command that records it.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
    from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, onnx, mschecker.schema)
    state = _session()
    default_dir = state.ini_golden_dir if state is not None else None
    run_dir = state.golden_dir if state is not None else DEFAULT_GOLDEN_DIR.resolve()
    directory = Path(directory).resolve() if directory is not None else run_dir
    update = state.update_golden if (update is None and state is not None) else bool(update)
    nodeid = nodeid or (state.current_nodeid if state is not None else None)
    actual = np.asarray(actual)

    manifest = golden_store.read_manifest(directory) if golden_store.manifest_path(directory).is_file() else None
    entry = (manifest or {}).get("tensors", {}).get(name)
    if update:
        if state is not None:
            state.add_pending(directory, name, actual, nodeid=nodeid)
        else:
            now = RunSession(directory, update_golden=True)
            now.add_pending(directory, name, actual)
            now.commit_goldens(producer="mschecker.testing.assert_matches_golden")
        _record("golden-update", name, None, f"golden {name!r} queued for recording in {directory}", passed=True,
                nodeid=nodeid)
        return None
    if entry is None:
        where = "no manifest.json there" if manifest is None else "not in its manifest"
        text = (f"golden {name!r} is not recorded in {directory} ({where}); record it with:\n"
                f"  {_record_command(nodeid, directory, default_dir)}")
        _record("golden", name, None, text, passed=False, nodeid=nodeid)
        raise CheckFailure(None, text)
    path = directory / entry["file"]
    if not path.is_file() or file_sha256(path) != entry["sha256"]:
        text = (f"golden {name!r}: {path} is missing or its sha256 differs from {directory / golden_store.MANIFEST}; "
                f"the golden directory is damaged (mschecker golden verify {directory})")
        _record("golden", name, None, text, passed=False, nodeid=nodeid)
        raise CheckFailure(None, text)
    expected = golden_store.load(directory, verify=False)[name]
    the_rule = _golden_rule(rule, tolerance, atol, rtol, ulp, cosine, manifest)
    if actual.shape != expected.shape:
        text = (f"golden {name!r}: actual shape {actual.shape} differs from the golden's {expected.shape} "
                f"({path}); if the change is intended: {_record_command(nodeid, directory, default_dir)}")
        _record("golden", name, None, text, passed=False, nodeid=nodeid)
        raise CheckFailure(None, text)
    tc = compare_arrays(actual, expected, the_rule, name=name, topk=topk)
    report = CheckReport([tc], the_rule, {"check": "golden", "golden_dir": str(directory), "golden_file": str(path),
                                          "sha256": entry["sha256"], "test": nodeid})
    header = "" if report.passed else (f"golden mismatch for {name!r} ({path}); if the change is intended, re-record "
                                       f"with: {_record_command(nodeid, directory, default_dir)}")
    return _finish("golden", name, report, header, nodeid=nodeid)


class GoldenDir:
    """A golden directory bound to a test (what the ``mschecker_golden`` fixture returns)."""

    def __init__(self, path, *, update: bool = False, nodeid: str | None = None):
        self.path = Path(path)
        self.update = update
        self.nodeid = nodeid

    def check(self, name: str, actual, **tolerance) -> CheckReport | None:
        """assert_matches_golden(name, actual, **tolerance) against this directory."""
        __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
        return assert_matches_golden(name, actual, directory=self.path, update=self.update, nodeid=self.nodeid,
                                     **tolerance)

    def names(self) -> list[str]:
        from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

        if not golden_store.manifest_path(self.path).is_file():
            return []
        return list(golden_store.read_manifest(self.path)["tensors"])

    def load(self, name: str) -> np.ndarray:
        from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

        return golden_store.load(self.path, verify=False)[name]

    def __repr__(self) -> str:
        return f"GoldenDir({str(self.path)!r}, update={self.update})"


# ----------------------------------------------------------------------------------------------------------------
# User kernels
# ----------------------------------------------------------------------------------------------------------------

_STORAGE = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
_VARIANT_NAME = re.compile(r"^(fp16|bf16|fp32)(?:_(fp16|bf16|fp32)acc)?(?:_\w+)?$")
_USER_KERNELS: set[str] = set()


def _storage_from_name(name: str) -> tuple[str, str] | None:
    """('float16', 'float32') for 'fp16_fp32acc[_algo]', ('float32', 'float32') for 'fp32'; None otherwise."""
    m = _VARIANT_NAME.match(name)
    if not m:
        return None
    storage = _STORAGE[m.group(1)]
    return storage, _STORAGE[m.group(2)] if m.group(2) else ("float32" if storage != "float32" else storage)


def planted_bug(fn: Callable, *, of: str, what: str, catch_with: str | None = None, dtype: str | None = None,
                accumulate: str | None = None) -> Variant:
    """A planted-bug variant of a user kernel: held to variant `of`'s contract, which it must break.

    The name is filled in by register_user_kernel from the variants mapping key (which must start with bug_).
    """
    return Variant(name="", fn=fn, dtype=dtype or "", contract=None, accumulate=accumulate or "",
                   planted_bug=what, bug_of=of, catch_with=catch_with)


def register_user_kernel(name: str, reference: Callable, variants: Mapping[str, Any], *, contract: Contract,
                         strategies: Mapping[str, Any], family: str = "user", doc: str = "",
                         golden_cases: Callable[[], Sequence[Case]] | None = None,
                         dtype: str | None = None, accumulate: str | None = None,
                         implmode: str = "high_precision") -> KernelInfo:
    """Add a user's kernel to the op registry so check_kernel(name) and ``mschecker kernels`` check it.

    reference: float64 function ``reference(*inputs, **params)``.
    variants: name -> function, Variant, or planted_bug(...). A plain function's storage and accumulator dtypes
      come from its name when it follows the registry convention ``<storage>[_<acc>acc][_<algo>]``
      (fp16_fp32acc, bf16_fp32acc, fp32, ...), else from `dtype`/`accumulate`. Each correct variant is held
      to `contract`; planted bugs to the contract of the variant they are a bug of.
    strategies: name -> hypothesis strategy of registry Cases (or a zero-argument factory of one); must include
      "generic" (what planted bugs are searched with unless they name another).
    Re-registering a user kernel's name replaces it (test runners may import a module twice); a built-in
    kernel's name is refused.
    """
    if name in registry() and name not in _USER_KERNELS:
        raise ValueError(f"kernel {name!r} is a built-in mschecker kernel; choose another name")
    if "generic" not in strategies:
        raise ValueError(f"kernel {name!r}: strategies must include 'generic' (has {sorted(strategies)})")
    built: dict[str, Variant] = {}
    for vname, spec in variants.items():
        if isinstance(spec, Variant):
            v = dataclasses.replace(spec, name=vname)
        elif callable(spec):
            v = Variant(name=vname, fn=spec, dtype="", contract=contract, implmode=implmode)
        else:
            raise TypeError(f"kernel {name!r}: variant {vname!r} must be a function or a Variant, got {type(spec)}")
        if v.is_planted_bug and not vname.startswith("bug_"):
            raise ValueError(f"kernel {name!r}: planted-bug variant {vname!r} must be named bug_...")
        if not v.is_planted_bug and v.contract is None:
            v = dataclasses.replace(v, contract=contract)
        if not v.dtype or not v.accumulate:
            parsed = _storage_from_name(vname) or (_storage_from_name(v.bug_of) if v.bug_of else None)
            store, acc = (dtype or (parsed or (None, None))[0]), (accumulate or (parsed or (None, None))[1])
            if store is None:
                raise ValueError(f"kernel {name!r}: cannot tell the storage dtype of variant {vname!r}; name it "
                                 "<storage>_<acc>acc (e.g. fp16_fp32acc) or pass dtype=")
            v = dataclasses.replace(v, dtype=v.dtype or store, accumulate=v.accumulate or acc or "float32")
        built[vname] = v
    for v in built.values():
        if v.bug_of is not None and v.bug_of not in built:
            raise ValueError(f"kernel {name!r}: planted bug {v.name!r} names bug_of={v.bug_of!r}, not a variant")
    factories = {k: (s if not _is_strategy(s) else (lambda s=s: s)) for k, s in strategies.items()}
    factories = {"generic": factories["generic"], **{k: f for k, f in factories.items() if k != "generic"}}
    info = KernelInfo(name=name, family=family, reference=reference, variants=built, strategies=factories,
                      golden_cases=golden_cases or (lambda: []), doc=doc)
    register_kernel(info, replace=True)
    _USER_KERNELS.add(name)
    return info


def unregister_user_kernel(name: str) -> None:
    """Remove a kernel added by register_user_kernel (test clean-up); built-in kernels cannot be removed."""
    if name not in _USER_KERNELS:
        raise ValueError(f"{name!r} is not a user kernel registered with register_user_kernel")
    _registry._REGISTRY.pop(name, None)
    _USER_KERNELS.discard(name)


def _is_strategy(x) -> bool:
    from hypothesis.strategies import SearchStrategy

    return isinstance(x, SearchStrategy)


def kernel_case_report(info: KernelInfo, variant: Variant, case: Case) -> tuple[CheckReport, str]:
    """The full report of one registered variant on one case (kernels.check's rounding and reference rules)."""
    rounded, outs = run_variant(variant, case)
    refs = run_reference(info, rounded)
    names = [f"{info.name}/{variant.name}" + (f"[{i}]" if len(outs) > 1 else "") for i in range(len(outs))]
    meta = {"check": "kernel", "kernel": info.name, "variant": variant.name, "storage": variant.dtype,
            "accumulate": variant.accumulate, "implmode": variant.implmode, "case": case.label,
            "params": dict(case.params), "input_shapes": [list(np.shape(x)) for x in case.inputs]}
    return contract_report(rounded, outs, refs, info.contract_of(variant), variant, names, meta)


def _contract_search_body(info: KernelInfo, variant: Variant, worst: dict):
    """The hypothesis test body of check_kernel: track the worst passing case, raise a report on a failing one."""
    def body(case):
        from hypothesis import target

        result = check_case(info, variant, case)
        # Steer the search toward the largest error relative to the bound (hypothesis' targeted phase): the
        # cases that almost break a contract are the ones worth mutating.
        ratio = result.worst_ratio
        target(ratio if np.isfinite(ratio) else 1e300, label="worst err/bound")
        if result.passed:
            if result.worst_ratio > worst["ratio"]:
                worst.update(ratio=result.worst_ratio, case=case)
            return
        report, header = kernel_case_report(info, variant, case)
        raise CheckFailure(report, header)
    return body


def check_kernel(name: str, *, variants: Sequence[str] | None = None, strategies: Sequence[str] | None = None,
                 settings=None) -> list[CheckReport]:
    """Every correct variant of kernel `name` meets its contract on its golden cases and on every strategy.

    The strategies are searched with hypothesis, targeted at the largest err/bound ratio. Runs under the current hypothesis profile unless `settings` (a hypothesis.settings) is given. For each
    variant x strategy, records the worst case seen (largest error/bound ratio) in the run report; on the first
    contract violation hypothesis shrinks the case and the AssertionError carries the plain-text report of the
    minimal failing case. Returns the reports of the worst cases.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
    from hypothesis import given

    info = get_kernel(name)
    chosen = [info.variant(v) for v in variants] if variants else info.correct_variants
    reports = []
    for variant in chosen:
        for case in info.golden_cases():  # the entry's fixed cases first: cheap and always the same
            if not check_case(info, variant, case).passed:
                report, header = kernel_case_report(info, variant, case)
                report.meta["strategy"] = "golden_cases"
                failure = CheckFailure(report, header)
                _record("kernel", f"{name}/{variant.name} on golden_cases", report, lambda f=failure: str(f))
                raise failure
        for sname in strategies or list(info.strategies):
            worst: dict[str, Any] = {"ratio": -1.0, "case": None}
            test = given(info.strategies[sname]())(_contract_search_body(info, variant, worst))
            if settings is not None:
                test = settings(test)
            label = f"{variant.name} on {sname}"
            try:
                test()
            except CheckFailure as exc:  # hypothesis re-raises the minimal failing example's failure last
                exc.report.meta["strategy"] = sname
                _record("kernel", f"{name}/{label}", exc.report, lambda exc=exc: str(exc))
                raise
            if worst["case"] is not None:
                report, _ = kernel_case_report(info, variant, worst["case"])
                report.meta.update({"strategy": sname, "worst_err_over_bound": worst["ratio"],
                                    "note": "the worst case the search saw"})
                _record("kernel", f"{name}/{label}", report,
                        lambda r=report: one_line(r) + f"; worst err/bound {r.meta['worst_err_over_bound']:.3g} "
                        "over the search")
                reports.append(report)
    return reports


def check_planted_bugs(name: str, *, max_examples: int = 300) -> list[Case]:
    """Every planted-bug variant of kernel `name` is caught: a search finds a case that breaks its contract.

    Proves the contract and strategies can fail. Derandomized, so the outcome does not depend on luck; the
    budget (300 examples) is what the built-in kernels' planted bugs need at most with their catch_with strategy.
    Returns the failing case found for each bug; AssertionError names a bug that was not caught.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not mschecker's internals
    from mschecker.kernels.suite import find_breaking_case  # lazy: start-up (hypothesis, mschecker.kernels)

    info = get_kernel(name)
    found = []
    for bug in info.planted_bugs:
        case = find_breaking_case(info, bug, max_examples)
        if case is None:
            text = (f"{name}/{bug.name} ({bug.planted_bug}) was not caught by strategy {bug.catch_with or 'generic'} "
                    f"in {max_examples} examples: the contract or the strategy is too weak")
            _record("planted-bug", f"{name}/{bug.name}", None, text, passed=False)
            raise AssertionError(text)
        _record("planted-bug", f"{name}/{bug.name}", None,
                f"{name}/{bug.name} ({bug.planted_bug}) caught on {case.label}", passed=True)
        found.append(case)
    return found
