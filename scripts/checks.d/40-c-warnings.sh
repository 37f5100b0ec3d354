# The native core's C hygiene: every file of its package (every .c under shmwin/, in
# shmwin/backends/shm/core/), as the production build and as the test build (-DSHMWIN_TEST),
# compiles with no warning under -Wall -Wextra -Wconversion (every narrowing or sign change
# spelled out, each cast that is one says why), and gcc's static analyser (-fanalyzer) finds
# nothing. Any new warning fails the run. Compile-only: nothing is written but to a temporary
# directory. Run by scripts/test from the repository root, .venv ready; also on its own:
#   bash scripts/checks.d/40-c-warnings.sh
# The analyser runs once a file, on the test build: its paths are the production build's plus the
# fail points' (each file preprocessed both ways differs only by the lines the test build adds,
# once the fail-point macros are read as the production's no-ops: scripts/_test_build_superset.py
# checks that here, every run, and fails the job if it stops being so). The analyser was 91 % of
# this job's CPU: 137 of 151 CPU-s (production 55, test 82; module.c alone 43 and 64); once, 82.
# Of module.c's 60 analysed CPU-s, nearly all went to _core.LAYOUT's 336 inlined calls and branches,
# one path each to walk: a table and a loop now (module.c's layout_names), under 1. The job: 87
# CPU-s before, 38 after (both measured under load, 18-20 on the 2 cores).
# stage: beside the suite (one core at most: scripts/test runs it while pytest runs)
set -euo pipefail
source scripts/_core_build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mapfile -t sources < <(core_sources)
preprocessed=()
for build in "" -DSHMWIN_TEST; do
  name=${build:-production}
  for source in "${sources[@]}"; do
    flags=(-std=gnu11 -fPIC -I"$core_include" $build -c "$source")
    object="$out/$(basename "$source" .c)"
    "$core_cc" "${flags[@]}" -O2 -Wall -Wextra -Wconversion -Werror -o "$object.o"
    "$core_cc" -std=gnu11 -I"$core_include" $build -E -P "$source" -o "$object.$name.i"
    if [ -n "$build" ]; then
      "$core_cc" "${flags[@]}" -O1 -fanalyzer -Werror -o "$object.analyzed.o"
      preprocessed+=("$object.production.i" "$object.$name.i")
    fi
  done
  echo "c warnings: $name build, ${#sources[@]} files: $core_cc -Wall -Wextra -Wconversion -Werror"
done
"$core_py" scripts/_test_build_superset.py "${preprocessed[@]}"
echo "c warnings: the test build, ${#sources[@]} files: $core_cc -fanalyzer -Werror (a superset of the production build's code)"
echo "c warnings: none"
