"""Stable Diffusion schedulers as diffusers defines them, from a pipeline's ``scheduler_config.json``, in float64.

Six classes, named as diffusers names them in ``_class_name``: PNDMScheduler (SD 1.x's default; with
``skip_prk_steps`` its PLMS warm-up, otherwise the Runge-Kutta start), DDIMScheduler (``eta``: 0 the
deterministic sampler, 1 DDPM's variance),
EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler (DPM-Solver++, orders 1-3) and
LMSDiscreteScheduler (the third class diffusers' ONNX pipeline names). Each reads the keys its diffusers class
reads, with diffusers' defaults for the absent ones, and ignores the others, as ``SchedulerMixin.from_config``
does: that is how ``--scheduler NAME`` swaps the class and keeps a folder's ``beta_schedule``, ``prediction_type``,
``steps_offset``, ... An option value this module does not implement (e.g. ``thresholding``, ``algorithm_type:
sde-dpmsolver++``) is an InputError naming it, never a silent approximation.

What is exactly diffusers' and what is not:
- the timesteps are diffusers' values and dtype (int64; float32 for the Euler classes), because they are the
  UNet's input;
- everything else (betas, alphas_cumprod, sigmas, the steps) is computed in float64 from the config's numbers,
  where diffusers computes the tables in float32 torch. The difference is diffusers' float32 rounding, measured
  and bounded in tests/sd/test_scheduler.py against diffusers' own results (fixture made by
  tools/gen_scheduler_fixture.py).
- Euler ancestral, and DDIM with eta > 0, need fresh noise each step. diffusers draws it from a torch generator
  (DDIM: ``variance_noise``), which numpy cannot reproduce; here it is ``noise_rng.standard_normal(shape)`` of the ``noise_rng`` the scheduler was built with
  (the pipeline hands it the ``numpy.random.RandomState(seed)`` that drew the initial latents, so one seed fixes
  the run, as one generator does in diffusers), or the ``noise`` passed to ``step``.

The interface (shared by all classes, index-based because PNDM repeats a timestep): ``timesteps`` (one UNet
evaluation each), ``init_noise_sigma``, ``scale_model_input(sample, index)``, ``step(model_output, index, sample,
noise=None)`` -> the next sample, called for index 0, 1, ... in order (the multistep methods keep history).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mschecker.errors import InputError

TRAIN_STEPS = 1000
BETA_START = 0.00085
BETA_END = 0.012

# Stable Diffusion 1.x's scheduler/scheduler_config.json (runwayml/stable-diffusion-v1-5): what the bundled graphs
# run with, and what --scheduler swaps the class of.
SD15_CONFIG = {"_class_name": "PNDMScheduler", "beta_end": BETA_END, "beta_schedule": "scaled_linear",
               "beta_start": BETA_START, "clip_sample": False, "num_train_timesteps": TRAIN_STEPS,
               "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None}

# diffusers' __init__ defaults shared by the classes (LMS has no rescale_betas_zero_snr)
_COMMON = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear",
           "trained_betas": None, "prediction_type": "epsilon", "steps_offset": 0, "rescale_betas_zero_snr": False}


# ------------------------------------------------------------------------------------------------ noise schedule
def _betas_for_alpha_bar(n: int, max_beta: float = 0.999) -> np.ndarray:
    """squaredcos_cap_v2 (Nichol & Dhariwal's cosine schedule), as diffusers' betas_for_alpha_bar."""
    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    return np.array([min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), max_beta) for i in range(n)])


def _rescale_zero_terminal_snr(betas: np.ndarray) -> np.ndarray:
    """Lin et al. 2023, algorithm 1 (diffusers' rescale_zero_terminal_snr)."""
    root = np.sqrt(np.cumprod(1.0 - betas))
    first, last = root[0], root[-1]
    root = (root - last) * (first / (first - last))
    bar = root ** 2
    return 1.0 - np.concatenate([bar[:1], bar[1:] / bar[:-1]])


def alphas_cumprod(train_steps: int = TRAIN_STEPS, beta_start: float = BETA_START, beta_end: float = BETA_END,
                   beta_schedule: str = "scaled_linear", trained_betas=None,
                   rescale_betas_zero_snr: bool = False) -> np.ndarray:
    """The cumulative product of (1 - beta) of a diffusers beta schedule, float64 (default: SD's scaled_linear)."""
    if trained_betas is not None:
        betas = np.asarray(trained_betas, dtype=np.float64)
    elif beta_schedule == "linear":
        betas = np.linspace(beta_start, beta_end, train_steps, dtype=np.float64)
    elif beta_schedule == "scaled_linear":
        betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, train_steps, dtype=np.float64) ** 2
    elif beta_schedule == "squaredcos_cap_v2":
        betas = _betas_for_alpha_bar(train_steps)
    else:
        raise ValueError(beta_schedule)  # validated by _Config before
    if rescale_betas_zero_snr:
        betas = _rescale_zero_terminal_snr(betas)
    return np.cumprod(1.0 - betas)


# ------------------------------------------------------------------------------------------------ config reading
class _Config:
    """One class's view of a scheduler config: its keys with diffusers' defaults, checked; unknown keys ignored."""

    def __init__(self, cls, config: dict, source: str):
        self.cls, self.source = cls, source
        self.values = {k: config.get(k, default) for k, default in cls.DEFAULTS.items()}
        for key, value in list(self.values.items()):
            if value is None and cls.DEFAULTS[key] is not None:  # JSON null: diffusers' default
                self.values[key] = cls.DEFAULTS[key]

    def fail(self, key: str, why: str):
        raise InputError(f"{self.source}: {self.cls.__name__} {key}={json.dumps(self.values.get(key))} {why}")

    def number(self, key: str, lo: float = -math.inf, hi: float = math.inf, integer: bool = False):
        value = self.values[key]
        ok_type = int if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_type) or not lo <= value <= hi:
            self.fail(key, f"must be {'an integer' if integer else 'a number'} in [{lo}, {hi}]")
        return value

    def flag(self, key: str) -> bool:
        if not isinstance(self.values[key], bool):
            self.fail(key, "must be true or false")
        return self.values[key]

    def choice(self, key: str, supported: tuple, known: tuple = ()):
        value = self.values[key]
        if value not in supported:
            extra = " (diffusers has it; mschecker does not implement it)" if value in known else ""
            self.fail(key, f"is not supported{extra}: choose one of {', '.join(map(str, supported))}")
        return value

    def reject_true(self, key: str) -> None:
        """An option diffusers has and this module does not implement, switched on."""
        if self.flag(key):
            self.fail(key, "is not supported by mschecker's schedulers")

    def alphas_cumprod(self) -> np.ndarray:
        n = self.number("num_train_timesteps", 1, 100000, integer=True)
        schedule = self.choice("beta_schedule", ("linear", "scaled_linear", "squaredcos_cap_v2"))
        betas = self.values["trained_betas"]
        if betas is not None and (not isinstance(betas, list) or len(betas) != n or not all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
            self.fail("trained_betas", f"must be null or a list of {n} numbers in [0, 1)")
        start, end = self.number("beta_start", 0, 1), self.number("beta_end", 0, 1)
        rescale = "rescale_betas_zero_snr" in self.values and self.flag("rescale_betas_zero_snr")
        ac = alphas_cumprod(n, start, end, schedule, betas, rescale)
        if rescale and self.cls.ZERO_SNR_SIGMA_FLOOR:
            ac[-1] = 2.0 ** -24  # diffusers' sigma classes: keep the last sigma finite
        return ac


def _spaced_timesteps(spacing: str, steps: int, train: int, offset: int) -> np.ndarray:
    """diffusers' descending timesteps for ``spacing`` (float64 before each class's rounding and cast)."""
    if spacing == "linspace":
        return np.linspace(0, train - 1, steps)[::-1].copy()
    if spacing == "leading":
        return (np.arange(0, steps) * (train // steps)).round()[::-1].copy() + offset
    return np.arange(train, 0, -train / steps).round() - 1  # trailing


def _sigma_to_t(sigma: np.ndarray, log_sigmas: np.ndarray) -> np.ndarray:
    """The (fractional) training timestep of each sigma, log-linear between table entries (diffusers')."""
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    dists = log_sigma - log_sigmas[:, np.newaxis]
    low = np.cumsum(dists >= 0, axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
    w = np.clip((log_sigmas[low] - log_sigma) / (log_sigmas[low] - log_sigmas[low + 1]), 0, 1)
    return ((1 - w) * low + w * (low + 1)).reshape(sigma.shape)


def _karras(sigma_max: float, sigma_min: float, steps: int, rho: float = 7.0) -> np.ndarray:
    """Karras et al. 2022 (eq. 5) sigmas, diffusers' _convert_to_karras."""
    ramp = np.linspace(0, 1, steps)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    return (hi + ramp * (lo - hi)) ** rho


class _Scheduler:
    """The shared interface and bookkeeping (see the module docstring)."""

    NAME = ""  # the --scheduler name
    DEFAULTS: dict = {}
    ZERO_SNR_SIGMA_FLOOR = False
    needs_noise = False
    accepts_eta = False  # diffusers passes eta only to a step() that takes it (DDIM's); the others ignore it
    stateful = False  # step() keeps history: call it for index 0, 1, ... in order

    def __init__(self, steps: int, config: dict | None = None, *, source: str = "scheduler_config.json",
                 noise_rng=None, eta: float = 0.0):
        self.steps = _check_steps(steps)
        if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not 0.0 <= eta <= 1.0:
            # DDIM (Song et al. 2021, eq. 16): eta in [0, 1] interpolates the deterministic DDIM (0) and DDPM's
            # variance (1); above 1 the direction term's 1 - a_prev - sigma^2 goes negative and the step is NaN
            raise InputError(f"eta must be a number in [0, 1], got {eta!r}")
        self.eta = float(eta) if self.accepts_eta else 0.0
        self.needs_noise = type(self).needs_noise or self.eta > 0
        c = _Config(type(self), SD15_CONFIG if config is None else config, source)
        self.config = c.values  # the values in effect (diffusers' defaults filled in)
        self.alphas_cumprod = c.alphas_cumprod()
        self.train_steps = len(self.alphas_cumprod)
        if self.steps > self.train_steps:
            raise InputError(f"{source}: {self.steps} inference steps exceed num_train_timesteps={self.train_steps}")
        self.offset = c.number("steps_offset", 0, self.train_steps, integer=True)
        self.noise_rng = noise_rng
        self._next = 0
        self.init_noise_sigma = 1.0
        self._setup(c)

    def _setup(self, c: _Config) -> None:
        raise NotImplementedError

    def _advance(self, index: int) -> None:
        """Steps run in order where history matters (PNDM, DPM-Solver++, LMS: ``stateful``)."""
        if self.stateful and index != self._next:
            raise ValueError(f"{type(self).__name__}.step called for index {index}, expected {self._next}")
        self._next += 1

    def _noise(self, noise, shape) -> np.ndarray:
        if noise is not None:
            return np.asarray(noise, dtype=np.float64)
        if self.noise_rng is None:
            raise ValueError(f"{type(self).__name__} draws noise every step: build it with noise_rng or pass noise")
        return np.asarray(self.noise_rng.standard_normal(shape), dtype=np.float64)

    def scale_model_input(self, sample: np.ndarray, index: int) -> np.ndarray:
        return sample

    def __repr__(self) -> str:
        return f"{type(self).__name__}(steps={self.steps})"


# ------------------------------------------------------------------------------------------------ PNDM
class PNDMScheduler(_Scheduler):
    """Pseudo numerical methods (Liu et al. 2022): PLMS, a 4th-order linear multistep method whose first steps
    use lower orders (skip_prk_steps, SD's setting), or after 3 Runge-Kutta steps of 4 evaluations each."""

    NAME = "pndm"
    stateful = True
    DEFAULTS = dict(_COMMON, skip_prk_steps=False, set_alpha_to_one=False, timestep_spacing="leading")

    def _setup(self, c):
        c.choice("prediction_type", ("epsilon", "v_prediction"), ("sample",))
        spacing = c.choice("timestep_spacing", ("linspace", "leading", "trailing"))
        n, train = self.steps, self.train_steps
        self.final_alpha_cumprod = 1.0 if c.flag("set_alpha_to_one") else self.alphas_cumprod[0]
        ascending = _spaced_timesteps(spacing, n, train, self.offset)[::-1]
        ascending = ascending.round().astype(np.int64) if spacing != "trailing" else ascending.astype(np.int64)
        self.skip_prk = c.flag("skip_prk_steps")
        if self.skip_prk:
            self.prk_timesteps = np.array([], dtype=np.int64)
            plms = np.concatenate([ascending[:-1], ascending[-2:-1], ascending[-1:]])[::-1]
        else:
            if n < 4:  # diffusers fails inside numpy here
                c.fail("skip_prk_steps", f"needs >= 4 inference steps (the Runge-Kutta start takes 3), got {n}")
            prk = ascending[-4:].repeat(2) + np.tile(np.array([0, train // n // 2]), 4)
            self.prk_timesteps = prk[:-1].repeat(2)[1:-1][::-1].copy()
            plms = ascending[:-3][::-1]
        self.timesteps = np.concatenate([self.prk_timesteps, plms]).astype(np.int64)
        self.ets: list[np.ndarray] = []
        self.counter, self.cur_model_output, self.cur_sample = 0, 0.0, None

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        t = int(self.timesteps[index])
        if self.counter < len(self.prk_timesteps) and not self.skip_prk:
            return self._step_prk(np.asarray(model_output, np.float64), t, np.asarray(sample, np.float64))
        return self._step_plms(np.asarray(model_output, np.float64), t, np.asarray(sample, np.float64))

    def _step_prk(self, model_output, t, sample):
        half = self.train_steps // self.steps // 2
        prev_t = t - (0 if self.counter % 2 else half)
        t = int(self.prk_timesteps[self.counter // 4 * 4])
        phase = self.counter % 4
        if phase == 0:
            self.cur_model_output = self.cur_model_output + 1 / 6 * model_output
            self.ets.append(model_output)
            self.cur_sample = sample
        elif phase in (1, 2):
            self.cur_model_output = self.cur_model_output + 1 / 3 * model_output
        else:
            model_output = self.cur_model_output + 1 / 6 * model_output
            self.cur_model_output = 0.0
        prev = self._prev_sample(self.cur_sample if self.cur_sample is not None else sample, t, prev_t, model_output)
        self.counter += 1
        return prev

    def _step_plms(self, model_output, t, sample):
        stride = self.train_steps // self.steps
        prev_t = t - stride
        if self.counter != 1:
            self.ets = self.ets[-3:] + [model_output]
        else:  # the warm-up's second evaluation, at the first timestep again: a trapezoid (Heun) step
            prev_t, t = t, t + stride
        ets = self.ets
        if len(ets) == 1 and self.counter == 0:
            self.cur_sample = sample
        elif len(ets) == 1 and self.counter == 1:
            model_output = (model_output + ets[-1]) / 2
            sample, self.cur_sample = self.cur_sample, None
        elif len(ets) == 2:
            model_output = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            model_output = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            model_output = (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4]) / 24
        prev = self._prev_sample(sample, t, prev_t, model_output)
        self.counter += 1
        return prev

    def _prev_sample(self, sample, t, prev_t, model_output):
        """PNDM paper eq. 9 (diffusers' _get_prev_sample)."""
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod
        b_t, b_prev = 1 - a_t, 1 - a_prev
        if self.config["prediction_type"] == "v_prediction":
            model_output = np.sqrt(a_t) * model_output + np.sqrt(b_t) * sample
        denom = a_t * np.sqrt(b_prev) + np.sqrt(a_t * b_t * a_prev)
        return np.sqrt(a_prev / a_t) * sample - (a_prev - a_t) * model_output / denom


# ------------------------------------------------------------------------------------------------ DDIM
class DDIMScheduler(_Scheduler):
    """DDIM (Song et al. 2021): eta = 0 the deterministic sampler; eta > 0 adds eta * sqrt(variance) times fresh
    noise, diffusers' DDIMScheduler.step with its _get_variance."""

    NAME = "ddim"
    accepts_eta = True
    DEFAULTS = dict(_COMMON, clip_sample=True, set_alpha_to_one=True, thresholding=False,
                    dynamic_thresholding_ratio=0.995, clip_sample_range=1.0, sample_max_value=1.0,
                    timestep_spacing="leading")

    def _setup(self, c):
        c.choice("prediction_type", ("epsilon", "sample", "v_prediction"))
        spacing = c.choice("timestep_spacing", ("linspace", "leading", "trailing"))
        c.reject_true("thresholding")
        self.clip = c.flag("clip_sample")
        self.clip_range = c.number("clip_sample_range", 0) if self.clip else None
        self.final_alpha_cumprod = 1.0 if c.flag("set_alpha_to_one") else self.alphas_cumprod[0]
        self.step_ratio = self.train_steps // self.steps  # diffusers' previous timestep, whatever the spacing
        t = _spaced_timesteps(spacing, self.steps, self.train_steps, 0)
        self.timesteps = (t.round() if spacing == "linspace" else t).astype(np.int64)
        if spacing == "leading":
            self.timesteps += self.offset

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        t = int(self.timesteps[index])
        prev = t - self.step_ratio
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev] if prev >= 0 else self.final_alpha_cumprod
        eps = np.asarray(model_output, dtype=np.float64)
        sample = np.asarray(sample, dtype=np.float64)
        kind = self.config["prediction_type"]
        if kind == "epsilon":
            x0 = (sample - np.sqrt(1.0 - a_t) * eps) / np.sqrt(a_t)
        elif kind == "sample":
            x0, eps = eps, (sample - np.sqrt(a_t) * eps) / np.sqrt(1.0 - a_t)
        else:  # v_prediction
            x0, eps = np.sqrt(a_t) * sample - np.sqrt(1.0 - a_t) * eps, np.sqrt(a_t) * eps + np.sqrt(1.0 - a_t) * sample
        if self.clip:
            x0 = np.clip(x0, -self.clip_range, self.clip_range)
        if self.eta == 0.0:
            return np.sqrt(a_prev) * x0 + np.sqrt(1.0 - a_prev) * eps
        variance = (1.0 - a_prev) / (1.0 - a_t) * (1.0 - a_t / a_prev)
        std = self.eta * np.sqrt(variance)
        return (np.sqrt(a_prev) * x0 + np.sqrt(1.0 - a_prev - std ** 2) * eps
                + std * self._noise(noise, sample.shape))


# ------------------------------------------------------------------------------------------------ Euler
def _x0_from_sigma(kind: str, model_output, sample, sigma):
    """The denoised estimate of the Karras-style (sigma) schedulers for each prediction type."""
    if kind == "epsilon":
        return sample - sigma * model_output
    if kind == "v_prediction":
        return model_output * (-sigma / np.sqrt(sigma ** 2 + 1)) + sample / (sigma ** 2 + 1)
    return model_output  # "sample" / "original_sample"


class _SigmaScheduler(_Scheduler):
    """What diffusers' Euler-family (sigma) schedulers share: float32 timesteps from the spacing (or from Karras'
    sigmas), sigmas interpolated linearly in t in the training table sqrt((1 - alpha_bar) / alpha_bar), the model
    input scaled by 1 / sqrt(sigma^2 + 1), the initial sigma sqrt(sigma_max^2 + 1) for leading spacing."""

    ZERO_SNR_SIGMA_FLOOR = True
    kind = "epsilon"

    def _train_sigmas(self) -> np.ndarray:
        return np.sqrt((1 - self.alphas_cumprod) / self.alphas_cumprod)

    def _set_sigmas(self, spacing: str, karras_range=None, final_sigma: float = 0.0) -> None:
        """``karras_range(sigma_max, sigma_min) -> (hi, lo)`` switches to Karras' sigmas between hi and lo."""
        train_sigmas = self._train_sigmas()
        if spacing == "linspace":  # diffusers: linspace in float32 directly
            timesteps = np.linspace(0, self.train_steps - 1, self.steps, dtype=np.float32)[::-1].copy()
        else:
            timesteps = _spaced_timesteps(spacing, self.steps, self.train_steps, self.offset).astype(np.float32)
        sigmas = np.interp(timesteps.astype(np.float64), np.arange(self.train_steps), train_sigmas)
        if karras_range is not None:
            sigmas = _karras(*karras_range(sigmas[0], sigmas[-1]), self.steps)
            timesteps = _sigma_to_t(sigmas, np.log(train_sigmas)).astype(np.float32)
        self.timesteps = timesteps
        self.sigmas = np.concatenate([sigmas, [final_sigma]])
        top = float(self.sigmas.max())
        self.init_noise_sigma = top if spacing in ("linspace", "trailing") else math.sqrt(top ** 2 + 1)

    def scale_model_input(self, sample, index):
        return sample / np.sqrt(self.sigmas[index] ** 2 + 1.0)

    def _derivative(self, model_output, sample, sigma):
        """d = (x - x0) / sigma; for epsilon models that is the model output itself (no cancellation)."""
        if self.kind == "epsilon":
            return model_output
        return (sample - _x0_from_sigma(self.kind, model_output, sample, sigma)) / sigma


class EulerDiscreteScheduler(_SigmaScheduler):
    """Euler's method on the probability-flow ODE in sigma (Karras et al. 2022, algorithm 2 without churn)."""

    NAME = "euler"
    DEFAULTS = dict(_COMMON, interpolation_type="linear", use_karras_sigmas=False, use_exponential_sigmas=False,
                    use_beta_sigmas=False, sigma_min=None, sigma_max=None, timestep_spacing="linspace",
                    timestep_type="discrete", final_sigmas_type="zero")

    def _setup(self, c):
        self.kind = c.choice("prediction_type", ("epsilon", "v_prediction", "sample", "original_sample"))
        spacing = c.choice("timestep_spacing", ("linspace", "leading", "trailing"))
        c.choice("interpolation_type", ("linear",), ("log_linear",))
        c.choice("timestep_type", ("discrete",), ("continuous",))
        c.reject_true("use_exponential_sigmas")
        c.reject_true("use_beta_sigmas")
        final = c.choice("final_sigmas_type", ("zero", "sigma_min"))

        def karras_range(sigma_max, sigma_min):  # the config's sigma_min / sigma_max win where given
            hi, lo = c.values.get("sigma_max"), c.values.get("sigma_min")
            return (c.number("sigma_max", 0) if hi is not None else sigma_max,
                    c.number("sigma_min", 0) if lo is not None else sigma_min)

        self._set_sigmas(spacing, karras_range if c.flag("use_karras_sigmas") else None,
                         self._train_sigmas()[0] if final == "sigma_min" else 0.0)

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        sigma, sigma_next = self.sigmas[index], self.sigmas[index + 1]
        sample = np.asarray(sample, np.float64)
        return sample + self._derivative(np.asarray(model_output, np.float64), sample, sigma) * (sigma_next - sigma)


class EulerAncestralDiscreteScheduler(_SigmaScheduler):
    """Euler ancestral (k-diffusion's sample_euler_ancestral, eta = 1): an Euler step down to sigma_down, then
    fresh noise of standard deviation sigma_up (see the module docstring for where the noise comes from)."""

    NAME = "euler_a"
    needs_noise = True
    DEFAULTS = dict(_COMMON, timestep_spacing="linspace")

    def _setup(self, c):
        self.kind = c.choice("prediction_type", ("epsilon", "v_prediction"), ("sample",))
        self._set_sigmas(c.choice("timestep_spacing", ("linspace", "leading", "trailing")))

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        sigma, sigma_to = self.sigmas[index], self.sigmas[index + 1]
        model_output = np.asarray(model_output, np.float64)
        sample = np.asarray(sample, np.float64)
        sigma_up = math.sqrt(sigma_to ** 2 * (sigma ** 2 - sigma_to ** 2) / sigma ** 2)
        sigma_down = math.sqrt(sigma_to ** 2 - sigma_up ** 2)
        return (sample + self._derivative(model_output, sample, sigma) * (sigma_down - sigma)
                + self._noise(noise, sample.shape) * sigma_up)


class LMSDiscreteScheduler(_SigmaScheduler):
    """Linear multistep in sigma (k-diffusion's sample_lms, order 4): the derivatives of the last <= 4 steps
    interpolated by a Lagrange polynomial in sigma, integrated exactly over [sigma_i, sigma_i+1] (diffusers
    integrates numerically with scipy's quad, exact for these polynomials to rounding)."""

    NAME = "lms"
    stateful = True
    ZERO_SNR_SIGMA_FLOOR = False
    ORDER = 4
    DEFAULTS = dict({k: v for k, v in _COMMON.items() if k != "rescale_betas_zero_snr"}, use_karras_sigmas=False,
                    use_exponential_sigmas=False, use_beta_sigmas=False, timestep_spacing="linspace")

    def _setup(self, c):
        self.kind = c.choice("prediction_type", ("epsilon", "sample", "v_prediction"))
        c.reject_true("use_exponential_sigmas")
        c.reject_true("use_beta_sigmas")
        spacing = c.choice("timestep_spacing", ("linspace", "leading", "trailing"))
        # diffusers' LMS takes Karras' range from the interpolated sigmas, never from the config
        self._set_sigmas(spacing, (lambda hi, lo: (hi, lo)) if c.flag("use_karras_sigmas") else None)
        self.derivatives: list[np.ndarray] = []

    def _coefficient(self, order: int, i: int, j: int) -> float:
        """Integral over [sigma_i, sigma_i+1] of the Lagrange basis polynomial of node sigma_(i-j) among
        sigma_i, ..., sigma_(i-order+1)."""
        basis = np.polynomial.Polynomial([1.0])
        for k in range(order):
            if k != j:
                basis = basis * np.polynomial.Polynomial([-self.sigmas[i - k], 1.0]) / (
                    self.sigmas[i - j] - self.sigmas[i - k])
        integral = basis.integ()
        return float(integral(self.sigmas[i + 1]) - integral(self.sigmas[i]))

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        sample = np.asarray(sample, np.float64)
        derivative = self._derivative(np.asarray(model_output, np.float64), sample, self.sigmas[index])
        self.derivatives = (self.derivatives + [derivative])[-self.ORDER:]
        order = min(index + 1, self.ORDER)
        update = sum(self._coefficient(order, index, j) * d
                     for j, d in zip(range(order), reversed(self.derivatives)))
        return sample + update


# ------------------------------------------------------------------------------------------------ DPM-Solver++
class DPMSolverMultistepScheduler(_Scheduler):
    """DPM-Solver++ multistep (Lu et al. 2022), data prediction, orders 1-3 with diffusers' lower-order start
    and (lower_order_final) end."""

    NAME = "dpmsolver++"
    stateful = True
    ZERO_SNR_SIGMA_FLOOR = True
    DEFAULTS = dict(_COMMON, solver_order=2, thresholding=False, dynamic_thresholding_ratio=0.995,
                    sample_max_value=1.0, algorithm_type="dpmsolver++", solver_type="midpoint",
                    lower_order_final=True, euler_at_final=False, use_karras_sigmas=False,
                    use_exponential_sigmas=False, use_beta_sigmas=False, use_lu_lambdas=False,
                    use_flow_sigmas=False, flow_shift=1.0, final_sigmas_type="zero",
                    lambda_min_clipped=-math.inf, variance_type=None, timestep_spacing="linspace",
                    use_dynamic_shifting=False)

    def _setup(self, c):
        self.kind = c.choice("prediction_type", ("epsilon", "sample", "v_prediction"), ("flow_prediction",))
        spacing = c.choice("timestep_spacing", ("linspace", "leading", "trailing"))
        if c.values["algorithm_type"] == "deis":  # diffusers maps it to dpmsolver++
            c.values["algorithm_type"] = "dpmsolver++"
        c.choice("algorithm_type", ("dpmsolver++",), ("dpmsolver", "sde-dpmsolver", "sde-dpmsolver++"))
        if c.values["solver_type"] in ("logrho", "bh1", "bh2"):  # diffusers maps these to midpoint
            c.values["solver_type"] = "midpoint"
        self.solver_type = c.choice("solver_type", ("midpoint", "heun"))
        self.order = c.number("solver_order", 1, 3, integer=True)
        for key in ("thresholding", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
                    "use_flow_sigmas"):
            c.reject_true(key)
        if c.values["variance_type"] is not None:
            c.fail("variance_type", "is not supported (learned-variance UNets)")
        self.lower_order_final = c.flag("lower_order_final")
        self.euler_at_final = c.flag("euler_at_final")
        final = c.choice("final_sigmas_type", ("zero", "sigma_min"))
        ac, train = self.alphas_cumprod, self.train_steps
        lambdas = np.log(np.sqrt(ac)) - np.log(np.sqrt(1 - ac))
        clip = c.values["lambda_min_clipped"]
        clip = -math.inf if clip is None else c.number("lambda_min_clipped")
        last = train - int(np.searchsorted(lambdas[::-1], clip))
        n = self.steps
        if spacing == "linspace":
            timesteps = np.linspace(0, last - 1, n + 1).round()[::-1][:-1].copy().astype(np.int64)
        elif spacing == "leading":
            timesteps = (np.arange(0, n + 1) * (last // (n + 1))).round()[::-1][:-1].copy().astype(np.int64)
            timesteps += self.offset
        else:
            timesteps = np.arange(last, 0, -train / n).round().copy().astype(np.int64) - 1
        train_sigmas = np.sqrt((1 - ac) / ac)
        if c.flag("use_karras_sigmas"):
            sigmas = _karras(train_sigmas[-1], train_sigmas[0], n)  # diffusers' DPM reads no sigma_min/max
            timesteps = _sigma_to_t(sigmas, np.log(train_sigmas))
            if c.values["beta_schedule"] != "squaredcos_cap_v2":
                timesteps = timesteps.round()
        else:
            sigmas = np.interp(timesteps, np.arange(train), train_sigmas)
        self.sigmas = np.concatenate([sigmas, [train_sigmas[0] if final == "sigma_min" else 0.0]])
        self.final_zero = final == "zero"
        self.timesteps = timesteps.astype(np.int64)
        self.model_outputs: list[np.ndarray | None] = [None] * self.order
        self.lower_order_nums = 0

    def _alpha_sigma_lambda(self, sigma: float):
        """alpha_t, sigma_t and lambda_t = log(alpha_t / sigma_t) of the VP process at Karras' sigma."""
        alpha = 1 / math.sqrt(sigma ** 2 + 1)
        return alpha, sigma * alpha, (math.log(alpha) - math.log(sigma * alpha)) if sigma > 0 else math.inf

    def step(self, model_output, index, sample, noise=None):
        self._advance(index)
        sample = np.asarray(sample, np.float64)
        model_output = np.asarray(model_output, np.float64)
        last = len(self.timesteps) - 1
        few = self.lower_order_final and len(self.timesteps) < 15
        lower_final = index == last and (self.euler_at_final or few or self.final_zero)
        lower_second = index == last - 1 and few
        alpha_s, sigma_s, _ = self._alpha_sigma_lambda(self.sigmas[index])
        if self.kind == "epsilon":
            x0 = (sample - sigma_s * model_output) / alpha_s
        elif self.kind == "sample":
            x0 = model_output
        else:
            x0 = alpha_s * sample - sigma_s * model_output
        self.model_outputs = self.model_outputs[1:] + [x0]
        if self.order == 1 or self.lower_order_nums < 1 or lower_final:
            prev = self._first_order(index, sample)
        elif self.order == 2 or self.lower_order_nums < 2 or lower_second:
            prev = self._second_order(index, sample)
        else:
            prev = self._third_order(index, sample)
        self.lower_order_nums = min(self.lower_order_nums + 1, self.order)
        return prev

    def _first_order(self, i, sample):
        """DPM-Solver++(1) = DDIM in lambda: x_t = sigma_t/sigma_s x - alpha_t (e^-h - 1) x0."""
        alpha_t, sigma_t, lambda_t = self._alpha_sigma_lambda(self.sigmas[i + 1])
        _, sigma_s, lambda_s = self._alpha_sigma_lambda(self.sigmas[i])
        x0 = self.model_outputs[-1]
        if sigma_t == 0:  # h = inf: the limit is x0 itself (diffusers reaches it through inf arithmetic)
            return x0.copy()
        h = lambda_t - lambda_s
        return (sigma_t / sigma_s) * sample - (alpha_t * math.expm1(-h)) * x0

    def _second_order(self, i, sample):
        alpha_t, sigma_t, lambda_t = self._alpha_sigma_lambda(self.sigmas[i + 1])
        _, sigma_s0, lambda_s0 = self._alpha_sigma_lambda(self.sigmas[i])
        _, _, lambda_s1 = self._alpha_sigma_lambda(self.sigmas[i - 1])
        m0, m1 = self.model_outputs[-1], self.model_outputs[-2]
        h, h0 = lambda_t - lambda_s0, lambda_s0 - lambda_s1
        d1 = (h / h0) * (m0 - m1)
        em1 = math.expm1(-h)
        if self.solver_type == "midpoint":
            return (sigma_t / sigma_s0) * sample - (alpha_t * em1) * m0 - 0.5 * (alpha_t * em1) * d1
        return (sigma_t / sigma_s0) * sample - (alpha_t * em1) * m0 + (alpha_t * (em1 / h + 1.0)) * d1

    def _third_order(self, i, sample):
        alpha_t, sigma_t, lambda_t = self._alpha_sigma_lambda(self.sigmas[i + 1])
        _, sigma_s0, lambda_s0 = self._alpha_sigma_lambda(self.sigmas[i])
        _, _, lambda_s1 = self._alpha_sigma_lambda(self.sigmas[i - 1])
        _, _, lambda_s2 = self._alpha_sigma_lambda(self.sigmas[i - 2])
        m0, m1, m2 = self.model_outputs[-1], self.model_outputs[-2], self.model_outputs[-3]
        h, h0, h1 = lambda_t - lambda_s0, lambda_s0 - lambda_s1, lambda_s1 - lambda_s2
        r0, r1 = h0 / h, h1 / h
        d1_0, d1_1 = (m0 - m1) / r0, (m1 - m2) / r1
        d1 = d1_0 + r0 / (r0 + r1) * (d1_0 - d1_1)
        d2 = (d1_0 - d1_1) / (r0 + r1)
        em1 = math.expm1(-h)
        return ((sigma_t / sigma_s0) * sample - (alpha_t * em1) * m0 + (alpha_t * (em1 / h + 1.0)) * d1
                - (alpha_t * ((em1 + h) / h ** 2 - 0.5)) * d2)


# ------------------------------------------------------------------------------------------------ construction
SCHEDULER_CLASSES = {cls.__name__: cls for cls in (PNDMScheduler, DDIMScheduler, EulerDiscreteScheduler,
                                                   EulerAncestralDiscreteScheduler, DPMSolverMultistepScheduler,
                                                   LMSDiscreteScheduler)}
SCHEDULERS = {cls.NAME: cls for cls in SCHEDULER_CLASSES.values()}  # --scheduler NAME -> class


def _check_steps(steps: int) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise InputError(f"number of inference steps must be a positive integer, got {steps!r}")
    return int(steps)


def load_scheduler_config(path: str | Path) -> dict:
    """A scheduler_config.json as a dict; InputError naming the file when unreadable or not a JSON object."""
    path = Path(path)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: expected a JSON object")
    return config


def scheduler_from_config(config: dict, steps: int, *, name: str | None = None,
                          source: str = "scheduler_config.json", noise_rng=None, eta: float = 0.0):
    """The scheduler ``config["_class_name"]`` names (or ``name``, a --scheduler name, which replaces the class
    and keeps the config's values, as diffusers' from_config), set to ``steps`` inference steps."""
    if name is not None:
        if name not in SCHEDULERS:
            raise InputError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}")
        cls = SCHEDULERS[name]
    else:
        class_name = config.get("_class_name")
        if class_name not in SCHEDULER_CLASSES:
            raise InputError(f"{source}: scheduler class {class_name!r} is not supported; supported: "
                             f"{', '.join(SCHEDULER_CLASSES)} (or override it: --scheduler {'|'.join(SCHEDULERS)})")
        cls = SCHEDULER_CLASSES[class_name]
    return cls(steps, config, source=source, noise_rng=noise_rng, eta=eta)


def make_scheduler(name: str, steps: int, *, noise_rng=None):
    """The bundled graphs' scheduler: SD 1.5's scheduler_config.json with the class of ``name``."""
    return scheduler_from_config(SD15_CONFIG, steps, name=name, source="SD 1.5 scheduler config",
                                 noise_rng=noise_rng)
