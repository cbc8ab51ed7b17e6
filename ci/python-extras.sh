#!/usr/bin/env bash
# Test-only Python packages kept out of uv.lock because they come from
# somewhere other than PyPI's newest build:
# - torch 2.13.0 CPU (the machine's local wheel in /opt/wheels; PyPI's default is CUDA, GBs)
# - transformers (the reference for the model math; accelerate to load its
#   quantized BitNet layouts), safetensors, and
#   sentencepiece + protobuf (tokenizer.model conversion tests)
# - llama-cpp-python, compiled from source once (~15 min on 2 cores) into a
#   wheel cache that later runs on the same machine reuse.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/uv.sh
source ci/uv.sh
ensure_uv
PY=.venv/bin/python
WHEELS="${BITNET_WHEEL_CACHE:-$HOME/.cache/bitnet-ci/wheels}"
LLAMA_VERSION=0.3.36
mkdir -p "$WHEELS"

FIND_LINKS=(--find-links "$WHEELS")
[ -d /opt/wheels ] && FIND_LINKS+=(--find-links /opt/wheels)

if ! ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "python extras: building llama-cpp-python $LLAMA_VERSION from source (once per machine)"
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" python3 -m pip wheel -q --no-deps \
    --wheel-dir "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
fi
echo "python extras: installing torch, transformers, llama-cpp-python"
"$UV" pip install --python "$PY" -q "${FIND_LINKS[@]}" \
  "torch==2.13.0" "transformers>=4.57" accelerate safetensors sentencepiece protobuf \
  "llama-cpp-python==$LLAMA_VERSION"
