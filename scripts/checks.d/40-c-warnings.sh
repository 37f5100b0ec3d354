# The native core's C hygiene: it compiles with no warning under -Wall -Wextra -Wconversion
# (every narrowing or sign change spelled out, each cast that is one says why), and gcc's
# static analyser (-fanalyzer) finds nothing. Any new warning fails the run. Compile-only:
# nothing is written but to a temporary directory. Run by scripts/test from the repository
# root, .venv ready; also on its own: bash scripts/checks.d/40-c-warnings.sh
set -euo pipefail
cc=${CC:-gcc}
include=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
flags=(-std=gnu11 -fPIC -I"$include" -c shmwin/_core.c)
echo "c warnings: $cc -Wall -Wextra -Wconversion -Werror"
"$cc" "${flags[@]}" -O2 -Wall -Wextra -Wconversion -Werror -o "$out/core.o"
echo "c warnings: $cc -fanalyzer -Werror"
"$cc" "${flags[@]}" -O1 -fanalyzer -Werror -o "$out/analyzed.o"
echo "c warnings: none"
