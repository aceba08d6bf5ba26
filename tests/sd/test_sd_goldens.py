"""golden/sd/tiny: the manifest verifies, and recomputing reproduces every stored tensor bit for bit.

Bit for bit because both runs are deterministic numpy arithmetic with fixed seeds (float64 reference; fp16
storage with fp32/fp16 accumulation on the emulator) at a fixed BLAS thread count, which compute_pinned sets
to one in a subprocess (OpenBLAS results change in the last bits with the thread count): any change of a
kernel, an op, the policy, the scheduler or the pipeline shows up here, and the tolerance of zero needs no
justification beyond that determinism.
If the graph builders change, the test says so (graph sha256) instead of reporting numerical noise:
rebuild with `python tools/build_sd_goldens.py --update` after checking the change is intended.

The BLAS calls inside (the float64 reference's GEMMs, the emulator's fp32 ones) are OpenBLAS's, not ours: their
last bits follow its CPU kernel too. The goldens were recorded with its Haswell kernels (tests/conftest.py pins
them on AVX2 CPUs); there the check is bit for bit. With any other BLAS kernel the recomputed tensors are held
to a measured bound instead (BLAS_KERNEL_BOUND): relative L2 distance per tensor and no NaN/inf that the golden
lacks.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mschecker.tensors import golden_store
from mschecker.sd import SDModels
from mschecker.sd.goldens import GOLDEN_DIR, SETTINGS, compute_pinned, graph_hashes

ROOT = Path(__file__).resolve().parents[2]


def bit_differences(actual: dict, expected: dict) -> list[str]:
    """Names (with a short why) of the tensors that differ in dtype, shape or any bit."""
    problems = []
    for name, e in expected.items():
        a = actual.get(name)
        if a is None:
            problems.append(f"{name}: not produced")
            continue
        a, e = np.require(a, requirements="C"), np.require(e, requirements="C")  # 0-d stays 0-d
        if a.dtype != e.dtype or a.shape != e.shape:
            problems.append(f"{name}: {a.dtype}{a.shape} vs stored {e.dtype}{e.shape}")
        elif a.tobytes() != e.tobytes():
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            problems.append(f"{name}: {int((a.view(np.uint8) != e.view(np.uint8)).sum())} bytes differ, "
                            f"max |diff| {np.nanmax(diff) if np.isfinite(diff).any() else 'nan'}")
    problems += [f"{n}: produced but not stored" for n in sorted(set(actual) - set(expected))]
    return problems


@pytest.fixture(scope="module")
def stored():
    return golden_store.load(GOLDEN_DIR)


@pytest.fixture(scope="module")
def recomputed():
    return compute_pinned()


def test_manifest_verifies_and_is_small():
    assert golden_store.verify(GOLDEN_DIR) == []
    manifest = golden_store.read_manifest(GOLDEN_DIR)
    size = sum((GOLDEN_DIR / e["file"]).stat().st_size for e in manifest["tensors"].values())
    assert size < 5 * 2 ** 20
    assert manifest["extra"]["settings"] == SETTINGS


def test_graphs_are_the_ones_the_goldens_were_built_from():
    stored_hashes = golden_store.read_manifest(GOLDEN_DIR)["extra"]["graph_sha256"]
    current = graph_hashes(SDModels.build(SETTINGS["preset"], SETTINGS["weights_seed"]))
    assert current == stored_hashes, ("the SD graph builders changed since golden/sd/tiny was recorded: check the "
                                      "change, then python tools/build_sd_goldens.py --update")


#: Relative L2 distance allowed per tensor group when OpenBLAS runs another CPU kernel than the goldens' Haswell
#: one. Measured (recomputing golden/sd/tiny with OPENBLAS_CORETYPE=Sandybridge, Prescott, Nehalem): the float64
#: reference <= 2.3e-15 (GEMM summation order only; bound 1e-13, 40x), the fp16 emulator <= 4.4e-3 (a reordered
#: fp32 sum flips some fp16 roundings, and ten denoising steps carry them on; bound 2e-2, 4.5x). Inputs are ours.
BLAS_KERNEL_BOUND = {"inputs": 0.0, "reference": 1e-13, "npu": 2e-2, "npu_pessimistic": 2e-2}


def goldens_blas_kernel() -> bool:
    """Whether OpenBLAS runs the kernel the goldens were recorded with (Haswell, one thread)."""
    return os.environ.get("OPENBLAS_CORETYPE", "").lower() == "haswell"


def bound_differences(actual: dict, expected: dict, rel_l2: float) -> list[str]:
    """Names of the tensors farther than rel_l2 (relative L2 over the finite pairs) or with other NaN/inf."""
    problems = []
    for name, e in expected.items():
        a = actual.get(name)
        if a is None or np.shape(a) != np.shape(e):
            problems.append(f"{name}: not produced with the stored shape")
            continue
        a, e = np.asarray(a, dtype=np.float64), np.asarray(e, dtype=np.float64)
        fin = np.isfinite(a) & np.isfinite(e)
        if (np.isfinite(a) != np.isfinite(e)).any():
            problems.append(f"{name}: NaN/inf differ")
        elif np.linalg.norm(a[fin] - e[fin]) > rel_l2 * np.linalg.norm(e[fin]):
            problems.append(f"{name}: relative L2 {np.linalg.norm(a[fin] - e[fin]) / np.linalg.norm(e[fin]):.3g} > "
                            f"{rel_l2:g}")
    return problems


@pytest.mark.parametrize("group", ["inputs", "reference", "npu", "npu_pessimistic"])
def test_recomputed_tensors_equal_the_goldens_bit_for_bit(group, stored, recomputed):
    tensors, _ = recomputed
    expected = {n: v for n, v in stored.items() if n.startswith(group + ".")}
    assert expected, f"no {group}.* goldens"
    actual = {n: v for n, v in tensors.items() if n.startswith(group + ".")}
    if goldens_blas_kernel() or BLAS_KERNEL_BOUND[group] == 0.0:
        problems = bit_differences(actual, expected)
    else:
        problems = bound_differences(actual, expected, BLAS_KERNEL_BOUND[group])
    assert problems == [], ("recomputed SD goldens differ (a kernel, op, policy or pipeline change?); if the change "
                            "is intended: python tools/build_sd_goldens.py --update\n" + "\n".join(problems))


def test_the_blas_kernel_bound_catches_what_a_bug_would_do(stored):
    """Off the goldens' BLAS kernel the check is a bound: it still fails on a 5% drift of one NPU tensor, a NaN
    the golden lacks, and a 1e-12 drift of the float64 reference."""
    npu = {n: np.asarray(v) for n, v in stored.items() if n.startswith("npu.")}
    assert bound_differences(npu, npu, BLAS_KERNEL_BOUND["npu"]) == []
    name = next(iter(npu))
    assert bound_differences({**npu, name: npu[name] * 1.05}, npu, BLAS_KERNEL_BOUND["npu"])
    nan = np.array(npu[name], dtype=np.float64)
    nan.reshape(-1)[0] = np.nan
    assert bound_differences({**npu, name: nan}, npu, BLAS_KERNEL_BOUND["npu"])
    ref = {n: np.asarray(v) for n, v in stored.items() if n.startswith("reference.")}
    rname = next(iter(ref))
    assert bound_differences({**ref, rname: ref[rname] * (1 + 1e-12)}, ref, BLAS_KERNEL_BOUND["reference"])


def test_goldens_pin_the_documented_behaviour(stored):
    """What the numbers mean: the NPU as given (the device table's kernels: fp32 norm statistics) returns a finite
    image close to the reference; its pessimistic bracket (fp16 GroupNorm statistics, where the current 910B
    kernel is closed) a NaN (black) image; and the reference image is not flat."""
    assert np.isnan(stored["npu_pessimistic.pipeline_decoded"].astype(np.float64)).any()
    assert stored["npu_pessimistic.pipeline_image"].max() == 0
    assert np.isfinite(stored["npu.pipeline_decoded"].astype(np.float64)).all()
    ref_img = stored["reference.pipeline_image"].astype(float)
    err = np.abs(stored["npu.pipeline_image"].astype(float) - ref_img)
    # 8 levels (~30 dB at worst if everywhere) is the `mschecker sd` image bar expressed per pixel
    assert err.max() <= 8 and ref_img.std() > 10


def test_a_one_ulp_change_is_caught(stored):
    """Planted bug: one element of one tensor moved by one ULP fails the comparison."""
    changed = dict(stored)
    x = stored["reference.vae_decoded"].copy()
    x.flat[5] = np.nextafter(x.flat[5], np.inf)
    changed["reference.vae_decoded"] = x
    problems = bit_differences(changed, stored)
    assert len(problems) == 1 and problems[0].startswith("reference.vae_decoded")


def test_builder_refuses_to_overwrite_without_update(tmp_path):
    """Existing goldens: exit 2, nothing rewritten (the check happens before any computation)."""
    before = {p.name: p.stat().st_mtime_ns for p in GOLDEN_DIR.iterdir()}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "build_sd_goldens.py")], capture_output=True, text=True)
    assert r.returncode == 2 and "--update" in r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in GOLDEN_DIR.iterdir()} == before
