"""The referee of `mschecker sd --referee SIDE`: a third whole-pipeline run with the referee side on every stage
(e.g. ort-fp16: each stage converted to fp16 on onnxruntime), judged against the float64 run stage by stage with
mschecker.modelcheck.referee's rule (PyTorch's: err(run vs float64) <= k * err(referee vs float64) + 1e-5, err = RMSE).

Why a whole pipeline and not each stage on the judged run's inputs: the judged run's image is the end of a chain
(text encoders -> N UNet steps -> VAE) whose errors compound, and the question a referee answers is "would another
fp16 implementation of this pipeline do as well?", which only the same chain run by that implementation answers.

Judged, in run order: every text encoder's hidden states (and SDXL's pooled embedding), the latents after the last
UNet step, the VAE output, and the image (diffusers' output_type="np": float32 in [0, 1], NaN kept) -- the
"final image" next to each stage's output.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mschecker.modelcheck.referee import RefereeVerdict, judge_outputs
from mschecker.sd.pipeline import PipelineResult, run_in_batches, run_pipeline


def stage_factory(side, begin: Callable[[str], None] | None = None):
    """A make_stage_runner running every stage on the referee ``side`` (its ``runner``: ort-fp16 converts each
    stage's graph); ``begin(stage)`` is called before each stage execution (progress)."""
    def make(model, stage_name):
        runner = side.runner(model, f"referee {side.spec} of the {stage_name} stage")
        metas = runner.inputs()

        def run(feeds):
            if begin is not None:
                begin(stage_name)
            return run_in_batches(runner.run, metas, feeds)
        return run
    return make


def stage_values(result: PipelineResult) -> dict[str, np.ndarray]:
    """{name: value} of the judged stage outputs of one run, in run order (the module docstring's list)."""
    out = {("text_embeddings" if st == "text_encoder" else f"{st}.hidden_states"): np.asarray(v)
           for st, v in result.text_outputs.items()}
    if result.pooled is not None:
        out["text_encoder_2.text_embeds"] = np.asarray(result.pooled)
    out["latents_final"] = np.asarray(result.latents[-1])
    out["decoded"] = np.asarray(result.decoded)
    out["image"] = result.images_float
    return out


def referee_pipeline(side, common: dict, judged: PipelineResult, truth: PipelineResult, *, k: float | None = None,
                     reduced: bool = True, begin: Callable[[str], None] | None = None) -> RefereeVerdict:
    """Run the pipeline (``common``: run_pipeline's keywords, the judged run's) on the referee side and judge
    ``judged`` against it, both measured against ``truth`` (the float64 run)."""
    referee = run_pipeline(make_stage_runner=stage_factory(side, begin), **common)
    run, ref, tru = stage_values(judged), stage_values(referee), stage_values(truth)
    return judge_outputs(list(tru), run, ref, tru, side=side.describe(), spec=side.spec, k=k, reduced=reduced)
