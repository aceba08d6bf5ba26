"""The mschecker pytest plugin (entry point ``pytest11: mschecker``): goldens, one run report, hypothesis profiles.

It loads in every pytest run where mschecker is installed, so it must cost nothing and change nothing for
tests that do not use it: at import time this module needs only the standard library and pytest; numpy,
hypothesis and the comparison engine are imported when a test first uses the fixture or an assertion helper
(mschecker.testing). Without any mschecker option it registers options, one fixture, and loads no profile.

What it adds (docs/PLUGIN.md is the user's view):
- ``--mschecker-report PATH``: one report for the whole run: every mschecker assertion's comparison (metrics,
  worst elements, failed rules, plain-text diff), its test node id, and every test's verdict. PATH ending in
  ``.html`` writes the HTML page and the JSON beside it (same stem, ``.json``); any other PATH gets JSON.
- ``--mschecker-update-golden``: golden assertions record the actual tensors instead of failing; the golden
  directories are rewritten once at the end of the session (mschecker.tensors.golden_store.record: atomic per file, manifest
  last) and the terminal summary lists what was added or changed.
- ``--mschecker-golden-dir DIR`` / ini ``mschecker_golden_dir`` (default ``tests/golden`` under the rootdir).
- ``--mschecker-hypothesis-profile ci|thorough`` (or MSCHECKER_HYPOTHESIS_PROFILE): see mschecker.testing.hypothesis_profiles.

pytest-xdist: a worker keeps its own records and, in update mode, stages its goldens under a directory the
controller handed it (``workerinput``); at its end the records travel back in ``workeroutput``; the controller
merges them, writes the one report and records each golden directory once, so no two processes ever write the
same manifest.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mschecker.testing.runstore import RunSession, activate, active, deactivate, write_run_report

_STATE_KEY = "_mschecker_run_session"


# ----------------------------------------------------------------------------------------------------------------
# Hooks
# ----------------------------------------------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("mschecker", "mschecker numerical checks")
    group.addoption("--mschecker-report", metavar="PATH", default=None,
                    help="write one mschecker report for the whole run: JSON, or HTML plus JSON if PATH ends in .html")
    group.addoption("--mschecker-update-golden", action="store_true", default=False,
                    help="record actual tensors as goldens (atomically, at session end) instead of failing")
    group.addoption("--mschecker-golden-dir", metavar="DIR", default=None,
                    help="golden directory for mschecker_golden / assert_matches_golden (overrides the ini value)")
    group.addoption("--mschecker-hypothesis-profile", metavar="NAME", default=None,
                    help="load mschecker's hypothesis profile: ci (derandomized, bounded) or thorough; default "
                         "$MSCHECKER_HYPOTHESIS_PROFILE, else hypothesis' profile is left alone")
    parser.addini("mschecker_golden_dir", "mschecker golden directory, relative to the rootdir", default="tests/golden")


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def _ini_golden_dir(config) -> Path:
    return (Path(str(config.rootpath)) / config.getini("mschecker_golden_dir")).resolve()


def _golden_dir(config) -> Path:
    option = config.getoption("mschecker_golden_dir")
    return Path(option).resolve() if option else _ini_golden_dir(config)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # tryfirst: register the profiles before hypothesis' own plugin loads --hypothesis-profile=mschecker-...
    _configure_profiles(config)
    _check_paths(config)
    update = bool(config.getoption("mschecker_update_golden"))
    staging = None
    if update:
        import tempfile

        staging = (config.workerinput.get("mschecker_staging") if _is_worker(config)
                   else tempfile.mkdtemp(prefix="mschecker-golden-staging-"))
    state = RunSession(_golden_dir(config), update_golden=update, staging_dir=Path(staging) if staging else None,
                       worker_id=config.workerinput.get("workerid") if _is_worker(config) else None,
                       ini_golden_dir=_ini_golden_dir(config))
    setattr(config, _STATE_KEY, state)
    activate(state)


def _check_paths(config) -> None:
    """Bad paths are usage errors at start-up (one line, exit 4), not a crash after the whole run."""
    report = config.getoption("mschecker_report")
    if report and Path(config.invocation_params.dir, report).is_dir():
        raise pytest.UsageError(f"--mschecker-report {report}: is a directory (give a .json or .html file path)")
    golden = _golden_dir(config)
    if golden.exists() and not golden.is_dir():
        raise pytest.UsageError(f"mschecker golden directory {golden}: exists and is not a directory")


def _configure_profiles(config) -> None:
    option = config.getoption("mschecker_hypothesis_profile")
    hyp = getattr(config.option, "hypothesis_profile", None)
    if not option and not hyp and not os.environ.get("MSCHECKER_HYPOTHESIS_PROFILE"):
        return  # nothing asked for: do not even import hypothesis
    from mschecker.testing import hypothesis_profiles  # lazy: start-up (mschecker.testing.hypothesis_profiles)

    if hyp and str(hyp).startswith(hypothesis_profiles.PREFIX):
        hypothesis_profiles.register_profiles()
    try:
        hypothesis_profiles.load_profile(option)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _state(config) -> RunSession | None:
    return getattr(config, _STATE_KEY, None)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: hand each worker the shared golden staging directory."""
    state = _state(node.config)
    if state is not None and state.staging_dir is not None:
        node.workerinput["mschecker_staging"] = str(state.staging_dir)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: take the records and staged goldens a worker sent back."""
    state = _state(node.config)
    output = getattr(node, "workeroutput", None) or {}
    if state is not None and "mschecker_records" in output:
        state.absorb_worker(json.loads(output["mschecker_records"]))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    state = _state(item.config)
    if state is not None:
        state.current_nodeid = item.nodeid
    try:
        yield
    finally:
        if state is not None:
            state.current_nodeid = None


def pytest_runtest_logreport(report):
    """Verdict per test; on an xdist controller this sees the reports the workers forward."""
    state = active()
    if state is not None and state.worker_id is None:
        state.note_outcome(report.nodeid, report.when, report.outcome)


@pytest.fixture
def mschecker_golden(request):
    """The run's golden directory: ``mschecker_golden.check(name, actual, ulp=1)`` (see mschecker.testing)."""
    from mschecker.testing.asserts import GoldenDir  # lazy: every pytest run imports the plugin (numpy, compare)

    state = _state(request.config)
    return GoldenDir(state.golden_dir, update=state.update_golden, nodeid=request.node.nodeid)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    state = _state(config)
    if state is None:
        return
    if _is_worker(config):
        state.stage_pending()
        config.workeroutput["mschecker_records"] = json.dumps(state.export(), default=str)
        return
    state.commit_goldens(producer="mschecker pytest plugin")
    path = config.getoption("mschecker_report")
    if path:
        state.meta.update({"rootdir": str(config.rootpath), "args": [str(a) for a in config.invocation_params.args],
                           "exitstatus": int(exitstatus)})
        state.written_reports = write_run_report(state, Path(config.invocation_params.dir) / path)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = _state(config)
    if state is None or _is_worker(config):
        return
    for line in state.summary_lines():
        terminalreporter.write_line(line)


def pytest_unconfigure(config):
    state = _state(config)
    if state is None:
        return
    deactivate(state)
    if state.staging_dir is not None and not _is_worker(config):
        import shutil

        shutil.rmtree(state.staging_dir, ignore_errors=True)
    delattr(config, _STATE_KEY)
