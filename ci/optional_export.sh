#!/usr/bin/env bash
# The optional Parquet export (mschecker[export] = pyarrow) with the real library: the export tests take the written
# file path here (the default suite runs them without pyarrow: the one-line refusal). MSCHECKER_REQUIRE_PYARROW makes
# a missing pyarrow a failure instead of the refusal branch.
set -euo pipefail
cd "$(dirname "$0")/.."
# the export extra's requirements, read from pyproject.toml (installing '.[export]' would rebuild mschecker)
python -m pip install -q $(python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["export"])')
MSCHECKER_REQUIRE_PYARROW=1 python -m pytest -q -p no:cacheprovider tests/campaign/test_cli.py tests/campaign/test_hostile.py \
  -k "parquet or export or tampered or random_pages"
