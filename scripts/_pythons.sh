# Sourced by scripts/wheels and scripts/checks.d/30-other-pythons.sh: the CPythons shmwin supports,
# and where to find each one here. SHMWIN_ONLY_PYTHONS="3.14" (or "3.10 3.14") narrows the jobs
# to those versions.
SHMWIN_PYTHONS="3.10 3.11 3.12 3.13 3.14"
source "$(dirname "${BASH_SOURCE[0]}")/_py314.sh"

# shmwin_find_python 3.12: print the path of a working CPython 3.12 (never a free-threaded build),
# or nothing: pyenv's newest 3.12.x first (pyenv's shims run only the versions it has selected),
# then python3.12 on PATH; for 3.14, then Debian's in its root (scripts/_py314.sh: a launcher
# whose venvs' pythons run through shmwin_python_enter).
shmwin_find_python() {
  local version="$1" root candidate
  root="${PYENV_ROOT:-$HOME/.pyenv}"
  for candidate in $(ls -d "$root"/versions/"$version".[0-9]* 2>/dev/null | sort -rV) ""; do
    [ -n "$candidate" ] && candidate="$candidate/bin/python$version" || candidate=$(command -v "python$version" || true)
    if [ -n "$candidate" ] && [ -x "$candidate" ] &&
      "$candidate" -c "import sys, sysconfig; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.')))
                         or bool(sysconfig.get_config_var('Py_GIL_DISABLED')))" 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  if [ "$version" = 3.14 ] && [ "${SHMWIN_PY314_ROOT:-1}" != 0 ]; then shmwin_py314_python; fi
  return 0
}

# shmwin_python_enter PYTHON: print the command that must run a venv's python made by PYTHON (the
# root's python3.14: scripts/py314), or nothing (a venv of any other runs as it is).
shmwin_python_enter() {
  if [ "$1" = "$SHMWIN_PY314_DIR/bin/python3.14" ]; then echo "$(dirname "$SHMWIN_PY314_DIR")/scripts/py314"; fi
}

# shmwin_versions: SHMWIN_PYTHONS, or those of SHMWIN_ONLY_PYTHONS (each must be one of them)
shmwin_versions() {
  local version
  for version in ${SHMWIN_ONLY_PYTHONS:-$SHMWIN_PYTHONS}; do
    [[ " $SHMWIN_PYTHONS " == *" $version "* ]] ||
      { echo "SHMWIN_ONLY_PYTHONS: $version is not one of $SHMWIN_PYTHONS" >&2; return 1; }
    echo "$version"
  done
}

# shmwin_compile_site [ENTER...] PYTHON SITE: compile SITE's modules to PYTHON's bytecode, all but
# the packages' own test suites (their tests/ and test/ folders: numpy's, setuptools', ... which no
# test here imports). pip install compiled every module, those included: 6.0 CPU-s of a 3.10
# venv's 14.2 (numpy, pytest, redis, limits, setuptools), 3.5 without them. The rest is still
# compiled once: with PYTHONDONTWRITEBYTECODE set, each process the tests start would compile
# what it imports again.
shmwin_compile_site() {
  local site="${*: -1}"
  "${@:1:$#-1}" -m compileall -q -j 0 -x '/site-packages/.+/tests?/' "$site" >/dev/null
}
