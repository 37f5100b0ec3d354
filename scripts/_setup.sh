# Sourced by scripts/test and scripts/demo: make .venv with shmwin and its test deps.
# Works on a fresh Debian/Ubuntu machine: installs python3-venv with apt if needed.
# uv (pinned, installed once per machine into the dev cache: scripts/_devcache.sh) makes .venv
# and installs into it from its own cache, ~/.cache/shmwin-dev/uv: 0.2 + 18 CPU-s from a warm
# machine against pip's 48 (mostly pip itself; 8 of the 18 are shmwin's C core, compiled from
# this checkout every time). No uv to be had, or SHMWIN_DEV_CACHE=off: pip, as before.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
  echo "shmwin needs Python 3.10+ (found: $("$PY" --version 2>&1))" >&2
  exit 1
fi
source "$ROOT/scripts/_devcache.sh"
SHMWIN_UV_PIN="uv==0.13.8"
# _shmwin_uv_build PYTHON DIR: a venv holding uv (its pip is only for this install)
_shmwin_uv_build() {
  "$1" -m venv "$2" && "$2/bin/python" -m pip install -q --disable-pip-version-check "$SHMWIN_UV_PIN"
}
# uv: its path, or nothing (the cache off, or no uv could be installed: pip does it all then)
uv=""
if [ -n "$(shmwin_devcache_root)" ]; then
  real_py=$("$PY" -c 'import sys; print(sys.executable)')
  uv_entry=$(shmwin_devcache "" uv 0 "$SHMWIN_UV_PIN $real_py" _shmwin_uv_build "$real_py" 2>.venv-uv.log) &&
    uv="$uv_entry/bin/uv" && rm -f .venv-uv.log ||
    echo "no uv for .venv (.venv-uv.log says why): pip makes it" >&2
  # its own cache beside the others: one rm -rf clears them all; and never a Python of its own
  export UV_CACHE_DIR="${UV_CACHE_DIR:-$(shmwin_devcache_root)/uv}" UV_PYTHON_DOWNLOADS=never
fi
if [ ! -x .venv/bin/python ] && [ -n "$uv" ]; then
  # --seed: pip in it, as python -m venv gives (scripts run .venv/bin/python -m pip)
  "$uv" venv -q --seed --python "$real_py" .venv ||
    { echo "uv venv failed (above): python -m venv and pip instead" >&2; rm -rf .venv; uv=""; }
fi
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    echo "installing python3-venv..." >&2
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    rm -rf .venv && "$PY" -m venv .venv
  fi
fi
# the native core (shmwin/backends/shm/core/) is compiled at install: a C compiler and Python's headers
if ! command -v cc >/dev/null || ! "$PY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  echo "installing a C compiler and Python headers (Debian: gcc, python3-dev) ..." >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq gcc python3-dev >/dev/null
fi
# reinstall when the build's inputs change: setup.py, pyproject.toml and every C source and header
# under shmwin/ (setup.py compiles all of them), in a fixed order
sources=$(find shmwin -name '*.c' -o -name '*.h' | LC_ALL=C sort)
# shellcheck disable=SC2086
stamp=".venv/.shmwin-installed-$(cat pyproject.toml setup.py $sources | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "installing shmwin and its test dependencies into .venv ..." >&2
  log=.venv/install.log
  # uv: the checkout's shmwin built again whatever uv has seen (--reinstall-package), and all
  # compiled to bytecode (PYTHONDONTWRITEBYTECODE is set on CI: nothing is compiled later); if
  # uv fails (its index unreachable, ...), pip has its turn, as before
  if [ -z "$uv" ] || ! "$uv" pip install --python .venv/bin/python --compile-bytecode \
      --reinstall-package shmwin -e ".[test,bench]" >"$log" 2>&1; then
    [ -z "$uv" ] || { cat "$log"; echo "uv pip install failed (above): pip installs instead"; } >&2
    if ! .venv/bin/python -m pip install -e ".[test,bench]" >"$log" 2>&1; then
      cat "$log" >&2; echo "pip install failed (log above)" >&2; exit 1
    fi
  fi
  .venv/bin/python -c "import shmwin._core, numpy, pytest, xdist" # fail loudly if anything is missing
  rm -f .venv/.shmwin-installed-* && touch "$stamp"
fi
