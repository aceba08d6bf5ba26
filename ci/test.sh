#!/usr/bin/env bash
# The README's test command: install mschecker with its test extra, run the default suite, the numpy twins of the
# compiled fast paths, and the installed-package smoke test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  python3 -m venv .venv
  . .venv/bin/activate
fi
# One BLAS thread: goldens holding BLAS results are recorded single-threaded (OpenBLAS's summation order depends
# on the thread count), and on 2 shared cores threaded OpenBLAS measured 10-90x slower on the suite's small matmuls.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# The compiled fast paths are required here: a broken C build fails the run (mschecker/native.py) instead of
# turning the tests that compare them with their numpy twins into skips.
export MSCHECKER_REQUIRE_NATIVE=1
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[test]'
mschecker --version
# Two workers: the 2-core CI machine runs the suite in about half the wall time (pytest-xdist is in the test extra).
python -m pytest -q -n 2
# Every numpy twin forced (the route taken without a C compiler): the bit-exact kernel and SD goldens, the executor,
# the SD pipeline and the streaming comparison must give the same bits and verdicts on it. A subset of the suite
# (the tests that compare the two routes in one process run above): measured 12 s CPU, 27 s wall on 2 cores.
MSCHECKER_NO_FASTCOMPARE=1 MSCHECKER_NO_FASTFP16=1 MSCHECKER_NO_FASTREF=1 python -m pytest -q -p no:cacheprovider \
  tests/kernels/test_goldens.py tests/kernels/test_exhaustive_fp16.py tests/sd/test_sd_goldens.py \
  tests/sd/test_pipeline.py tests/graph/test_executor.py tests/npu/test_npu_ops_vs_naive.py \
  tests/test_compare_streaming.py
# The oldest onnx / onnxruntime the dependency ranges allow (ci/oldest_deps.sh; ~1 min).
bash ci/oldest_deps.sh
# The installed package: wheel, fresh venv, commands and pytest plugin run from site-packages.
bash ci/smoke_installed.sh
# The optional Parquet export with pyarrow installed (ci/optional_export.sh), last: it adds pyarrow to this venv.
bash ci/optional_export.sh
