#!/usr/bin/env bash
# Here, once (on a machine with apt and a registry): fetch what the GPU smoke
# lane needs on the lent GPU machine, which has Python 3.12, no Vulkan loader
# and no registry access (docs/GPU.md, "How to rerun"):
#   .gl/   the Debian packages of the Vulkan loader and glvnd (amd64)
#   .whl/  cp312 manylinux wheels of pyopencl, vulkan, wgpu, gguf and their needs,
#          and the workspace's pure-Python wheels (the backends, built here, where
#          glslangValidator and the registry are; bitnet-core too, for CPython 3.12,
#          where a 3.12 interpreter is at hand, else it is compiled there);
#          .whl/host/: what ci/host-cpu.sh needs there (see below)
# Both folders are git-ignored; carry them to the GPU machine with the tree
# (device tool: carry [".gl", ".whl"]). Then run bash ci/gpu-bench.sh (everything,
# in one call) or bash ci/gpu-smoke.sh (the smoke lane alone) there.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/uv.sh
source ci/uv.sh
ensure_uv
mkdir -p .gl .whl /tmp/amd64/partial
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
if ! ls .gl/*.deb >/dev/null 2>&1; then
  apt-get "${o[@]}" update -qq
  (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
# binary wheels for that machine's CPython 3.12 on x86-64 Linux
CP312=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
WHEELS=(pyopencl pytools platformdirs siphash24 cffi pycparser vulkan wgpu rendercanvas sniffio gguf)
python3 -m pip download -q --no-deps "${CP312[@]}" -d .whl "${WHEELS[@]}"
# The workspace packages whose wheels do not depend on the Python version
# (py3-none-*) travel built. bitnet-core's native module is built here for
# CPython 3.12 when a 3.12 interpreter is at hand (it dispatches on the CPU at
# run time, so one build serves any x86-64), saving that machine's minutes;
# otherwise ci/gpu-env.sh builds it there.
find .whl -name 'bitnet*.whl' -delete
for d in packages/*/; do
  [ -f "$d/pyproject.toml" ] || continue
  name="$(basename "$d")"
  [ "$name" = "bitnet-core" ] && continue
  "$UV" build -q --wheel --package "$name" --out-dir .whl
done
find .whl -name 'bitnet*.whl' ! -name '*-py3-none-*.whl' -delete  # keep Python-version-independent wheels
for py in "$(command -v python3.12 || true)" $(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null); do
  if [ -n "$py" ] && "$py" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    "$UV" build -q --wheel --package bitnet-core --python "$py" --out-dir .whl
    break
  fi
done
# .whl/host/: what ci/host-cpu.sh adds there (into a site of its own, not the GPU
# stages'): the server's packages for the HTTP streams, and llama-cpp-python built
# for AVX-512 (the host is cpu-avx512; the registry's wheel and a GGML_NATIVE build
# here are AVX2), compiled once per machine (~15 min on 2 cores) into the wheel
# cache. BITNET_GPU_HOST_WHEELS=0 skips both.
if [ "${BITNET_GPU_HOST_WHEELS:-1}" != 0 ]; then
  mkdir -p .whl/host
  # resolved with their dependencies (the server's extra, the load test's client,
  # llama-cpp-python's imports)
  HOST_WHEELS=(fastapi uvicorn httptools uvloop httpx diskcache jinja2)
  python3 -m pip download -q "${CP312[@]}" -d .whl/host "${HOST_WHEELS[@]}" \
    || echo "gpu-prepare: WARNING: the server's wheels did not download"
  LLAMA512="${BITNET_WHEEL_CACHE:-$HOME/.cache/bitnet-ci/wheels}/avx512"
  if ! ls "$LLAMA512"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
    echo "gpu-prepare: building llama-cpp-python 0.3.36 for AVX-512 (once per machine)"
    mkdir -p "$LLAMA512"
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON" python3 -m pip wheel -q --no-deps \
      --no-cache-dir --no-binary llama-cpp-python --wheel-dir "$LLAMA512" "llama-cpp-python==0.3.36" \
      || echo "gpu-prepare: WARNING: llama-cpp-python did not build (host-cpu runs without it)"
  fi
  cp "$LLAMA512"/llama_cpp_python-0.3.36-*.whl .whl/host/ 2>/dev/null || true
fi
# what the wheels were built from: ci/gpu-env.sh checks the tree there against it
git ls-files --cached --others --exclude-standard packages | xargs sha1sum >.whl/SOURCES.sha1
ls .gl .whl
du -sh .gl .whl
