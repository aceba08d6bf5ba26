"""`mschecker sd`: a Stable Diffusion pipeline on the float64 reference and on the emulated NPU.

The pipeline is your own diffusers ONNX export (`--pipeline DIR`: model_index.json, text_encoder/, unet/,
vae_decoder/, tokenizer/, scheduler/; SDXL folders as optimum writes them also text_encoder_2/, tokenizer_2/) or
a bundled preset (`--preset`, synthetic weights, `sdxl` among them; `--save-pipeline DIR` writes it as such a
folder). `--sides A,B` picks the two runs (reference, npu, ort; default reference,npu). The call takes diffusers'
arguments (--prompt repeated or --prompts-file, --negative-prompt, --num-images-per-prompt, --height/--width,
--guidance-rescale, --eta, SDXL's --original-size/--crops-coords-top-left/--target-size, --force-upcast;
docs/SD_PIPELINE.md). Runs the text encoder(s), N guided UNet steps and the VAE decoder twice (same prompts,
seeds, scheduler), reports the error of every stage (text embeddings of each encoder, latents after each step,
decoded tensor, image PSNR/SSIM of the worst image), the first node
whose output went NaN/inf (or hit the format's max in saturation mode), and -- when the run fails with an
overflow -- searches for the fix and re-runs to prove it (mschecker.sd.check). Writes a side-by-side PNG and an
error-per-step plot, each side's image (<side>.image.npy: float32 HWC in [0, 1]) and latents after every step
(<side>.latents_step<k>.npy) to --out, the full result to --json.

Exit code: 0 when the NPU image, on the profile and options as given, has PSNR >= --psnr-min against the
reference and every stage output is finite; 1 otherwise (also when a fix was found: the fix is a suggestion,
re-run with its flags to gate on it); 2 on bad input. With --referee SIDE (ort-fp16, ort:<EP>) a third pipeline
run on that side judges every stage output and the image relative to float64 (mschecker.sd.referee); the exit
code then follows --judge (default both: either verdict failing exits 1). The default run (small preset, 10 DDIM
steps, ascend910b) exits 1 on purpose: SD's VAE GroupNorm statistics overflow fp16 on that profile, which the
report names and whose fix it verifies.

Default --psnr-min 30 dB: Polygraphy's PSNR default and the lower end of the image-level bars peers use
(docs/NUMERICS.md §9: Polygraphy >= 30 dB, Apple's Core ML SD port > 35 dB between implementations). The
bundled weights are not a trained denoiser, so fp16 rounding differences grow over the steps more than with
real weights (latent relative error 1.2e-2 after step 1, 4.2e-2 after step 10 on `small`); 30 dB (RMS error ~8
of 255 levels) still separates "the same image" from a broken one. Measured, 10 DDIM steps, ascend910b with the
fp32-statistics fix: small 38.8 dB (SSIM 0.998), tiny 42.0 dB; the black NaN image: small 4.9 dB, tiny 6.4 dB.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from mschecker.errors import InputError, UsageError
from mschecker.npu.knobs import add_npu_arguments, npu_options_from_args
from mschecker.sd.folder import FORCE_UPCAST, NUM_IMAGES_MAX, PROMPTS_MAX, SDPipeline, SIZE_MAX, XL_STAGES
from mschecker.sd.presets import PRESET_NAMES
from mschecker.sd.scheduler import SCHEDULERS
from mschecker.commands._args import Parser, add_referee_args, check_writable, check_writable_dir, referee_from_args
from mschecker.fsio import check_readable
from mschecker.npu.profile import load_profile
from mschecker.sd.bundled import bundled_pipeline, save_bundled

DEFAULT_PROMPT = "a photo of an astronaut riding a horse on the moon"
SEED_MAX = 2**32 - 1  # numpy.random.RandomState(seed), as diffusers' ONNX pipeline draws the initial noise
STEPS_MAX = 1000      # every scheduler refuses more steps than its num_train_timesteps (SD's: 1000)
PROMPT_FILE_MAX = 1 << 20  # bytes: PROMPTS_MAX prompts of a few hundred tokens each fit many times over


def build_parser() -> Parser:
    p = Parser(prog="mschecker sd", description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pipeline", metavar="DIR", help="a diffusers ONNX pipeline folder (your own export)")
    src.add_argument("--preset", choices=list(PRESET_NAMES), help="bundled graphs, synthetic weights (default small)")
    p.add_argument("--save-pipeline", metavar="DIR", help="write the bundled --preset as a diffusers ONNX folder "
                                                          "and exit")
    p.add_argument("--tokenizer", metavar="DIR", help="with --save-pipeline: the tokenizer folder to ship (e.g. SD's "
                                                     "CLIP vocab.json + merges.txt); default a byte-level one")
    p.add_argument("--sides", default="reference,npu", metavar="A,B",
                   help="the two runs compared, among reference, npu, ort (default reference,npu; B is judged)")
    p.add_argument("--latents", metavar="FILE.npy", help="initial latents, unit variance, scaled by the scheduler's "
                                                        "initial sigma as diffusers does (default: RandomState(--seed).randn)")
    p.add_argument("--steps", type=_positive_int("--steps", maximum=STEPS_MAX), default=10,
                   help="UNet steps (default 10)")
    prompts = p.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", help="the prompt; repeat for several (default: an astronaut)")
    prompts.add_argument("--prompts-file", metavar="FILE", help="prompts, one per line (UTF-8; blank lines skipped)")
    p.add_argument("--negative-prompt", action="append", metavar="TEXT",
                   help="diffusers' negative_prompt: one for every prompt, or repeated once per prompt (default: "
                        "none -- the empty prompt, or zeros where an SDXL folder forces them)")
    p.add_argument("--num-images-per-prompt", type=_positive_int("--num-images-per-prompt", maximum=NUM_IMAGES_MAX),
                   default=1, help="images per prompt (default 1)")
    p.add_argument("--height", type=_positive_int("--height", maximum=SIZE_MAX),
                   help="image height in px, a multiple of the VAE's scale factor (default: the UNet config's "
                        "sample_size x 8, as diffusers; given --latents define it)")
    p.add_argument("--width", type=_positive_int("--width", maximum=SIZE_MAX), help="image width in px (as --height)")
    p.add_argument("--guidance-rescale", type=_finite_float("--guidance-rescale", 0.0, 1.0), default=0.0,
                   help="diffusers' guidance_rescale in [0, 1] (default 0: off; 0.7 is the paper's value)")
    p.add_argument("--eta", type=_finite_float("--eta", 0.0, 1.0), default=0.0,
                   help="DDIM's eta in [0, 1] (default 0; other schedulers ignore it, as diffusers does)")
    xl = p.add_argument_group("SDXL micro-conditioning (add_time_ids; default: the image size, crop 0,0)")
    xl.add_argument("--original-size", type=_pair("--original-size"), metavar="H,W")
    xl.add_argument("--crops-coords-top-left", type=_pair("--crops-coords-top-left", minimum=0), metavar="TOP,LEFT")
    xl.add_argument("--target-size", type=_pair("--target-size"), metavar="H,W")
    p.add_argument("--force-upcast", choices=FORCE_UPCAST, default="config",
                   help="the VAE in float32 on the NPU side (ATC must_keep_origin_dtype), as diffusers' force_upcast: "
                        "config (default: as vae_decoder/config.json says; SDXL's VAE sets it), on, off")
    p.add_argument("--scheduler", choices=list(SCHEDULERS),
                   help="override the scheduler class (default: the folder's scheduler_config.json; ddim bundled)")
    p.add_argument("--seed", type=_positive_int("--seed", minimum=0, maximum=SEED_MAX), default=0,
                   help=f"initial-noise seed in [0, {SEED_MAX}] (numpy's RandomState takes 32 bits)")
    p.add_argument("--guidance-scale", type=_finite_float("--guidance-scale"), default=7.5)
    p.add_argument("--psnr-min", type=_finite_float("--psnr-min"), default=30.0, help="image PSNR threshold in dB (default 30)")
    add_npu_arguments(p, XL_STAGES)
    p.add_argument("--no-fix", action="store_true", help="do not search for a fix when the run overflows")
    p.add_argument("--fix-by", choices=("node", "op_type"), default="node",
                   help="the fix search's moves: single nodes (default: the smallest fix) or whole op types (fewer "
                        "re-runs, a coarser fix)")
    p.add_argument("--out", default="sd_out", help="folder for the PNGs and arrays (default ./sd_out)")
    p.add_argument("--json", metavar="PATH", help="write the full result as JSON")
    add_referee_args(p)
    return p


def _positive_int(flag: str, minimum: int = 1, maximum: int | None = None):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:  # also a number of more than 4300 digits
            raise InputError(f"{flag} must be an integer, got {text[:40]!r}") from None
        if v < minimum:
            raise InputError(f"{flag} must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise InputError(f"{flag} must be <= {maximum}, got {text[:40]}")
        return v
    return parse


def _finite_float(flag: str, lo: float = -math.inf, hi: float = math.inf):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise InputError(f"{flag} must be a number, got {text[:40]!r}") from None
        if not math.isfinite(v):
            raise InputError(f"{flag} must be finite, got {text[:40]!r}")
        if not lo <= v <= hi:
            raise InputError(f"{flag} must be in [{lo:g}, {hi:g}], got {text[:40]}")
        return v
    return parse


def _pair(flag: str, minimum: int = 1):
    """H,W (or TOP,LEFT): two integers in [minimum, SIZE_MAX]."""
    def parse(text: str) -> tuple[int, int]:
        parts = text.split(",")
        if len(parts) != 2:
            raise InputError(f"{flag} must be two integers A,B, got {text[:40]!r}")
        one = _positive_int(flag, minimum=minimum, maximum=SIZE_MAX)
        return one(parts[0].strip()), one(parts[1].strip())
    return parse


def read_prompts(args) -> list[str]:
    """--prompt (repeated) or --prompts-file's lines; the default prompt when neither is given."""
    if not args.prompts_file:
        return args.prompt or [DEFAULT_PROMPT]

    path = Path(args.prompts_file)
    if check_readable(path, "--prompts-file").st_size > PROMPT_FILE_MAX:
        raise InputError(f"--prompts-file {path}: larger than {PROMPT_FILE_MAX} bytes")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"--prompts-file {path}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise InputError(f"--prompts-file {path}: cannot read ({exc.strerror or exc})") from None
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not 1 <= len(prompts) <= PROMPTS_MAX:
        raise InputError(f"--prompts-file {path}: {len(prompts)} prompts; between 1 and {PROMPTS_MAX}")
    return prompts


