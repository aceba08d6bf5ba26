"""The campaign file: every bad key is one InputError naming it; the matrix expands into stable cells."""
from __future__ import annotations

from pathlib import Path

import pytest

from mschecker.campaign.spec import load_campaign, parse_campaign
from mschecker.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "golden" / "default"


def check_block(**extra) -> dict:
    return {"name": "m", "model": str(DEFAULT / "model.onnx"),
            "inputs": [str(DEFAULT / "x.bin"), str(DEFAULT / "t.bin")], "golden": str(DEFAULT / "expected"), **extra}


def parse(raw: dict, path: Path = ROOT / "c.toml"):
    return parse_campaign(raw, path)


def test_expansion_counts_keys_and_repeats():
    spec = parse({"campaign": {"name": "n", "repeats": 2},
                  "check": [check_block(devices=["ort", "reference", "npu"], profiles=["ascend910b", "ascend310p"])],
                  "sd": [{"name": "s", "preset": "tiny", "prompts": ["a", "b"], "seeds": [0, 1],
                          "profiles": ["ascend910b", "fp32"]}],
                  "kernels": [{"name": "k", "kernels": ["softmax", "exp"]}]})
    cells = spec.cells()
    by_kind = {k: [c for c in cells if c.kind == k] for k in ("check", "sd", "kernels")}
    # ort: 2 repeats (noise is measured); reference and npu x 2 profiles: bit-exact, one sample each
    assert [c.task_key for c in by_kind["check"]] == [
        'm | device="ort"#0', 'm | device="ort"#1', 'm | device="reference"#0',
        'm | device="npu" | profile="ascend910b"#0', 'm | device="npu" | profile="ascend310p"#0']
    assert [c.bit_exact for c in by_kind["check"]] == [False, False, True, True, True]
    assert len(by_kind["sd"]) == 2 * 2 * 2 and all(c.bit_exact for c in by_kind["sd"])
    assert [c.coords for c in by_kind["kernels"]] == [{"kernel": "softmax"}, {"kernel": "exp"}]
    assert len({c.task_key for c in cells}) == len(cells)


