# shellcheck shell=bash
# Sourced by ci/setup.sh and ci/test.sh: `ensure_uv` sets UV to a working uv
# binary and puts its folder first on this shell's PATH.
#
# It uses the uv already installed (PATH, ~/.local/bin, ~/.cargo/bin) or else
# installs one into a private virtual environment, BITNET_TOOLS (default
# ~/.local/share/bitnet/tools): the system Python is never modified, so this
# works on an externally managed Python (PEP 668: Debian 12, Ubuntu 24.04).

BITNET_TOOLS="${BITNET_TOOLS:-${XDG_DATA_HOME:-$HOME/.local/share}/bitnet/tools}"

_uv_works() { [ -n "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

ensure_uv() {
  local candidate
  for candidate in "${UV:-}" "$(command -v uv 2>/dev/null || true)" "$HOME/.local/bin/uv" \
    "$HOME/.cargo/bin/uv" "$BITNET_TOOLS/bin/uv"; do
    if _uv_works "$candidate"; then
      UV="$candidate"
      break
    fi
  done
  if [ -z "${UV:-}" ] || ! _uv_works "$UV"; then
    UV=""
    local py
    py="$(command -v python3 || true)"
    if [ -z "$py" ]; then
      echo "setup: python3 (3.10 or newer) is needed; Debian/Ubuntu: apt-get install python3" >&2
      return 1
    fi
    echo "setup: installing uv into $BITNET_TOOLS (a private venv; the system Python is left alone)"
    # With ensurepip (python3-venv) the venv has its own pip; without it, the
    # system pip installs into the venv (--python), which PEP 668 allows.
    if { "$py" -m venv --clear "$BITNET_TOOLS" >/dev/null 2>&1 &&
      "$BITNET_TOOLS/bin/python" -m pip install --quiet uv; } ||
      { "$py" -m venv --clear --without-pip "$BITNET_TOOLS" &&
        "$py" -m pip --python "$BITNET_TOOLS/bin/python" install --quiet uv; }; then
      UV="$BITNET_TOOLS/bin/uv"
    elif command -v pipx >/dev/null && pipx install uv >/dev/null; then
      UV="$(pipx environment --value PIPX_BIN_DIR)/uv"
    fi
    if ! _uv_works "$UV"; then
      echo "setup: could not install uv. Install python3-venv (Debian/Ubuntu: apt-get install" \
        "python3-venv) or uv itself, then run this again." >&2
      return 1
    fi
  fi
  export UV
  PATH="$(dirname "$UV"):$PATH"
  export PATH
}
