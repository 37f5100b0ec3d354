# What `pip install shmwin` downloads, built and tested as shipped: scripts/wheels makes the sdist and
# a manylinux_2_17 wheel for x86_64 and aarch64 for every CPython 3.10-3.14 found (a missing one is
# said and skipped; 3.14 is Debian sid's, in its root: scripts/_py314.sh), checks each (no C
# source, stripped, nothing newer than GLIBC_2.17) and runs each in a fresh venv of its own Python
# with no C compiler reachable (aarch64 ones under qemu-user, where Debian has that CPython). They
# stay in wheelhouse/.
# Then the extension shipped for .venv's Python runs the native, fail-point and crash tests, in a
# copy of the checkout: built against glibc 2.17, it waits for a lock with pthread_mutex_timedlock on
# CLOCK_REALTIME (pthread_mutex_clocklock is glibc 2.30+), a path no gcc build here compiles.
# About 3 minutes once the tools are in: they (.venv-tools, the build backend, the 3.14 root and
# Debian's aarch64 CPythons) are made once per machine in the dev cache (scripts/_devcache.sh;
# SHMWIN_DEV_CACHE=off: once per clone, in the checkout).
#   bash scripts/checks.d/20-wheels.sh
# stage: beside the suite (one core at most but for its last tests: zig cc, qemu-user, downloads;
# this Python's wheel is the one the suite's wheel and README tests build: SHMWIN_WHEEL_CACHE)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash scripts/wheels
tag=$(.venv/bin/python -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheel=$(ls wheelhouse/shmwin-*-"$tag"-*_"$(uname -m)".whl)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r shmwin tests pyproject.toml "$copy/"
find "$copy/shmwin" -name '*.so' -delete
.venv/bin/python -c 'import sys, zipfile
whl = zipfile.ZipFile(sys.argv[1])
whl.extractall(sys.argv[2], [n for n in whl.namelist() if n.endswith(".so")])' "$wheel" "$copy"
# its bytecode, once (scripts/_core_build.sh's core_bytecode says why: each test's child imports it)
.venv/bin/python -m compileall -q -j 0 "$copy/shmwin" "$copy/tests" >/dev/null
(cd "$copy" && "$OLDPWD/.venv/bin/python" -c 'import os, shmwin._core as c
assert c.__file__.startswith(os.getcwd()), f"the tests would import {c.__file__}"')
echo "wheels: the shipped $(basename "$wheel") under the native, fail-point and crash tests"
# In this process (-n 0): 28 tests, mostly waiting on the crash tests' children; two xdist workers
# each started and collected the 224 for them, 11.2 CPU-s against 7.6 here, and no sooner.
(cd "$copy" && "$OLDPWD/.venv/bin/python" -m pytest -n 0 -q -p no:cacheprovider \
  tests/integration/core/test_native.py tests/integration/core/failpoints tests/integration/core/test_crash.py)
# The fail-point tests skip against the shipped (production) core. The same toolchain's test build
# (zig cc for glibc 2.17, -DSHMWIN_TEST) runs them: every section struck after every store, on the
# lock path only that build takes (pthread_mutex_timedlock on CLOCK_REALTIME).
zigcc=".venv-tools/bin/zigcc-$(uname -m)-linux-gnu.2.17"
zig_copy=$(mktemp -d)
trap 'rm -rf "$copy" "$zig_copy"' EXIT
CC="$zigcc" source scripts/_core_build.sh
core_copy "$zig_copy" -O2 -DSHMWIN_TEST
echo "wheels: zig cc's glibc-2.17 test build under the fail-point and crash tests"
# -n 0 too: the 196 tests took 49.5 and 40.1 CPU-s in one process against 61.4 and 45.6 on two
# xdist workers (two pairs, gcc's -O2 test build, under load 16-21). This job starts beside the
# suite, niced, but in the full runs at d3f0159 and 3fe9e98 it was the last to end (884 and 953 s):
# if its end is then alone on the machine, two workers would end it sooner for ~10 CPU-s more.
core_pytest "$zig_copy" -- -n 0 -q -m failpoints \
  tests/integration/core/test_native.py tests/integration/core/failpoints tests/integration/core/test_crash.py
