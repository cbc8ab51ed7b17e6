#!/usr/bin/env bash
# Set up a fresh machine for bitnet development.
#   bash ci/setup.sh --core   uv + the workspace environment (.venv): enough to run `bitnet`
#   bash ci/setup.sh          also system packages (PoCL, lavapipe) and the test-only extras
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:---full}"
export PATH="$HOME/.local/bin:$PATH"
if ! command -v uv >/dev/null; then
  echo "setup: installing uv"
  python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
fi
if [ "$MODE" = "--full" ]; then
  bash ci/system-packages.sh
fi
echo "setup: syncing the workspace (.venv)"
uv sync --locked --all-packages --inexact
if [ "$MODE" = "--full" ]; then
  bash ci/python-extras.sh
fi
