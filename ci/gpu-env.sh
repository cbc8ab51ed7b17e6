# shellcheck shell=bash
# Sourced by ci/gpu-smoke.sh and ci/gpu-bench.sh from the repository root, on a
# machine with a GPU: makes the GPU APIs and the project importable and sets PY.
#
# On the lent H100 (Python 3.12, no Vulkan loader, no registry), the recipe of
# docs/GPU.md "How to rerun": run ci/gpu-prepare.sh here
# once, carry .gl and .whl with the tree, and this
#   - unpacks .gl/*.deb into / (Vulkan loader, glvnd) and runs ldconfig,
#   - installs .whl/*.whl into /tmp/site (pyopencl, vulkan, wgpu, gguf, the
#     workspace's wheels, bitnet-core's cp312 build when gpu-prepare made one),
#   - points Vulkan/EGL at NVIDIA's ICD files and OpenCL at libnvidia-opencl,
#   - builds the workspace packages not carried as wheels with the machine's
#     python3 (scikit-build-core, pybind11, cmake and numpy are in its image)
#     into /tmp/bitnet-site.
# On a development machine with a GPU and a .venv, it uses the .venv and the
# machine's own loaders as they are (nothing is unpacked or installed).

# A development machine with a GPU keeps its own loaders and .venv; the lent
# machine (no .venv travels) gets the carried debs and wheels.
if [ -x .venv/bin/python ] && .venv/bin/python -c "import bitnet_core" 2>/dev/null; then
  PY=.venv/bin/python
else
  PY=python3
  # --- platform: loaders, wheels ----------------------------------------------
  if ls .gl/*.deb >/dev/null 2>&1; then
    echo "gpu-env: unpacking $(ls .gl/*.deb | wc -l) Debian packages (Vulkan loader, glvnd)"
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  SITE=""
  if [ -f .whl/SOURCES.sha1 ] && ! sha1sum --quiet --status -c .whl/SOURCES.sha1 2>/dev/null; then
    GPU_ENV_STALE="the carried wheels were built from other sources than this tree's packages/ (run ci/gpu-prepare.sh again)"
    echo "gpu-env: WARNING: $GPU_ENV_STALE"
  fi
  if ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu-env: installing carried wheels into /tmp/site"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl
    SITE=/tmp/site
  fi
  # --- the project: what did not travel as a wheel, built with this python3 -----
  export PYTHONPATH="${SITE}${PYTHONPATH:+:$PYTHONPATH}"  # build-time needs (wgpu) too
  pkgs=()
  for d in packages/*/; do
    [ -f "$d/pyproject.toml" ] || continue
    wheel_name="$(basename "$d" | tr - _)"
    ls .whl/"$wheel_name"-*.whl >/dev/null 2>&1 && continue  # carried, built by gpu-prepare.sh
    pkgs+=("./$d")
  done
  if [ "${#pkgs[@]}" -gt 0 ]; then
    echo "gpu-env: building ${pkgs[*]} with $(python3 --version)"
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
      --target /tmp/bitnet-site "${pkgs[@]}"
    export PYTHONPATH="/tmp/bitnet-site${PYTHONPATH:+:$PYTHONPATH}"
  fi
fi

# --- the drivers: NVIDIA's ICDs where they are ------------------------------------
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
