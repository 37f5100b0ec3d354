# Sourced by scripts/_pythons.sh (so by scripts/wheels and scripts/checks.d/30-other-pythons.sh) and
# by scripts/py314: CPython 3.14 where no native one is installed. pyenv here stops at 3.13 and
# Debian has python3.14 only in sid, built against sid's glibc (newer than this machine's), so it
# runs in a Debian sid root of its own, made by debootstrap once per machine into the dev cache
# (scripts/_devcache.sh: ~/.cache/shmwin-dev/py314-root-*; .py314/root links to it, git-ignored;
# SHMWIN_DEV_CACHE=off: made in .py314/root itself, once per clone) and entered by scripts/py314:
# a private mount namespace (this machine's /dev, /dev/shm, /proc, /sys, /tmp, the dev cache and
# the checkout, at the same paths), then chroot. The root has what the 3.14 jobs run:
# python3.14 with its headers and venv, gcc (the other-pythons job builds the test core there) and
# redis-server (the contract tests run on it). It needs no network at run time: this machine's pip
# installs what a venv there needs (shmwin_py314_install).
# Made fresh: 36 to 63 s and 41 CPU-s on the 2-core machine (minbase, no recommends; one root for
# every job and clone), 470 MB; reused: nothing to do. scripts/test.d/30-py314-root.sh starts it
# beside the suite. Sid moves: python3.14 is whatever sid has that day (3.14.10 on 2026-11-28), so
# the cached root is made again once 7 days old. Once 3.14 leaves sid, SHMWIN_PY314_SUITE=forky
# (or a later one) takes it from there.
SHMWIN_PY314_SUITE="${SHMWIN_PY314_SUITE:-sid}"
SHMWIN_PY314_PACKAGES="python3.14,python3.14-dev,python3.14-venv,gcc,libc6-dev,redis-server,redis-tools"
SHMWIN_PY314_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.py314"
source "$(dirname "${BASH_SOURCE[0]}")/_emulated.sh"  # shmwin_debian_mirror
source "$(dirname "${BASH_SOURCE[0]}")/_devcache.sh"

# shmwin_py314_root: make the root unless it is there and made from today's package list (under a
# lock: the wheels and the other-pythons jobs, the background set-up step, or another clone's run
# may ask at once); print its path, or nothing (and why, on stderr) if it cannot be made here.
shmwin_py314_root() {
  local root mirror started=$SECONDS
  mkdir -p "$SHMWIN_PY314_DIR"
  mirror=$(shmwin_debian_mirror)
  [ -n "$mirror" ] || { echo "py314: no Debian mirror in /etc/apt/sources*" >&2; return 0; }
  root=$(shmwin_devcache --link "$SHMWIN_PY314_DIR/root" py314-root 7 \
    "$SHMWIN_PY314_SUITE $SHMWIN_PY314_PACKAGES $mirror $(uname -m)" \
    _shmwin_py314_build "$SHMWIN_PY314_SUITE" "$SHMWIN_PY314_PACKAGES" "$mirror") || return 0
  [ $((SECONDS - started)) -lt 2 ] || echo "py314: the root is ready, in $((SECONDS - started)) s" >&2
  echo "$root"
}

# _shmwin_py314_build SUITE PACKAGES MIRROR ROOT: debootstrap ROOT (its log: ROOT.log)
_shmwin_py314_build() {
  local suite="$1" packages="$2" mirror="$3" root="$4"
  if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || { echo "py314: no debootstrap and no apt-get here" >&2; return 1; }
    echo "py314: installing debootstrap (Debian) ..." >&2
    local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq debootstrap; } >"$root.log" 2>&1 ||
      { cat "$root.log" >&2; return 1; }
  fi
  echo "py314: debootstrap of Debian $suite with python3.14 into $root ..." >&2
  if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1; then
    tail -20 "$root.log" >&2; echo "py314: debootstrap failed" >&2; return 1
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages  # 100 MB, unused
  rm -f "$root.log"
}

# shmwin_py314_python: print a python3.14 that runs here (the root's, through scripts/py314: a
# small launcher in .py314/bin/), or nothing.
shmwin_py314_python() {
  local root launcher="$SHMWIN_PY314_DIR/bin/python3.14"
  root=$(shmwin_py314_root)
  [ -n "$root" ] || return 0
  if [ ! -x "$launcher" ]; then
    mkdir -p "$SHMWIN_PY314_DIR/bin"
    printf '#!/bin/sh\nexec "%s" python3.14 "$@"\n' "$(dirname "$SHMWIN_PY314_DIR")/scripts/py314" >"$launcher.tmp"
    chmod +x "$launcher.tmp" && mv "$launcher.tmp" "$launcher"
  fi
  echo "$launcher"
}

# shmwin_py314_install HOST_PYTHON VENV ARGS...: `pip install ARGS` (requirements) into VENV, a
# venv made in the root without pip: HOST_PYTHON (one of this machine's, with pip) installs
# wheels for CPython 3.14 on the root's glibc and machine into its site-packages (--target; the
# root has no network), and the root's Python compiles them to its own bytecode. One pip process,
# where a download outside and the venv's own pip inside took two and ensurepip (5 CPU-s).
shmwin_py314_install() {
  local host_python="$1" env_dir="$2" libc minor site
  shift 2
  site="$env_dir/lib/python3.14/site-packages"
  [ -d "$site" ] || { echo "py314: $env_dir is not a 3.14 venv" >&2; return 1; }
  libc=$("$(dirname "$SHMWIN_PY314_DIR")/scripts/py314" python3.14 -c 'import platform; print(platform.libc_ver()[1])')
  local install=(--only-binary :all: --python-version 3.14 --implementation cp --abi cp314)
  for minor in $(seq 17 "${libc#2.}"); do install+=(--platform "manylinux_2_${minor}_$(uname -m)"); done
  # --no-compile: this pip's Python would write its own version's bytecode, not 3.14's (and the
  # packages' test suites need none: shmwin_compile_site, scripts/_pythons.sh)
  "$host_python" -m pip install -q --no-compile --target "$site" "${install[@]}" "$@" &&
    rm -rf "$site/bin" &&  # --target's console scripts, for HOST_PYTHON: the tests run python -m
    shmwin_compile_site "$(dirname "$SHMWIN_PY314_DIR")/scripts/py314" "$env_dir/bin/python" "$site"
}