def generation_args(args, pipeline) -> dict:
    """run_pipeline's call arguments from the flags, checked against the pipeline before any model runs."""
    prompts = read_prompts(args)
    negatives = args.negative_prompt
    if negatives is not None and len(negatives) not in (1, len(prompts)):
        raise UsageError(f"--negative-prompt given {len(negatives)} times for {len(prompts)} prompts: give it once, "
                         "or once per prompt")
    xl_flags = {"original_size": "--original-size", "crops_coords_top_left": "--crops-coords-top-left",
                "target_size": "--target-size"}
    given = {k: getattr(args, k) for k in xl_flags if getattr(args, k) is not None}
    if given and not pipeline.xl:
        raise UsageError(f"{xl_flags[next(iter(given))]}: SDXL's micro-conditioning; {pipeline.name} is an SD "
                         "1.x/2.x pipeline")
    if args.latents is None:
        pipeline.latent_size(args.height, args.width)  # sizes: one line, before any work
    return dict(prompt=prompts if len(prompts) > 1 else prompts[0],
                negative_prompt=(negatives[0] if len(negatives) == 1 else negatives) if negatives else None,
                num_images_per_prompt=args.num_images_per_prompt, height=args.height, width=args.width,
                guidance_rescale=args.guidance_rescale, eta=args.eta, **given)


