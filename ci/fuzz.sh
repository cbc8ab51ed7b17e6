#!/usr/bin/env bash
# The fuzz lane: every atheris target tools/fuzz/fuzz_*.py for BITNET_FUZZ_SECONDS
# (default 120) each. Crashing inputs are kept under OUTDIR (default out/ci/fuzz)
# and fail the lane. Usage: bash ci/fuzz.sh [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-${BITNET_CI_OUT:-out/ci}/fuzz}"
SECONDS_EACH="${BITNET_FUZZ_SECONDS:-120}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$OUTDIR"
shopt -s nullglob
targets=(tools/fuzz/fuzz_*.py)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no targets under tools/fuzz yet"
  exit 0
fi
if ! "$PY" -c "import atheris" 2>/dev/null; then
  echo "fuzz: atheris is not installed in $PY (uv sync installs the dev group)" >&2
  exit 1
fi
status=0
for t in "${targets[@]}"; do
  name="$(basename "$t" .py)"
  echo "fuzz: $name for ${SECONDS_EACH}s"
  mkdir -p "$OUTDIR/$name"
  if ! "$PY" "$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=20 \
      -artifact_prefix="$OUTDIR/$name/" >"$OUTDIR/$name.log" 2>&1; then
    echo "fuzz: $name FAILED; last lines of $OUTDIR/$name.log:" >&2
    tail -n 30 "$OUTDIR/$name.log" >&2
    status=1
  else
    grep -E "^(#[0-9]+\s+DONE|Done)" "$OUTDIR/$name.log" | tail -n 2 || true
  fi
done
exit $status
