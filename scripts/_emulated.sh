# Sourced by scripts/wheels: aarch64 CPythons to run its aarch64 wheels with, under qemu-user (Debian's
# qemu-user package; no binfmt_misc needed: every aarch64 program is started through qemu-aarch64).
# They are Debian's own builds, the only aarch64 CPythons a Debian mirror has: 3.11 (bookworm),
# 3.13 (trixie) and 3.14 (sid), each unpacked with its libraries from the .debs into a root of its
# own, through a private apt configuration (the machine's apt state is not touched). Each root is
# made once per machine, in the dev cache (scripts/_devcache.sh: ~/.cache/shmwin-dev/aarch64-python3.X-*; made
# again once 7 days old: the suites get point releases, sid moves); SHMWIN_DEV_CACHE=off: once per
# clone, in .venv-tools/aarch64/<suite>/.
SHMWIN_EMULATED_PYTHONS="3.11:bookworm 3.13:trixie 3.14:sid"
source "$(dirname "${BASH_SOURCE[0]}")/_devcache.sh"

# the Debian mirror this machine's apt uses (deb822 .sources or a one-line sources.list); always
# status 0 (either file may be missing: under pipefail and errexit, an assignment from it ended
# the caller), so an empty answer is the caller's to report
shmwin_debian_mirror() {
  { sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
    sed -n 's/^deb  *\(\[[^]]*\] *\)\{0,1\}\([a-z]*:[^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null
  } | grep -v -e security -e '^$' | head -1 || true
}

# shmwin_emulated_root 3.13: print the root holding Debian's aarch64 python3.13 (made once), or
# nothing if no Debian suite here has that version.
shmwin_emulated_root() {
  local version="$1" entry suite="" mirror
  for entry in $SHMWIN_EMULATED_PYTHONS; do [ "${entry%%:*}" = "$version" ] && suite="${entry#*:}"; done
  [ -n "$suite" ] || return 0
  mirror=$(shmwin_debian_mirror)
  [ -n "$mirror" ] || { echo "wheels: no Debian mirror in /etc/apt/sources*" >&2; return 1; }
  shmwin_devcache "$ROOT/.venv-tools/aarch64/$suite" "aarch64-python$version" 7 "$suite $version $mirror" \
    _shmwin_emulated_build "$suite" "$version" "$mirror"
}

# _shmwin_emulated_build SUITE VERSION MIRROR ROOT: unpack the suite's aarch64 pythonVERSION into ROOT
_shmwin_emulated_build() {
  local suite="$1" version="$2" mirror="$3" root="$4" apt deb dir
  echo "wheels: unpacking Debian $suite's aarch64 python$version into $root ..." >&2
  apt=$(mktemp -d)
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/preferences.d" "$root"
  : >"$apt/status"
  echo "deb [arch=arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
    "$mirror $suite main" >"$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::Etc::PreferencesParts=$apt/preferences.d" -o "Dir::State::Lists=$apt/lists"
    -o "Dir::Cache=$apt/cache" -o "Dir::State::status=$apt/status" -o APT::Architecture=arm64
    -o APT::Architectures::=arm64 -o Debug::NoLocking=1)
  if ! { apt-get "${opts[@]}" -qq update >"$apt/log" 2>&1 &&
      apt-get "${opts[@]}" -qq -y install --download-only "python$version" "python$version-venv" >>"$apt/log" 2>&1; }; then
    cat "$apt/log" >&2; rm -rf "$apt"; echo "wheels: could not fetch Debian $suite's aarch64 python$version" >&2; return 1
  fi
  for deb in "$apt"/cache/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
  rm -rf "$apt"
  for dir in bin sbin lib; do  # merged /usr (trixie): /lib is base-files' symlink, not in a .deb here
    [ -e "$root/$dir" ] || [ ! -d "$root/usr/$dir" ] || ln -s "usr/$dir" "$root/$dir"
  done
  # The standard library's bytecode: Debian compiles it when the package is configured (its
  # postinst), which unpacking skips, so each emulated process compiled every module it
  # imported, under qemu (12 to 15 CPU-s to make a 3.13 or 3.14 venv). Bytecode is the same
  # on every machine: this machine's CPython of that version compiles it, once a root.
  local native; native=$(shmwin_find_python "$version")
  if [ -n "$native" ]; then "$native" -m compileall -q -j 0 "$root/usr/lib/python$version" >/dev/null || true; fi
}
