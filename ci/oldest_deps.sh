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
# The oldest protobuf pyproject.toml allows builds the ACL dump header class (mschecker/devdump/aclproto.py) and
# round-trips a message through it (the protoc-generated comparison in tests/devdump needs a newer runtime).
ptarget="$(mktemp -d)"
python -m pip install -q --no-deps --target "$ptarget" "protobuf==4.25.1"
PYTHONPATH="$ptarget" python -c "
import google.protobuf, numpy as np
from mschecker.devdump import acl
from mschecker.devdump.model import OpTensors
import tempfile, pathlib
d = pathlib.Path(tempfile.mkdtemp()) / 'Add.a.1.0.1'
d.write_bytes(acl.encode(OpTensors('a/b', 'Add', [np.arange(6, dtype=np.float16).reshape(2, 3)], [np.ones(3, np.float32)])))
op = acl.read_file(d)
assert op.name == 'a/b' and op.inputs[0].load().tolist() == [[0, 1, 2], [3, 4, 5]], op
print('oldest protobuf:', google.protobuf.__version__, 'ACL dump round trip ok')"
rm -rf "$ptarget"
