"""Hypothesis profiles for numerical suites: `ci` (reproducible, bounded) and `thorough` (long search).

Why two: a CI run must be reproducible and bounded in time (a failure that only shows on some runs, or a
suite whose length depends on luck, is worse than useless in a merge gate), while a numerical kernel is
only trusted after a long randomized search over adversarial inputs, which belongs in a nightly or manual run.

- ``ci``: derandomized (the same examples every run, so a red build is reproducible from the log alone), no
  example database (CI machines are fresh; a database would only hide state), no deadline (the first example
  pays numpy/BLAS warm-up and shared CI cores are noisy: a timing deadline would fail on load, not on
  numerics), 25 examples per test (what keeps a suite of a few hundred property tests within a minute on two
  cores), ``print_blob`` so a failure prints the line that reproduces it.
- ``thorough``: randomized, 1000 examples per test, no deadline; run it on demand or nightly.

The profiles are registered with hypothesis as ``mschecker-ci`` and ``mschecker-thorough`` so they never
replace hypothesis' own built-in ``ci`` profile (which hypothesis loads by itself when the CI variable is
set) in a user's suite that did not ask for ours. Selection, most specific first:

1. the pytest option ``--mschecker-hypothesis-profile=ci|thorough`` (the plugin, mschecker/testing/pytest_plugin.py),
2. the environment variable ``MSCHECKER_HYPOTHESIS_PROFILE=ci|thorough``,
3. a suite's own default (mschecker's own tests/conftest.py defaults to ``ci``; the plugin alone never loads a
   profile unless 1 or 2 asks for one, so suites that do not use mschecker keep their hypothesis settings).

hypothesis' own ``--hypothesis-profile=mschecker-thorough`` works too (the plugin registers the profiles first).
"""
from __future__ import annotations

import os

ENV_VAR = "MSCHECKER_HYPOTHESIS_PROFILE"
PREFIX = "mschecker-"
CI_MAX_EXAMPLES = 25
THOROUGH_MAX_EXAMPLES = 1000
PROFILE_NAMES = ("ci", "thorough")

_registered = False


def register_profiles() -> None:
    """Register ``mschecker-ci`` and ``mschecker-thorough`` with hypothesis (idempotent)."""
    global _registered
    if _registered:
        return
    from hypothesis import HealthCheck, settings

    # too_slow / data_too_large: tensor strategies draw a seed and a shape, not every element, but a kernel
    # example can still take milliseconds; these health checks would flag the workload, not a bug.
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile(
        PREFIX + "ci", derandomize=True, database=None, deadline=None, max_examples=CI_MAX_EXAMPLES,
        print_blob=True, suppress_health_check=quiet,
    )
    settings.register_profile(
        PREFIX + "thorough", deadline=None, max_examples=THOROUGH_MAX_EXAMPLES, print_blob=True,
        suppress_health_check=quiet,
    )
    _registered = True


def hypothesis_name(name: str) -> str:
    """The hypothesis profile name for a selection ('ci' -> 'mschecker-ci'); ValueError naming the choices."""
    key = name.strip().lower()
    if key.startswith(PREFIX):
        key = key[len(PREFIX):]
    if key not in PROFILE_NAMES:
        raise ValueError(f"unknown mschecker hypothesis profile {name!r} (choose one of {', '.join(PROFILE_NAMES)})")
    return PREFIX + key


def selected(option: str | None = None, default: str | None = None) -> str | None:
    """The profile asked for: the option, else the environment variable, else `default` (may be None)."""
    for value in (option, os.environ.get(ENV_VAR), default):
        if value:
            return value
    return None


def load_profile(option: str | None = None, default: str | None = None) -> str | None:
    """Register the profiles and load the selected one; returns the hypothesis profile name loaded, or None.

    `option` is an explicit choice (e.g. a pytest option), `default` what to use when neither the option nor
    MSCHECKER_HYPOTHESIS_PROFILE says anything. With neither, hypothesis' current profile is left alone.
    """
    name = selected(option, default)
    if name is None:
        return None
    full = hypothesis_name(name)
    register_profiles()
    from hypothesis import settings

    settings.load_profile(full)
    return full