def parse_sides(text: str) -> tuple[str, str]:
    from mschecker.sd.check import SIDES  # lazy: start-up (mschecker._fastfp16, mschecker.bisect, mschecker.devdump)

    sides = tuple(x.strip() for x in text.split(","))
    if len(sides) != 2 or sides[0] == sides[1] or any(x not in SIDES for x in sides):
        raise UsageError(f"--sides {text!r}: give two different sides among {', '.join(SIDES)}, e.g. reference,npu")
    return sides


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)

    if args.save_pipeline:
        return _save_pipeline(args)
    if args.tokenizer:
        raise UsageError("--tokenizer goes with --save-pipeline (a pipeline folder brings its own tokenizer/)")
    sides = parse_sides(args.sides)
    referee, referee_k, judge = referee_from_args(args, runnable=True)  # before minutes of work
    knobs = npu_options_from_args(args, XL_STAGES)
    # every output checked before minutes of work: a folder in the way, a missing or read-only folder
    out = check_writable_dir(args.out, "--out")
    if args.json:
        check_writable(args.json, "--json")

    for name in knobs.profile_names():
        load_profile(name)  # bad profile: one line, before minutes of work

    pipeline = SDPipeline.from_folder(args.pipeline) if args.pipeline else \
        bundled_pipeline(args.preset or "small", scheduler=args.scheduler or "ddim")
    generation = generation_args(args, pipeline)
    prompt = generation.pop("prompt")
    batch = (1 if isinstance(prompt, str) else len(prompt)) * args.num_images_per_prompt
    latents = None
    if args.latents:
        from mschecker.tensors.io import read_tensor  # lazy: start-up (mschecker.schema, mschecker.tensors)

        latents = pipeline.check_latents(read_tensor(args.latents), f"--latents {args.latents}", batch)
    from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)
    from mschecker.sd.check import run_check
    from mschecker.sd.report import render_console, write_json, write_outputs

    console = make_console()  # a log (not a terminal) is not cut at 80 columns
    with _progress(args.steps + len(pipeline.text_stages) + batch, batch) as progress:
        check = run_check(prompt=prompt, pipeline=pipeline, steps=args.steps, scheduler=args.scheduler,
                          seed=args.seed, guidance_scale=args.guidance_scale, sides=sides, knobs=knobs,
                          psnr_min=args.psnr_min, search_fix=not args.no_fix, initial_latents=latents,
                          fix_by=args.fix_by, progress=progress, generation=generation, force_upcast=args.force_upcast,
                          referee=referee, referee_k=referee_k, judge=judge)
    render_console(check, console)
    paths = write_outputs(check, out)
    print(f"wrote {len(paths)} files to {out}: " + ", ".join(p.name for p in paths if p.suffix == ".png"))
    if args.json:
        write_json(check, args.json, extra={"images": [str(p) for p in paths if p.suffix == ".png"],
                                            "arrays": [str(p) for p in paths if p.suffix == ".npy"]})
        print(f"json: {args.json}")
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in check.timings.items()))
    return 0 if check.passed else 1


