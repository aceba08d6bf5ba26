"""Scheduler configurations the first fixture cases never reached (issue 28), against diffusers' own runs
(tests/fixtures/schedulers, cases appended by tools/gen_scheduler_fixture.py) and against diffusers' rules:

- DPM-Solver++ with timestep_spacing="leading" and steps_offset=1, without Karras sigmas;
- lower_order_final at 14, 15 and 16 steps: diffusers' rule is ``len(timesteps) < 15`` (the last step first
  order, and order 3's second-to-last step second order, only below 15 steps);
- Euler / LMS / Euler ancestral initial latents: x_init * init_noise_sigma, sqrt(sigma_max^2 + 1) for leading
  spacing and sigma_max for linspace / trailing.

The generic per-case checks of tests/sd/test_scheduler.py run on these cases too; the tests here pin what each
case is for. A live comparison with diffusers runs where diffusers and torch are installed (dev only) and skips
otherwise.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mschecker.sd.scheduler import scheduler_from_config

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "schedulers"
CASES = json.loads((FIXTURE / "cases.json").read_text())["cases"]
U64 = 2.0 ** -53
NEW = ["dpmpp_leading_offset1", "dpmpp_lof_sigma_min_14", "dpmpp_lof_sigma_min_15", "dpmpp_lof_sigma_min_16",
       "dpmpp_lof_order3_14", "dpmpp_lof_order3_15", "dpmpp_lof_order3_16", "euler_leading_offset1",
       "euler_karras_leading", "lms_leading_offset1", "lms_trailing", "euler_a_trailing"]


@pytest.fixture(scope="module")
def data():
    with np.load(FIXTURE / "trajectories.npz") as npz:
        return {k: npz[k] for k in npz.files}


def _scheduler(name, **overrides):
    case = CASES[name]
    return scheduler_from_config(dict(case["config"], _class_name=case["class"], **overrides), case["steps"])


def _run(name, data, s=None):
    s = s or _scheduler(name)
    x = data[f"{name}/x_init"].astype(np.float64) * s.init_noise_sigma
    samples = [x]
    for k in range(len(s.timesteps)):
        s.scale_model_input(x, k)
        x = s.step(data[f"{name}/model_outputs"][k].astype(np.float64), k, x,
                   noise=data[f"{name}/noise"][k].astype(np.float64))
        samples.append(x)
    return s, np.stack(samples)


def _rel(ours, theirs):
    n = len(theirs)
    return np.abs(ours - theirs).reshape(n, -1).max(axis=1) / np.abs(theirs).reshape(n, -1).max(axis=1)


def _assert_follows_diffusers(samples, data, name):
    """Every step within the bound derived in tests/sd/test_scheduler.py's docstring: <= 1000 roundings in the
    cumulative product, <= 30 more per step, (1000 + 30 (k + 1)) u64 of the step's largest |value|."""
    bound = (1000 + 30 * (np.arange(len(samples)) + 1)) * U64
    assert (_rel(samples, data[f"{name}/samples_f64"]) <= bound).all()


def test_the_fixture_holds_the_new_cases():
    assert set(NEW) <= set(CASES)


@pytest.mark.parametrize("name", NEW)
def test_new_cases_follow_diffusers_float64(name, data):
    s, samples = _run(name, data)
    expected = data[f"{name}/timesteps_f32"]
    if CASES[name]["config"].get("use_karras_sigmas"):  # from the sigmas: diffusers' float64 run, to float32
        expected = data[f"{name}/timesteps_f64"].astype(np.float32)  # (see test_scheduler.py)
    np.testing.assert_array_equal(s.timesteps, expected)
    assert abs(s.init_noise_sigma - data[f"{name}/init_noise_sigma_f64"]) <= 1030 * U64 * s.init_noise_sigma
    _assert_follows_diffusers(samples, data, name)


