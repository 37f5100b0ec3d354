# The unit, contract, native and fail-point tests on every supported CPython other than .venv's
# (the fail-point tests on the oldest and newest of them: below)
# (scripts/_pythons.sh finds them: pyenv's, or python3.X on PATH; 3.14 is Debian sid's, in a root
# of its own entered through scripts/py314, where the venv's packages come from pip downloads made
# outside it), each against an extension built
# for that version by setup.py with that interpreter (build_ext --inplace: the .so's name carries
# the version, so each sits beside .venv's), as the core's test build (-DSHMWIN_TEST: fail points
# compiled in, so the fail-point tests run there too; .venv's own core stays the production one).
# One venv per version, .venv-py3.X/, holding only what these tests import: a link into the dev
# cache (scripts/_devcache.sh: made once per machine and Python, and again once 7 days old, DEPS
# being ranges); SHMWIN_DEV_CACHE=off: made in the checkout, once per clone. The extension and the
# bytecode of shmwin and tests are built in the checkout, every run. A CPython not found here is
# said and skipped; any test failure fails the job.
#   bash scripts/checks.d/30-other-pythons.sh [pytest args]
#   SHMWIN_ONLY_PYTHONS=3.14 bash scripts/checks.d/30-other-pythons.sh     one version only
# stage: beside the suite (niced, from the moment .venv is ready: the full run at f175cc5 left 195
# core-seconds idle beside the suite, whose workers wait on processes and servers, while this job's
# 286 CPU-s ran after it, beside the sanitizer run, on the run's critical path)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
source scripts/_pythons.sh
# (and the key cache's races: its reference counts are the interpreter's, 3.14 counting differently)
TESTS=(tests/unit tests/contract tests/integration/core/test_native.py tests/integration/core/failpoints
  tests/integration/core/test_keycache_races.py)
# not the contract folder's tests of the repository itself (its scripts' lanes and dev cache, its
# files' sizes, the sanitizer job's allocators): what they check is the same on every Python,
# and .venv's run has them (about 10 CPU-s a version)
TESTS+=(--ignore=tests/contract/test_ci_lanes.py --ignore=tests/contract/test_devcache.py
  --ignore=tests/contract/test_sizes.py --ignore=tests/contract/test_sanitizer_allocators.py)
# The fail-point tests (every section of the core struck after every store, ~50 CPU-s a version)
# on the oldest and the newest of these CPythons; the ones between run everything else. The
# core's C is the same on every version: what differs is the CPython API it calls, which the
# native, key-cache and contract tests exercise on each. The fail-point tests run on .venv's
# CPython too, as the sanitizer job's build and as zig cc's glibc-2.17 build (20-wheels.sh).
# SHMWIN_FAILPOINTS_EVERY_PYTHON=1 runs them on each version, as before (100 CPU-s more).
mapfile -t listed < <(shmwin_versions)
ends=" ${listed[0]:-} ${listed[${#listed[@]}-1]:-} "
# setup.py needs setuptools 77+ (pyproject's license field); the contract runs on redis too, and
# the rate tests compare with limits' parser
DEPS="setuptools>=77 numpy>=1.23 pytest>=7 pytest-xdist>=3 redis>=4.2 limits>=4.1"
# 3.12+ warns at every fork of a process with threads (numpy's BLAS pool): the fail-point tests fork
# hundreds of times, on purpose; pytest-asyncio's option is unknown without it, and unneeded here
QUIET=(-W "ignore:This process:DeprecationWarning" -W "ignore::pytest.PytestConfigWarning")
main=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# _other_pythons_venv PYTHON VERSION DIR: a venv of PYTHON with DEPS in DIR
_other_pythons_venv() {
  local py="$1" version="$2" env_dir="$3" enter
  read -r -a enter <<<"$(shmwin_python_enter "$py")"
  echo "other pythons: making $env_dir ($py) ..." >&2
  # Without pip (ensurepip: 2 to 3 CPU-s a venv): .venv's pip installs into it. For this
  # machine's Pythons it runs under the venv's own (pip --python): a real install, 1.2 CPU-s
  # less than ensurepip and the venv's pip; the root (no network) gets its wheels from it below.
  "$py" -m venv --without-pip "$env_dir"
  if [ ${#enter[@]} = 0 ]; then
    # shellcheck disable=SC2086
    .venv/bin/python -m pip --python "$env_dir/bin/python" install -q --no-compile --disable-pip-version-check \
      $DEPS >"$env_dir/install.log" 2>&1 &&
      shmwin_compile_site "$env_dir/bin/python" "$env_dir/lib/python$version/site-packages"
  else
    # shellcheck disable=SC2086
    shmwin_py314_install .venv/bin/python "$env_dir" $DEPS >"$env_dir/install.log" 2>&1
  fi || { cat "$env_dir/install.log" >&2; echo "other pythons: pip failed for $version" >&2; return 1; }
}
started=$SECONDS ran=() skipped=()
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
versions=$(shmwin_versions)
for version in $versions; do
  [ "$version" = "$main" ] && continue
  py=$(shmwin_find_python "$version")
  if [ -z "$py" ]; then
    echo "other pythons: no CPython $version here: skipped" >&2
    skipped+=("$version")
    continue
  fi
  read -r -a enter <<<"$(shmwin_python_enter "$py")"  # the root's 3.14: its venv runs in the root
  # the key: the Python's real path (the root's 3.14: the root's own, its launcher being the clone's)
  identity=$(readlink -f "$py")
  [ ${#enter[@]} = 0 ] || identity="$(readlink -f "$SHMWIN_PY314_DIR/root")/usr/bin/python$version"
  env_dir=".venv-py$version"
  shmwin_devcache --link "$env_dir" "venv-py$version" 7 "$identity $DEPS" \
    _other_pythons_venv "$py" "$version" >/dev/null
  CFLAGS="${CFLAGS:-} -DSHMWIN_TEST" "${enter[@]}" "$env_dir/bin/python" setup.py -q build_ext --inplace --force \
    >"$logs/build-$version.log" 2>&1 ||
    { cat "$logs/build-$version.log" >&2; echo "other pythons: the extension failed to build for $version" >&2; exit 1; }
  # this version's bytecode beside .venv's (scripts/_core_build.sh's core_bytecode says why)
  "${enter[@]}" "$env_dir/bin/python" -m compileall -q -j 0 shmwin tests >/dev/null
  marks=()
  if [ "${SHMWIN_FAILPOINTS_EVERY_PYTHON:-0}" != 1 ] && [[ "$ends" != *" $version "* ]]; then
    marks=(-m "not failpoints")
  fi
  echo "other pythons: $version ($py)${marks[*]:+, not the fail-point tests (on ${ends:1:-1} only)}"
  "${enter[@]}" "$env_dir/bin/python" -m pytest -n auto -q --durations=5 -p no:cacheprovider "${QUIET[@]}" \
    "${marks[@]}" "${TESTS[@]}" "$@"
  ran+=("$version")
done
echo "other pythons: ran on ${ran[*]:-none}; skipped ${skipped[*]:-none}; in $((SECONDS - started)) s"
