"""The NPU policy's kernel choice is declared, not derived from names: KernelInfo.defaults names the variant of
each (dtype, accumulate, implmode) group, registration refuses an undeclared tie or a mis-keyed variant, and a
new variant with a shorter name changes nothing."""
from __future__ import annotations

import dataclasses

import pytest

from mschecker.npu.policy import select_variant
from mschecker.kernels.registry import KernelInfo, Variant, _check_defaults, get_kernel, register_kernel, registry

MODES = [(im, cube, acc) for im in ("high_precision", "high_performance") for cube in (True, False)
         for acc in ("float32", "float16")]


def _choices(info: KernelInfo) -> dict:
    out = {}
    for dtype in sorted({v.dtype for v in info.correct_variants}):
        for im, cube, acc in MODES:
            out[(dtype, im, cube, acc)] = select_variant(info, dtype, im, cube=cube, cube_acc=acc).name
    return out


def _twin(v: Variant, name: str) -> Variant:
    return dataclasses.replace(v, name=name)


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_group_declares_its_default(name):
    info = get_kernel(name)
    groups: dict = {}
    for v in info.correct_variants:
        groups.setdefault((v.dtype, v.accumulate, v.implmode), []).append(v.name)
    for key, members in groups.items():
        if len(members) > 1:
            assert len(set(members) & set(info.defaults)) == 1, (name, key, members, info.defaults)


@pytest.mark.parametrize("name", ["matmul", "gelu", "layer_norm", "reduce_sum"])
def test_a_shorter_named_variant_changes_no_choice(name):
    """The old rule broke ties by the shortest name: a new variant called "x" would have won every tie."""
    info = get_kernel(name)
    before = _choices(info)
    extra = {}
    for v in info.correct_variants:
        twin = _twin(v, "x" + str(len(extra)))
        extra[twin.name] = twin
    # What registration asks of the author of the new variants: every group now tied declares its default (the
    # variant that was alone keeps running). Declared first, so declaration order alone would pick the twins.
    defaults = tuple(info.defaults) + tuple(v.name for v in info.correct_variants
                                            if not any(d in info.defaults and info.variant(d).dtype == v.dtype
                                                       and info.variant(d).accumulate == v.accumulate
                                                       and info.variant(d).implmode == v.implmode
                                                       for d in info.defaults))
    bigger = dataclasses.replace(info, variants={**extra, **info.variants}, defaults=defaults)
    _check_defaults(bigger)
    assert _choices(bigger) == before


def test_registration_refuses_an_undeclared_tie():
    info = get_kernel("matmul")
    v = info.variant("fp16_fp32acc")
    tie = dataclasses.replace(info, name="matmul_tie_test", variants={"fp16_fp32acc": v, "y": _twin(v, "y")},
                              defaults=())
    with pytest.raises(ValueError, match="exactly one must be named in defaults"):
        register_kernel(tie)
    both = dataclasses.replace(tie, defaults=("fp16_fp32acc", "y"))
    with pytest.raises(ValueError, match="exactly one"):
        register_kernel(both)
    assert "matmul_tie_test" not in registry()


def test_registration_refuses_a_variant_keyed_by_another_name_and_unknown_defaults():
    info = get_kernel("matmul")
    v = info.variant("fp16_fp32acc")
    with pytest.raises(ValueError, match="key variants by their own name"):
        register_kernel(dataclasses.replace(info, name="matmul_key_test", variants={"other": v}, defaults=()))
    with pytest.raises(ValueError, match="not correct variants"):
        register_kernel(dataclasses.replace(info, name="matmul_key_test", variants={v.name: v}, defaults=("nope",)))
    assert "matmul_key_test" not in registry()


def test_declared_default_wins_over_declaration_order():
    info = get_kernel("matmul")
    v = info.variant("fp16_fp32acc")
    first, second = _twin(v, "aaa_first"), _twin(v, "zzz_default")
    tie = dataclasses.replace(info, variants={first.name: first, second.name: second}, defaults=("zzz_default",))
    assert select_variant(tie, "float16", "high_precision", cube=True, cube_acc="float32").name == "zzz_default"
