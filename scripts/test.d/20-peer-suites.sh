# Fetch the test suites of the installed limits and Flask-Limiter (their sdists ship them) into
# .peer-suites/<dist>-<version>/, once: tests/integration/limits/test_peer_suites.py runs them against shm://.
# Sourced by scripts/test (from the repository root, .venv ready); also runs on its own:
#   bash scripts/test.d/20-peer-suites.sh
# A failed download stops scripts/test with pip's error: the peer suites are never skipped.
shmwin_fetch_peer_suites() {
  local root dist version target download
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  for dist in limits flask-limiter; do
    version=$("$root/.venv/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist") ||
      { echo "peer suites: $dist is not installed in .venv" >&2; return 1; }
    target="$root/.peer-suites/$dist-$version"
    [ -f "$target/.complete" ] && continue
    echo "peer suites: downloading the $dist $version sdist (its tests) ..." >&2
    download=$(mktemp -d)
    if ! "$root/.venv/bin/python" -m pip download --quiet --no-binary :all: --no-deps \
        --dest "$download" "$dist==$version"; then
      rm -rf "$download"
      echo "peer suites: could not download the $dist $version sdist (network?)" >&2
      return 1
    fi
    rm -rf "$target" && mkdir -p "$target"
    tar -xzf "$download"/*.tar.gz -C "$target" --strip-components=1 && rm -rf "$download" || return 1
    [ -d "$target/tests" ] || { echo "peer suites: the $dist sdist has no tests/ directory" >&2; return 1; }
    touch "$target/.complete"
  done
}
shmwin_fetch_peer_suites
