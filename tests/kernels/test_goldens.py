"""Kernel goldens (golden/kernels/, written by tools/build_kernel_goldens.py through mschecker.kernels.goldens).

- every golden directory verifies against its manifest (sha256, shape, dtype, no stray files);
- the float64 reference reproduces every stored output BIT-EXACTLY (a changed reference is a visible event:
  regenerate with --update and review the diff);
- every correct variant stays within its contract of the stored outputs, and every variant whose bits are ours
  (no Variant.platform_bits) reproduces its stored output bits exactly: a changed bit is a regression to explain
  and re-record with --update, whatever the contract allows;
- a BLAS-backed float64 reference (KernelInfo.reference_bits_bound) reproduces its outputs within the bound of two
  summation orders, so the goldens hold on any CPU's BLAS;
- every registered kernel has goldens, and the whole store stays small (< 5 MB: small shapes only);
- the machinery can fail: a corrupted file, a reference off by one ulp and a variant off by its bound are caught,
  and the tool refuses to overwrite without --update.
"""
from __future__ import annotations


import numpy as np
import pytest

from mschecker.tensors import golden_store
from mschecker.kernels.goldens import (GOLDEN_ROOT, check_variant_against_golden, load_kernel_goldens,
                                     reference_mismatches, variant_bit_mismatches, write_kernel_goldens)
from mschecker.kernels.registry import KernelInfo, Variant, get_kernel, registry

DIRS = sorted(p.parent for p in GOLDEN_ROOT.glob("*/manifest.json"))
KERNEL_DIRS = [pytest.param(d, id=d.name) for d in DIRS]


@pytest.mark.parametrize("directory", KERNEL_DIRS)
def test_golden_manifest_verifies(directory):
    assert golden_store.verify(directory) == []


@pytest.mark.parametrize("directory", KERNEL_DIRS)
def test_reference_reproduces_goldens_bit_exactly(directory):
    name, cases = load_kernel_goldens(directory)
    info = get_kernel(name)
    assert cases
    assert [p for c in cases for p in reference_mismatches(info, c)] == []


@pytest.mark.parametrize("directory", KERNEL_DIRS)
def test_variants_within_contract_of_goldens(directory):
    name, cases = load_kernel_goldens(directory)
    info = get_kernel(name)
    failures = [r.describe() for c in cases for v in info.correct_variants
                if not (r := check_variant_against_golden(info, v, c)).passed]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("directory", KERNEL_DIRS)
def test_variants_reproduce_golden_bits(directory):
    name, cases = load_kernel_goldens(directory)
    info = get_kernel(name)
    assert [p for c in cases for v in info.correct_variants for p in variant_bit_mismatches(info, v, c)] == []


def test_every_registered_kernel_has_goldens():
    missing = sorted(set(registry()) - {d.name for d in DIRS})
    assert not missing, (f"no goldens for {missing}: run `python tools/build_kernel_goldens.py "
                         + " ".join(f"--kernel {m}" for m in missing) + "`")


def test_golden_store_is_small():
    total = sum(p.stat().st_size for p in GOLDEN_ROOT.rglob("*") if p.is_file())
    assert total < 5 * 2**20, f"golden/kernels holds {total / 2**20:.1f} MB; keep golden cases small"


# ------------------------------------------------------------------ the checks can fail

@pytest.fixture
def conv_golden(tmp_path):
    write_kernel_goldens(tmp_path, ["conv2d"])
    return tmp_path / "conv2d"


def test_refuses_overwrite_without_update(conv_golden):
    from mschecker.errors import InputError

    before = golden_store.read_manifest(conv_golden)
    with pytest.raises(InputError, match="--update"):
        write_kernel_goldens(conv_golden.parent, ["conv2d"])
    assert golden_store.read_manifest(conv_golden) == before
    write_kernel_goldens(conv_golden.parent, ["conv2d"], update=True)
    assert golden_store.verify(conv_golden) == []


def test_corrupted_golden_is_reported(conv_golden):
    entry = next(iter(golden_store.read_manifest(conv_golden)["tensors"].values()))
    path = conv_golden / entry["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert any("sha256" in p for p in golden_store.verify(conv_golden))


def test_reference_off_by_one_ulp_is_caught(conv_golden):
    name, cases = load_kernel_goldens(conv_golden)
    info = get_kernel(name)
    nudged = KernelInfo(info.name, info.family, lambda *a, **k: np.nextafter(info.reference(*a, **k), np.inf),
                        info.variants, info.strategies, info.golden_cases)
    assert reference_mismatches(nudged, cases[0])


def test_variant_beyond_its_bound_is_caught(conv_golden):
    name, cases = load_kernel_goldens(conv_golden)
    info = get_kernel(name)
    good = info.variant("fp16_fp32acc")

    def off(*a, **k):
        y = good.fn(*a, **k).astype(np.float64)
        return (y + 4 * np.abs(y) * 2.0**-11 + 1e-3).astype(np.float16)

    bad = Variant("off", off, "float16", good.contract)
    assert check_variant_against_golden(info, good, cases[0]).passed
    assert not check_variant_against_golden(info, bad, cases[0]).passed


def test_build_tool_exit_codes(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bkg", GOLDEN_ROOT.parent.parent / "tools" / "build_kernel_goldens.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.main(["--root", str(tmp_path), "--kernel", "bitpack4"]) == 0
    assert tool.main(["--root", str(tmp_path), "--kernel", "bitpack4"]) == 2
    assert tool.main(["--root", str(tmp_path), "--kernel", "no_such_kernel", "--update"]) == 2
    err = capsys.readouterr().err
    assert "--update" in err and "no_such_kernel" in err and "Traceback" not in err


def test_changed_variant_bit_is_caught(conv_golden):
    """One output element one ulp away: within every contract, but not the golden's bits."""
    info = get_kernel("softmax")
    write_kernel_goldens(conv_golden.parent, ["softmax"])
    _, cases = load_kernel_goldens(conv_golden.parent / "softmax")
    good = info.variant("fp16_fp16acc")
    assert good.platform_bits is None and variant_bit_mismatches(info, good, cases[0]) == []

    def nudged(x, axis=-1):
        y = good.fn(x, axis).copy()
        y.reshape(-1)[0] = np.nextafter(y.reshape(-1)[0], np.float16(np.inf))
        return y

    bad = Variant("fp16_fp16acc", nudged, "float16", good.contract, accumulate="float16")
    assert check_variant_against_golden(info, bad, cases[0]).passed
    assert variant_bit_mismatches(info, bad, cases[0])


def test_blas_reference_bound_allows_reordering_not_a_change():
    """matmul's reference is held within 2 gamma_K(u64)|A||B|: another summation order passes, a relative change
    of 1e-9 (a slipped constant, a dropped rounding in a float64 path would be far larger) fails."""
    info = get_kernel("matmul")
    _, cases = load_kernel_goldens(GOLDEN_ROOT / "matmul")
    gcase = cases[0]
    assert info.reference_bits_bound is not None

    def reordered(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return np.sum((a[..., :, :, None] * b[..., None, :, :])[..., ::-1, :], axis=-2)  # K summed backwards

    def changed(a, b):
        return info.reference(a, b) * (1 + 1e-9)

    for fn, ok in ((reordered, True), (changed, False)):
        other = KernelInfo(info.name, info.family, fn, info.variants, info.strategies, info.golden_cases,
                           reference_bits_bound=info.reference_bits_bound)
        assert (reference_mismatches(other, gcase) == []) is ok, fn.__name__
