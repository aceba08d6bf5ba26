"""Schedulers against diffusers' own results (fixture: tools/gen_scheduler_fixture.py, diffusers 0.42 on torch
2.13; this test needs neither) and against hand-computed values.

Each fixture case is a closed loop run by diffusers from fixed inputs (initial sample, model outputs, ancestral
noise) twice: as shipped (float32 tables and arithmetic, ``_f32``) and with float32 replaced by float64 in the
scheduler modules (``_f64``: diffusers' algorithm without its rounding). Bounds, u64 = 2^-53, u32 = 2^-24:

- against ``_f64``: both sides evaluate the same formulas in float64 from the same float32 inputs, in other
  orders. The cumulative product of <= 1000 factors carries <= 1000 roundings, each step <= 30 more on values of
  the step's magnitude: |ours - f64| <= (1000 + 30 (k + 1)) u64 * max|f64 at step k|. A one-digit slip in a
  constant, a wrong table index or a dropped special case moves results by >= 1e-6.
- against ``_f32`` (diffusers as users run it), first order in float32's unit roundoff:
  * its table alphas_cumprod[t] has relative error <= e[t] = sum_{s <= t} (3 u32 beta_s / alpha_s + 2 u32)
    (beta from linspace/squaring: <= 3 u32, amplified by beta / alpha in the cancellation 1 - beta; 1 - beta and
    the product: 2 u32), checked on diffusers' tables below; each entry's float32 coefficients and their products
    with the sample add <= 4 u32 more. Their effect on the run is sum_t |d samples / d log alphas_cumprod[t]|
    (e[t] + 4 u32) over the entries the run reads, the derivatives taken by finite differences of our float64
    scheduler;
  * the update arithmetic: <= 8 roundings a step, accumulated over the steps, on intermediate terms up to
    kappa = max 1 / sqrt(alphas_cumprod[t]) times the result (x0 from eps divides by sqrt(alpha_bar); PNDM's
    sqrt(alpha_prev / alpha_t); sigma ~ alpha_bar^-1/2 in the Euler classes, whose terms cancel down to the
    result): 8 (k + 2) u32 kappa max|f32 at step k|.
  Not covered: zero-terminal-SNR rescaling (its float32 cancellations are not in e[t]); there the measured
  distance of diffusers' float32 run from its own float64 run is the baseline.
"""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd.scheduler import (SCHEDULER_CLASSES, SCHEDULERS, SD15_CONFIG, DDIMScheduler,
                                    DPMSolverMultistepScheduler, EulerDiscreteScheduler, alphas_cumprod,
                                    load_scheduler_config, make_scheduler, scheduler_from_config)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "schedulers"
CASES = json.loads((FIXTURE / "cases.json").read_text())["cases"]
U64, U32 = 2.0 ** -53, 2.0 ** -24


@pytest.fixture(scope="module")
def data():
    with np.load(FIXTURE / "trajectories.npz") as npz:
        return {k: npz[k] for k in npz.files}


def run_case(name: str, data, scheduler=None):
    """Our scheduler on the case's inputs, closed loop as a pipeline: (scheduler, scaled inputs, samples)."""
    case = CASES[name]
    s = scheduler or scheduler_from_config(dict(case["config"], _class_name=case["class"]), case["steps"])
    x = data[f"{name}/x_init"].astype(np.float64) * s.init_noise_sigma
    samples, scaled = [x], []
    for k in range(len(s.timesteps)):
        scaled.append(s.scale_model_input(x, k))
        x = s.step(data[f"{name}/model_outputs"][k].astype(np.float64), k, x,
                   noise=data[f"{name}/noise"][k].astype(np.float64))
        samples.append(x)
    return s, np.stack(scaled), np.stack(samples)


def per_step_error(ours, theirs):
    """max |ours - theirs| of each step over max |theirs| of that step."""
    n = len(theirs)
    return np.abs(ours - theirs).reshape(n, -1).max(axis=1) / np.abs(theirs).reshape(n, -1).max(axis=1)


