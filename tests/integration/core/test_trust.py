"""The trust model at the segment's door: whose segment, which mode, what sits at the path,
what a full /dev/shm says -- and gunicorn's --user/--group with real servers.

Tests that need root (another uid, a private /dev/shm, gunicorn's privilege drop) say so
with the marks of tests/support/rootenv.py and are skipped, with the reason, elsewhere."""

from __future__ import annotations

import os
import select
import stat
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.rootenv import (
    NOBODY,
    describe,
    needs_namespace,
    needs_root,
    needs_setpriv,
    python_argv,
    run_as,
    run_in_namespace,
)
from support.servers import Server, free_port, hammer, python_module

import shmwin
from shmwin import Limiter, Window
from shmwin.backends.shm.segment import Segment, check_name, on_behalf_of, path_of, unlink_prefix


def _bytes_of(name: str) -> bytes:
    """The segment's data: keyed segments are sparse (sized for their capacity), so only the
    extents that hold data are read, with their offsets."""
    out = bytearray()
    fd = os.open(path_of(name), os.O_RDONLY)
    try:
        size, off = os.fstat(fd).st_size, 0
        while off < size:
            try:
                start = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after off
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out += start.to_bytes(8, "little") + os.pread(fd, end - start, start)
            off = end
    finally:
        os.close(fd)
    return bytes(out)


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["\n", "\r", "#1", "a\nb"])
def test_a_name_with_a_newline_or_a_hash_is_refused(name, suffix):
    for make in (lambda: Window(name + suffix), lambda: Limiter(name + suffix, "5/minute")):
        with pytest.raises(ValueError, match="may only use"):
            make()
    assert not [n for n in shmwin.names() if n.startswith(name)]  # nothing created


def test_the_hash_is_named_among_the_refused():
    with pytest.raises(ValueError, match="no '/', '#'"):
        check_name("api#2")


def test_a_namespace_with_a_trailing_newline_is_refused(name, monkeypatch):
    monkeypatch.setenv("SHMWIN_NAMESPACE", "tenant\n")
    with pytest.raises(ValueError, match="SHMWIN_NAMESPACE"):
        Window(name)


# -- what sits at the path -----------------------------------------------------------------------


