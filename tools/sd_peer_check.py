"""Dev-only peer check: `mschecker sd --sides ort,reference` against diffusers' own pipeline code on the same ONNX
folder, prompts, call arguments, seed and initial latents -- the latents after every step and every decoded image.

The peer (--peer, default auto, chosen by the folder):
    optimum  optimum's ORTStableDiffusionXLPipeline (model_index.json names an XL class or has text_encoder_2) or
             ORTStableDiffusionPipeline (other folders): diffusers' torch __call__ (StableDiffusion[XL]Pipeline) with
             onnxruntime sessions for the models -- the pipeline users of `optimum-cli export onnx` run.
    onnx     diffusers' legacy OnnxStableDiffusionPipeline (numpy; SD only, no guidance_rescale). auto picks it for
             folders whose model_index.json names an Onnx* class -- what `mschecker sd --save-pipeline` writes.
             optimum loads those folders but its text encoder fails on the first call (AttributeError:
             'ORTTextEncoder' object has no attribute 'num_decoder_layers': their text_encoder/config.json has no
             num_hidden_layers); with --peer optimum the tool registers num_hidden_layers=0 for it (the count of
             hidden_states.<i> outputs to drop: these graphs have none) and optimum then runs them (recorded).

Runs in an environment with diffusers + torch + optimum-onnx (never a project dependency):
    python3 -m venv /tmp/devenv_sd
    /tmp/devenv_sd/bin/pip install torch==2.13.0 diffusers==0.39.0 "optimum-onnx[onnxruntime]==0.1.0"
mschecker itself runs as a subprocess of the project's interpreter (--mschecker-python, default .venv/bin/python
of this checkout) with --sides ort,reference: its `--out` arrays (ort.latents_step<k>.npy, ort.image.npy or
ort.images.npy) are what is compared. P=/tmp/devenv_sd/bin/python; the recorded cases
(benchmarks/results/sd_peer_check.json, --json adds or replaces the entry named --case):
    # folders: the tiny random-weight optimum exports (tools/export_tiny_sdxl.py, tools/export_tiny_sd_sized.py)
    .venv/bin/python -m mschecker.cli sd --preset tiny --save-pipeline /tmp/sd_like          # tokenizer files
    $P tools/export_tiny_sdxl.py --tokenizer /tmp/sd_like/tokenizer --out /tmp/sdxl                # 128 px, Euler
    $P tools/export_tiny_sd_sized.py --tokenizer /tmp/sd_like/tokenizer --out /tmp/sd128            # PNDM
    $P tools/export_tiny_sd_sized.py --tokenizer /tmp/sd_like/tokenizer --out /tmp/sd128d --scheduler ddim
    # each case below plus --case NAME --json benchmarks/results/sd_peer_check.json to record it
    # a. SDXL at its default 128 x 128, negative prompt absent (zeros: force_zeros_for_empty_prompt), 1 image
    $P tools/sd_peer_check.py --pipeline /tmp/sdxl/onnx --steps 3 --guidance-scale 5
    # b. SDXL 64 x 96, 2 prompts x 2 images, negative prompt, guidance rescale, micro-conditioning
    $P tools/sd_peer_check.py --pipeline /tmp/sdxl/onnx --steps 3 --guidance-scale 5 --height 64 --width 96 \\
        --prompt "a cat" --prompt "a dog" --negative-prompt blurry --num-images-per-prompt 2 \\
        --guidance-rescale 0.7 --original-size 96,128 --crops-coords-top-left 8,16
    # c. SD 1.x (PNDM) 64 x 96, negative prompt, 2 images, guidance rescale
    $P tools/sd_peer_check.py --pipeline /tmp/sd128/onnx --steps 3 --height 64 --width 96 \\
        --negative-prompt blurry --num-images-per-prompt 2 --guidance-rescale 0.7
    # d. SD 1.x DDIM, eta 0.5 (mschecker's per-step noise injected into the peer), 2 prompts
    $P tools/sd_peer_check.py --pipeline /tmp/sd128d/onnx --steps 3 --eta 0.5 --prompt "a cat" --prompt "a dog" \
        --latents-seed 1
    # e. the bundled tiny preset as a folder (legacy OnnxStableDiffusionPipeline peer; --peer optimum works too;
    #    --scheduler pndm|euler|dpmsolver++ before --save-pipeline for the others; lms needs scipy in the dev env)
    .venv/bin/python -m mschecker.cli sd --preset tiny --save-pipeline /tmp/sd_tiny
    $P tools/sd_peer_check.py --pipeline /tmp/sd_tiny --steps 4 [--peer optimum]
tests/sd/test_peer_check.py runs smaller versions of every case (MSCHECKER_DIFFUSERS_PYTHON=$P; ~3 min in all).

What is compared: the initial latents are RandomState(--latents-seed, default --seed).randn(B, C, h, w) in
float32 (B = prompts x images per prompt; h, w = --height / --width over the VAE scale factor, default the UNet's
sample_size), handed to both sides (mschecker --latents, the peer latents=); each side scales them by the
scheduler's init_noise_sigma. Per-step noise (DDIM with eta > 0) is mschecker's: numpy's
RandomState(--seed).standard_normal(latents.shape), one draw per step in order (mschecker's RandomState draws
nothing before when --latents is given); the peer's scheduler.step is wrapped to pass it as DDIM's
variance_noise (float32). Euler ancestral has no such argument (its noise is torch's randn_tensor): out of reach.
After every UNet evaluation (PNDM: steps + 1, its PLMS warm-up) the latents of the whole batch, and each decoded
image (output_type="np", float32 HWC in [0, 1]) on its own: relative error ||a - b|| / ||b||.

The bar is onnxruntime's own noise: the peer runs twice, with onnxruntime's graph optimizations on (its default)
and off -- the same models and inputs through fused vs unfused kernels, float32 rounding in another order. Every
row's mschecker-vs-peer error (both optimized) must not exceed SLACK times the largest optimized-vs-unoptimized
error of the peer over all rows: a difference no larger than what onnxruntime's own kernel choice makes is float32
rounding, not semantics (a wrong scheduler step, guidance, time id or negative prompt is orders larger). Exit 0
when every row passes, 1 otherwise, 2 on bad input.

What differs on purpose: mschecker does the host arithmetic (scheduler, guidance) in float64 where diffusers
does it in float32 (torch / numpy); that difference is what is being bounded. The legacy ONNX pipeline feeds
input_ids as int32; for a text encoder declaring int64 they are cast to the declared type (the same ids).
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "sd_peer_check.json"
SLACK = 2.0  # the mschecker-peer difference may reach twice onnxruntime's optimized-vs-unoptimized spread
DEFAULT_PROMPT = "a photo of an astronaut riding a horse"
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local folders only: never ask the Hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / nb if nb else float(np.linalg.norm(a - b))


def _json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


class Folder:
    """What the tool reads from a pipeline folder: XL or not, the latent shape, a description."""

    def __init__(self, path: Path):
        self.path = path
        self.index = _json(path / "model_index.json")
        self.cls = str(self.index.get("_class_name", ""))
        self.xl = "XL" in self.cls or bool((self.index.get("text_encoder_2") or [None])[0]) \
            or (path / "text_encoder_2").is_dir()
        self.legacy = self.cls.startswith("Onnx")  # diffusers' OnnxStableDiffusionPipeline (mschecker's own folders)
        unet = _json(path / "unet" / "config.json")
        vae = _json(path / "vae_decoder" / "config.json")
        self.sample_size = unet.get("sample_size", 64)
        self.channels = unet.get("in_channels", 4)
        # diffusers: vae_scale_factor = 2 ** (len(vae.config.block_out_channels) - 1), 8 without a config
        self.vae_scale_factor = 2 ** (len(vae["block_out_channels"]) - 1) if "block_out_channels" in vae else 8
        self.scheduler = (self.index.get("scheduler") or [None, None])[1]

    def describe(self) -> dict:
        import onnx

        producer = None
        unet = self.path / "unet" / "model.onnx"
        if unet.is_file():
            m = onnx.load(str(unet), load_external_data=False)
            producer = f"{m.producer_name} {m.producer_version}".strip() + f", opset {m.opset_import[0].version}"
        return {"class": self.cls, "xl": self.xl, "scheduler": self.scheduler, "unet_sample_size": self.sample_size,
                "vae_scale_factor": self.vae_scale_factor, "diffusers_version_in_index": self.index.get(
                    "_diffusers_version"), "unet_producer": producer,
                "stages": sorted(p.name for p in self.path.iterdir() if (p / "model.onnx").is_file())}


def session_options(optimize: bool):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return so


def inject_noise(scheduler, noise_seed: int, eta: float) -> None:
    """DDIM with eta > 0: pass mschecker's per-step noise (RandomState(seed).standard_normal(shape), one draw per
    step) as variance_noise instead of the torch generator's. functools.wraps keeps step's signature, which the
    pipelines inspect to decide whether to pass eta."""
    if not eta:
        return
    import torch

    rng = np.random.RandomState(noise_seed)
    step = scheduler.step

    @functools.wraps(step)
    def with_noise(model_output, timestep, sample, *args, **kwargs):
        kwargs.pop("generator", None)
        noise = rng.standard_normal(tuple(sample.shape))
        kwargs["variance_noise"] = torch.from_numpy(noise).to(sample.dtype)
        return step(model_output, timestep, sample, *args, **kwargs)

    scheduler.step = with_noise


def run_optimum(folder: Folder, a, latents: np.ndarray, optimize: bool, notes: list[str]):
    import torch
    from optimum.onnxruntime import ORTStableDiffusionPipeline, ORTStableDiffusionXLPipeline

    cls = ORTStableDiffusionXLPipeline if folder.xl else ORTStableDiffusionPipeline
    pipe = cls.from_pretrained(str(folder.path), provider="CPUExecutionProvider",
                               session_options=session_options(optimize))
    for name in ("text_encoder", "text_encoder_2"):
        te = getattr(pipe, name, None)
        if te is not None and not hasattr(te.config, "num_hidden_layers") and not hasattr(te.config,
                                                                                          "num_decoder_layers"):
            te.register_to_config(num_hidden_layers=0)  # mschecker's folders: no hidden_states.<i> outputs
            note = f"{name}/config.json has no num_hidden_layers: registered 0 for optimum's ORTTextEncoder"
            if note not in notes:
                notes.append(note)
    pipe.set_progress_bar_config(disable=True)
    inject_noise(pipe.scheduler, a.seed, a.eta)
    per_step: list[np.ndarray] = []

    def on_step_end(p, i, t, kwargs):
        per_step.append(kwargs["latents"].detach().cpu().numpy().copy())
        return kwargs

    kw = dict(prompt=a.prompt if len(a.prompt) > 1 else a.prompt[0], negative_prompt=_negative(a),
              num_images_per_prompt=a.num_images_per_prompt, height=a.h, width=a.w, num_inference_steps=a.steps,
              guidance_scale=a.guidance_scale, guidance_rescale=a.guidance_rescale, eta=a.eta,
              latents=torch.from_numpy(latents.copy()), output_type="np", callback_on_step_end=on_step_end)
    if folder.xl:
        kw.update(original_size=a.original_size, crops_coords_top_left=a.crops_coords_top_left or (0, 0),
                  target_size=a.target_size)
    out = pipe(**kw)
    return per_step, np.asarray(out.images)


class _CastIds:
    """The legacy ONNX pipeline's text encoder call with input_ids cast to the dtype the graph declares."""

    def __init__(self, model):
        self.model = model
        meta = next(i for i in model.model.get_inputs() if i.name == "input_ids")
        self.dtype = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}[meta.type]

    def __call__(self, **kwargs):
        kwargs["input_ids"] = np.asarray(kwargs["input_ids"]).astype(self.dtype)
        return self.model(**kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def run_onnx(folder: Folder, a, latents: np.ndarray, optimize: bool, notes: list[str]):
    import diffusers
    import onnxruntime as ort
    from diffusers import OnnxRuntimeModel, OnnxStableDiffusionPipeline
    from transformers import CLIPTokenizer

    so = session_options(optimize)

    def model(stage):
        return OnnxRuntimeModel(model=ort.InferenceSession(str(folder.path / stage / "model.onnx"), sess_options=so,
                                                           providers=["CPUExecutionProvider"]))
    cls = getattr(diffusers, folder.scheduler)
    if isinstance(cls.__dict__.get("init_noise_sigma"), property):  # Euler's is a torch tensor, which the ONNX
        cls = type(cls.__name__, (cls,), {  # pipeline's numpy latents cannot be multiplied by: hand it a float
            "init_noise_sigma": property(lambda self, get=cls.init_noise_sigma.fget: float(get(self)))})
    scheduler = cls.from_pretrained(str(folder.path / "scheduler"))
    inject_noise(scheduler, a.seed, a.eta)
    pipe = OnnxStableDiffusionPipeline(vae_encoder=None, vae_decoder=model("vae_decoder"),
                                       text_encoder=_CastIds(model("text_encoder")),
                                       tokenizer=CLIPTokenizer.from_pretrained(str(folder.path / "tokenizer")),
                                       unet=model("unet"), scheduler=scheduler, safety_checker=None,
                                       feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    per_step: list[np.ndarray] = []
    # the legacy pipeline's latents are (height // 8, width // 8) whatever the VAE's scale factor
    h, w = latents.shape[-2] * 8, latents.shape[-1] * 8
    out = pipe(a.prompt if len(a.prompt) > 1 else a.prompt[0], negative_prompt=_negative(a),
               num_images_per_prompt=a.num_images_per_prompt, height=h, width=w, num_inference_steps=a.steps,
               guidance_scale=a.guidance_scale, eta=a.eta, latents=latents.copy(), output_type="np",
               callback=lambda i, t, x: per_step.append(np.array(x)), callback_steps=1)
    return per_step, np.asarray(out.images)


def _negative(a):
    if not a.negative_prompt:
        return None  # the pipelines' own default: "" for SD, zeros for SDXL's force_zeros_for_empty_prompt
    return a.negative_prompt if len(a.negative_prompt) > 1 else a.negative_prompt[0]


def _pair(text: str):
    try:
        h, w = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not two integers A,B") from None
    return (h, w)


def mschecker_command(python: str, folder: Path, a, latents_file: Path, out: Path) -> list[str]:
    cmd = [python, "-m", "mschecker.cli", "sd", "--pipeline", str(folder), "--sides", "ort,reference",
           "--steps", str(a.steps), "--guidance-scale", str(a.guidance_scale), "--latents", str(latents_file),
           "--seed", str(a.seed), "--out", str(out)]
    for p in a.prompt:
        cmd += ["--prompt", p]
    for n in a.negative_prompt or []:
        cmd += ["--negative-prompt", n]
    if a.num_images_per_prompt != 1:
        cmd += ["--num-images-per-prompt", str(a.num_images_per_prompt)]
    if a.height is not None:
        cmd += ["--height", str(a.h)]
    if a.width is not None:
        cmd += ["--width", str(a.w)]
    if a.guidance_rescale:
        cmd += ["--guidance-rescale", str(a.guidance_rescale)]
    if a.eta:
        cmd += ["--eta", str(a.eta)]
    for flag, value in (("--original-size", a.original_size), ("--crops-coords-top-left", a.crops_coords_top_left),
                        ("--target-size", a.target_size)):
        if value is not None:
            cmd += [flag, f"{value[0]},{value[1]}"]
    return cmd


def run_mschecker(cmd: list[str], out: Path, batch: int) -> tuple[list[np.ndarray], np.ndarray]:
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")})
    if r.returncode not in (0, 1):
        raise SystemExit(f"sd_peer_check: mschecker failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
    per_step = []  # one file per UNet evaluation: PNDM's PLMS warm-up evaluates steps + 1 times
    while (out / f"ort.latents_step{len(per_step) + 1}.npy").is_file():
        per_step.append(np.load(out / f"ort.latents_step{len(per_step) + 1}.npy"))
    images = np.load(out / "ort.images.npy") if batch > 1 else np.load(out / "ort.image.npy")[None]
    return per_step, images


def versions() -> dict:
    import importlib.metadata as md

    found = {}
    for p in ("diffusers", "optimum", "optimum-onnx", "transformers", "torch", "onnxruntime", "onnx", "numpy"):
        try:
            found[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return found


def record(path: Path, case: str, entry: dict) -> None:
    """Add or replace runs[case] in the results file, keeping every other entry."""
    data = _json(path)
    if data and "runs" not in data:  # a bare result written by an older version of this tool
        data = {"runs": {"(earlier)": data}}
    data["what"] = ("tools/sd_peer_check.py: mschecker sd --sides ort,reference vs diffusers' pipeline code (optimum "
                    "ORTStableDiffusion[XL]Pipeline, or diffusers' OnnxStableDiffusionPipeline for mschecker's own "
                    "folders) on the same folder, call arguments, seed, latents: relative error ||a-b||/||b|| of "
                    "the latents after every step and of every image, bar SLACK x the peer's own onnxruntime "
                    "optimized-vs-unoptimized spread")
    data["command"] = "/tmp/devenv_sd/bin/python tools/sd_peer_check.py --pipeline DIR [call arguments] --case NAME " \
                      "--json benchmarks/results/sd_peer_check.json (each entry's 'command')"
    data["date"] = datetime.date.today().isoformat()
    data.setdefault("runs", {})[case] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", type=Path, required=True, help="a diffusers ONNX pipeline folder")
    ap.add_argument("--peer", choices=("auto", "optimum", "onnx"), default="auto",
                    help="optimum's ORTStableDiffusion[XL]Pipeline or diffusers' OnnxStableDiffusionPipeline "
                         "(default auto: onnx for Onnx* folders, optimum otherwise)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompt", action="append", help=f"repeat for several (default {DEFAULT_PROMPT!r})")
    ap.add_argument("--negative-prompt", action="append", help="one for all prompts or one per prompt (default none)")
    ap.add_argument("--num-images-per-prompt", type=int, default=1)
    ap.add_argument("--height", type=int, help="px (default the UNet's sample_size x the VAE scale factor)")
    ap.add_argument("--width", type=int)
    ap.add_argument("--guidance-scale", type=float, default=7.5)
    ap.add_argument("--guidance-rescale", type=float, default=0.0)
    ap.add_argument("--eta", type=float, default=0.0, help="DDIM's eta (mschecker's noise injected into the peer)")
    ap.add_argument("--original-size", type=_pair, metavar="H,W", help="SDXL")
    ap.add_argument("--crops-coords-top-left", type=_pair, metavar="TOP,LEFT", help="SDXL")
    ap.add_argument("--target-size", type=_pair, metavar="H,W", help="SDXL")
    ap.add_argument("--seed", type=int, default=0, help="mschecker's --seed (its per-step noise)")
    ap.add_argument("--latents-seed", type=int, help="the initial latents' RandomState seed (default --seed)")
    ap.add_argument("--mschecker-python", default=str(ROOT / ".venv" / "bin" / "python"))
    ap.add_argument("--json", type=Path, help=f"add the result to this file's runs (e.g. {RESULTS.relative_to(ROOT)})")
    ap.add_argument("--case", help="the entry's name in --json (default: derived from the folder and arguments)")
    ap.add_argument("--describe", default="", help="a description of the folder for the record (how it was made)")
    a = ap.parse_args(argv)

    def bad(msg: str) -> int:
        print(f"sd_peer_check: error: {msg}", file=sys.stderr)
        return 2

    if not (a.pipeline / "model_index.json").is_file():
        return bad(f"{a.pipeline / 'model_index.json'} not found")
    folder = Folder(a.pipeline)
    a.prompt = a.prompt or [DEFAULT_PROMPT]
    if a.negative_prompt and len(a.negative_prompt) not in (1, len(a.prompt)):
        return bad(f"{len(a.negative_prompt)} negative prompts for {len(a.prompt)} prompts")
    peer = a.peer if a.peer != "auto" else ("onnx" if folder.legacy and not folder.xl else "optimum")
    if peer == "onnx" and folder.xl:
        return bad("diffusers' OnnxStableDiffusionPipeline runs SD folders only: use --peer optimum for SDXL")
    if peer == "onnx" and a.guidance_rescale:
        return bad("diffusers' OnnxStableDiffusionPipeline has no guidance_rescale: use --peer optimum")
    if not folder.xl and any(v is not None for v in (a.original_size, a.crops_coords_top_left, a.target_size)):
        return bad("--original-size / --crops-coords-top-left / --target-size are SDXL's (this folder is SD)")
    if a.eta and folder.scheduler != "DDIMScheduler":
        return bad(f"--eta acts on DDIM only; this folder's scheduler is {folder.scheduler}")
    if "Ancestral" in str(folder.scheduler):
        return bad("Euler ancestral's per-step noise is torch's randn_tensor in diffusers: no way to inject "
                   "mschecker's")
    f = folder.vae_scale_factor
    a.h = a.height or folder.sample_size * f
    a.w = a.width or folder.sample_size * f
    if a.h % f or a.w % f:
        return bad(f"--height / --width must be multiples of the VAE scale factor {f}")
    batch = len(a.prompt) * a.num_images_per_prompt
    latents_seed = a.seed if a.latents_seed is None else a.latents_seed
    # diffusers' legacy ONNX draw: generator.randn(*shape).astype(float32) -- mschecker's own default latents
    latents = np.random.RandomState(latents_seed).randn(batch, folder.channels, a.h // f, a.w // f) \
        .astype(np.float32)
    with tempfile.TemporaryDirectory(prefix="sd-peer-") as tmp:
        latents_file = Path(tmp) / "latents.npy"
        np.save(latents_file, latents)
        cmd = mschecker_command(a.mschecker_python, a.pipeline, a, latents_file, Path(tmp) / "out")
        ours, our_images = run_mschecker(cmd, Path(tmp) / "out", batch)
    run_peer = run_optimum if peer == "optimum" else run_onnx
    notes: list[str] = []
    theirs, their_images = run_peer(folder, a, latents, True, notes)
    plain, plain_images = run_peer(folder, a, latents, False, notes)
    rows = []
    for k, (x, y, z) in enumerate(zip(ours, theirs, plain), start=1):
        rows.append({"what": f"latents step {k}", "mschecker_vs_peer": rel(x, y), "ort_noise": rel(z, y)})
    shapes_ok = our_images.shape == their_images.shape == plain_images.shape and len(our_images) == batch
    if shapes_ok:
        for k in range(batch):
            rows.append({"what": f"image {k + 1}" if batch > 1 else "image",
                         "mschecker_vs_peer": rel(our_images[k], their_images[k]),
                         "ort_noise": rel(plain_images[k], their_images[k])})
    else:
        notes.append(f"image shapes differ: mschecker {our_images.shape}, peer {their_images.shape}")
    bar = max(r["ort_noise"] for r in rows)
    counts_ok = len(ours) == len(theirs) == len(plain) >= a.steps
    if not counts_ok:
        notes.append(f"step counts differ: mschecker {len(ours)}, peer {len(theirs)} / {len(plain)}")
    ok = counts_ok and shapes_ok and all(r["mschecker_vs_peer"] <= SLACK * bar for r in rows)
    peer_name = ("optimum " + ("ORTStableDiffusionXLPipeline" if folder.xl else "ORTStableDiffusionPipeline")
                 if peer == "optimum" else "diffusers OnnxStableDiffusionPipeline")
    settings = {"steps": a.steps, "prompts": a.prompt, "negative_prompt": a.negative_prompt,
                "num_images_per_prompt": a.num_images_per_prompt, "height": a.h, "width": a.w,
                "guidance_scale": a.guidance_scale, "guidance_rescale": a.guidance_rescale, "eta": a.eta,
                "seed": a.seed, "latents_seed": latents_seed, "latents_shape": list(latents.shape)}
    if folder.xl:
        settings.update(original_size=a.original_size, crops_coords_top_left=a.crops_coords_top_left,
                        target_size=a.target_size)
    step_rows = [r for r in rows if r["what"].startswith("latents")]
    image_rows = [r for r in rows if not r["what"].startswith("latents")]
    argv_used, skip = [], False  # the call as recorded: without the bookkeeping options
    for x in (sys.argv[1:] if argv is None else list(argv)):
        if skip or x in ("--json", "--case", "--describe", "--mschecker-python"):
            skip = not skip
            continue
        argv_used.append(x)
    result = {"folder": {"path": str(a.pipeline), "description": a.describe, **folder.describe()},
              "peer": peer_name, "versions": versions(), "settings": settings,
              "command": shlex.join(["tools/sd_peer_check.py", *argv_used]),
              "mschecker_command": shlex.join(cmd[1:]).replace(tmp, "TMP"),
              "slack": SLACK, "ort_noise_max": bar,
              "max_step_rel": max((r["mschecker_vs_peer"] for r in step_rows), default=None),
              "max_image_rel": max((r["mschecker_vs_peer"] for r in image_rows), default=None),
              "passed": ok, "notes": notes, "rows": rows}
    for r in rows:
        print(f"{r['what']:>16}: mschecker vs peer {r['mschecker_vs_peer']:.3e}   onnxruntime noise "
              f"{r['ort_noise']:.3e}")
    for n in notes:
        print(f"note: {n}")
    print(f"{'PASS' if ok else 'FAIL'} ({peer_name}): every relative error <= {SLACK:g} x max onnxruntime noise "
          f"({bar:.3e})")
    if a.json:
        case = a.case or f"{folder.path.name} {peer} {a.h}x{a.w} B{batch} {a.steps} steps"
        record(a.json, case, result)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
