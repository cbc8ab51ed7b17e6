#!/usr/bin/env bash
# Run COMMAND with one planted fault (tools/plants/sitecustomize.py); it must fail.
#   bash tools/plants/run.sh negated-logits-after-fourth uv run --no-sync pytest packages/bitnet-core/tests/test_server.py -k garbled
# Exit status: COMMAND's. The plants and the tests that catch them: docs/TESTING.md.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 PLANT COMMAND..." >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
export BITNET_PLANT=$1
shift
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "$@"
