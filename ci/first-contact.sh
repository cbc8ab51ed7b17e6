#!/usr/bin/env bash
# The README's first command, run as a stranger on a stock machine would run it:
# a fresh clone, a fresh HOME, a new shell with a minimal PATH, the system
# python3 (externally managed on Debian 12), and uv, the shader tools
# (glslangValidator, spirv-val), nvcc and clang hidden by bind-mounting
# /dev/null over them in a private mount namespace (`unshare -m`, root).
# Passes when the command exits 0 and writes text. Lane `first-contact`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bitnet-first-contact.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

git clone --quiet "$ROOT" "$WORK/repo"
mkdir "$WORK/home"
# The first command of the README's quick start, exactly as written.
COMMAND="$(python3 - "$WORK/repo/README.md" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
start = text.index("## Quick start")
block = re.search(r"```bash\n(.*?)```", text[start:], re.S).group(1)
print(block.strip().splitlines()[0])
PY
)"
echo "first-contact: README command: $COMMAND"

HIDE=()
for tool in uv uvx glslangValidator glslang spirv-val glslc nvcc clang clang-15 clang-16 clang-17 clang-18 clang-19; do
  for dir in /usr/local/bin /usr/bin /bin "$HOME/.local/bin" "$HOME/.cargo/bin" /usr/local/cuda/bin; do
    [ -f "$dir/$tool" ] && HIDE+=("$dir/$tool")
  done
done
echo "first-contact: hiding ${HIDE[*]:-nothing}"
if /usr/bin/python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
  echo "first-contact: /usr/bin/python3 is externally managed (PEP 668)"
fi

# The machine's network settings pass through (a TLS-inspecting proxy's CA
# bundle, proxies); nothing else of this environment does.
NETWORK_ENV=()
for var in SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE PIP_CERT CURL_CA_BUNDLE \
  http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!var:-}" ] && NETWORK_ENV+=("$var=${!var}")
done

set +e
unshare -m bash -s "$WORK" "$COMMAND" "${NETWORK_ENV[*]:-}" "${HIDE[@]}" >"$WORK/stdout" 2>"$WORK/stderr" <<'SH'
set -e
work="$1"; command="$2"; read -r -a network <<<"$3"; shift 3
for f in "$@"; do mount --bind /dev/null "$f"; done
cd "$work/repo"
exec env -i HOME="$work/home" PATH=/usr/bin:/bin LANG=C.UTF-8 TERM=dumb "${network[@]}" \
  bash --noprofile --norc -c "$command"
SH
rc=$?
set -e
tail -n 25 "$WORK/stderr"
echo "----- stdout"
cat "$WORK/stdout"
echo "-----"
if [ "$rc" -ne 0 ]; then
  echo "first-contact: FAILED, the README's first command exited $rc" >&2
  exit 1
fi
if [ "$(tr -d '[:space:]' <"$WORK/stdout" | wc -c)" -le 6 ]; then
  echo "first-contact: FAILED, no text was written" >&2
  exit 1
fi
if ! ls "$WORK/home/.local/share/bitnet/tools/bin/uv" >/dev/null 2>&1; then
  echo "first-contact: FAILED, uv was not bootstrapped into the fresh HOME" >&2
  exit 1
fi
echo "first-contact: passed (uv bootstrapped into a private venv, text written)"
