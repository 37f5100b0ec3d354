# Sourced by scripts/test.d/20-peer-suites.sh, 21-adapter-suites.sh and 22-metrics-suite.sh: fetch
# the sdist of an installed peer (its tests ship in it) into .peer-suites/<dist>-<version>/, once.
#   shmwin_fetch_sdist_tests LABEL DIST:PATH ...   PATH: what the sdist must hold (its tests)
# The installed versions are read in one Python process, and the missing sdists downloaded at once
# by scripts/_fetch_sdists.py (from the index's JSON listing, in parallel, sha256 checked): pip
# download took a process and an isolated build env a sdist, one after another (31 s and 13
# CPU-s for the five). If that fails (an index without the JSON listing, ...), pip download does
# it as before. A failed download returns 1 with the error: the peer suites are never skipped.
shmwin_fetch_sdist_tests() {
  local label="$1" root pair dist want version target download wanted=() missing=() versions=()
  shift
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for pair in "$@"; do wanted+=("${pair%%:*}"); done
  mapfile -t versions < <("$root/.venv/bin/python" -c 'import importlib.metadata as m, sys
for dist in sys.argv[1:]:
    print(m.version(dist))' "${wanted[@]}") && [ ${#versions[@]} = ${#wanted[@]} ] ||
    { echo "$label: one of ${wanted[*]} is not installed in .venv" >&2; return 1; }
  for i in "${!wanted[@]}"; do
    [ -f "$root/.peer-suites/${wanted[$i]}-${versions[$i]}/.complete" ] || missing+=("${wanted[$i]}==${versions[$i]}")
  done
  [ ${#missing[@]} = 0 ] && return 0
  echo "$label: downloading the sdists of ${missing[*]} (their tests) ..." >&2
  download=$(mktemp -d)
  if ! "$root/.venv/bin/python" "$root/scripts/_fetch_sdists.py" "$download" "${missing[@]}"; then
    echo "$label: falling back to pip download" >&2
    rm -rf "$download" && download=$(mktemp -d)
    if ! "$root/.venv/bin/python" -m pip download --quiet --no-binary :all: --no-deps \
        --dest "$download" "${missing[@]}"; then
      rm -rf "$download"
      echo "$label: could not download the sdists of ${missing[*]} (network?)" >&2
      return 1
    fi
  fi
  for i in "${!wanted[@]}"; do
    dist=${wanted[$i]} version=${versions[$i]} want=${*:$((i + 1)):1} want=${want#*:}
    target="$root/.peer-suites/$dist-$version"
    [ -f "$target/.complete" ] && continue
    # the sdist's file name: the project's name with -, _ or . as it was published, any case
    sdist=$(find "$download" -maxdepth 1 -iname "$(sed 's/[-_.]/?/g' <<<"$dist")-$version.tar.gz" | head -1)
    [ -n "$sdist" ] || { echo "$label: no sdist of $dist $version was downloaded" >&2; rm -rf "$download"; return 1; }
    rm -rf "$target" && mkdir -p "$target"
    tar -xzf "$sdist" -C "$target" --strip-components=1 || { rm -rf "$download"; return 1; }
    [ -e "$target/$want" ] || { echo "$label: the $dist sdist has no $want" >&2; rm -rf "$download"; return 1; }
    touch "$target/.complete"
  done
  rm -rf "$download"
}
