#!/usr/bin/env bash
# Everything a lent GPU machine is for, in one call that always ends on time:
# the smoke lane per GPU provider (ci/gpu_smoke.py, the providers side by side,
# since it checks results, not speed), then, one at a time and most wanted first:
# the CUDA benchmarks and a decode step kernel by kernel (four launches a layer
# against ten, 64 and 1,000 tokens of context), CUDA's 64 streams against one,
# the Vulkan and OpenCL benchmarks and Vulkan's step, launches and host ms a step
# per provider, Vulkan's float16 cache against the CPU's, the host time of a step
# per engine; last, with what time is left, the host's own CPU (the CPU engine's
# tests and benchmarks on many cores with AVX-512: ci/host-cpu.sh).
#
#   here, before each device session:  bash ci/gpu-prepare.sh
#   there:       bash ci/gpu-bench.sh [OUTDIR]      (device tool: carry .gl and .whl)
#
# Each stage runs under its own time limit (BITNET_GPU_STAGE_SCALE scales them
# all), cut to what is left of BITNET_GPU_BUDGET seconds for the whole script
# (default 480: eight minutes, under the device tool's 600 a call), and logs to
# OUTDIR/<stage>.log; OUTDIR/summary.txt lists every stage's exit code and
# OUTDIR/results.tgz holds the JSON figures and receipts. A stage that fails or
# runs out of time does not stop the ones after it.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR="$(mkdir -p "${1:-${OUT:-out/ci/gpu-bench}}" && cd "${1:-${OUT:-out/ci/gpu-bench}}" && pwd)"
RES="$OUTDIR/results"
mkdir -p "$RES"
export PYTHONUNBUFFERED=1
# shellcheck source=ci/gpu-env.sh
source ci/gpu-env.sh >"$OUTDIR/setup.log" 2>&1 || echo "gpu-env failed" >>"$OUTDIR/setup.log"
SCALE="${BITNET_GPU_STAGE_SCALE:-1}"
DEADLINE=$(($(date +%s) + ${BITNET_GPU_BUDGET:-480}))

# shellcheck source=ci/stages.sh
source ci/stages.sh

"$PY" -c "import sys; from bitnet_core.cli.main import main; sys.exit(main(['devices']))" \
  >>"$OUTDIR/setup.log" 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
  | tee -a "$OUTDIR/summary.txt"

# --- correctness: the smoke lane, one process per GPU provider -------------------
mapfile -t GPUS < <("$PY" - <<'PY' 2>>"$OUTDIR/setup.log"
from bitnet_core.hal import list_providers
for r in list_providers(explicit=True):
    p = r.probe(True)
    if r.device_kind == "gpu" and not p.fake:
        print(r.name)
PY
)
echo "GPU providers: ${GPUS[*]:-none}" | tee -a "$OUTDIR/summary.txt"
[ -n "${GPU_ENV_STALE:-}" ] && echo "WARNING: $GPU_ENV_STALE" | tee -a "$OUTDIR/summary.txt"
for name in "${GPUS[@]}"; do
  stage "smoke-$name" 120 "$PY" ci/gpu_smoke.py --providers "$name" --timeout 110 \
    --out "$RES/smoke-$name" &
done
wait
cat "$OUTDIR"/smoke-*.log >"$OUTDIR/smoke.log" 2>/dev/null && rm -f "$OUTDIR"/smoke-*.log

# --- speed: one benchmark at a time ---------------------------------------------
stage cuda 150 "$PY" packages/bitnet-cuda/bench/bench_cuda.py --tokens 32 --repeat 20 \
  --json "$RES/cuda.json"
# where a step's time goes, kernel by kernel (PyTorch's profiler sees the graph's kernels)
# at a short and a long context (the attention's splits grow with the cache), four kernels
# a decode layer against ten (issue 48: BITNET_CUDA_LAYER), wall ms a step side by side;
# the 2B-4T preset's random I2_S file is written once and read by the Vulkan stage too
stage cuda 130 "$PY" tools/bench/step_profile.py --preset 2b4t --ternary-type i2_s --device cuda \
  --kernels --steps 16 --prompt 64 1000 --variant four:BITNET_CUDA_LAYER=1 \
  --variant ten:BITNET_CUDA_LAYER=0 --json "$RES/cuda-step.json"
