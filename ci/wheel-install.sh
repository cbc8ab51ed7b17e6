#!/usr/bin/env bash
# The release wheels as a user installs them (lane `wheels`):
#  1. tools/build-wheels builds every distribution into a fresh folder (bitnet-core
#     for each CPython 3.10-3.13 found, repaired by auditwheel; every core wheel
#     must carry a manylinux tag);
#  2. a new venv installs the wheels with pip, binaries only, with the C and C++
#     compilers hidden (bind mounts in a private mount namespace): our
#     distributions from the built files, third-party ones from the registry;
#  3. it runs `bitnet devices`, `bitnet run` on the bundled demo model, and
#     `bitnet run --device NAME` for each backend (opencl, vulkan, webgpu on PoCL
#     and lavapipe).
# The distributions and backends are read from packages/* (no list here): every
# backend is installed through its extra of the meta package, but those named in
# BITNET_WHEEL_SKIP (default: cuda, whose CuPy needs a GPU).
# BITNET_WHEEL_PYTHONS overrides the CPythons built (default: 3.10 3.11 3.12 3.13).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bitnet-wheels.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
PY="$ROOT/.venv/bin/python"
read -r -a PYTHONS <<<"${BITNET_WHEEL_PYTHONS:-3.10 3.11 3.12 3.13}"

"$PY" tools/build-wheels --out "$WORK/dist" --python "${PYTHONS[@]}" --skip-sdist
ls -l "$WORK/dist"
for whl in "$WORK"/dist/bitnet_core-*.whl; do
  case "$whl" in
    *manylinux_*) ;;
    *)
      echo "wheels: FAILED, $(basename "$whl") has no manylinux tag" >&2
      exit 1
      ;;
  esac
done

# The venv's interpreter: the CPython the workspace runs on.
BASE="$("$PY" -c 'import sys; print(sys._base_executable)')"
TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
"$BASE" -m venv "$WORK/venv"
# Our wheels for this CPython: the pure ones, and the platform ones of its tag.
WHEELS=()
for whl in "$WORK"/dist/*.whl; do
  case "$(basename "$whl")" in *-py3-none-any.whl | *-"$TAG"-*) WHEELS+=("$whl") ;; esac
done
# The backends: packages/bitnet-* but the core (the extra and the device are its name).
BACKENDS=()
for dir in "$ROOT"/packages/bitnet-*/; do
  name="$(basename "$dir")"
  name="${name#bitnet-}"
  [ "$name" = core ] && continue
  case " ${BITNET_WHEEL_SKIP-cuda} " in *" $name "*) continue ;; esac
  BACKENDS+=("$name")
done
EXTRAS="$(IFS=,; echo "${BACKENDS[*]:+${BACKENDS[*]},}server")"
echo "wheels: installing bitnet[$EXTRAS]"

HIDE=()
for tool in cc gcc g++ c++ clang clang++ clang-15 nvcc; do
  for dir in /usr/local/bin /usr/bin /bin /usr/local/cuda/bin; do
    [ -f "$dir/$tool" ] && HIDE+=("$dir/$tool")
  done
done
echo "wheels: hiding ${HIDE[*]:-nothing}"

# Every distribution of ours is named by its file, so none comes from the index;
# the meta package's extras pull in the backends (satisfied by those files); CuPy
# (bitnet-cuda[cuda12]) is left out: no GPU here.
unshare -m bash -s "$WORK/venv" "${WHEELS[*]}" "$EXTRAS" "${BACKENDS[*]}" "${HIDE[@]}" <<'SH'
set -euo pipefail
venv="$1"; read -r -a wheels <<<"$2"; extras="$3"; read -r -a backends <<<"$4"; shift 4
for f in "$@"; do mount --bind /dev/null "$f"; done
export PATH="$venv/bin:/usr/bin:/bin" XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
meta=""; rest=()
for w in "${wheels[@]}"; do
  case "$(basename "$w")" in bitnet-[0-9]*) meta="$w" ;; *) rest+=("$w") ;; esac
done
python -m pip install --quiet --only-binary :all: "${rest[@]}" "$meta[$extras]"
python -m pip list 2>/dev/null | grep -i '^bitnet'
cd "$venv"  # away from the source tree: the installed files are what runs
bitnet devices
bitnet run --prompt "ROMEO:" -n 24 --temperature 0
for device in "${backends[@]}"; do
  echo "== bitnet run --device $device"
  bitnet run --device "$device" --prompt "ROMEO:" -n 8 --temperature 0
done
SH
echo "wheels: passed"
