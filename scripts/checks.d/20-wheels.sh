# What `pip install shmwin` downloads, built and tested as shipped: scripts/wheels makes the sdist and
# a manylinux_2_17 wheel for x86_64 and aarch64 for every CPython 3.10-3.13 found (a missing one is
# said and skipped), checks each (no C source, stripped, nothing newer than GLIBC_2.17) and runs
# each in a fresh venv of its own Python with no C compiler reachable (aarch64 ones under qemu-user,
# where Debian has that CPython). They stay in wheelhouse/.
# Then the extension shipped for .venv's Python runs the native, fail-point and crash tests, in a
# copy of the checkout: built against glibc 2.17, it waits for a lock with pthread_mutex_timedlock on
# CLOCK_REALTIME (pthread_mutex_clocklock is glibc 2.30+), a path no gcc build here compiles.
# About 3 minutes once the tools are in.
#   bash scripts/checks.d/20-wheels.sh
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
(cd "$copy" && "$OLDPWD/.venv/bin/python" -c 'import os, shmwin._core as c
assert c.__file__.startswith(os.getcwd()), f"the tests would import {c.__file__}"')
echo "wheels: the shipped $(basename "$wheel") under the native, fail-point and crash tests"
(cd "$copy" && "$OLDPWD/.venv/bin/python" -m pytest -n auto -q -p no:cacheprovider \
  tests/integration/test_native.py tests/integration/test_failpoints.py tests/integration/test_crash.py)
