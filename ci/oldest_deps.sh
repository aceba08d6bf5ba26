#!/usr/bin/env bash
# The oldest onnx / onnxruntime that pyproject.toml allows (its lower bounds: keep the two in step), installed
# beside the current environment and run against the tests that exercise them most: model loading and
# external-data checks before onnxruntime, onnxruntime's messages and logs, TensorProto (bf16 included) I/O.
# Why these bounds: onnx < 1.19 cannot write bfloat16 TensorProtos from ml_dtypes arrays (the .pb round trip
# fails); onnxruntime 1.20.1 is the oldest release this suite was run against (all of tests/reliability,
# test_cli, test_bad_input, test_golden, test_tensorio passed on it).
set -euo pipefail
cd "$(dirname "$0")/.."
OLDEST="onnx==1.19.0 onnxruntime==1.20.1"
target="$(mktemp -d)"
trap 'rm -rf "$target"' EXIT
python -m pip install -q --no-deps --target "$target" $OLDEST
PYTHONPATH="$target" python -c "import onnx, onnxruntime; print('oldest allowed:', onnx.__version__, onnxruntime.__version__)"
PYTHONPATH="$target" python -m pytest -q -p no:cacheprovider tests/test_tensorio.py tests/test_bad_input.py \
  tests/reliability/test_hostile_cli.py