# issue 48: CUDA with 64 streams against one (the 2B-4T shape, 8 layers: tok/s of the
# batched step against decode), before the other backends so that the budget keeps it
for g in "${GPUS[@]}"; do
  if [ "$g" = cuda ]; then
    stage streams 120 "$PY" ci/gpu_kv_diff.py --make-2b4t /tmp/bitnet-2b4t-8l.gguf --layers 8 \
      && stage streams 120 "$PY" tools/bench/batched_step.py --model /tmp/bitnet-2b4t-8l.gguf \
        --device cuda --streams 64 --steps 8 --rounds 2 --context 64 --no-probe
  fi
done

stage vulkan 80 "$PY" packages/bitnet-vulkan/bench/bench_vulkan.py --preset 2b --no-cpu \
  --tokens 16 --json "$RES/vulkan.json"
# where a Vulkan step's time goes, dispatch by dispatch (timestamp queries); 64 untimed
# steps first (an H100's first steps ran ~2x slower, its clocks ramping up)
stage vulkan 60 "$PY" tools/bench/step_profile.py --preset 2b4t --ternary-type i2_s --device vulkan \
  --kernels --warmup 64 --steps 16 --prompt 64 1000 --json "$RES/vulkan-step-profile.json"
stage opencl 70 "$PY" packages/bitnet-opencl/bench/opencl_bench.py --shapes 2b --model small \
  --tokens 16 --cpu-tokens 4 --copy-mb 512 --json "$RES/opencl.json"
# issue 48: launches and host ms a decode step per provider (the 30-layer model above),
# Vulkan's float16 cache against cpu-reference's bit for bit
M="/tmp/bitnet-host-bound-$(id -u).gguf"  # the 30-layer, 256-wide preset, written once
[ -f "$M" ] || "$PY" -c "import sys; from bitnet_core.model.presets import preset
from bitnet_core.model.random import random_model_file
random_model_file(sys.argv[1], preset('host-bound'), seed=0, overwrite=True)" "$M" || M=""
if [ -n "$M" ]; then
  for name in "${GPUS[@]}"; do
    stage launches 25 "$PY" -m bitnet_core bench -m "$M" --device "$name" -p 64 -n 16 \
      --warmup 1 --profile --json --no-progress
  done
fi
stage kv-diff 40 "$PY" ci/gpu_kv_diff.py --device vulkan --kv-type float16 --layers 4 \
  --prompt 11 --json "$RES/kv-diff.json"
# host ms a decode step, fused engine against generic, on the issue-27 model (30 thin
# layers: tools/bench/step_profile.py's --preset host-bound), the variants interleaved
stage steps 30 "$PY" tools/bench/step_profile.py --preset host-bound --device vulkan --steps 20 \
  --variant fused:BITNET_VULKAN_FUSED=1 --variant generic:BITNET_VULKAN_FUSED=0 \
  --json "$RES/vulkan-step.json"
stage steps 30 "$PY" tools/bench/step_profile.py --preset host-bound --device opencl --steps 20 \
  --variant command-buffer: --variant loop:BITNET_OPENCL_COMMAND_BUFFER=0 \
  --variant generic:BITNET_OPENCL_FUSED=0 --json "$RES/opencl-step.json"
stage steps 40 "$PY" tools/bench/step_profile.py --preset host-bound --device webgpu --steps 20 \
  --variant fused:BITNET_WEBGPU_FUSED=1 --variant generic:BITNET_WEBGPU_FUSED=0 \
  --json "$RES/webgpu-step.json"

# --- the host's own CPU, last, in what time is left: many cores with AVX-512 on the
# lent H100's host (16 cores, cpu-avx512), which no CI machine has (ci/host-cpu.sh)
left=$((DEADLINE - $(date +%s) - 10))
if [ "$left" -ge 30 ]; then
  PY="$PY" BITNET_HOST_BUDGET="$left" bash ci/host-cpu.sh "$OUTDIR/host-cpu" "$RES/host-cpu" \
    | sed 's/^/host-cpu: /' | tee -a "$OUTDIR/summary.txt"
else
  echo "host-cpu: skipped (the budget is spent)" | tee -a "$OUTDIR/summary.txt"
fi

tar -czf "$OUTDIR/results.tgz" -C "$OUTDIR" results && rm -rf "$RES"
