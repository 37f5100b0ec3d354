# The fail-point suites against the core's test build. Fail points (failpoint(), failpoint_fired(),
# SHMWIN_FAILPOINT read by child processes, a counted branch after every store of a section) are
# compiled only with -DSHMWIN_TEST: the production core (setup.py) has none, and the main run
# skips every test marked `failpoints` (tests/conftest.py). Here the same sources are built with
# it into a copy of the package (scripts/_core_build.sh), and those tests run there; children
# (PYTHONPATH = the copy) import the same build, and SHMWIN_EXPECT_CORE makes the run check it.
# On its own (the quick way to the fail-point tests, no sanitizer), from the repository root, .venv
# ready:
#   bash scripts/checks.d/10-failpoints.sh [extra pytest arguments]
# scripts/test leaves it out: 50-sanitizers.sh's UBSan run is this build (-O2 -DSHMWIN_TEST) with
# UBSan's checks, and runs these tests with the sanitizer's (225 of these 227 were run by both).
# stage: run by 50-sanitizers.sh (its UBSan run: the same -O2 test build, every test marked failpoints)
set -euo pipefail
source scripts/_core_build.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-failpoints.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$SECONDS
core_copy "$work/copy" -O2 -DSHMWIN_TEST
(cd "$work/copy" && PYTHONPATH="$work/copy" "$core_py" -c \
  'from shmwin import _core; assert hasattr(_core, "failpoint"), "not a test build"')
echo "failpoints: the test build (-DSHMWIN_TEST), every test marked failpoints"
status=0
core_pytest "$work/copy" -- -n 2 -q -m failpoints tests "$@" || status=$?
echo "failpoints: $((SECONDS - started)) s, exit $status"
exit "$status"
