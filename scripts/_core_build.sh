# Sourced by the jobs that need another build of the native core (scripts/checks.d/10-failpoints.sh,
# 50-sanitizers.sh): build shmwin._core from every .c under shmwin/ (the C package in
# shmwin/backends/shm/core/), into a copy of the package, and run pytest against that copy.
#
#   core_build OUT.so ROOT CFLAGS...     compile ROOT's core ("": this checkout's) into OUT.so
#   core_copy DIR CFLAGS...              copy shmwin/ and tests/ into DIR, the core built with CFLAGS
#                                        in place of shmwin/_core*.so (the checkout's is never touched)
#   core_bytecode PYTHON DIR             compile DIR's shmwin/ and tests/ to PYTHON's bytecode
#   core_pytest DIR ENV... -- ARGS...    pytest ARGS from DIR, PYTHONPATH = DIR (children inherit it),
#                                        SHMWIN_EXPECT_CORE = DIR's core (tests/conftest.py checks it)
#
# The test build is -DSHMWIN_TEST: fail points (failpoint(), failpoint_fired(), SHMWIN_FAILPOINT
# read by children) compiled in. The production build (setup.py) has none of them.
# Run from the repository root, .venv ready.
core_root=$(pwd)
core_py="$core_root/.venv/bin/python"
core_cc=${CC:-gcc}
core_include=$("$core_py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
core_suffix=$("$core_py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')

core_sources() {  # every .c of the native core under $1 (default: this checkout), sorted
  find "${1:-$core_root}/shmwin" -name '*.c' | LC_ALL=C sort
}

# core_bytecode PYTHON DIR: compile DIR's shmwin/ and tests/ to bytecode once, for PYTHON's
# version. Each of the thousands of Python processes the tests start imports shmwin (and the
# children tests/support/); with PYTHONDONTWRITEBYTECODE set (as on the CI machine) none of them
# writes what it compiled, so each compiled every module again: `python -c "import shmwin"` took
# 0.25 CPU-s from source, 0.17 from bytecode, the CLI's start 0.35 and 0.29. Imports still check
# each file's mtime against its bytecode, so a file edited after this is compiled afresh.
core_bytecode() {
  "$1" -m compileall -q -j 0 "$2/shmwin" "$2/tests" >/dev/null
}

# core_build OUT.so ROOT CFLAGS...: ROOT's sources (default this checkout's) compiled each to an
# object at once, the cores sharing them, then linked: one gcc over the 27 files compiled them one
# after another (12 s wall for the UBSan build, on a critical path of the full run).
core_build() {
  local out=$1 root=${2:-$core_root} objects source status=0 i=0 pids=()
  shift 2
  objects=$(mktemp -d)
  while read -r source; do
    i=$((i + 1))  # (not in the background command's words: those expand in its subshell)
    "$core_cc" -c -fPIC -std=gnu11 "$@" -I"$core_include" "$source" -o "$objects/$i.o" &
    pids+=($!)
  done < <(core_sources "$root")
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [ "$status" = 0 ]; then "$core_cc" -shared "$@" "$objects"/*.o -o "$out" || status=1; fi
  rm -rf "$objects"
  return "$status"
}

core_copy() {
  local dir=$1
  shift
  mkdir -p "$dir"
  cp -r "$core_root/shmwin" "$core_root/tests" "$core_root/pyproject.toml" "$core_root/README.md" "$dir/"
  find "$dir" -name '__pycache__' -prune -exec rm -rf {} +
  rm -f "$dir"/shmwin/_core*.so
  core_build "$dir/shmwin/_core$core_suffix" "$dir" "$@"
  core_bytecode "$core_py" "$dir"
}

core_pytest() {
  local dir=$1 env=()
  shift
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  (cd "$dir" && env "${env[@]}" PYTHONPATH="$dir" SHMWIN_EXPECT_CORE="$dir/shmwin/_core$core_suffix" \
    "$core_py" -m pytest -p no:cacheprovider "$@")
}
