#!/usr/bin/env bash
# The GPU smoke lane: run on a machine with a GPU (never in CPU CI).
#   bash ci/gpu-smoke.sh [OUTDIR]          (default out/ci/gpu-smoke)
# It allocates on every GPU provider, runs the conformance kit and a small
# model against the CPU reference, and writes OUTDIR/parity-receipt.json
# (plus conformance-<provider>.json and the engine's receipt-<provider>.json).
#
# The platform and project setup (Vulkan loader, carried wheels, ICDs, the
# native build) is ci/gpu-env.sh's; see there for the lent H100's recipe.
# BITNET_SMOKE_ALLOW_UNAVAILABLE=1 reports missing devices instead of failing
# (to try the script where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-${BITNET_CI_OUT:-out/ci}/gpu-smoke}"
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/gpu-smoke.log") 2>&1
# shellcheck source=ci/gpu-env.sh
source ci/gpu-env.sh
"$PY" -c "import sys; from bitnet_core.cli.main import main; sys.exit(main(['devices']))" || true

ARGS=(--out "$OUTDIR")
[ "${BITNET_SMOKE_ALLOW_UNAVAILABLE:-0}" = "1" ] && ARGS+=(--allow-unavailable)
"$PY" ci/gpu_smoke.py "${ARGS[@]}"
