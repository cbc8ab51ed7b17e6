#!/usr/bin/env bash
# The Vulkan backend on a lent NVIDIA GPU machine (the recipe of docs/GPU.md, *How to rerun*, as a script).
#
#   bash packages/bitnet-vulkan/bench/nvidia.sh prepare          # here, once (needs apt + pip)
#   bash packages/bitnet-vulkan/bench/nvidia.sh run [bench args]  # there: tests, then the bench
#
# `prepare` fills packages/bitnet-vulkan/bench/.gpu/ (ignored by the package's .gitignore):
# the Debian Vulkan/GL loader packages (the GPU machine has
# the NVIDIA driver but no loader), cp312 wheels of what the provider imports
# (vulkan, cffi, pycparser, numpy, pytest), and the SPIR-V module built here
# (that machine has no glslangValidator). Carry `packages/bitnet-vulkan/bench/.gpu` to the
# device call, e.g. command: bash packages/bitnet-vulkan/bench/nvidia.sh run --preset 2b --no-cpu --json $OUT/vulkan-2b.json
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
DIR="$ROOT/packages/bitnet-vulkan/bench/.gpu"
cd "$ROOT"

prepare() {
  mkdir -p "$DIR/gl" "$DIR/whl" "$DIR/spirv" /tmp/amd64/partial
  local o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  # shellcheck disable=SC2086
  apt-get $o update -qq
  # shellcheck disable=SC2086
  (cd "$DIR/gl" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DIR/whl" vulkan==1.3.275.1 cffi pycparser numpy pytest pluggy iniconfig packaging
  "$ROOT/.venv/bin/python" - "$DIR/spirv/_spirv.py" <<'PY'
import shutil, sys
import bitnet_vulkan._spirv as s
assert not s.SKIPPED and s.MODULES, "build bitnet-vulkan with its shaders first (uv sync)"
shutil.copy(s.__file__, sys.argv[1])
PY
  du -sh "$DIR"
}

run() {
  for f in "$DIR"/gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$DIR"/whl/*.whl
  cp "$DIR/spirv/_spirv.py" packages/bitnet-vulkan/src/bitnet_vulkan/_spirv.py
  # the entry point, as an installed bitnet-vulkan would register it
  local di=/tmp/site/bitnet_vulkan-0.0.0.dist-info
  mkdir -p "$di"
  printf 'Metadata-Version: 2.1\nName: bitnet-vulkan\nVersion: 0.0.0\n' >"$di/METADATA"
  printf '[bitnet.providers]\nvulkan = bitnet_vulkan.provider:VulkanProvider\n' >"$di/entry_points.txt"
  export PYTHONPATH="/tmp/site:$ROOT/packages/bitnet-core/src:$ROOT/packages/bitnet-vulkan/src"
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  export PYTHONUNBUFFERED=1 BITNET_CONFORMANCE_REQUIRE=1
  python3 -c "from bitnet_vulkan.provider import VulkanProvider as V; print(V().probe())"
  python3 -m pytest -q -x -p no:cacheprovider packages/bitnet-vulkan/tests || echo "TESTS FAILED"
  python3 packages/bitnet-vulkan/bench/bench_vulkan.py "$@"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare | run [bench_vulkan.py args]" >&2; exit 2 ;;
esac
