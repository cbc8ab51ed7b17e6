#!/usr/bin/env bash
# Debian packages the CI lanes need (the union of `system` in ci/lanes.toml for
# the lanes ci/test.sh runs): OpenCL on the CPU (PoCL), Vulkan on the CPU (Mesa
# lavapipe), shader tools. Skipped (with a note) where apt is not usable.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! PKGS_LINE="$(python3 ci/matrix.py system-packages --ci 2>/dev/null)"; then
  # python3 without tomllib (3.10 without tomli): the same list, by hand
  PKGS_LINE="chromium chromium-driver pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo clang-15 mesa-vulkan-drivers libvulkan1 vulkan-tools glslang-tools spirv-tools g++-aarch64-linux-gnu qemu-user-static"
fi
read -r -a PKGS <<<"$PKGS_LINE"
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! command -v apt-get >/dev/null; then
  echo "system packages: no apt-get; install by hand: ${missing[*]}" >&2
  exit 0
fi
echo "system packages: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
