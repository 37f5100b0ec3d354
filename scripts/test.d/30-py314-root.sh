# Start making CPython 3.14's Debian sid root (scripts/_py314.sh: debootstrap, about a minute, mostly
# downloads and unpacking; once per machine, in the dev cache: on a machine that has it, .py314/root
# only links to it) in the background, so that it is ready when the wheels and other-pythons
# jobs run after the suite instead of adding its minute to theirs. They wait for it (a lock) if it
# is still going, and make it themselves if it failed. Its output: .py314/make.log.
# Sourced by scripts/test (from the repository root), after the set-up; nothing to do when the
# checks are skipped, the root is off (SHMWIN_PY314_ROOT=0) or a native python3.14 is installed.
shmwin_start_py314_root() {
  [ "${SHMWIN_SKIP_CHECKS:-0}" != 1 ] && [ "${SHMWIN_PY314_ROOT:-1}" != 0 ] || return 0
  ! command -v python3.14 >/dev/null && ! ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.14.* >/dev/null 2>&1 ||
    return 0
  mkdir -p .py314
  echo "py314: making the 3.14 root in the background (.py314/make.log)" >&2
  nohup bash scripts/py314 --make >.py314/make.log 2>&1 </dev/null &
}
shmwin_start_py314_root
