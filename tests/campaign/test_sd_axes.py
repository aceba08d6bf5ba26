"""SD cells take diffusers' newer call arguments as matrix axes (pipeline folders, sizes, negative prompts) and as
block settings; a campaign without them keeps its cell keys and spec hashes."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mschecker.campaign.spec import parse_campaign
from mschecker.errors import InputError

ROOT = Path(__file__).resolve().parents[2]


def parse(sd: dict, path: Path = ROOT / "c.toml"):
    return parse_campaign({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], **sd}]}, path)


def test_an_old_block_keeps_its_keys_and_hashes():
    cell = parse({"preset": "tiny"}).cells()[0]
    assert cell.key == 's | prompt="a" | seed=0 | profile="ascend910b"'
    old_params = {"prompt": "a", "seed": 0, "profile": "ascend910b", "preset": "tiny", "steps": 10,
                  "scheduler": "ddim", "guidance_scale": 7.5, "npu_options": {}, "stage_options": {},
                  "psnr_min": 30.0, "search_fix": False, "weights_seed": 0}
    payload = json.dumps({"kind": "sd", "params": old_params}, sort_keys=True, separators=(",", ":"))
    assert cell.params == old_params
    assert cell.spec_hash == hashlib.sha256(payload.encode()).hexdigest()


def test_sizes_negative_prompts_and_folders_are_axes(tmp_path):
    for name in ("sd_a", "sdxl_b"):
        (tmp_path / name).mkdir()
    spec = parse({"pipelines": ["sd_a", "sdxl_b"], "sizes": [[64, 96], [128, 128]], "negative_prompts": ["", "ugly"],
                  "num_images_per_prompt": 2, "guidance_rescale": 0.7, "eta": 0.3, "scheduler": "pndm",
                  "force_upcast": "off"}, tmp_path / "c.toml")
    cells = spec.cells()
    assert len(cells) == 2 * 2 * 2
    first = cells[0]
    assert first.key == ('s | pipeline="sd_a" | prompt="a" | seed=0 | size=[64, 96] | negative_prompt="" | '
                         'profile="ascend910b"')
    assert first.params["pipeline"] == str(tmp_path / "sd_a") and "preset" not in first.params
    assert first.params["generation"] == {"negative_prompt": "", "num_images_per_prompt": 2, "height": 64,
                                          "width": 96, "guidance_rescale": 0.7, "eta": 0.3}
    assert first.params["force_upcast"] == "off" and first.params["scheduler"] == "pndm"
    # a moved folder keeps the key and the hash: the path is not part of either
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("sd_a", "sdxl_b"):
        (moved / name).mkdir()
    again = parse({"pipelines": ["sd_a", "sdxl_b"], "sizes": [[64, 96], [128, 128]], "negative_prompts": ["", "ugly"],
                   "num_images_per_prompt": 2, "guidance_rescale": 0.7, "eta": 0.3, "scheduler": "pndm",
                   "force_upcast": "off"}, moved / "c.toml").cells()[0]
    assert again.key == first.key and again.spec_hash == first.spec_hash


@pytest.mark.parametrize("sd,message", [
    ({"sizes": [[0, 64]]}, "sizes[0] must be [height, width] in px"),
    ({"sizes": [[64]]}, "sizes[0] must be [height, width] in px"),
    ({"sizes": [64]}, "sizes[0] must be an array"),
    ({"negative_prompts": [1]}, "negative_prompts[0] must be a string"),
    ({"guidance_rescale": 1.5}, "guidance_rescale must be in [0, 1]"),
    ({"eta": -0.1}, "eta must be in [0, 1]"),
    ({"num_images_per_prompt": 0}, "num_images_per_prompt"),
    ({"force_upcast": "maybe"}, "force_upcast must be one of config, on, off"),
    ({"scheduler": "heun"}, "scheduler must be one of"),
    ({"pipelines": ["nowhere"]}, "pipelines 'nowhere'"),
    ({"pipelines": ["x"], "preset": "tiny"}, "give preset or pipelines, not both"),
    ({"stage_options": {"text_encoder_3": {}}}, "unknown stage 'text_encoder_3'"),
])
def test_bad_axes_are_one_line(sd, message, tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(InputError, match=None) as info:
        parse(sd, tmp_path / "c.toml")
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_folder_cell_runs_at_its_size_with_its_negative_prompt(tmp_path):
    from mschecker.campaign.cells import run_cell
    from mschecker.sd.bundled import save_bundled

    save_bundled("tiny", tmp_path / "pipe")
    spec = parse({"pipelines": ["pipe"], "sizes": [[12, 20]], "negative_prompts": ["blurry"], "steps": 2,
                  "num_images_per_prompt": 2}, tmp_path / "c.toml")
    record = run_cell(spec.cells()[0])
    assert record["status"] in ("pass", "fail"), record
    assert record["metrics"]["image_psnr_db"] > 0 and "text_embeddings.rel_euclidean" in record["metrics"]
    assert len(record["model_sha256"]) == 64
    assert record["detail"]["image_size"] == [12, 20] and record["detail"]["images"] == 2
    # the hash is of the folder's graphs: an edited graph is another model
    (tmp_path / "pipe" / "unet" / "model.onnx").write_bytes((tmp_path / "pipe" / "unet" / "model.onnx").read_bytes()
                                                            + b"\0")
    from mschecker.campaign.kinds.sd import pipeline_models_sha256

    assert pipeline_models_sha256(str(tmp_path / "pipe")) != record["model_sha256"]
