"""scripts/_devcache.sh, the per-machine cache of the runs' tools (the 3.14 root, .venv-tools, the
other CPythons' venvs, ...), driven with a trivial builder (mkdir) from real bash processes: an
entry is built once, under a lock, at its final path, and marked complete last; a build cut
short is removed and made again; a stale one is made again as the next generation, the one before
it kept; SHMWIN_DEV_CACHE=off builds in the checkout's own path."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "scripts" / "_devcache.sh"

# BUILD: the builder makes its folder, says so in $LOG, then waits while $HOLD names a file that
# does not exist (the test's hand on it: never a timer). The driver prints the entry's path.
DRIVER = r"""
set -euo pipefail
source "$1"
build() {
  mkdir "$1" && echo "built $1" >>"$LOG"
  while [ -n "${HOLD:-}" ] && [ ! -e "$HOLD" ]; do sleep 0.01; done
  [ -z "${FAIL:-}" ]
}
shmwin_devcache ${LINK:+--link} "$LOCAL" tools "${AGE:-7}" "${KEY:-pins a==1}" build
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, SHMWIN_DEV_CACHE=str(tmp_path / "cache"), LOG=str(tmp_path / "log"),
               LOCAL=str(tmp_path / "checkout" / ".venv-tools"))  # fmt: skip
    env.update(extra)
    return env


def _start(tmp_path: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", "-c", DRIVER, "driver", str(HELPER)], env=_env(tmp_path, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def _run(tmp_path: Path, **extra: str) -> Path:
    proc = _start(tmp_path, **extra)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return Path(out.strip())


def _builds(tmp_path: Path) -> list[str]:
    log = tmp_path / "log"
    return log.read_text().splitlines() if log.exists() else []


def _until(predicate, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30  # a bound on a hang, not a timing under test
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def _waiting_on(lock: Path) -> bool:
    """Whether a process is blocked in flock on LOCK (/proc/locks marks a waiter with "->")."""
    inode = f":{lock.stat().st_ino} "
    locks = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and "FLOCK" in line and inode in line for line in locks)


def test_an_entry_is_built_once_and_marked_complete_last(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert first.parent == tmp_path / "cache"
    assert first.name.startswith("tools-") and first.name.endswith(".g1")
    assert (first / ".complete").read_text().startswith("pins a==1")
    assert _run(tmp_path) == first and _builds(tmp_path) == [f"built {first}"]
    # another key (other pins, or another builder text) is another entry
    other = _run(tmp_path, KEY="pins a==2")
    assert other != first and len(_builds(tmp_path)) == 2


def test_the_checkout_path_links_to_the_entry(tmp_path: Path) -> None:
    local = tmp_path / "checkout" / ".venv-tools"
    local.mkdir(parents=True)
    (local / "old").touch()  # a clone's own, from a run with the cache off: replaced by the link
    entry = _run(tmp_path, LINK="1")
    assert local.is_symlink() and local.resolve() == entry.resolve()


def test_a_build_cut_short_is_removed_and_built_again(tmp_path: Path) -> None:
    hold = tmp_path / "go"
    proc = _start(tmp_path, HOLD=str(hold))
    _until(lambda: len(_builds(tmp_path)) == 1, "the first build started")
    os.killpg(proc.pid, signal.SIGKILL)  # the run is killed mid-build: no .complete
    proc.communicate(timeout=60)
    half = Path(_builds(tmp_path)[0].split(" ", 1)[1])
    assert half.is_dir() and not (half / ".complete").exists()
    entry = _run(tmp_path)
    assert len(_builds(tmp_path)) == 2 and (entry / ".complete").exists()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if p.is_dir()) == [entry.name]


def test_two_runs_at_once_build_once_the_second_waits_then_uses_it(tmp_path: Path) -> None:
    hold = tmp_path / "go"
    first = _start(tmp_path, HOLD=str(hold))
    try:
        _until(lambda: len(_builds(tmp_path)) == 1, "the first build started")
        second = _start(tmp_path, HOLD=str(hold))
        try:
            lock = next((tmp_path / "cache").glob("tools-*.lock"))
            _until(lambda: _waiting_on(lock), "the second run waits on the lock")
        finally:
            hold.touch()
        out_second, err_second = second.communicate(timeout=60)
    finally:
        hold.touch()
        out_first, err_first = first.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, err_first + err_second
    assert out_first == out_second and len(_builds(tmp_path)) == 1


def test_a_stale_entry_is_built_again_as_the_next_generation(tmp_path: Path) -> None:
    def age(entry: Path, days: int) -> None:
        then = time.time() - days * 86400
        os.utime(entry / ".complete", (then, then))

    g1 = _run(tmp_path)
    age(g1, 6)
    assert _run(tmp_path) == g1  # 6 days old: still fresh
    age(g1, 8)
    g2 = _run(tmp_path)
    assert g2.name == g1.name[: -len("g1")] + "g2" and len(_builds(tmp_path)) == 2
    assert (g1 / ".complete").exists()  # a run that started on it keeps it
    age(g2, 8)
    g3 = _run(tmp_path)
    assert g3.name.endswith(".g3") and g2.is_dir() and not g1.exists()
    # exact pins (MAX_AGE_DAYS 0) never go stale
    pinned = _run(tmp_path, AGE="0", KEY="exact")
    age(pinned, 30)
    assert _run(tmp_path, AGE="0", KEY="exact") == pinned and len(_builds(tmp_path)) == 4


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    proc = _start(tmp_path, FAIL="1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "failed" in err
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]


def test_off_builds_in_the_checkout_as_before(tmp_path: Path) -> None:
    local = tmp_path / "checkout" / ".venv-tools"
    for off in ("off", "0"):
        entry = _run(tmp_path, SHMWIN_DEV_CACHE=off, LINK="1")
        assert entry == local and local.is_dir() and not local.is_symlink()
        assert (local / ".complete").exists() and not (tmp_path / "cache").exists()
    assert len(_builds(tmp_path)) == 1
    # a link left by a run with the cache on gives way to the clone's own folder
    cached = _run(tmp_path, LINK="1")
    assert local.is_symlink() and local.resolve() == cached.resolve()
    assert _run(tmp_path, SHMWIN_DEV_CACHE="off", LINK="1") == local and not local.is_symlink()


def test_an_entry_no_run_asked_for_in_30_days_goes_when_another_is_asked_for(tmp_path: Path) -> None:
    old = _run(tmp_path, KEY="old pins")
    kept = _run(tmp_path, KEY="pins in use", AGE="0")
    lock = next(p for p in (tmp_path / "cache").glob("tools-*.lock") if old.name.startswith(p.stem))
    then = time.time() - 31 * 86400
    os.utime(lock, (then, then))  # its last use, 31 days ago
    os.utime(kept / ".complete", (then, then))  # built long ago, but asked for below: kept
    _run(tmp_path, KEY="pins in use", AGE="0")
    assert not old.exists() and not lock.exists() and kept.is_dir()


def test_a_cache_that_cannot_be_written_builds_in_the_checkout(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.touch()  # the cache's root would be under a file: mkdir fails (even as root)
    proc = _start(tmp_path, SHMWIN_DEV_CACHE=str(blocker / "cache"), LINK="1")
    out, err = proc.communicate(timeout=60)
    local = tmp_path / "checkout" / ".venv-tools"
    assert proc.returncode == 0 and Path(out.strip()) == local and not local.is_symlink(), err
    assert "cannot write" in err
