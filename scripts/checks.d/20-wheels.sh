# What `pip install shmwin` downloads, built and tested as shipped: scripts/wheels makes the sdist and
# a manylinux_2_17 wheel for every CPython 3.10-3.13 found (a missing one is said and skipped), checks
# each (no C source, stripped, nothing newer than GLIBC_2.17) and runs each in a fresh venv of its own
# Python with no C compiler reachable. They stay in wheelhouse/.
#   bash scripts/checks.d/20-wheels.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec bash scripts/wheels
