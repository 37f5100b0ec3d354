# Sourced by scripts/_setup.sh, scripts/_py314.sh, scripts/_emulated.sh, scripts/wheels and the
# checks that make venvs: the per-machine cache of what the runs need but that depends only on pins,
# never on the checkout (as pre-commit's ~/.cache/pre-commit and tox's do). A fresh clone (CI runs
# one on the developers' machine after each session) made every one of them again, 2.5 to 3 CPU-min
# a run: the Debian sid root of CPython 3.14, Debian's aarch64 CPythons, .venv-tools, the venvs of
# the other CPythons and of the docs, uv for .venv.
#
#   SHMWIN_DEV_CACHE=DIR        the cache's root (default ${XDG_CACHE_HOME:-$HOME/.cache}/shmwin-dev)
#   SHMWIN_DEV_CACHE=off (or 0) every one built in the checkout, once per clone, as before
#   rm -rf ~/.cache/shmwin-dev  clears it (each entry is made again when next asked for)
#
# An entry is a folder named by its kind and a hash of everything that decides its contents (the
# caller's key: pins, package list, suite, Python's path and version; plus the builder function's
# own text, so an edit of how it is built is a new entry). It is built under a lock (flock: a second
# run from another clone waits, then uses it) at its final path (venvs are not relocatable), and
# marked complete LAST (.complete, holding the key): a folder without it is a build cut short, and
# is removed and built again. Entries that do not rest on exact pins (a `pkg>=x` range, Debian sid)
# go stale after MAX_AGE_DAYS (7: the runs still meet new releases); a stale entry is built again
# as the next generation (NAME-HASH.g2 beside .g1), never in place: a run that started on .g1 keeps
# it, and a generation is removed only once a newer one has itself been superseded. An entry no run
# has asked for in 30 days (another key's: old pins, an old root's venv) is removed, under its lock,
# when another is asked for: its lock file's time is its last use. The cache holds tools and
# dependencies only, never the checkout's build of shmwin nor a test's result.

# shmwin_devcache_root: print the cache's root, or nothing when SHMWIN_DEV_CACHE is off or 0, or
# when it cannot be made or written there (said on stderr: the checkout is used, as with off)
shmwin_devcache_root() {
  local dir
  case "${SHMWIN_DEV_CACHE:-}" in
    off | 0) return 0 ;;
    "") dir="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/shmwin-dev" ;;
    *) dir="$SHMWIN_DEV_CACHE" ;;
  esac
  if mkdir -p "$dir" 2>/dev/null && [ -w "$dir" ]; then
    echo "$dir"
  else
    echo "dev cache: cannot write $dir: building in the checkout (SHMWIN_DEV_CACHE=off)" >&2
  fi
}

# shmwin_devcache [--link] LOCAL NAME MAX_AGE_DAYS KEY BUILDER [ARGS...]: print the path of a
# complete entry, after `BUILDER ARGS... PATH` has made it at PATH if needed (PATH does not exist
# then; the builder's output goes to stderr; a failed build is removed and the function fails).
# LOCAL is the path in the checkout that the scripts name: with the cache off the entry is built
# there (no age rule: a clone's own, as before), and with --link it becomes a symlink to the entry
# otherwise. MAX_AGE_DAYS 0: never stale (exact pins).
shmwin_devcache() {
  local link=0
  if [ "$1" = --link ]; then link=1; shift; fi
  local local_path="$1" name="$2" max_age_days="$3" key="$4" builder="$5" cache
  shift 5
  # the builder's own text is part of the key: a change of how an entry is built makes another
  if declare -F "$builder" >/dev/null; then key="$key"$'\n'"$(declare -f "$builder")"; fi
  cache=$(shmwin_devcache_root)
  if [ -z "$cache" ]; then
    [ -L "$local_path" ] && rm -f "$local_path"  # a link left by a run with the cache on
    mkdir -p "$(dirname "$local_path")"
    _shmwin_devcache_build "$local_path.lock" "$local_path" 0 "$key" "$builder" "$@" >/dev/null || return 1
    echo "$local_path"
    return 0
  fi
  local base entry
  base="$cache/$name-$(printf '%s' "$key" | sha1sum | cut -c1-12)"
  mkdir -p "$cache"
  entry=$(_shmwin_devcache_build "$base.lock" "$base" "$max_age_days" "$key" "$builder" "$@") || return 1
  touch "$base.lock"  # its last use
  _shmwin_devcache_prune "$cache"
  if [ "$link" = 1 ]; then
    [ -L "$local_path" ] || rm -rf "$local_path"  # a clone's own, from a run with the cache off
    mkdir -p "$(dirname "$local_path")"
    if [ "$(readlink "$local_path")" != "$entry" ]; then  # swapped whole: another job may read it
      ln -sfn "$entry" "$local_path.$$" && mv -T "$local_path.$$" "$local_path"
    fi
  fi
  echo "$entry"
}

