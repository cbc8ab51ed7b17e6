#!/usr/bin/env bash
# The GPU smoke lane: run on a machine with a GPU (never in CPU CI).
#   bash ci/gpu-smoke.sh [OUTDIR]          (default out/ci/gpu-smoke)
# It allocates on every GPU provider, runs the conformance kit and a small
# model against the CPU reference, and writes OUTDIR/parity-receipt.json
# (plus conformance-<provider>.json and the engine's receipt-<provider>.json).
#
# On the lent H100 (Python 3.12, no Vulkan loader, no registry), the recipe of
# REFERENCE.md "Running the GPU-style backends": run ci/gpu-prepare.sh here
# once, carry .gl and .whl with the tree, and this script then
#   - unpacks .gl/*.deb into / (Vulkan loader, glvnd) and runs ldconfig,
#   - installs .whl/*.whl into /tmp/site (pyopencl, vulkan, wgpu, gguf, ...),
#   - points Vulkan/EGL at NVIDIA's ICD files and OpenCL at libnvidia-opencl,
#   - builds the workspace packages not carried as wheels (bitnet-core's
#     native module) with the machine's python3 (scikit-build-core, pybind11,
#     cmake and numpy are in its image) into /tmp/bitnet-site.
# On a development machine with a GPU and a .venv, it uses the .venv as is.
# BITNET_SMOKE_ALLOW_UNAVAILABLE=1 reports missing devices instead of failing
# (to try the script where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTDIR="${1:-${BITNET_CI_OUT:-out/ci}/gpu-smoke}"
mkdir -p "$OUTDIR"
exec > >(tee "$OUTDIR/gpu-smoke.log") 2>&1

# --- platform: loaders, wheels, ICDs ------------------------------------------
if ls .gl/*.deb >/dev/null 2>&1; then
  echo "gpu-smoke: unpacking $(ls .gl/*.deb | wc -l) Debian packages (Vulkan loader, glvnd)"
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
SITE=""
if ls .whl/*.whl >/dev/null 2>&1; then
  echo "gpu-smoke: installing carried wheels into /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  SITE=/tmp/site
fi
NV=/usr/local/nvidia/share
if [ -f "$NV/vulkan/icd.d/nvidia_icd.json" ]; then
  export VK_DRIVER_FILES="$NV/vulkan/icd.d/nvidia_icd.json"
  export __EGL_VENDOR_LIBRARY_FILENAMES="$NV/glvnd/egl_vendor.d/10_nvidia.json"
fi
if ldconfig -p 2>/dev/null | grep -q libnvidia-opencl.so.1 && [ -z "${OCL_ICD_VENDORS:-}" ]; then
  mkdir -p /tmp/icd
  echo libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true

# --- the project ----------------------------------------------------------------
if [ -x .venv/bin/python ] && .venv/bin/python -c "import bitnet_core" 2>/dev/null; then
  PY=.venv/bin/python
else
  PY=python3
  export PYTHONPATH="${SITE}${PYTHONPATH:+:$PYTHONPATH}"  # build-time needs (wgpu) too
  echo "gpu-smoke: building the workspace packages with $(python3 --version)"
  pkgs=()
  for d in packages/*/; do
    [ -f "$d/pyproject.toml" ] || continue
    wheel_name="$(basename "$d" | tr - _)"
    ls .whl/"$wheel_name"-*.whl >/dev/null 2>&1 && continue  # carried, built by gpu-prepare.sh
    pkgs+=("./$d")
  done
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
    --target /tmp/bitnet-site "${pkgs[@]}"
  SITE="/tmp/bitnet-site${SITE:+:$SITE}"
fi
export PYTHONPATH="${SITE}${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c "import sys; from bitnet_core.cli.main import main; sys.exit(main(['devices']))" || true

ARGS=(--out "$OUTDIR")
[ "${BITNET_SMOKE_ALLOW_UNAVAILABLE:-0}" = "1" ] && ARGS+=(--allow-unavailable)
"$PY" ci/gpu_smoke.py "${ARGS[@]}"