def f32_table_error_bound(ac: np.ndarray) -> np.ndarray:
    alpha = np.concatenate([ac[:1], ac[1:] / ac[:-1]])
    return np.cumsum(3 * U32 * (1 - alpha) / alpha + 2 * U32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_timesteps_are_diffusers(name, data):
    s = scheduler_from_config(dict(CASES[name]["config"], _class_name=CASES[name]["class"]), CASES[name]["steps"])
    expected = data[f"{name}/timesteps_f32"]
    assert s.timesteps.dtype == expected.dtype
    if CASES[name]["config"].get("use_karras_sigmas") and expected.dtype == np.float32:
        # Euler + Karras: timesteps derived from sigmas; diffusers' float32 log-sigma table moves them in the
        # float32 digits, so they equal diffusers' float64 run's values rounded to float32
        expected = data[f"{name}/timesteps_f64"].astype(np.float32)
    np.testing.assert_array_equal(s.timesteps, expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_tables_match_diffusers_float64(name, data):
    s, _, _ = run_case(name, data)
    ac = data[f"{name}/alphas_cumprod_f64"]
    bound = 2 * (np.arange(len(ac)) + 1) * U64  # the same product of float64 factors, two evaluation orders
    np.testing.assert_array_less(np.abs(s.alphas_cumprod - ac), bound * ac + 1e-300)
    table_bound = (1000 + 30) * U64
    assert abs(s.init_noise_sigma - data[f"{name}/init_noise_sigma_f64"]) <= table_bound * s.init_noise_sigma
    if f"{name}/sigmas_f64" in data:
        sigmas = data[f"{name}/sigmas_f64"]
        np.testing.assert_array_less(np.abs(s.sigmas - sigmas), table_bound * sigmas.max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_steps_match_diffusers_float64(name, data):
    _, scaled, samples = run_case(name, data)
    steps = np.arange(len(samples))
    bound = (1000 + 30 * (steps + 1)) * U64
    assert (per_step_error(samples, data[f"{name}/samples_f64"]) <= bound).all()
    assert (per_step_error(scaled, data[f"{name}/scaled_inputs_f64"]) <= bound[:-1]).all()


@pytest.mark.parametrize("name", sorted(n for n in CASES if not CASES[n]["config"].get("rescale_betas_zero_snr")))
def test_diffusers_float32_tables_are_within_float32_rounding(name, data):
    ac64, ac32 = data[f"{name}/alphas_cumprod_f64"], data[f"{name}/alphas_cumprod_f32"]
    assert (np.abs(ac32 - ac64) <= f32_table_error_bound(ac64) * ac64).all()


def table_sensitivity(name: str, data, used: list[int], h: float = 1e-7) -> np.ndarray:
    """|d samples / d log alphas_cumprod[t]| for each t of ``used`` (finite differences through trained_betas,
    which give the scheduler any table): (len(used), steps + 1, *shape)."""
    case = CASES[name]
    ac = alphas_cumprod(*(case["config"].get(k, d) for k, d in (("num_train_timesteps", 1000),
                                                                 ("beta_start", 0.0001), ("beta_end", 0.02),
                                                                 ("beta_schedule", "linear"))))

    def samples(table):
        betas = 1 - np.concatenate([table[:1], table[1:] / table[:-1]])
        config = dict(case["config"], _class_name=case["class"], trained_betas=betas.tolist())
        return run_case(name, data, scheduler_from_config(config, case["steps"]))[2]

    base = samples(ac)
    rows = []
    for t in used:
        bumped = ac.copy()
        bumped[t] *= 1 + h
        rows.append(np.abs(samples(bumped) - base) / h)
    return np.stack(rows)


def used_table_entries(s) -> list[int]:
    """The alphas_cumprod entries a run reads: both neighbours of each timestep, the previous timesteps of the
    DDIM/PNDM/PRK updates (one and a half stride away), the ends of the table."""
    n, stride = s.train_steps, s.train_steps // s.steps
    used = {0, n - 1}
    for t in s.timesteps.astype(np.float64):
        for base in (math.floor(t), math.ceil(t)):
            used.update(base + d for d in (0, -stride, -stride // 2, stride))
    return sorted(t for t in used if 0 <= t < n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_steps_match_diffusers_float32(name, data):
    s, _, samples = run_case(name, data)
    theirs = data[f"{name}/samples_f32"]
    if CASES[name]["config"].get("rescale_betas_zero_snr"):
        # baseline: no farther from diffusers' float32 run than diffusers' float64 run is (elementwise), up to
        # the float64 bound of test_steps_match_diffusers_float64
        exact = data[f"{name}/samples_f64"]
        slack = (1000 + 30 * (len(samples))) * U64 * np.abs(exact).max()
        assert (np.abs(samples - theirs) <= np.abs(exact - theirs) + slack).all()
        return
    used = used_table_entries(s)
    e = f32_table_error_bound(data[f"{name}/alphas_cumprod_f64"])[used] + 4 * U32
    first_order = np.tensordot(e, table_sensitivity(name, data, used), axes=1)
    steps = len(samples)
    scale = np.abs(theirs).reshape(steps, -1).max(axis=1)
    kappa = s.alphas_cumprod[np.floor(s.timesteps.astype(np.float64)).astype(int)].min() ** -0.5
    arithmetic = (8 * (np.arange(steps) + 2) * U32 * kappa * scale).reshape((steps,) + (1,) * (samples.ndim - 1))
    assert (np.abs(samples - theirs) <= first_order + arithmetic).all()


def test_agreement_report(data):
    """Prints the measured agreement (pytest -s): worst per-step relative error against each diffusers run."""
    for name in sorted(CASES):
        _, _, samples = run_case(name, data)
        e64 = per_step_error(samples, data[f"{name}/samples_f64"]).max()
        e32 = per_step_error(samples, data[f"{name}/samples_f32"]).max()
        print(f"{name:28s} {CASES[name]['class']:34s} steps {len(samples) - 1:2d}  vs float64 {e64:.1e}"
              f"  vs float32 {e32:.1e}")


# ------------------------------------------------------------------------------------------------ hand values
def test_scaled_linear_schedule_constants():
    ac = alphas_cumprod()
    assert ac[0] == pytest.approx(1 - 0.00085, abs=1e-15)
    # beta_1 by hand: (sqrt(0.00085) + (sqrt(0.012) - sqrt(0.00085)) / 999) ** 2
    beta1 = (math.sqrt(0.00085) + (math.sqrt(0.012) - math.sqrt(0.00085)) / 999) ** 2
    assert ac[1] == pytest.approx((1 - 0.00085) * (1 - beta1), rel=1e-14)
    # values every SD implementation quotes: final alpha_bar and k-diffusion's sigma range for SD 1.x
    assert ac[999] == pytest.approx(0.0046601, abs=1e-7)
    assert math.sqrt((1 - ac[999]) / ac[999]) == pytest.approx(14.6146, abs=1e-4)
    assert math.sqrt((1 - ac[0]) / ac[0]) == pytest.approx(0.029167, abs=1e-6)


def test_sd15_timesteps_by_hand():
    np.testing.assert_array_equal(DDIMScheduler(10).timesteps, [901, 801, 701, 601, 501, 401, 301, 201, 101, 1])
    np.testing.assert_array_equal(DDIMScheduler(4).timesteps, [751, 501, 251, 1])
    # PLMS warm-up: the first timestep twice (diffusers' skip_prk_steps), so steps + 1 UNet evaluations
    np.testing.assert_array_equal(make_scheduler("pndm", 4).timesteps, [751, 501, 501, 251, 1])
    np.testing.assert_array_equal(make_scheduler("euler", 4).timesteps, [999.0, 666.0, 333.0, 0.0])
    np.testing.assert_array_equal(make_scheduler("dpmsolver++", 4).timesteps, [999, 749, 500, 250])


def ddim_forward_consistency_error(s) -> float:
    """x_t = sqrt(a_t) x0 + sqrt(1 - a_t) eps  ->  step(eps) must be sqrt(a_prev) x0 + sqrt(1 - a_prev) eps."""
    ac = s.alphas_cumprod
    rng = np.random.default_rng(0)
    x0, eps = rng.standard_normal((1, 4, 3, 3)), rng.standard_normal((1, 4, 3, 3))
    worst = 0.0
    for index in (0, len(s.timesteps) - 1):
        t = s.timesteps[index]
        prev = t - s.step_ratio
        a_prev = ac[prev] if prev >= 0 else ac[0]  # set_alpha_to_one=False: alphas_cumprod[0] at the end
        x_t = math.sqrt(ac[t]) * x0 + math.sqrt(1 - ac[t]) * eps
        expected = math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps
        worst = max(worst, float(np.abs(s.step(eps, index, x_t) - expected).max()))
    return worst


def test_ddim_step_with_the_true_noise_moves_along_the_forward_process():
    assert DDIMScheduler(10).step_ratio == 100
    assert ddim_forward_consistency_error(DDIMScheduler(10)) < 1e-12  # float64 arithmetic on O(1) values


def test_euler_sigmas_and_step():
    s = EulerDiscreteScheduler(4)
    ac = alphas_cumprod()
    expected = [math.sqrt((1 - ac[t]) / ac[t]) for t in (999, 666, 333, 0)] + [0.0]
    np.testing.assert_allclose(s.sigmas, expected, rtol=1e-14)
    assert s.init_noise_sigma == pytest.approx(14.6146, abs=1e-4)
    s3 = EulerDiscreteScheduler(3)  # fractional timesteps interpolate linearly between training sigmas
    assert s3.timesteps[1] == 499.5
    assert s3.sigmas[1] == pytest.approx((expected_sigma(ac, 499) + expected_sigma(ac, 500)) / 2, rel=1e-14)
    rng = np.random.default_rng(1)  # the Euler step with the exact noise of x0: x0 + sigma eps -> x0 + sigma' eps
    x0, eps = rng.standard_normal(5), rng.standard_normal(5)
    x = x0 + s.sigmas[1] * eps
    np.testing.assert_allclose(s.scale_model_input(x, 1), x / math.sqrt(s.sigmas[1] ** 2 + 1), rtol=1e-15)
    np.testing.assert_allclose(s.step(eps, 1, x), x0 + s.sigmas[2] * eps, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.step(eps, 3, x0 + s.sigmas[3] * eps), x0, rtol=1e-12, atol=1e-12)


def expected_sigma(ac, t):
    return math.sqrt((1 - ac[t]) / ac[t])


# ------------------------------------------------------------------------------------------------ configs, names
def test_scheduler_names_keep_the_config_values_as_from_config():
    v_config = dict(SD15_CONFIG, _class_name="DDIMScheduler", prediction_type="v_prediction",
                    timestep_spacing="trailing", unknown_key=3)
    for name, cls in SCHEDULERS.items():
        s = scheduler_from_config(v_config, 5, name=name)
        assert type(s) is cls and s.config["timestep_spacing"] == "trailing"
        assert s.config["beta_schedule"] == "scaled_linear" and s.config["prediction_type"] == "v_prediction"
        assert "unknown_key" not in s.config
    # keys a class does not read are not kept: DDIM's clip_sample does not reach Euler; absent keys take the
    # class's own default (PNDM's skip_prk_steps is False where the config does not say)
    assert "clip_sample" not in make_scheduler("euler", 4).config
    pndm = scheduler_from_config({"_class_name": "DDIMScheduler"}, 8, name="pndm")
    assert not pndm.skip_prk and len(pndm.timesteps) == 12 + 8 - 3


def test_unknown_class_is_an_input_error_naming_it_and_the_supported_ones():
    with pytest.raises(InputError) as info:
        scheduler_from_config({"_class_name": "HeunDiscreteScheduler"}, 10, source="pipe/scheduler_config.json")
    message = str(info.value)
    assert "pipe/scheduler_config.json" in message and "HeunDiscreteScheduler" in message
    assert all(cls in message for cls in SCHEDULER_CLASSES)
    with pytest.raises(InputError, match="unknown scheduler 'heun'.*pndm, ddim, euler, euler_a, dpmsolver\\+\\+"):
        make_scheduler("heun", 10)


@pytest.mark.parametrize("changes, named", [
    ({"_class_name": "DPMSolverMultistepScheduler", "algorithm_type": "sde-dpmsolver++"}, "algorithm_type"),
    ({"_class_name": "DDIMScheduler", "thresholding": True}, "thresholding"),
    ({"_class_name": "EulerDiscreteScheduler", "interpolation_type": "log_linear"}, "interpolation_type"),
    ({"_class_name": "DDIMScheduler", "beta_schedule": "sigmoid"}, "beta_schedule"),
    ({"_class_name": "DDIMScheduler", "prediction_type": "flow"}, "prediction_type"),
    ({"_class_name": "EulerAncestralDiscreteScheduler", "prediction_type": "sample"}, "prediction_type"),
    ({"_class_name": "DDIMScheduler", "timestep_spacing": "karras"}, "timestep_spacing"),
    ({"_class_name": "DDIMScheduler", "num_train_timesteps": "1000"}, "num_train_timesteps"),
    ({"_class_name": "DDIMScheduler", "steps_offset": 1.5}, "steps_offset"),
    ({"_class_name": "DDIMScheduler", "trained_betas": [0.1, 0.2]}, "trained_betas"),
    ({"_class_name": "DDIMScheduler", "clip_sample": "no"}, "clip_sample"),
    ({"_class_name": "DPMSolverMultistepScheduler", "solver_order": 4}, "solver_order"),
    ({"_class_name": "PNDMScheduler", "skip_prk_steps": False, "steps": 3}, "skip_prk_steps"),
])
def test_unsupported_or_malformed_options_are_input_errors_naming_the_key(changes, named):
    with pytest.raises(InputError, match=f"cfg.json: .*{named}"):
        scheduler_from_config(dict(SD15_CONFIG, **changes), changes.get("steps", 10), source="cfg.json")


@pytest.mark.parametrize("steps", [0, -1, 2.5, True, 1001])
def test_bad_step_counts_are_input_errors(steps):
    with pytest.raises(InputError):
        make_scheduler("ddim", steps)


def test_load_scheduler_config_names_the_file(tmp_path):
    with pytest.raises(InputError, match="missing.json: not found"):
        load_scheduler_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(InputError, match="bad.json"):
        load_scheduler_config(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(InputError, match="list.json: expected a JSON object"):
        load_scheduler_config(tmp_path / "list.json")
    (tmp_path / "ok.json").write_text(json.dumps(SD15_CONFIG))
    assert type(scheduler_from_config(load_scheduler_config(tmp_path / "ok.json"), 5)).__name__ == "PNDMScheduler"


def test_ancestral_noise_comes_from_the_given_generator(data):
    """Euler ancestral draws noise_rng.standard_normal(shape) per step: the same seed, the same trajectory; the
    noise drawn equals passing those draws explicitly."""
    name = "euler_a_sd15"
    case = CASES[name]
    config = dict(case["config"], _class_name=case["class"])
    out = data[f"{name}/model_outputs"].astype(np.float64)
    x = data[f"{name}/x_init"].astype(np.float64)

    def trajectory(rng, explicit=None):
        s = scheduler_from_config(config, case["steps"], noise_rng=rng)
        y = x * s.init_noise_sigma
        for k in range(len(s.timesteps)):
            y = s.step(out[k], k, y, noise=None if explicit is None else explicit[k])
        return y

    draws = np.random.RandomState(7)
    explicit = [draws.standard_normal(x.shape) for _ in range(case["steps"])]
    np.testing.assert_array_equal(trajectory(np.random.RandomState(7)), trajectory(None, explicit))
    assert not np.array_equal(trajectory(np.random.RandomState(7)), trajectory(np.random.RandomState(8)))
    with pytest.raises(ValueError, match="noise"):
        make_scheduler("euler_a", 3).step(out[0], 0, x)


def test_multistep_schedulers_refuse_out_of_order_steps():
    s = make_scheduler("dpmsolver++", 5)
    x = np.ones(3)
    s.step(x, 0, x)
    with pytest.raises(ValueError, match="index 2, expected 1"):
        s.step(x, 2, x)
    assert isinstance(DPMSolverMultistepScheduler(5), DPMSolverMultistepScheduler)


# ------------------------------------------------------------------------------------------------ planted bugs
def worst_float64_error(data, names) -> float:
    """The largest per-step error against diffusers' float64 runs, in units of the bound the main test allows."""
    worst = 0.0
    for name in names:
        _, _, samples = run_case(name, data)
        bound = (1000 + 30 * (np.arange(len(samples)) + 1)) * U64
        worst = max(worst, float((per_step_error(samples, data[f"{name}/samples_f64"]) / bound).max()))
    return worst


def cases_with(cls: str | None = None, **config) -> list[str]:
    return [n for n, c in CASES.items() if (cls is None or c["class"] == cls)
            and all(c["config"].get(k) == v for k, v in config.items())]


@pytest.mark.parametrize("bug", [
    "karras rho 7.5", "v-prediction x0 sign", "zero SNR not rescaled", "cosine beta cap 0.99",
    "PLMS warm-up at the next timestep", "DPM alpha_t without sqrt", "LMS of order 3"])
def test_planted_bugs_are_caught(bug, data, monkeypatch):
    import mschecker.sd.scheduler as sched

    if bug == "karras rho 7.5":
        original = sched._karras
        monkeypatch.setattr(sched, "_karras", lambda hi, lo, n, rho=7.0: original(hi, lo, n, 7.5))
        names = cases_with(use_karras_sigmas=True)
    elif bug == "v-prediction x0 sign":
        monkeypatch.setattr(sched, "_x0_from_sigma", lambda kind, m, x, s: m * (s / np.sqrt(s ** 2 + 1))
                            + x / (s ** 2 + 1) if kind == "v_prediction" else x - s * m)
        names = ["euler_leading_v", "euler_a_v_trailing_cos"]
    elif bug == "zero SNR not rescaled":
        monkeypatch.setattr(sched, "_rescale_zero_terminal_snr", lambda betas: betas)
        names = cases_with(rescale_betas_zero_snr=True)
    elif bug == "cosine beta cap 0.99":
        original = sched._betas_for_alpha_bar
        monkeypatch.setattr(sched, "_betas_for_alpha_bar", lambda n, max_beta=0.999: original(n, 0.99))
        names = cases_with(beta_schedule="squaredcos_cap_v2")
    elif bug == "PLMS warm-up at the next timestep":
        original = sched.PNDMScheduler._prev_sample
        monkeypatch.setattr(sched.PNDMScheduler, "_prev_sample", lambda self, x, t, prev_t, m: original(
            self, x, t - 1 if self.counter == 1 else t, prev_t, m))
        names = ["pndm_sd15"]
    elif bug == "LMS of order 3":
        monkeypatch.setattr(sched.LMSDiscreteScheduler, "ORDER", 3)
        names = cases_with(cls="LMSDiscreteScheduler")
    else:
        original = sched.DPMSolverMultistepScheduler._alpha_sigma_lambda  # alpha_t without its square root
        monkeypatch.setattr(sched.DPMSolverMultistepScheduler, "_alpha_sigma_lambda", lambda self, s: (
            original(self, s)[0] ** 2, *original(self, s)[1:]))
        names = ["dpmpp_sd15"]
    assert names
    assert worst_float64_error(data, names) > 1e3


# ------------------------------------------------------------------------------------------------ live diffusers
@pytest.mark.slow
def test_fixture_is_what_the_installed_diffusers_computes(data):
    """With diffusers and torch installed (dev environments only): the stored float32 runs are reproduced, so a
    diffusers release that changes a scheduler shows up here (regenerate with tools/gen_scheduler_fixture.py)."""
    pytest.importorskip("diffusers")
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_scheduler_fixture", Path(__file__).resolve().parents[2] / "tools" / "gen_scheduler_fixture.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    fresh = generator.run_all("f32")
    for key, value in fresh.items():
        case, what = key.split("/")
        stored = data[key] if what in ("x_init", "model_outputs", "noise") else data[f"{case}/{what}_f32"]
        np.testing.assert_array_equal(value, stored, err_msg=key)
