# Sourced by scripts/test.d/20-peer-suites.sh and 21-adapter-suites.sh: fetch the sdist of an
# installed peer (its tests ship in it) into .peer-suites/<dist>-<version>/, once.
#   shmwin_fetch_sdist_tests LABEL DIST:PATH ...   PATH: what the sdist must hold (its tests)
# A failed download returns 1 with pip's error: the peer suites are never skipped.
shmwin_fetch_sdist_tests() {
  local label="$1" root pair dist want version target download
  shift
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for pair in "$@"; do
    want="${pair#*:}" dist="${pair%%:*}"
    version=$("$root/.venv/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist") ||
      { echo "$label: $dist is not installed in .venv" >&2; return 1; }
    target="$root/.peer-suites/$dist-$version"
    [ -f "$target/.complete" ] && continue
    echo "$label: downloading the $dist $version sdist (its tests) ..." >&2
    download=$(mktemp -d)
    if ! "$root/.venv/bin/python" -m pip download --quiet --no-binary :all: --no-deps \
        --dest "$download" "$dist==$version"; then
      rm -rf "$download"
      echo "$label: could not download the $dist $version sdist (network?)" >&2
      return 1
    fi
    rm -rf "$target" && mkdir -p "$target"
    tar -xzf "$download"/*.tar.gz -C "$target" --strip-components=1 && rm -rf "$download" || return 1
    [ -e "$target/$want" ] || { echo "$label: the $dist sdist has no $want" >&2; return 1; }
    touch "$target/.complete"
  done
}
