#!/usr/bin/env bash
# Installed-package smoke test: build the wheel, install it (not editable) into a fresh virtual environment, and run
# the commands and the pytest plugin from site-packages with the working directory outside the repository. Catches
# what a checkout hides: data that is not shipped as package data, lookups through the source tree, a C extension
# that is not built into the wheel.
# Usage: bash ci/smoke_installed.sh [WORKDIR]   (default: a temporary directory, removed afterwards)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ge 1 ]; then work="$1"; mkdir -p "$work"; else work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT; fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The compiled fast paths must be in the wheel: a missing one is an error here, not a quiet numpy fallback.
export MSCHECKER_REQUIRE_NATIVE=1
unset PYTHONPATH MSCHECKER_NO_FASTCOMPARE MSCHECKER_NO_FASTFP16 MSCHECKER_NO_FASTREF

export PIP_DISABLE_PIP_VERSION_CHECK=1
step() { echo "== smoke (${SECONDS}s): $*"; }
expect() {  # expect RC CMD...: run CMD, fail unless it exits with RC
  local want="$1"; shift
  local got=0
  "$@" >"$work/last.out" 2>&1 || got=$?
  if [ "$got" != "$want" ]; then
    tail -n 40 "$work/last.out"
    echo "smoke: FAILED: '$*' exited $got, expected $want" >&2
    exit 1
  fi
}

step "build the wheel"
expect 0 python -m pip wheel -q --no-deps "$repo" -w "$work/wheels"  # its log: setuptools' package-data notices
step "install it into a fresh venv (with its declared dependencies)"
python -m venv "$work/venv"
py="$work/venv/bin/python" mschecker="$work/venv/bin/mschecker"
expect 0 "$py" -m pip install -q --no-compile "$work"/wheels/mschecker-*.whl "pytest>=7"  # no .pyc pass: ~4 s CPU less

cd "$work"  # outside the repository: nothing may be found through the source tree
step "imported from site-packages, bundled data shipped, compiled fast paths active"
expect 0 "$py" - "$repo" <<'EOF'
import sys
from pathlib import Path

import mschecker
from mschecker import golden_data, native
from mschecker.kernels.goldens import GOLDEN_ROOT, load_kernel_goldens

repo, site = Path(sys.argv[1]).resolve(), Path(mschecker.__file__).resolve().parent
assert repo not in site.parents, f"mschecker imported from the checkout: {site}"
for p in (golden_data.path("default", "model.onnx"), GOLDEN_ROOT, golden_data.path("sd", "tiny", "manifest.json")):
    assert p.exists() and site in p.resolve().parents, f"bundled data missing or outside the package: {p}"
dirs = sorted(d.parent for d in GOLDEN_ROOT.glob("*/manifest.json"))
assert len(dirs) == len(list((repo / "golden" / "kernels").glob("*/manifest.json"))) > 0
cases = sum(len(load_kernel_goldens(d)[1]) for d in dirs)  # every file verified against its sha256
status = native.status()
assert all(s == "active" for s in status.values()), status
print(f"{len(dirs)} kernel golden sets ({cases} cases) verified; fast paths: {status}")
EOF
cat "$work/last.out"
expect 0 "$mschecker" --version
step "mschecker demo"
expect 0 "$mschecker" demo
step "mschecker kernels (three kernels)"
expect 0 "$mschecker" kernels --kernel softmax --kernel conv2d --kernel gelu
step "mschecker sd --preset tiny: passes on ascend910b (exit 0); the pessimistic bracket (fp16 GroupNorm statistics) fails (exit 1), passes with the fused GroupNorms in fp32 in atc's words (exit 0)"
expect 0 "$mschecker" sd --preset tiny --out "$work/sd_out"
expect 1 "$mschecker" sd --preset tiny --bracket pessimistic --out "$work/sd_out"
grep -q "FIXES IT" "$work/last.out"
expect 0 "$mschecker" sd --preset tiny --bracket pessimistic --out "$work/sd_out" \
  --customize_dtypes vae_decoder:OpType::GroupNorm:InputDtype:float32
step "the pytest plugin in a user project (examples/fused_kernel_project copied out of the repository)"
cp -r "$repo/examples/fused_kernel_project" "$work/project"
cd "$work/project"
export MSCHECKER_HYPOTHESIS_PROFILE=ci
expect 0 "$py" -m pytest -q -p no:cacheprovider "--mschecker-report=$work/report.json"
grep -q "5 passed" "$work/last.out"
expect 1 env FUSEDKERN_BUG=1 "$py" -m pytest -q -p no:cacheprovider
grep -q "4 failed, 1 passed" "$work/last.out"
step "passed"