def test_dpmpp_leading_offset_timesteps():
    """leading: (arange(n + 1) * (1000 // (n + 1)))[::-1][:-1] + steps_offset, int64."""
    s = _scheduler("dpmpp_leading_offset1")
    assert s.timesteps.dtype == np.int64
    np.testing.assert_array_equal(s.timesteps, np.arange(10, 0, -1) * 90 + 1)
    # the sigmas are read at those timesteps (the offset included), not at the un-offset ones
    ac = s.alphas_cumprod
    np.testing.assert_allclose(s.sigmas[:-1], np.sqrt((1 - ac[s.timesteps]) / ac[s.timesteps]), rtol=1e-15)


@pytest.mark.parametrize("steps,last_differs", [(14, True), (15, False), (16, False)])
def test_lower_order_final_applies_below_15_steps_only(steps, last_differs, data):
    """With a nonzero final sigma, lower_order_final changes the last step below 15 steps and nothing at 15 or
    more (diffusers' ``len(timesteps) < 15``); the fixture's diffusers run agrees step by step."""
    name = f"dpmpp_lof_sigma_min_{steps}"
    _, on = _run(name, data)
    _, off = _run(name, data, _scheduler(name, lower_order_final=False))
    np.testing.assert_array_equal(on[:-1], off[:-1])
    assert (not np.array_equal(on[-1], off[-1])) == last_differs
    _assert_follows_diffusers(on, data, name)


@pytest.mark.parametrize("steps,tail_differs", [(14, True), (15, False), (16, False)])
def test_lower_order_final_order3_second_to_last_step(steps, tail_differs, data):
    """Order 3, final sigma 0: the last step is first order anyway (final_sigmas_type zero); below 15 steps the
    second-to-last drops to second order too."""
    name = f"dpmpp_lof_order3_{steps}"
    _, on = _run(name, data)
    _, off = _run(name, data, _scheduler(name, lower_order_final=False))
    np.testing.assert_array_equal(on[:-2], off[:-2])
    assert (not np.array_equal(on[-2], off[-2])) == tail_differs
    _assert_follows_diffusers(on, data, name)


@pytest.mark.parametrize("name,leading", [("euler_leading_offset1", True), ("euler_karras_leading", True),
                                          ("lms_leading_offset1", True), ("lms_trailing", False),
                                          ("euler_a_trailing", False), ("euler_sd15", False), ("lms_sd15", False)])
def test_initial_latents_are_scaled_by_init_noise_sigma(name, leading, data):
    s = _scheduler(name)
    top = float(s.sigmas.max())
    want = math.sqrt(top ** 2 + 1) if leading else top
    assert s.init_noise_sigma == pytest.approx(want, rel=1e-15)
    assert s.init_noise_sigma == pytest.approx(float(data[f"{name}/init_noise_sigma_f64"]), rel=1e-13)
    first = data[f"{name}/samples_f64"][0]  # diffusers' latents before the first step: x_init * init_noise_sigma
    np.testing.assert_allclose(data[f"{name}/x_init"].astype(np.float64) * s.init_noise_sigma, first, rtol=1e-13)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_live_diffusers_agrees_when_installed(name):
    """Dev only: diffusers itself (float32) on the same config gives the same timesteps and init_noise_sigma."""
    diffusers = pytest.importorskip("diffusers")
    pytest.importorskip("torch")
    case = CASES[name]
    theirs = getattr(diffusers, case["class"]).from_config(dict(case["config"], _class_name=case["class"]))
    theirs.set_timesteps(case["steps"])
    ours = _scheduler(name)
    if case["config"].get("use_karras_sigmas"):  # float32 log-sigma table: the float32 digits move
        np.testing.assert_allclose(ours.timesteps, theirs.timesteps.numpy(), rtol=1e-5)
    else:
        np.testing.assert_array_equal(ours.timesteps, theirs.timesteps.numpy())
    assert float(theirs.init_noise_sigma) == pytest.approx(ours.init_noise_sigma, rel=1e-6)
