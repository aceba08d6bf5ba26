#!/usr/bin/env bash
# The README's test command: install mschecker with its test extra, then run the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  python3 -m venv .venv
  . .venv/bin/activate
fi
# One BLAS thread: goldens holding BLAS results are recorded single-threaded (OpenBLAS's summation order depends
# on the thread count), and on 2 shared cores threaded OpenBLAS measured 10-90x slower on the suite's small matmuls.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[test]'
python -m pytest -q