def test_npu_options_speak_atc_and_change_the_cell():
    """A cell's npu_options take ATC's settings inline (a cell runs where only shipped files exist)."""
    base = {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"]}]}
    opts = {"precision_mode_v2": "mixed_float16", "modify_mixlist": {"black-list": {"to-add": ["SoftmaxV2"]}},
            "customize_dtypes": ["OpType::GroupNorm:InputDtype:float32"], "optypelist_for_implmode": ["Gelu"],
            "implmode": "high_performance", "fusion": {"GroupNormFusionPass": "off"}}
    cell = parse({**base, "sd": [{**base["sd"][0], "npu_options": opts}]}).cells()[0]
    assert cell.spec_hash != parse(base).cells()[0].spec_hash


def test_timeouts_per_block_default_to_the_campaign():
    spec = parse({"campaign": {"name": "n", "timeout_s": 60},
                  "kernels": [{"name": "k", "kernels": ["exp"]}, {"name": "slow", "kernels": ["exp"], "timeout_s": 5}]})
    assert [c.timeout_s for c in spec.cells()] == [60.0, 5.0]
    assert spec.cells()[0].spec_hash == spec.cells()[1].spec_hash  # a timeout is not what a cell computes


def test_spec_hash_tracks_parameters_not_paths(tmp_path):
    base = {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"]}]}
    h0 = parse(base).cells()[0].spec_hash
    changed = {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"], "steps": 11}]}
    assert parse(changed).cells()[0].spec_hash != h0
    opts = {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"],
                                               "npu_options": {"implmode": "high_precision"}}]}
    assert parse(opts).cells()[0].spec_hash != h0
    # the same check cell declared from another folder (paths differ) keeps its key and hash
    a = parse({"campaign": {"name": "n"}, "check": [check_block()]}).cells()[0]
    copy = tmp_path / "d"
    copy.mkdir()
    for f in ("model.onnx", "x.bin", "t.bin"):
        (copy / f).write_bytes((DEFAULT / f).read_bytes())
    (copy / "expected").mkdir()
    b = parse({"campaign": {"name": "n"}, "check": [{"name": "m", "model": "d/model.onnx",
                                                     "inputs": ["d/x.bin", "d/t.bin"], "golden": "d/expected"}]},
              tmp_path / "c.toml").cells()[0]
    assert (a.key, a.spec_hash) == (b.key, b.spec_hash)


@pytest.mark.parametrize("raw, message", [
    ({"campaign": {"name": "n", "timout_s": 3}, "kernels": [{"name": "k"}]}, "[campaign]: unknown key 'timout_s'"),
    ({"campaign": {"name": "n"}, "kernel": [{"name": "k"}]}, "unknown key 'kernel'"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k", "example": 3}]},
     "[[kernels]] #1 'k': unknown key 'example' (known: examples, kernels, name, timeout_s)"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k", "examples": "3"}]}, "examples must be an integer, got str"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k", "examples": True}]}, "examples must be an integer"),
    ({"campaign": {"name": "n", "timeout_s": -1}, "kernels": [{"name": "k"}]}, "timeout_s must be a positive"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k", "timeout_s": 0}]}, "'k': timeout_s must be a positive"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k", "kernels": ["nope"]}]}, "kernels: "),
    ({"campaign": {"name": "n"}}, "declares no cells"),
    ({"kernels": [{"name": "k"}]}, "missing the [campaign] table"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": []}]}, "'s': prompts must not be empty"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a", 3]}]}, "prompts[1] must be a string"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "profiles": ["ascend999"]}]},
     "profiles[0]: "),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "preset": "huge"}]}, "preset 'huge'"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"],
                                         "stage_options": {"vae": {"implmode": "high_precision"}}}]},
     "stage_options: unknown stage 'vae'"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "npu_options": {"implmod": "x"}}]},
     "npu_options: unknown key 'implmod'"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "npu_options": {"implmode": "fastest"}}]},
     "npu_options: "),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "npu_options": {
        "customize_dtypes": ["OpType::GroupNormalization:InputDtype:float32"]}}]}, "ATC takes the Ascend IR op type"),
    ({"campaign": {"name": "n"}, "sd": [{"name": "s", "prompts": ["a"], "npu_options": {
        "precision_mode": "force_fp16", "precision_mode_v2": "fp16"}}]}, "atc refuses"),
    ({"campaign": {"name": "n"}, "kernels": [{"name": "k"}, {"name": "k"}]}, "same name"),
    ({"campaign": {"name": "n"}, "compare": {"allow": {"image_psnr_db": -1}}, "kernels": [{"name": "k"}]},
     "allow.image_psnr_db must be a finite number >= 0"),
])
def test_bad_campaign_names_the_key(raw, message):
    with pytest.raises(InputError) as err:
        parse(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_check_block_paths_and_devices():
    with pytest.raises(InputError, match=r"\[\[check\]\] #1 'm': model 'missing.onnx': .* does not exist"):
        parse({"campaign": {"name": "n"}, "check": [check_block(model="missing.onnx")]})
    with pytest.raises(InputError, match=r"devices\[1\] 'gpu' is not one of ort, reference, npu"):
        parse({"campaign": {"name": "n"}, "check": [check_block(devices=["ort", "gpu"])]})
    with pytest.raises(InputError, match="tolerance: unknown key 'atl'"):
        parse({"campaign": {"name": "n"}, "check": [check_block(tolerance={"atl": 1})]})
    with pytest.raises(InputError, match="missing required key 'golden'"):
        block = check_block()
        del block["golden"]
        parse({"campaign": {"name": "n"}, "check": [block]})


def test_load_campaign_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[campaign\nname = 1\n")
    with pytest.raises(InputError, match=r"bad.toml: not valid TOML"):
        load_campaign(bad)
    with pytest.raises(InputError, match="not found"):
        load_campaign(tmp_path / "none.toml")
    typed = tmp_path / "typed.toml"
    typed.write_text('[campaign]\nname = 3\n[[kernels]]\nname = "k"\n')
    with pytest.raises(InputError, match=r"typed.toml: \[campaign\]: name must be a string, got int 3"):
        load_campaign(typed)


def test_example_campaigns_parse():
    for path in sorted((ROOT / "examples" / "campaigns").glob("*.toml")):
        assert load_campaign(path).cells(), path


@pytest.mark.parametrize("name", ["smoke.toml", "sd_small_nightly.toml"])
def test_the_example_campaigns_parse(name):
    """The shipped examples stay valid as the options they use change (the nightly's VAE fix speaks ATC)."""
    from pathlib import Path

    from mschecker.campaign.spec import load_campaign

    spec = load_campaign(Path(__file__).resolve().parents[2] / "examples" / "campaigns" / name)
    assert spec.cells()
