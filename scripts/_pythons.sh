# Sourced by scripts/wheels and scripts/checks.d/30-other-pythons.sh: the CPythons shmwin supports,
# and where to find each one here.
SHMWIN_PYTHONS="3.10 3.11 3.12 3.13"

# shmwin_find_python 3.12: print the path of a working CPython 3.12 (never a free-threaded build),
# or nothing: pyenv's newest 3.12.x first (pyenv's shims run only the versions it has selected),
# then python3.12 on PATH.
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
  return 0
}