def _save_pipeline(args) -> int:
    """--save-pipeline: the bundled --preset written as a diffusers ONNX folder, read back to check it."""
    if args.pipeline:
        raise UsageError("--save-pipeline writes a bundled --preset; it does not take --pipeline")
    path = save_bundled(args.preset or "small", args.save_pipeline, scheduler=args.scheduler or "ddim",
                        tokenizer=args.tokenizer)
    SDPipeline.from_folder(path)  # what was written reads back as a consistent pipeline
    print(f"pipeline: {path}")
    return 0


class _progress:
    """rich.progress on a terminal (one bar per run, advanced per stage / UNet step); silent otherwise."""

    def __init__(self, total: int, decodes: int = 1):
        self.total, self.decodes = total, decodes
        self.bar = None
        self.tasks: dict[str, int] = {}
        self.totals: dict[str, int] = {}

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.__enter__()
        return self

    def __call__(self, run: str, stage: str, step: int | None) -> None:
        if self.bar is None:
            return
        if run not in self.tasks:
            total = self.decodes if run.startswith("fix") and stage == "vae_decoder" else self.total
            self.tasks[run] = self.bar.add_task(run, total=total)
            self.totals[run] = total
        label = f"{run}: {stage}" + (f" step {step + 1}" if step is not None else "")
        task = self.tasks[run]
        done = next(t for t in self.bar.tasks if t.id == task).completed + 1
        # PNDM's warm-up evaluates the UNet steps + 1 times: the bar grows rather than overflow
        self.bar.update(task, description=label, advance=1, total=max(done, self.totals[run]))

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False
