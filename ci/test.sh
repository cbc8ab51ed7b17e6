#!/usr/bin/env bash
# The test command of the README (and of .ci/run): set up, then run every lane
# of ci/lanes.toml that fits a CPU machine (`ci = true`), each with its timeout.
#   bash ci/test.sh              set up + all CPU lanes
#   bash ci/test.sh core tools   set up + only those lanes
# A summary table ends the log; out/ci/lanes.json keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything, set-up included, within BITNET_CI_MINUTES (CI allows 60).
export BITNET_CI_DEADLINE="${BITNET_CI_DEADLINE:-$(($(date +%s) + ${BITNET_CI_MINUTES:-57} * 60))}"
if [ $# -eq 0 ]; then
  bash ci/setup.sh --full
else
  bash ci/setup.sh --dev
  if .venv/bin/python ci/matrix.py needs-extras "$@"; then bash ci/python-extras.sh; fi
fi
# the lanes call `uv run`: the uv that setup found or installed, first on PATH
# shellcheck source=ci/uv.sh
source ci/uv.sh
ensure_uv
if [ $# -eq 0 ]; then
  exec .venv/bin/python ci/matrix.py run --ci
fi
exec .venv/bin/python ci/matrix.py run "$@"
