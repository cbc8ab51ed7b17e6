#!/usr/bin/env bash
# The CPU engine on the machine this runs on, in one call that ends on time:
#   1. its kernel, runner and conformance tests (every kernel table the CPU has,
#      and device="cpu" on every usable CPU against the reference);
#   2. the machine's ceilings (read bandwidth, int8 peak) at 1 to N threads;
#   3. issue 29's measurement at 2 threads: tools/bench/model_vs_llamacpp.py on the
#      700M-shaped TQ2_0 model, ours against llama-cpp-python where it is installed
#      (ci/gpu-prepare.sh carries a build for AVX-512), tq1_160 beside TQ2_0 in the
#      same rounds, then the AVX2 path (--device cpu-avx2);
#   4. issue 28's batched step at 2 threads (tools/bench/batched_step.py);
#   5. decode and prompt at N and 8 threads (tq1_160 beside TQ2_0);
#   6. issue 28's HTTP streams at 2 threads (tools/loadtest/serve_scaling.py), where
#      the server's packages are installed.
# Made for the lent GPU machine's host (16 cores with AVX-512, which no CI machine
# has; ci/gpu-bench.sh ends with it in the time its GPU stages leave), and for any
# many-core machine (docs/CPU_KERNELS.md, "Many cores and NUMA").
#
#   bash ci/host-cpu.sh [OUTDIR [RESULTS]]   (BITNET_HOST_BUDGET seconds, default 540)
#
# Logs and summary.txt go to OUTDIR (default out/ci/host-cpu), the JSON figures to
# RESULTS (default OUTDIR/results). PY: the Python to use (else ci/gpu-env.sh's).
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR="$(mkdir -p "${1:-out/ci/host-cpu}" && cd "${1:-out/ci/host-cpu}" && pwd)"
RES="$(mkdir -p "${2:-$OUTDIR/results}" && cd "${2:-$OUTDIR/results}" && pwd)"
export PYTHONUNBUFFERED=1
if [ -z "${PY:-}" ]; then
  # shellcheck source=ci/gpu-env.sh
  source ci/gpu-env.sh >"$OUTDIR/setup.log" 2>&1 || echo "gpu-env failed" >>"$OUTDIR/setup.log"
fi
# the lent machine (no .venv: PY is its python3) gets the wheels ci/gpu-prepare.sh
# carried for this script, in a site of its own
CARRIED=0
if [ "$PY" = python3 ] && ls .whl/host/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/host-site .whl/host/*.whl >>"$OUTDIR/setup.log" 2>&1
  export PYTHONPATH="/tmp/host-site${PYTHONPATH:+:$PYTHONPATH}"
  CARRIED=1
fi
SCALE="${BITNET_GPU_STAGE_SCALE:-1}"
DEADLINE=$(($(date +%s) + ${BITNET_HOST_BUDGET:-540}))
# shellcheck source=ci/stages.sh
source ci/stages.sh

lscpu >"$OUTDIR/lscpu.txt" 2>&1
NCPU="$(nproc)"
echo "$(grep -m1 'Model name' "$OUTDIR/lscpu.txt" | sed 's/  */ /g'), $NCPU CPUs" \
  | tee -a "$OUTDIR/summary.txt"
# llama-cpp-python where it imports; the carried build is for AVX-512 VNNI, which
# elsewhere dies of SIGILL at its first kernel (and takes its rounds with it)
LLAMA=(--no-llama)
if "$PY" -c "import llama_cpp" 2>>"$OUTDIR/setup.log" \
  && { [ "$CARRIED" = 0 ] || grep -qw avx512_vnni /proc/cpuinfo; }; then
  LLAMA=()
fi
echo "llama-cpp-python: ${LLAMA[*]:-installed}" | tee -a "$OUTDIR/summary.txt"
MODEL=/tmp/large-tq2_0.gguf
BENCH=(tools/bench/model_vs_llamacpp.py --n-prompt 128 --n-gen 128)
TQ1=(--variant tq1:BITNET_CPU_LAYOUT=tq1_160)

stage tests 120 "$PY" -m pytest -q -p no:cacheprovider -m "not crossval and not fuzz and not cross" \
  packages/bitnet-core/tests/test_cpu_kernels.py packages/bitnet-core/tests/test_cpu_runner.py \
  packages/bitnet-core/tests/test_cpu_conformance.py packages/bitnet-core/tests/test_kv_dtype.py
stage probe 60 "$PY" tools/bench/machine_probe.py --threads 1 2 4 8 "$NCPU" --reps 3
MAKE=(--model "$MODEL")
[ -f "$MODEL" ] || MAKE=(--make "$MODEL")
stage issue29 150 "$PY" "${BENCH[@]}" "${MAKE[@]}" "${LLAMA[@]}" "${TQ1[@]}" --threads 2 --runs 3 \
  --out "$RES/issue29-t2.json"
stage issue29 100 "$PY" "${BENCH[@]}" --model "$MODEL" "${LLAMA[@]}" --device cpu-avx2 --threads 2 \
  --runs 3 --out "$RES/issue29-avx2-t2.json"
stage issue28 90 sh -c "\"$PY\" tools/bench/batched_step.py --model $MODEL --threads 2 --streams 8 \
  --steps 16 --rounds 2 >\"$RES/issue28-batched-t2.json\""
for t in "$NCPU" 8; do
  stage sweep 60 "$PY" "${BENCH[@]}" --model "$MODEL" --no-llama "${TQ1[@]}" --threads "$t" --runs 2 \
    --out "$RES/sweep-t$t.json"
done
stage issue28 120 "$PY" tools/loadtest/serve_scaling.py --gguf "$MODEL" --threads 2 --streams 8 \
  --max-tokens 64 --rounds 1 --long-prompt 0 --json "$RES/issue28-http-t2.json"
