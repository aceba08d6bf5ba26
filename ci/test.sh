#!/usr/bin/env bash
# The README's test command: install mschecker with its test extra, then run the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${VIRTUAL_ENV:-}" ]; then
  python3 -m venv .venv
  . .venv/bin/activate
fi
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[test]'
python -m pytest -q
