#!/usr/bin/env bash
# Set up a fresh machine for bitnet.
#   bash ci/setup.sh --core   uv and .venv with every workspace package: enough to run
#                             `.venv/bin/bitnet` (what the README's first command needs)
#   bash ci/setup.sh --dev    also the development tools (pytest, ruff, ...): enough for a lane
#   bash ci/setup.sh          also system packages (PoCL, lavapipe) and the test-only extras
#
# --core needs only python3 (3.10+, its headers) and a C++ compiler: uv comes from
# ci/uv.sh (a private venv when none is installed; the system Python is not
# touched), the GPU backends' shader tools come from PyPI as build requirements.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:---full}"
case "$MODE" in
  --core | --dev | --full) ;;
  *)
    echo "usage: bash ci/setup.sh [--core|--dev|--full]" >&2
    exit 2
    ;;
esac

missing_build_tools() {
  local missing=()
  command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=(g++)
  python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || missing+=(python3-dev)
  python3 -c 'import ensurepip' 2>/dev/null || python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-venv)
  echo "${missing[*]}"
}
MISSING="$(missing_build_tools)"
if [ -n "$MISSING" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if command -v apt-get >/dev/null; then
    echo "setup: installing what the CPU build needs: $MISSING"
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $MISSING >/dev/null
  else
    echo "setup: missing $MISSING (a C++ compiler, Python headers, python3-venv); install them and run this again" >&2
    exit 1
  fi
fi

# shellcheck source=ci/uv.sh
source ci/uv.sh
ensure_uv
if [ "$MODE" = "--full" ]; then
  bash ci/system-packages.sh
fi
echo "setup: syncing the workspace (.venv) with $UV"
if [ "$MODE" = "--core" ]; then
  "$UV" sync --locked --all-packages --inexact --no-dev
else
  "$UV" sync --locked --all-packages --inexact
fi
# Bytecode for what a `bitnet` command imports, as pip writes it at install: where
# PYTHONDONTWRITEBYTECODE is set nothing else would, and every command would compile
# about 240 modules again (0.4 s of CPU before the model starts loading).
.venv/bin/python - <<'PY'
import compileall, importlib.util, os
for name in ("bitnet_core", "bitnet", "bitnet_cuda", "bitnet_opencl", "bitnet_vulkan",
             "bitnet_webgpu", "numpy", "tokenizers", "jinja2", "markupsafe"):
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        for path in spec.submodule_search_locations:
            compileall.compile_dir(path, quiet=1, workers=os.cpu_count() or 1)
PY
if [ "$MODE" = "--full" ]; then
  bash ci/python-extras.sh
fi
