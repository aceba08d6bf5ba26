"""Schedulers against hand-computed values and against their defining identities."""
import math

import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd.scheduler import DDIMScheduler, EulerScheduler, alphas_cumprod, make_scheduler


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


def test_ddim_timesteps_are_leading_with_offset():
    np.testing.assert_array_equal(DDIMScheduler(10).timesteps, [901, 801, 701, 601, 501, 401, 301, 201, 101, 1])
    np.testing.assert_array_equal(DDIMScheduler(4).timesteps, [751, 501, 251, 1])


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


def test_ddim_step_hand_computed_scalar():
    s = DDIMScheduler(10)
    a_t, a_p = s.alphas_cumprod[901], s.alphas_cumprod[801]
    x, e = 2.0, 0.5
    x0 = (x - math.sqrt(1 - a_t) * e) / math.sqrt(a_t)
    assert s.step(np.array(e), 0, np.array(x)) == pytest.approx(math.sqrt(a_p) * x0 + math.sqrt(1 - a_p) * e,
                                                                 rel=1e-14)


def test_euler_sigmas_and_step():
    s = EulerScheduler(4)
    np.testing.assert_array_equal(s.timesteps, [999.0, 666.0, 333.0, 0.0])
    ac = alphas_cumprod()
    expected = [math.sqrt((1 - ac[t]) / ac[t]) for t in (999, 666, 333, 0)] + [0.0]
    np.testing.assert_allclose(s.sigmas, expected, rtol=1e-14)
    assert s.init_noise_sigma == pytest.approx(14.6146, abs=1e-4)
    # fractional timesteps interpolate linearly between training sigmas
    s3 = EulerScheduler(3)
    assert s3.timesteps[1] == 499.5
    assert s3.sigmas[1] == pytest.approx((expected_sigma(ac, 499) + expected_sigma(ac, 500)) / 2, rel=1e-14)
    # model input scaling and the Euler step with the exact noise of x0: x = x0 + sigma eps -> x0 + sigma' eps
    rng = np.random.default_rng(1)
    x0, eps = rng.standard_normal(5), rng.standard_normal(5)
    x = x0 + s.sigmas[1] * eps
    np.testing.assert_allclose(s.scale_model_input(x, 1), x / math.sqrt(s.sigmas[1] ** 2 + 1), rtol=1e-15)
    np.testing.assert_allclose(s.step(eps, 1, x), x0 + s.sigmas[2] * eps, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.step(eps, 3, x0 + s.sigmas[3] * eps), x0, rtol=1e-12, atol=1e-12)


def expected_sigma(ac, t):
    return math.sqrt((1 - ac[t]) / ac[t])


@pytest.mark.parametrize("name, steps", [("ddim", 0), ("euler", 1001), ("ddim", 2.5), ("plms", 10)])
def test_bad_scheduler_arguments_are_input_errors(name, steps):
    with pytest.raises(InputError):
        make_scheduler(name, steps)
