"""What issue 22's bisect mutants (tools/mutants/patches/{writers_atc,search_fusion_off}_*.patch) showed no test
checked: a precision_mode_v2 profile's fix is written and read back in the v2 spelling, and step 5 (fusion off)
trades only the fp32 moves of a pass's fused ops, keeping every other move of the fix. Each test fails under the
mutant it names."""
from __future__ import annotations

import pytest

from mschecker.bisect.search import Evaluation, FixConfig, _fusion_off_trials
from mschecker.bisect.writers import written_profile
from mschecker.npu.profile import load_profile
from mschecker.npu.atc import parse_atc_command


@pytest.mark.parametrize("v2", ["mixed_float16", "origin", "fp16"])
def test_a_v2_profiles_fix_is_written_and_read_back_in_v2(v2):
    """writers_atc_v2_written_as_v1: the flags file says --precision_mode_v2 (atc refuses it next to
    --precision_mode), and the files give back the profile as proven."""
    base = load_profile("ascend910b").replace(precision_mode_v2=v2)
    fixed = base.replace(keep_dtype=("/act",), implmode_by_op_type={"Gelu": "high_precision"})
    if v2 == "mixed_float16":
        fixed = fixed.replace(modify_mixlist={"black-list": {"to-add": ["Sigmoid"]}})
    back, texts = written_profile(fixed, "m.onnx")
    flags = parse_atc_command(texts["atc_flags"], "atc_flags.txt")
    assert flags.precision_mode_v2 == v2 and flags.precision_mode is None
    assert (back.precision_mode_v2, back.precision_mode) == (v2, fixed.precision_mode)
    assert back.keep_dtype == ("/act",) and dict(back.implmode_by_op_type) == {"Gelu": "high_precision"}


def _trials(config: FixConfig, fusion_of: dict[str, str], passes: bool = True) -> list[FixConfig]:
    """The configurations step 5 evaluates (a stub evaluation: every trial passes or fails)."""
    seen: list[FixConfig] = []

    def evaluate(cfg, purpose):
        seen.append(cfg)
        return Evaluation(purpose, cfg, passes, 0.0, [], [], 0.0)
    _fusion_off_trials(evaluate, lambda ev: ev, config, fusion_of)
    return seen


def test_fusion_off_trades_only_the_fused_ops_fp32_moves():
    """search_fusion_off_high_precision_moves, search_fusion_off_drops_other_moves: a fix keeps a fused GroupNorm
    in fp32, an unfused Mul in fp32 and a fused Gelu in high_precision. The one trial switches GroupNormFusionPass
    off instead of the GroupNorm's move and keeps the other two moves; the Gelu's implmode move (cheaper than
    losing the fusion) gets no trial."""
    config = FixConfig(keep_dtype=frozenset({"/n/Mul/GroupNorm", "/a/Mul"}),
                       high_precision=frozenset({"/g/Mul_1/Gelu"}))
    fusion_of = {"/n/Mul/GroupNorm": "GroupNormFusionPass", "/g/Mul_1/Gelu": "GeluFusionPass"}
    assert _trials(config, fusion_of) == [FixConfig(keep_dtype=frozenset({"/a/Mul"}),
                                                    high_precision=frozenset({"/g/Mul_1/Gelu"}),
                                                    fusion_off=frozenset({"GroupNormFusionPass"}))]
    # only an implmode move on a fused op: nothing to trade
    assert _trials(FixConfig(high_precision=frozenset({"/g/Mul_1/Gelu"})), fusion_of) == []
    # two passes: the second trial starts from the first where that passed, from the fix where it failed
    two = FixConfig(keep_dtype=frozenset({"/n/Mul/GroupNorm", "/g/Mul_1/Gelu"}))
    got = _trials(two, fusion_of)
    assert [t.fusion_off for t in got] == [frozenset({"GeluFusionPass"}),
                                           frozenset({"GeluFusionPass", "GroupNormFusionPass"})]
    assert got[-1].keep_dtype == frozenset() and got[-1].high_precision == frozenset()
    got = _trials(two, fusion_of, passes=False)
    assert [t.fusion_off for t in got] == [frozenset({"GeluFusionPass"}), frozenset({"GroupNormFusionPass"})]
    assert got[-1].keep_dtype == frozenset({"/g/Mul_1/Gelu"})
