# Fetch the test suites of the installed pyrate-limiter and django-ratelimit (their sdists ship
# them: pyrate-limiter's tests/, django-ratelimit's django_ratelimit/tests.py) into
# .peer-suites/<dist>-<version>/, once: tests/integration/adapters/test_adapter_peer_suites.py
# runs them against ShmwinBucket and ShmwinCounterCache.
# Sourced by scripts/test (from the repository root, .venv ready); also runs on its own:
#   bash scripts/test.d/21-adapter-suites.sh
# A failed download stops scripts/test with pip's error: the peer suites are never skipped.
shmwin_fetch_adapter_suites() {
  local root dist version target download want
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  for dist in pyrate-limiter:tests django-ratelimit:django_ratelimit/tests.py; do
    want="${dist#*:}" dist="${dist%%:*}"
    version=$("$root/.venv/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist") ||
      { echo "adapter suites: $dist is not installed in .venv" >&2; return 1; }
    target="$root/.peer-suites/$dist-$version"
    [ -f "$target/.complete" ] && continue
    echo "adapter suites: downloading the $dist $version sdist (its tests) ..." >&2
    download=$(mktemp -d)
    if ! "$root/.venv/bin/python" -m pip download --quiet --no-binary :all: --no-deps \
        --dest "$download" "$dist==$version"; then
      rm -rf "$download"
      echo "adapter suites: could not download the $dist $version sdist (network?)" >&2
      return 1
    fi
    rm -rf "$target" && mkdir -p "$target"
    tar -xzf "$download"/*.tar.gz -C "$target" --strip-components=1 && rm -rf "$download" || return 1
    [ -e "$target/$want" ] || { echo "adapter suites: the $dist sdist has no $want" >&2; return 1; }
    touch "$target/.complete"
  done
}
shmwin_fetch_adapter_suites
