#!/usr/bin/env bash
# The fuzz lane: every atheris target tools/fuzz/fuzz_*.py for its seconds in
# tools/fuzz/floors.toml (times BITNET_FUZZ_SCALE, default 1), each checked
# against its coverage and corpus floors (tools/fuzz/lane.py). Logs, corpora and
# crashing inputs are kept under OUTDIR (default out/ci/fuzz).
# Usage: bash ci/fuzz.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-${BITNET_CI_OUT:-out/ci}/fuzz}"
PY="${PYTHON:-.venv/bin/python}"
if ! "$PY" -c "import atheris" 2>/dev/null; then
  echo "fuzz: atheris is not installed in $PY (uv sync installs the dev group)" >&2
  exit 1
fi
exec "$PY" tools/fuzz/lane.py "$OUTDIR"
