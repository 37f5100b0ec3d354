# What `pip install shmwin` downloads, built and tested as shipped: scripts/wheels makes the sdist and
# a manylinux_2_17 wheel for x86_64 and aarch64 for every CPython 3.10-3.13 found (a missing one is
# said and skipped), checks each (no C source, stripped, nothing newer than GLIBC_2.17) and runs
# each in a fresh venv of its own Python with no C compiler reachable (aarch64 ones under qemu-user,
# where Debian has that CPython). They stay in wheelhouse/. About 2.5 minutes once the tools are in.
#   bash scripts/checks.d/20-wheels.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec bash scripts/wheels