def test_a_symlink_at_the_path_is_never_followed(name, tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    os.symlink(target, path_of(name))
    try:
        for opener in (
            lambda: Window(name),
            lambda: Window.create(name),
            lambda: Window.attach(name),
            lambda: Limiter(name, "5/minute"),
        ):
            with pytest.raises(shmwin.ForeignFileError, match="symbolic link"):
                opener()
        assert target.read_bytes() == b"precious"
        target.unlink()  # dangling now: still refused, and no file appears at the target
        with pytest.raises(shmwin.ForeignFileError, match="symbolic link"):
            Window(name)
        assert not target.exists()
    finally:
        assert shmwin.unlink(name)  # removes the link itself
    assert not os.path.lexists(path_of(name))


@pytest.mark.parametrize("kind", ["directory", "FIFO"])
def test_a_directory_or_fifo_at_the_path_is_a_clear_error_at_once(name, kind):
    path = path_of(name)
    os.mkdir(path) if kind == "directory" else os.mkfifo(path)
    try:
        with pytest.raises(shmwin.ForeignFileError, match=kind):
            Window(name, ready_timeout=60)  # no wait: refused on the first look
        with pytest.raises(shmwin.ForeignFileError, match=kind):
            Window.attach(name, ready_timeout=60)
        if kind == "directory":
            with pytest.raises(shmwin.ForeignFileError, match=kind):
                shmwin.unlink(name)
    finally:
        os.rmdir(path) if kind == "directory" else os.unlink(path)


# -- mode ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o620, 0o602, 0o666])
def test_a_segment_others_may_write_is_refused_unless_perm_allows_it(name, mode):
    Window(name).close()
    os.chmod(path_of(name), mode)
    before = _bytes_of(name)
    with pytest.raises(shmwin.UntrustedSegmentError, match=f"mode {oct(mode)}") as err:
        Window.attach(name)
    assert isinstance(err.value, PermissionError) and f"perm={oct(mode)}" in str(err.value)
    with pytest.raises(shmwin.UntrustedSegmentError):
        Window(name)  # create-or-attach as well
    assert _bytes_of(name) == before  # nothing written
    seg = Segment.attach(name, 1.0, lambda mm: True, perm=mode)  # widened knowingly
    seg.close()
    shmwin.unlink(name)


def test_perm_is_the_mode_whatever_the_umask(name):
    old = os.umask(0o077)
    try:
        with Window(name, perm=0o660) as w:
            assert stat.S_IMODE(os.stat(path_of(name)).st_mode) == 0o660
            w.unlink()
    finally:
        os.umask(old)


@pytest.mark.parametrize("perm", [0o400, 0o200, 0o1600, -1])
def test_a_perm_the_owner_cannot_use_is_refused(name, perm):
    with pytest.raises(ValueError, match="perm"):
        Window(name, perm=perm)
    for not_a_mode in (True, "0o600", perm):
        with pytest.raises(ValueError, match="perm"):
            Segment.create(name, 4096, not_a_mode, lambda mm: None)
    assert not os.path.lexists(path_of(name))


# -- prefixes ----------------------------------------------------------------------------------


def test_unlink_prefix_takes_the_storage_s_segments_only(make_name):
    p = make_name("app")
    mine, others = [p, f"{p}.moving.5.60", f"{p}.fixed.60"], [f"{p}2.moving.5.60", f"{p}x"]
    for n in mine + others:
        Window(n).close()
    assert unlink_prefix(p) == sorted(mine)
    assert not any(os.path.exists(path_of(n)) for n in mine)
    assert set(others) <= set(shmwin.names())
    assert unlink_prefix(p) == []
    for n in others:
        shmwin.unlink(n)
    with pytest.raises(ValueError):
        unlink_prefix("")


# -- another user's segment (root) ---------------------------------------------------------------


def _squat(name: str) -> int:
    """As another user: create a valid limiter under the victim's name, and use it."""
    with Limiter(name, "5/minute") as lim:
        lim.hit("client")
        return os.getuid()


@needs_root
def test_a_segment_squatted_by_another_user_is_refused(name):
    assert run_as(NOBODY, NOBODY, _squat, name) == NOBODY
    assert os.stat(path_of(name)).st_uid == NOBODY
    before = _bytes_of(name)
    openers = (lambda: Limiter(name, "5/minute"), lambda: Limiter.attach(name), lambda: Window.attach(name))
    for opener in openers:
        with pytest.raises(shmwin.UntrustedSegmentError, match=f"owned by uid {NOBODY}") as err:
            opener()
        assert isinstance(err.value, PermissionError) and "trust_uids" in str(err.value)
    assert _bytes_of(name) == before  # refused before anything was written
    with on_behalf_of(NOBODY), Limiter.attach(name) as lim:  # trusted only when asked
        assert lim.stats("client").used == 1
    seg = Segment.attach(name, 1.0, lambda mm: True, trust_uids=[NOBODY])
    seg.close()
    shmwin.unlink(name)


def _squat_unready(name: str) -> None:
    fd = os.open(path_of(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.ftruncate(fd, 65536)  # sized, never marked ready
    os.close(fd)


@needs_root
def test_another_user_s_unready_segment_is_refused_without_waiting_for_it(name):
    run_as(NOBODY, NOBODY, _squat_unready, name)
    try:
        with pytest.raises(shmwin.UntrustedSegmentError):  # not SegmentNotReadyError after 30 s
            Window.attach(name, ready_timeout=30)
    finally:
        shmwin.unlink(name)


def _add(name: str, n: int) -> int:
    with Window.attach(name) as w:
        w.add(n)
        return int(w.total())


@needs_root
def test_root_creates_for_another_user_who_opens_it(name):
    with on_behalf_of(NOBODY, NOBODY), Window(name) as w:
        st = os.stat(path_of(name))
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (NOBODY, NOBODY, 0o600)
        assert run_as(NOBODY, NOBODY, _add, name, 5) == 5
        assert w.total() == 5
    with pytest.raises(shmwin.UntrustedSegmentError):
        Window.attach(name)  # outside the block, root no longer trusts it
    shmwin.unlink(name)
    Segment.create(name, 4096, 0o600, lambda mm: None, uid=NOBODY, gid=0).close()  # the explicit form
    assert (os.stat(path_of(name)).st_uid, os.stat(path_of(name)).st_gid) == (NOBODY, 0)
    shmwin.unlink(name)


def _give_to_root(name: str) -> str:
    with on_behalf_of(0), Window(name):
        pass
    raise AssertionError("gave a segment away")


@needs_root
def test_only_root_gives_a_segment_away_and_a_refusal_leaves_nothing(name):
    with pytest.raises(shmwin.WindowPermissionError, match="only root"):
        run_as(NOBODY, NOBODY, _give_to_root, name)
    assert not os.path.lexists(path_of(name))


def _attach_signalling_its_first_wait(name: str, waiting_fd: int) -> bytes:
    """Segment.attach that writes to ``waiting_fd`` when it first sleeps (waits for the
    creator), so the test acts on the segment exactly while the attach waits."""
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if not os.get_blocking(waiting_fd):  # already told
            real_sleep(seconds)
            return
        os.set_blocking(waiting_fd, False)
        os.write(waiting_fd, b"w")
        real_sleep(seconds)

    time.sleep = sleep  # this forked child's own module
    seg = Segment.attach(name, 60.0, lambda mm: mm[:5] == b"ready")
    try:
        return bytes(seg.mm[:5])
    finally:
        seg.close()


def _while_attach_waits(name: str, uid: int, then: Callable[[int], None]) -> list[object]:
    """Create ``name`` empty (root, 0600), attach as ``uid`` in a child, and once the attach
    waits run ``then(fd)``; the child's result or exception."""
    fd = os.open(path_of(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    waiting_r, waiting_w = os.pipe()
    outcome: list[object] = []

    def child() -> None:
        try:
            outcome.append(run_as(uid, uid, _attach_signalling_its_first_wait, name, waiting_w))
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=child)
    thread.start()
    try:
        while not select.select([waiting_r], [], [], 0.05)[0]:
            assert thread.is_alive(), f"the attach never waited: {outcome}"
        then(fd)
        thread.join(60)
        return outcome
    finally:
        thread.join(60)
        for end in (fd, waiting_r, waiting_w):
            os.close(end)
        shmwin.unlink(name)


def _hand_over_and_build(fd: int) -> None:
    os.fchown(fd, NOBODY, NOBODY)
    os.posix_fallocate(fd, 0, 4096)
    os.pwrite(fd, b"ready", 0)


@needs_root
def test_an_attach_waits_while_the_creator_hands_the_segment_over(name):
    """Root has created the file but not yet given it away (mode 0600, size 0): the worker's
    EACCES then is a creation in progress, not a refusal."""
    assert _while_attach_waits(name, NOBODY, _hand_over_and_build) == [b"ready"]


@needs_root
def test_a_segment_given_away_while_an_attach_waited_is_refused(name):
    """Root opened it while it was still root's; by the time it is ready it is nobody's:
    the check after the wait refuses it."""
    (outcome,) = _while_attach_waits(name, 0, _hand_over_and_build)
    assert isinstance(outcome, shmwin.UntrustedSegmentError), outcome


def _attach_quickly(name: str) -> None:
    Window.attach(name, ready_timeout=0.2)


@needs_root
def test_another_user_s_empty_file_is_a_permission_error_after_the_wait(name):
    os.close(os.open(path_of(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        with pytest.raises(shmwin.WindowPermissionError, match="owned by uid 0"):
            run_as(NOBODY, NOBODY, _attach_quickly, name)
    finally:
        shmwin.unlink(name)


# -- a full /dev/shm (private tmpfs in a namespace) ----------------------------------------------

OUT_OF_INODES = """
import errno, os, shmwin
from shmwin import Limiter, Window
made = {}
for i in range(10):
    try:
        made[f"w{i}"] = Window(f"w{i}", span=10, buckets=10)
    except shmwin.OutOfSpaceError as exc:
        assert exc.errno == errno.ENOSPC and isinstance(exc, OSError), exc
        assert "no free inode" in str(exc) and f"w{i}" in str(exc), exc
        print("refused:", exc)
        break
else:
    raise SystemExit("never ran out of inodes")
assert list(made) == ["w0", "w1", "w2"], made  # nr_inodes=4: the root directory and three files
try:
    Limiter("lim", "5/minute")
except shmwin.OutOfSpaceError:
    pass
else:
    raise SystemExit("a limiter was created with no inode left")
assert sorted(os.listdir("/dev/shm")) == ["shmwin.w0", "shmwin.w1", "shmwin.w2"], os.listdir("/dev/shm")
made["w2"].close()  # a mapped segment keeps its inode, even unlinked
shmwin.unlink("w2")
with Window("w2", span=10, buckets=10) as w:  # one freed inode: room again
    w.add(4)
    assert w.total() == 4
"""


@needs_namespace
def test_running_out_of_inodes_is_out_of_space_and_leaves_nothing():
    proc = run_in_namespace(python_argv(OUT_OF_INODES), shm_inodes=4)
    assert proc.returncode == 0, describe(proc)
    assert "refused: " in proc.stdout


OUT_OF_BYTES = """
import os, shmwin
from shmwin import Limiter, Window
small = Window("small", span=10, buckets=10)
try:
    Window("big", span=100000, buckets=100000)
except shmwin.OutOfSpaceError as exc:
    assert exc.errno == 28 and "needs" in str(exc), exc
    print("refused:", exc)
else:
    raise SystemExit("a too-big segment was created")
assert os.listdir("/dev/shm") == ["shmwin.small"], os.listdir("/dev/shm")  # nothing half-built
small.add(3)
assert small.total() == 3
# a key table is sparse: it reserves memory as keys come, so a full /dev/shm is an
# OutOfSpaceError for the key that needs more -- never a SIGBUS -- and loses nothing
lim = Limiter("lim", "5/s", capacity=10**6, on_full="raise")  # the default, "allow", admits instead
keys = 0
while True:
    try:
        assert lim.hit(f"client-{keys}")
    except shmwin.OutOfSpaceError as exc:
        assert exc.errno == 28 and "no room" in str(exc), exc
        print("refused:", exc)
        break
    keys += 1
    assert keys < 10**6, "a 1 MiB /dev/shm held a million keys"
assert keys > 100, keys
assert all(lim.stats(f"client-{i}").used == 1 for i in range(keys))
assert lim.hit("client-0") and lim.stats("client-0").used == 2  # known keys go on counting
"""


@needs_namespace
def test_a_full_dev_shm_is_out_of_space_and_leaves_nothing():
    proc = run_in_namespace(python_argv(OUT_OF_BYTES), shm_size="1m")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.count("refused: ") == 2


# -- gunicorn --user nobody --group nogroup ------------------------------------------------------

HOOKS_CONF = """
from shmwin.gunicorn import Hooks
shmwin_hooks = Hooks(limiters={{"{name}-lim": {{"rates": "50/hour", "capacity": 100}}}},
                     windows={{"{name}-req": {{"span": "1h", "buckets": 60, "fields": ("ok", "limited")}}}},
                     prefixes=["shm://{name}?capacity=100"])
on_starting, child_exit, on_exit = shmwin_hooks.on_starting, shmwin_hooks.child_exit, shmwin_hooks.on_exit
"""


def _gunicorn_as_nobody(name: str, tmp_path, app: str, preload: bool = False) -> Server:
    gunicorn_config = pytest.importorskip("gunicorn.config")
    port = free_port()
    (tmp_path / "gunicorn.conf.py").write_text(textwrap.dedent(HOOKS_CONF).format(name=name))
    # --graceful-timeout 5: a worker still booting when the master passes on SIGTERM (one recycled
    # by --max-requests at the hammer's last requests) may run the master's own handler, inherited
    # at the fork, and miss it; gunicorn kills it after the graceful timeout, and the master goes
    # on to on_exit -- after 30 s by default, the time stop() waits (it then killed the master)
    args = ["-c", str(tmp_path / "gunicorn.conf.py"), "-w", "2", "--max-requests", "20", "--graceful-timeout",
            "5", "--user", "nobody", "--group", "nogroup", "-b", f"127.0.0.1:{port}"]  # fmt: skip
    if hasattr(gunicorn_config, "ControlSocket"):  # gunicorn >= 24
        args.append("--no-control-socket")
    if preload:
        args += ["--preload", "--pythonpath", str(tmp_path)]
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_LOG_DIR": str(tmp_path)}
    return Server(python_module("gunicorn", *args, app), port, env, view=True)  # its workers run as nobody


def _owner(name: str) -> tuple[int, int, int]:
    st = os.stat(path_of(name))
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@needs_setpriv
def test_gunicorn_with_user_and_group_counts_exactly(name, tmp_path):
    server = _gunicorn_as_nobody(name, tmp_path, "wsgi_limited:app")
    try:
        assert _owner(name + "-lim") == _owner(name + "-req") == (NOBODY, NOBODY, 0o600)  # by the master
        statuses, pids = hammer(server.port, 80)
        assert statuses == {200: 50, 429: 30}, server.output()
        assert len(pids) > 2, "workers were not recycled during the test"
        with on_behalf_of(NOBODY), Window.attach(name + "-req") as w:
            assert w.totals() == {"ok": 50, "limited": 30}
        assert "WindowPermissionError" not in server.output()
    finally:
        assert server.stop() == 0
    assert name + "-lim" not in shmwin.names() and name + "-req" not in shmwin.names()  # on_exit


STORAGE_APP = """
import os

from limits import parse, strategies
from limits.storage import storage_from_string

import shmwin.integrations.limits  # registers shm://

limiter = strategies.MovingWindowRateLimiter(
    storage_from_string(f"shm://{os.environ['SHMWIN_TEST_NAME']}?capacity=100")
)
rate = parse("50/hour")


def app(environ, start_response):
    status = "200 OK" if limiter.hit(rate, "client") else "429 Too Many Requests"
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", "0")])
    return [b""]
"""


@needs_setpriv
def test_gunicorn_removes_a_shm_storage_s_segments_at_exit(name, tmp_path):
    pytest.importorskip("limits")
    (tmp_path / "storage_app.py").write_text(STORAGE_APP)
    # --preload: the master imports the app as root. A worker that drops to nobody first cannot
    # import what a stdlib kept in a private home (pyenv under /root) holds, and Flask's imports
    # reach deep into it, hence limits' own strategy over a bare WSGI app
    server = _gunicorn_as_nobody(name, tmp_path, "storage_app:app", preload=True)
    try:
        statuses, _ = hammer(server.port, 60)
        assert statuses == {200: 50, 429: 10}, server.output()
        storage = [n for n in shmwin.names() if n.startswith(name + ".")]
        assert storage, "the storage created no segment"
        assert all(_owner(n)[0] == NOBODY for n in storage)  # created lazily by the workers
    finally:
        assert server.stop() == 0
    log = Path(server.log.name).read_text()  # stop() closed the server's handle
    assert not [n for n in shmwin.names() if n.startswith(name)], log
    assert f"removed {len(storage)} segment(s) of storage {name!r}" in log
