# The native core under the sanitizers: the tests marked `sanitize` (the native, fail-point,
# crash, bad-segment, keys and growth tests, and the bad-words fuzz: see tests/conftest.py)
# run against a core built with UndefinedBehaviorSanitizer, then against one built with
# AddressSanitizer. Any report fails the run, even one from a child process: each process
# writes its report to a file under reports/ (log_path), and a report ends the process.
# Both builds are test builds (-DSHMWIN_TEST): the fail-point tests run under them too.
#
# The UBSan build is the fail-point job's (10-failpoints.sh: -O2 -DSHMWIN_TEST) with UBSan's
# checks added, so that the full run runs the fail-point tests marked `sanitize` (225 of 227)
# here only: they ran three times a run (the plain test build, UBSan, ASan) for two verdicts.
# The plain -O2 test build's code still runs them on every other CPython (30-other-pythons.sh)
# and as zig cc's glibc-2.17 build (20-wheels.sh); run 10-failpoints.sh for it on this one.
#
# Two builds, not one -fsanitize=address,undefined: with gcc, libasan exports the
# __sanitizer_set_report_path that libubsan calls, so a combined build writes UBSan's reports
# to stderr whatever UBSAN_OPTIONS says -- a child's report would be lost.
#
# Each build goes into a copy of the package and tests in a temporary directory
# (scripts/_core_build.sh, every file of the C package): the in-place shmwin/_core*.so of the
# main suite is never touched, and the tests' children (PYTHONPATH = the copy's root) import
# the same build; SHMWIN_EXPECT_CORE makes the run check that.
# Run by scripts/test from the repository root, .venv ready; also on its own:
#   bash scripts/checks.d/50-sanitizers.sh [extra pytest arguments]
set -euo pipefail
source scripts/_core_build.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-sanitizers.XXXXXX")
trap 'rm -rf "$work"' EXIT

# run_sanitized NAME ENV... -- CFLAGS...: build, run the marked tests, fail on any report
run_sanitized() {
  local name=$1 copy="$work/$1" env=() started=$SECONDS
  shift
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  mkdir -p "$copy/reports"
  core_copy "$copy" -g -fno-omit-frame-pointer -fno-sanitize-recover=all -DSHMWIN_TEST "$@"
  echo "sanitizers: $name: $*"
  local status=0
  core_pytest "$copy" "${env[@]}" -- -n 2 -q --durations=10 -m sanitize "${files[@]}" "${extra[@]}" || status=$?
  if compgen -G "$copy/reports/*" >/dev/null; then
    echo "sanitizers: $name: reports:" >&2
    for report in "$copy"/reports/*; do echo "== $report" >&2; cat "$report" >&2; done
    status=1
  fi
  echo "sanitizers: $name: $((SECONDS - started)) s, exit $status"
  return "$status"
}

extra=("$@")
# The files that hold the marked tests (collected against this checkout's core: the markers do not
# depend on it). Each process of a run collects what it is given; under ASan (every Python object
# through its malloc) collecting all of tests/integration to keep the marked tests took 21.4 CPU-s
# a process, these 51 files 9.7, for the same 775 tests; three processes a run.
listing=$("$core_py" -m pytest -p no:cacheprovider --collect-only -q -m sanitize tests/integration 2>&1) ||
  { echo "$listing" >&2; echo "sanitizers: collecting the marked tests failed" >&2; exit 1; }
mapfile -t files < <(sed -n 's/::.*//p' <<<"$listing" | sort -u)
run_sanitized undefined UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$work/undefined/reports/ubsan" \
  -- -O2 -fsanitize=undefined,float-cast-overflow,float-divide-by-zero
# libasan first in every process (Python is not built with it); PyMem through malloc, so that
# the core's PyMem buffers are checked too; CPython leaks by design. A quarantine of 64 MiB, not
# the default 256: with every Python object through ASan's malloc, each of the hundreds of
# processes the tests start kept touching fresh pages for it (the native and fail-point tests of
# one file: 30 CPU-s with 256, 19 of them in the kernel; 22 with 64, as with 16 or 4); a freed
# buffer of the core still waits behind 64 MiB of other frees before its memory is reused.
run_sanitized address LD_PRELOAD="$("$core_cc" -print-file-name=libasan.so)" PYTHONMALLOC=malloc \
  ASAN_OPTIONS="detect_leaks=0:quarantine_size_mb=64:log_path=$work/address/reports/asan" -- -O1 -fsanitize=address
echo "sanitizers: no report"