# _shmwin_devcache_build LOCK BASE MAX_AGE_DAYS KEY BUILDER [ARGS...]: under LOCK, print a complete
# entry for KEY, built if needed. MAX_AGE_DAYS 0: BASE itself, rebuilt only when cut short or made
# from another key; otherwise the newest of BASE.g1, BASE.g2, ... younger than that, or the next one.
_shmwin_devcache_build() {
  local lock="$1" base="$2" max_age_days="$3" key="$4" builder="$5"
  shift 5
  (
    flock 8
    local entry="" gen=0 dir n generations=()
    if [ "$max_age_days" = 0 ]; then
      entry="$base"
      if [ -f "$entry/.complete" ] && [ "$(cat "$entry/.complete")" = "$key" ]; then echo "$entry"; exit 0; fi
    else
      for dir in "$base".g*; do
        [ -d "$dir" ] || continue
        n="${dir##*.g}"
        [[ "$n" =~ ^[0-9]+$ ]] || continue
        # no .complete under the lock: a build that was killed, never one still going
        if [ ! -f "$dir/.complete" ]; then rm -rf "$dir"; continue; fi
        generations+=("$n")
      done
      if [ ${#generations[@]} -gt 0 ]; then
        mapfile -t generations < <(printf '%s\n' "${generations[@]}" | sort -n)
        gen="${generations[-1]}"
        # fresh: made less than MAX_AGE_DAYS ago (the .complete file's time is the build's end)
        if [ -z "$(find "$base.g$gen/.complete" -mmin +$((max_age_days * 1440)))" ]; then
          echo "$base.g$gen"
          exit 0
        fi
      fi
      entry="$base.g$((gen + 1))"
    fi
    rm -rf "$entry"
    echo "dev cache: building ${entry/#$HOME/\~} ..." >&2
    if ! "$builder" "$@" "$entry" >&2; then
      rm -rf "$entry"
      echo "dev cache: building $entry failed" >&2
      exit 1
    fi
    [ -d "$entry" ] || { echo "dev cache: $builder made no $entry" >&2; exit 1; }
    printf '%s' "$key" >"$entry/.complete"
    # the generation before this one stays (a run may have started on it); older ones go
    if [ "$max_age_days" != 0 ] && [ ${#generations[@]} -gt 1 ]; then
      for n in "${generations[@]:0:${#generations[@]}-1}"; do rm -rf "$base.g$n"; done
    fi
    echo "$entry"
  ) 8>"$lock"
}

# _shmwin_devcache_prune CACHE: remove the entries of CACHE whose lock file is over 30 days old
# (no run has asked for them since), each under its lock, skipped if held
_shmwin_devcache_prune() {
  local lock
  while read -r lock; do
    [ -n "$lock" ] || continue
    (
      flock -n 8 || exit 0
      rm -rf "${lock%.lock}" "${lock%.lock}".g* && rm -f "$lock"
    ) 8>>"$lock"
  done < <(find "$1" -maxdepth 1 -name '*.lock' -mtime +30 2>/dev/null)
}
