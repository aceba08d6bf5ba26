"""Deterministic Stable Diffusion schedulers (DDIM with eta = 0, Euler), in float64, as diffusers computes them.

Noise schedule (SD 1.5's ``scaled_linear``): betas = linspace(sqrt(0.00085), sqrt(0.012), 1000) ** 2,
alphas_cumprod = cumprod(1 - betas). Checked against diffusers' formulas: alphas_cumprod[0] = 0.99915,
alphas_cumprod[999] = 0.0046600, sigma_max = sqrt((1 - a) / a) at t = 999 = 14.6146 and sigma_min = 0.029167
(k-diffusion's SD values), see tests/sd/test_scheduler.py.

- ``DDIMScheduler``: SD 1.5's scheduler config (timestep_spacing "leading", steps_offset 1,
  set_alpha_to_one False): timesteps = arange(N) * (1000 // N) reversed + 1; the step is
  x0 = (x - sqrt(1 - a_t) eps) / sqrt(a_t);  x_prev = sqrt(a_prev) x0 + sqrt(1 - a_prev) eps,
  with a_prev = alphas_cumprod[0] past the first training step. Initial noise sigma 1.
- ``EulerScheduler``: diffusers' EulerDiscreteScheduler defaults (timestep_spacing "linspace", no churn):
  timesteps = linspace(0, 999, N) reversed, sigmas interpolated linearly in t and a final 0; model input
  x / sqrt(sigma^2 + 1); step x + eps (sigma_next - sigma). Initial noise sigma = sigma_max.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

TRAIN_STEPS = 1000
BETA_START = 0.00085
BETA_END = 0.012


def alphas_cumprod(train_steps: int = TRAIN_STEPS, beta_start: float = BETA_START,
                   beta_end: float = BETA_END) -> np.ndarray:
    """The scaled-linear noise schedule's cumulative product of (1 - beta), float64."""
    betas = np.linspace(beta_start ** 0.5, beta_end ** 0.5, train_steps, dtype=np.float64) ** 2
    return np.cumprod(1.0 - betas)


def _check_steps(steps: int) -> int:
    if not isinstance(steps, (int, np.integer)) or not 1 <= steps <= TRAIN_STEPS:
        raise InputError(f"number of inference steps must be an integer in 1..{TRAIN_STEPS}, got {steps!r}")
    return int(steps)


@dataclass
class DDIMScheduler:
    """DDIM, eta = 0 (deterministic), SD 1.5 configuration."""

    steps: int
    steps_offset: int = 1

    def __post_init__(self):
        self.steps = _check_steps(self.steps)
        self.alphas_cumprod = alphas_cumprod()
        self.step_ratio = TRAIN_STEPS // self.steps
        self.timesteps = (np.arange(self.steps) * self.step_ratio)[::-1].astype(np.int64) + self.steps_offset
        self.init_noise_sigma = 1.0

    def scale_model_input(self, sample: np.ndarray, index: int) -> np.ndarray:
        return sample

    def step(self, eps: np.ndarray, index: int, sample: np.ndarray) -> np.ndarray:
        t = int(self.timesteps[index])
        prev = t - self.step_ratio
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev] if prev >= 0 else self.alphas_cumprod[0]
        x0 = (sample - np.sqrt(1.0 - a_t) * eps) / np.sqrt(a_t)
        return np.sqrt(a_prev) * x0 + np.sqrt(1.0 - a_prev) * eps


@dataclass
class EulerScheduler:
    """Euler (Karras et al. algorithm 2 without churn), diffusers' EulerDiscreteScheduler defaults."""

    steps: int

    def __post_init__(self):
        self.steps = _check_steps(self.steps)
        ac = alphas_cumprod()
        self.timesteps = np.linspace(0, TRAIN_STEPS - 1, self.steps, dtype=np.float64)[::-1].copy()
        train_sigmas = np.sqrt((1.0 - ac) / ac)
        self.sigmas = np.concatenate([np.interp(self.timesteps, np.arange(TRAIN_STEPS), train_sigmas), [0.0]])
        self.init_noise_sigma = float(self.sigmas.max())

    def scale_model_input(self, sample: np.ndarray, index: int) -> np.ndarray:
        return sample / np.sqrt(self.sigmas[index] ** 2 + 1.0)

    def step(self, eps: np.ndarray, index: int, sample: np.ndarray) -> np.ndarray:
        return sample + eps * (self.sigmas[index + 1] - self.sigmas[index])


SCHEDULERS = {"ddim": DDIMScheduler, "euler": EulerScheduler}


def make_scheduler(name: str, steps: int):
    """``ddim`` or ``euler`` with ``steps`` inference steps; InputError otherwise."""
    try:
        cls = SCHEDULERS[name]
    except KeyError:
        raise InputError(f"unknown scheduler {name!r}; choose one of {', '.join(SCHEDULERS)}") from None
    return cls(steps)
