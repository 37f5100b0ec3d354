# The fail-point suites against the core's test build. Fail points (failpoint(), failpoint_fired(),
# SHMWIN_FAILPOINT read by child processes, a counted branch after every store of a section) are
# compiled only with -DSHMWIN_TEST: the production core (setup.py) has none, and the main run
# skips every test marked `failpoints` (tests/conftest.py). Here the same sources are built with
# it into a copy of the package (scripts/_core_build.sh), and those tests run there; children
# (PYTHONPATH = the copy) import the same build, and SHMWIN_EXPECT_CORE makes the run check it.
# Run by scripts/test from the repository root, .venv ready; also on its own:
#   bash scripts/checks.d/10-failpoints.sh [extra pytest arguments]
# In scripts/test's full run (SHMWIN_FULL_RUN=1) it runs only the fail-point tests not marked
# `sanitize` (2 of 227): 50-sanitizers.sh's run is a test build too (-DSHMWIN_TEST, with ASan's
# and UBSan's checks) and runs the other 225, which ran in both before (~150 CPU-s twice); this
# -O2 test build's code runs them on the oldest and newest other CPython (30-other-pythons.sh)
# and as zig cc's.
# stage: beside the checks (in the full run its 2 tests in one process, ~10 CPU-s: beside the sanitizer
# job, not on the run's critical path before it)
set -euo pipefail
source scripts/_core_build.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-failpoints.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$SECONDS
core_copy "$work/copy" -O2 -DSHMWIN_TEST
(cd "$work/copy" && PYTHONPATH="$work/copy" "$core_py" -c \
  'from shmwin import _core; assert hasattr(_core, "failpoint"), "not a test build"')
echo "failpoints: the test build (-DSHMWIN_TEST)"
status=0
marks="failpoints" workers=2
# The full run's 2 tests in this one process: with -n 2 each of the two workers collected all of
# tests/ (2,745 tests, 5.7 CPU-s a collection) to run one test (11.7 CPU-s of the job's 17)
[ "${SHMWIN_FULL_RUN:-0}" = 1 ] && marks="failpoints and not sanitize" workers=0
echo "failpoints: the tests marked $marks"
core_pytest "$work/copy" -- -n "$workers" -q -m "$marks" tests "$@" || status=$?
echo "failpoints: $((SECONDS - started)) s, exit $status"
exit "$status"
