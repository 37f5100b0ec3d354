# The native core's C hygiene: every file of its package (every .c under shmwin/, in
# shmwin/backends/shm/core/), as the production build and as the test build (-DSHMWIN_TEST),
# compiles with no warning under -Wall -Wextra -Wconversion (every narrowing or sign change
# spelled out, each cast that is one says why), and gcc's static analyser (-fanalyzer) finds
# nothing. Any new warning fails the run. Compile-only: nothing is written but to a temporary
# directory. Run by scripts/test from the repository root, .venv ready; also on its own:
#   bash scripts/checks.d/40-c-warnings.sh
# stage: beside the suite (one core at most: scripts/test runs it while pytest runs)
set -euo pipefail
source scripts/_core_build.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mapfile -t sources < <(core_sources)
for build in "" -DSHMWIN_TEST; do
  name=${build:-production}
  for source in "${sources[@]}"; do
    flags=(-std=gnu11 -fPIC -I"$core_include" $build -c "$source")
    object="$out/$(basename "$source" .c)"
    "$core_cc" "${flags[@]}" -O2 -Wall -Wextra -Wconversion -Werror -o "$object.o"
    "$core_cc" "${flags[@]}" -O1 -fanalyzer -Werror -o "$object.analyzed.o"
  done
  echo "c warnings: $name build, ${#sources[@]} files: $core_cc -Wall -Wextra -Wconversion -Werror; -fanalyzer -Werror"
done
echo "c warnings: none"
