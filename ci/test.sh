#!/usr/bin/env bash
# The test command of the README: sets up, then runs every lane that fits a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh --full
export PATH="$HOME/.local/bin:$PATH"
echo "== lint"
uv run --no-sync ruff check .
uv run --no-sync ruff format --check .
echo "== tests"
uv run --no-sync pytest packages -q -p no:cacheprovider
