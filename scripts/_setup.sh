# Sourced by scripts/test and scripts/demo: make .venv with shmwin and its test deps.
# Works on a fresh Debian/Ubuntu machine: installs python3-venv with apt if needed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
  echo "shmwin needs Python 3.10+ (found: $("$PY" --version 2>&1))" >&2
  exit 1
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
  if ! .venv/bin/python -m pip install -e ".[test,bench]" >"$log" 2>&1; then
    cat "$log" >&2; echo "pip install failed (log above)" >&2; exit 1
  fi
  .venv/bin/python -c "import shmwin._core, numpy, pytest, xdist" # fail loudly if anything is missing
  rm -f .venv/.shmwin-installed-* && touch "$stamp"
fi
