#!/usr/bin/env bash
# bitnet-opencl on a real GPU through the vendor's OpenCL driver, on a machine
# with no network (the lent NVIDIA H100/H200: Python 3.12 with numpy, pytest,
# cmake, pybind11, scikit-build-core; no pyopencl, no ICD file for NVIDIA).
#
#   here, once:          bash packages/bitnet-opencl/bench/gpu_opencl.sh --fetch
#                        (cp312 wheels of pyopencl and its needs, and gguf, into .whl/;
#                        .whl/ must be ignored: echo /.whl/ >> .git/info/exclude)
#   there (carry .whl):  bash packages/bitnet-opencl/bench/gpu_opencl.sh [OUTDIR]
#
# There it installs the wheels and the two workspace packages into /tmp/site,
# registers NVIDIA's OpenCL library as an ICD when none is, runs the package's
# tests on the GPU (the conformance suite may not skip: BITNET_CONFORMANCE_REQUIRE=1)
# and the benchmark on the 2B-4T shapes; logs and JSON go to OUTDIR (default $OUT or out/).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"

if [ "${1:-}" = "--fetch" ]; then
  mkdir -p .whl
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    pyopencl==2026.1.4 pytools==2026.1.1 siphash24==1.9 platformdirs gguf
  ls -la .whl
  exit 0
fi

OUTDIR="${1:-${OUT:-out}}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
# the workspace packages: bitnet-core builds its C++ there (cmake, pybind11 present)
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
  --target /tmp/site packages/bitnet-core packages/bitnet-opencl

if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1 && [ -z "${OCL_ICD_VENDORS:-}" ]; then
  mkdir -p /tmp/icd
  echo libnvidia-opencl.so.1 >/tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true

"$PY" - <<'PY' 2>&1 | tee "$OUTDIR/opencl_probe.txt"
from bitnet_opencl import OpenCLProvider
from bitnet_opencl.runtime.devices import discover
for d in discover().devices:
    print("device", d.address, d.describe(), sorted(e for e in d.extensions if "subgroup" in e or "dot" in e or "fp" in e))
p = OpenCLProvider()
print("auto:", p.probe(False))
print("explicit:", p.probe(True))
rt = p.runtime
print("features:", rt.features, "notes:", rt.build_notes)
PY

set +e
BITNET_CONFORMANCE_REQUIRE=1 "$PY" -m pytest packages/bitnet-opencl/tests -q -p no:cacheprovider \
  2>&1 | tee "$OUTDIR/opencl_tests.txt"
tests_rc=${PIPESTATUS[0]}
"$PY" packages/bitnet-opencl/bench/opencl_bench.py --shapes 2b --model 2b --tokens 32 \
  --cpu-tokens 2 --copy-mb 1024 --sweep-gemv --json "$OUTDIR/opencl_bench.json" 2>&1 | tee "$OUTDIR/opencl_bench.txt"
bench_rc=${PIPESTATUS[0]}
echo "tests rc=$tests_rc bench rc=$bench_rc"
exit $(( tests_rc || bench_rc ))
