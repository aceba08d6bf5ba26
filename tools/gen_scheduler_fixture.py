"""Write tests/fixtures/schedulers/: diffusers' schedulers run on fixed inputs, for tests/sd/test_scheduler.py.

Dev-time only (needs torch and diffusers):  python tools/gen_scheduler_fixture.py

For every case of CASES (a scheduler_config.json, a class, a number of steps) diffusers' scheduler runs a closed
loop from a fixed initial sample with fixed model outputs (and, for Euler ancestral, fixed noise injected in place
of its torch generator's draws), as a pipeline runs it:
    latents = x_init * init_noise_sigma;  for each t: scale_model_input(latents, t); latents = step(out_k, t, latents)
It runs twice, in two processes:
- ``f32``: diffusers as shipped (float32 torch tables and arithmetic);
- ``f64``: the same diffusers code with float32 replaced by float64 in the scheduler modules (torch.float32 and
  np.float32 read as float64 there, float64 default dtype): diffusers' algorithm without its float32 rounding.
Written: cases.json (configs, steps, producer versions) and trajectories.npz (per case: timesteps, sigmas where
the class has them, init_noise_sigma, alphas_cumprod, inputs, scaled model inputs and samples of both runs).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "schedulers"
SHAPE = (2, 4, 3, 3)

SD15 = {"_class_name": "PNDMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
        "clip_sample": False, "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True,
        "steps_offset": 1, "trained_betas": None}
SD2_V = dict(SD15, _class_name="DDIMScheduler", prediction_type="v_prediction")

# name: (class, config, steps). The config is what a folder would hold; the class replaces _class_name as
# diffusers' from_config does (keys the class does not read are ignored).
CASES = {
    "pndm_sd15": ("PNDMScheduler", SD15, 10),
    "pndm_sd15_25": ("PNDMScheduler", SD15, 25),
    "pndm_prk_linear": ("PNDMScheduler", {"beta_schedule": "linear", "skip_prk_steps": False}, 8),
    "pndm_v_trailing_cos": ("PNDMScheduler", dict(SD15, prediction_type="v_prediction", timestep_spacing="trailing",
                                                  beta_schedule="squaredcos_cap_v2", set_alpha_to_one=True), 7),
    "pndm_linspace": ("PNDMScheduler", dict(SD15, timestep_spacing="linspace"), 6),
    "ddim_sd15": ("DDIMScheduler", SD15, 10),
    "ddim_sd2_v": ("DDIMScheduler", SD2_V, 10),
    "ddim_zero_snr_trailing_v": ("DDIMScheduler", dict(SD2_V, rescale_betas_zero_snr=True,
                                                       timestep_spacing="trailing"), 8),
    "ddim_defaults_clip_sample": ("DDIMScheduler", {"prediction_type": "sample", "timestep_spacing": "linspace"}, 6),
    "euler_sd15": ("EulerDiscreteScheduler", SD15, 10),
    "euler_leading_v": ("EulerDiscreteScheduler", dict(SD2_V, timestep_spacing="leading"), 9),
    "euler_karras_trailing": ("EulerDiscreteScheduler", dict(SD15, use_karras_sigmas=True,
                                                             timestep_spacing="trailing"), 8),
    "euler_sample_sigma_min": ("EulerDiscreteScheduler", dict(SD15, prediction_type="sample",
                                                              final_sigmas_type="sigma_min"), 5),
    "euler_zero_snr_v": ("EulerDiscreteScheduler", dict(SD2_V, rescale_betas_zero_snr=True,
                                                        timestep_spacing="trailing"), 6),
    "euler_a_sd15": ("EulerAncestralDiscreteScheduler", SD15, 10),
    "euler_a_v_trailing_cos": ("EulerAncestralDiscreteScheduler", dict(SD2_V, timestep_spacing="trailing",
                                                                       beta_schedule="squaredcos_cap_v2"), 6),
    "euler_a_leading": ("EulerAncestralDiscreteScheduler", dict(SD15, timestep_spacing="leading"), 7),
    "lms_sd15": ("LMSDiscreteScheduler", SD15, 10),
    "lms_karras_v_leading": ("LMSDiscreteScheduler", dict(SD2_V, use_karras_sigmas=True,
                                                          timestep_spacing="leading"), 8),
    "lms_sample_trailing_cos": ("LMSDiscreteScheduler", dict(SD15, prediction_type="sample",
                                                             timestep_spacing="trailing",
                                                             beta_schedule="squaredcos_cap_v2"), 6),
    "dpmpp_sd15": ("DPMSolverMultistepScheduler", SD15, 10),
    "dpmpp_sd15_20": ("DPMSolverMultistepScheduler", SD15, 20),
    "dpmpp_karras_v_leading": ("DPMSolverMultistepScheduler", dict(SD2_V, use_karras_sigmas=True,
                                                                   timestep_spacing="leading"), 12),
    "dpmpp_order3_heun_linear": ("DPMSolverMultistepScheduler", {"solver_order": 3, "solver_type": "heun"}, 16),
    "dpmpp_sigma_min_sample": ("DPMSolverMultistepScheduler", dict(SD15, final_sigmas_type="sigma_min",
                                                                   prediction_type="sample",
                                                                   lower_order_final=False), 10),
    # lower_order_final below 15 steps: first order at the end even with a nonzero final sigma; order 3 drops
    # to order 2 one step before
    "dpmpp_sigma_min_12": ("DPMSolverMultistepScheduler", dict(SD15, final_sigmas_type="sigma_min"), 12),
    "dpmpp_order3_12": ("DPMSolverMultistepScheduler", dict(SD15, solver_order=3), 12),
    "dpmpp_trailing_order1": ("DPMSolverMultistepScheduler", dict(SD15, solver_order=1,
                                                                  timestep_spacing="trailing"), 5),
    # issue 28: configurations the cases above never reached (appended: the earlier cases keep their inputs)
    # DPM-Solver++ with leading spacing and steps_offset=1, without Karras sigmas
    "dpmpp_leading_offset1": ("DPMSolverMultistepScheduler", dict(SD15, timestep_spacing="leading"), 10),
    # lower_order_final around diffusers' rule len(timesteps) < 15: with a nonzero final sigma (order 2) the last
    # step is first order at 14 steps and second order at 15 and 16; order 3 drops to order 2 one step before
    # the end at 14 only
    "dpmpp_lof_sigma_min_14": ("DPMSolverMultistepScheduler", dict(SD15, final_sigmas_type="sigma_min"), 14),
    "dpmpp_lof_sigma_min_15": ("DPMSolverMultistepScheduler", dict(SD15, final_sigmas_type="sigma_min"), 15),
    "dpmpp_lof_sigma_min_16": ("DPMSolverMultistepScheduler", dict(SD15, final_sigmas_type="sigma_min"), 16),
    "dpmpp_lof_order3_14": ("DPMSolverMultistepScheduler", dict(SD15, solver_order=3), 14),
    "dpmpp_lof_order3_15": ("DPMSolverMultistepScheduler", dict(SD15, solver_order=3), 15),
    "dpmpp_lof_order3_16": ("DPMSolverMultistepScheduler", dict(SD15, solver_order=3), 16),
    # Euler / LMS initial latents (init_noise_sigma: sqrt(sigma_max^2 + 1) for leading, sigma_max otherwise)
    "euler_leading_offset1": ("EulerDiscreteScheduler", dict(SD15, timestep_spacing="leading"), 10),
    "euler_karras_leading": ("EulerDiscreteScheduler", dict(SD15, use_karras_sigmas=True,
                                                            timestep_spacing="leading"), 7),
    "lms_leading_offset1": ("LMSDiscreteScheduler", dict(SD15, timestep_spacing="leading"), 9),
    "lms_trailing": ("LMSDiscreteScheduler", dict(SD15, timestep_spacing="trailing"), 6),
    "euler_a_trailing": ("EulerAncestralDiscreteScheduler", dict(SD15, timestep_spacing="trailing"), 6),
}


def case_inputs(index: int, steps_run: int):
    rng = np.random.default_rng(1000 + index)
    x_init = rng.standard_normal(SHAPE).astype(np.float32)
    outputs = rng.standard_normal((steps_run,) + SHAPE).astype(np.float32)
    noise = rng.standard_normal((steps_run,) + SHAPE).astype(np.float32)
    return x_init, outputs, noise


def run_all(precision: str) -> dict[str, np.ndarray]:
    import torch
    import diffusers
    from diffusers.schedulers import (scheduling_ddim, scheduling_dpmsolver_multistep,
                                      scheduling_euler_ancestral_discrete, scheduling_euler_discrete,
                                      scheduling_lms_discrete, scheduling_pndm)

    modules = [scheduling_pndm, scheduling_ddim, scheduling_euler_discrete, scheduling_euler_ancestral_discrete,
               scheduling_dpmsolver_multistep, scheduling_lms_discrete]
    dtype = torch.float32
    if precision == "f64":
        dtype = torch.float64
        torch.set_default_dtype(torch.float64)
        torch64 = types.SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
        torch64.float32 = torch.float64
        np64 = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
        np64.float32 = np.float64
        for module in modules:
            module.torch, module.np = torch64, np64
    out = {}
    for index, (name, (cls_name, config, steps)) in enumerate(CASES.items()):
        cls = getattr(diffusers, cls_name)
        sched = cls.from_config(dict(config, _class_name=cls_name))
        sched.set_timesteps(steps)
        n = len(sched.timesteps)
        x_init, outputs, noise = case_inputs(index, n)
        injected = []
        scheduling_euler_ancestral_discrete.randn_tensor = lambda shape, **kw: injected.pop(0)
        latents = torch.from_numpy(x_init).to(dtype) * sched.init_noise_sigma
        scaled, samples = [], [latents.numpy().astype(np.float64)]
        for k, t in enumerate(sched.timesteps):
            scaled.append(sched.scale_model_input(latents, t).numpy().astype(np.float64))
            injected[:] = [torch.from_numpy(noise[k]).to(dtype)]
            latents = sched.step(torch.from_numpy(outputs[k]).to(dtype), t, latents).prev_sample
            samples.append(latents.numpy().astype(np.float64))
        out[f"{name}/timesteps"] = sched.timesteps.numpy()
        if hasattr(sched, "sigmas") and cls_name != "PNDMScheduler" and cls_name != "DDIMScheduler":
            out[f"{name}/sigmas"] = np.asarray(sched.sigmas, dtype=np.float64)
        out[f"{name}/init_noise_sigma"] = np.float64(sched.init_noise_sigma)
        out[f"{name}/alphas_cumprod"] = sched.alphas_cumprod.numpy().astype(np.float64)
        out[f"{name}/x_init"], out[f"{name}/model_outputs"], out[f"{name}/noise"] = x_init, outputs, noise
        out[f"{name}/scaled_inputs"], out[f"{name}/samples"] = np.stack(scaled), np.stack(samples)
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--run":  # the child process: one precision into one file
        np.savez(argv[2], **run_all(argv[1]))
        return 0
    import diffusers
    import torch

    OUT.mkdir(parents=True, exist_ok=True)
    merged = {}
    with tempfile.TemporaryDirectory() as tmp:
        for precision in ("f32", "f64"):
            path = Path(tmp) / f"{precision}.npz"
            subprocess.run([sys.executable, __file__, "--run", precision, str(path)], check=True)
            with np.load(path) as data:
                for key in data.files:
                    case, what = key.split("/")
                    shared = what in ("x_init", "model_outputs", "noise")
                    merged[key if shared else f"{case}/{what}_{precision}"] = data[key]
    np.savez_compressed(OUT / "trajectories.npz", **merged)
    cases = {name: {"class": cls, "config": config, "steps": steps} for name, (cls, config, steps) in CASES.items()}
    (OUT / "cases.json").write_text(json.dumps(
        {"producer": f"diffusers {diffusers.__version__}, torch {torch.__version__}", "shape": list(SHAPE),
         "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(CASES)} cases to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
