# The native core under the sanitizers: the tests marked `sanitize` (the native, fail-point,
# crash, bad-segment, keys and growth tests, and the bad-words fuzz: see tests/conftest.py)
# run against a core built with AddressSanitizer and UndefinedBehaviorSanitizer at once. Any
# report fails the run, even one from a child process: each process writes its reports to files
# under reports/ (ASan's log_path; UBSan's through scripts/_ubsan_reports.c, below), and a
# report ends the process. The build is a test build (-DSHMWIN_TEST): the fail-point tests run
# under both sanitizers here (and in the full run only here: 10-failpoints.sh runs the 2 of them
# not marked `sanitize`). The plain -O2 test build's code still runs them on the oldest and
# newest other CPython (30-other-pythons.sh) and as zig cc's glibc-2.17 build (20-wheels.sh); run
# 10-failpoints.sh for it on this one.
#
# One build, not one per sanitizer: the two runs, one after the other, were 445 s of the full
# run's critical path (UBSan 110 s, ASan the rest), the same 775 tests twice. With gcc, a
# combined build's UBSan reports ignore UBSAN_OPTIONS=log_path (the preloaded libasan owns the
# report path) and go to stderr, where a child's would be lost; so every process also preloads
# a shim that libubsan calls on each report (its weak __ubsan_on_report), which writes the report
# to a file of its own. The job first proves, on a probe library, that both kinds of report reach
# their files: a run whose reports could be lost fails before any test runs.
#
# The build goes into a copy of the package and tests in a temporary directory
# (scripts/_core_build.sh, every file of the C package): the in-place shmwin/_core*.so of the
# main suite is never touched, and the tests' children (PYTHONPATH = the copy's root) import
# the same build; SHMWIN_EXPECT_CORE makes the run check that.
# Run by scripts/test from the repository root, .venv ready; also on its own:
#   bash scripts/checks.d/50-sanitizers.sh [extra pytest arguments]
set -euo pipefail
source scripts/_core_build.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/shmwin-sanitizers.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$SECONDS
copy="$work/core" reports="$work/core/reports" probe="$work/probe"
mkdir -p "$probe/reports"
flags=(-O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=all
  -fsanitize=address,undefined,float-cast-overflow,float-divide-by-zero)
core_copy "$copy" "${flags[@]}" -DSHMWIN_TEST &
copied=$!
"$core_cc" -shared -fPIC -O1 -o "$work/ubsan_reports.so" scripts/_ubsan_reports.c \
  "$("$core_cc" -print-file-name=libubsan.so)"
# libasan first in every process (Python is not built with it), then the shim; CPython leaks by
# design. In the processes that run the tests (the xdist workers) every Python object and PyMem
# buffer goes through ASan's malloc (PYTHONMALLOC=malloc), so a core method that uses an object
# after its last reference, or overruns a small PyMem buffer, is caught wherever a test calls it.
# The processes those tests start (victims, readers: hundreds of short ones) keep CPython's own
# allocator (SHMWIN_CHILD_PYTHONMALLOC, set in the workers by tests/conftest.py): there ASan still
# checks the core's larger buffers and every malloc, and the core's methods they call are the
# ones the workers call too. Through malloc in every process the job took 280 s and 509 CPU-s;
# so, 214 s and 377 (pymalloc everywhere: 147 s and 243). A quarantine
# of 64 MiB, not the default 256: with every Python object through ASan's malloc, each of the
# hundreds of processes the tests start kept touching fresh pages for it (the native and
# fail-point tests of one file: 30 CPU-s with 256, 19 of them in the kernel; 22 with 64, as with
# 16 or 4); a freed buffer of the core still waits behind 64 MiB of other frees before reuse.
libasan=$("$core_cc" -print-file-name=libasan.so)
sanitized() {  # sanitized REPORTS_DIR: env, the environment of a process under both sanitizers
  env=("LD_PRELOAD=$libasan:$work/ubsan_reports.so" PYTHONMALLOC=malloc SHMWIN_CHILD_PYTHONMALLOC=pymalloc
    "ASAN_OPTIONS=detect_leaks=0:quarantine_size_mb=64:log_path=$1/asan"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1" "SHMWIN_UBSAN_REPORTS=$1")
}

# The probe: one overflow and one use after free, each in a process of its own, each must leave
# its report in a file (and end its process)
printf '%s\n' '#include <stdlib.h>' 'int overflow(int x) { return x + 2147483647; }' \
  'int freed(void) { volatile char *p = malloc(4); free((void *)p); return p[1]; }' >"$probe/probe.c"
"$core_cc" -shared -fPIC "${flags[@]}" -o "$probe/probe.so" "$probe/probe.c"
sanitized "$probe/reports"
for call in "overflow(5)" "freed()"; do
  if env "${env[@]}" "$core_py" -c "import ctypes; ctypes.CDLL('$probe/probe.so').$call" 2>/dev/null; then
    echo "sanitizers: the probe's $call was not stopped" >&2; exit 1
  fi
done
for kind in ubsan asan; do
  compgen -G "$probe/reports/$kind.*" >/dev/null ||
    { echo "sanitizers: the probe's $kind report reached no file: reports would be lost" >&2; exit 1; }
done
echo "sanitizers: the probe's UBSan and ASan reports each reached their file"

# The files that hold the marked tests (collected against this checkout's core: the markers do not
# depend on it). Each process of a run collects what it is given; under ASan (every Python object
# through its malloc) collecting all of tests/integration to keep the marked tests took 21.4 CPU-s
# a process, these 51 files 9.7, for the same 775 tests; three processes a run.
listing=$("$core_py" -m pytest -p no:cacheprovider --collect-only -q -m sanitize tests/integration 2>&1) ||
  { echo "$listing" >&2; echo "sanitizers: collecting the marked tests failed" >&2; exit 1; }
mapfile -t files < <(sed -n 's/::.*//p' <<<"$listing" | sort -u)
wait "$copied" || { echo "sanitizers: the build failed" >&2; exit 1; }
mkdir -p "$reports"
echo "sanitizers: address,undefined: ${flags[*]}"
status=0
sanitized "$reports"
core_pytest "$copy" "${env[@]}" -- -n 2 -q --durations=10 -m sanitize "${files[@]}" "$@" || status=$?
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitizers: reports:" >&2
  for report in "$reports"/*; do echo "== $report" >&2; cat "$report" >&2; done
  status=1
fi
echo "sanitizers: $((SECONDS - started)) s, exit $status"
[ "$status" = 0 ] && echo "sanitizers: no report"
exit "$status"
