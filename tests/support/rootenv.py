"""Helpers for tests that need root: another uid, a private /proc, a small /dev/shm.

Each capability has a ``*_skip_reason()`` (None when the machine can) and a ready-made
``pytest.mark.skipif`` mark, so a test says what it needs in one line::

    @needs_namespace
    def test_full_dev_shm():
        proc = run_in_namespace(python_argv(CODE), shm_size="1m")
        assert proc.returncode == 0, proc.stderr

Three ways to run something:

* :func:`run_as` -- a Python function in a forked child running as another uid/gid; its
  return value (or exception) comes back to the caller. For "a squatter creates a segment".
* :func:`command_as` -- argv prefixed with ``setpriv`` so it runs as another uid/gid (no
  supplementary groups). Compose it with the next one to run several users in one namespace.
* :func:`run_in_namespace` / :func:`namespace_argv` -- argv run by
  ``unshare -m -p --fork`` with a fresh /proc (``hidepid=2`` by default: each uid sees only
  its own processes) and a private tmpfs on /dev/shm (``shm_size``, ``shm_inodes``). The
  host's /dev/shm and /proc are untouched; everything in the private tmpfs vanishes with
  the namespace, so a test there needs no cleanup (and the leak fixture cannot see it).

Another uid must read this checkout (its venv, its shmwin): a checkout in a private folder (a
``mktemp -d`` clone, mode 0700) is out of its reach. :func:`through_view` then runs a command
in a private mount namespace where the checkout is bind-mounted on a world-readable path too,
every mention of the checkout in its argv, environment and cwd pointing there;
:func:`run_in_namespace` and :class:`support.servers.Server` (``view=True``) use it.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534  # uid of "nobody" and gid of "nogroup" on Debian


@cache
def root_skip_reason() -> str | None:
    return None if os.geteuid() == 0 else "needs root (to switch uid, give files away or mount)"


def tool_skip_reason(tool: str, purpose: str) -> str | None:
    """Why a test needing root and util-linux's ``tool`` (for ``purpose``) cannot run here,
    before it probes what the tool can do (None if both are here)."""
    if root_skip_reason():
        return root_skip_reason()
    return None if shutil.which(tool) else f"needs {tool} (util-linux) {purpose}"


@cache
def setpriv_skip_reason() -> str | None:
    if reason := tool_skip_reason("setpriv", "to run a command as another uid"):
        return reason
    probe = subprocess.run(command_as(NOBODY, NOBODY, ["true"]), capture_output=True, text=True)
    return None if probe.returncode == 0 else f"setpriv cannot switch to uid {NOBODY}: {probe.stderr.strip()}"


@cache
def namespace_skip_reason() -> str | None:
    """Why :func:`run_in_namespace` cannot work here (None if it can): root, unshare with
    mount and PID namespaces, proc with hidepid=2, tmpfs with size and nr_inodes."""
    if reason := tool_skip_reason("unshare", "for mount and PID namespaces"):
        return reason
    probe = run_in_namespace(["true"], shm_size="64k", shm_inodes=16, timeout=30)
    if probe.returncode != 0:
        return f"cannot mount a private /proc (hidepid=2) and /dev/shm in a namespace: {probe.stderr.strip()}"
    return None


@cache
def checkout_hidden() -> bool:
    """Can uid NOBODY not import this checkout's shmwin and numpy with this interpreter (a
    private folder on the checkout's path)? False where no uid can be switched to."""
    if setpriv_skip_reason():
        return False
    probe = command_as(NOBODY, NOBODY, [sys.executable, "-c", "import numpy, shmwin"])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(probe, capture_output=True, env=env, cwd="/").returncode != 0


@cache
def _view_dir() -> str:
    """An empty world-readable folder, the mount point of the checkout's view (in private mount
    namespaces only: here it stays empty, and goes at exit)."""
    view = tempfile.mkdtemp(prefix="shmwin-view-")
    os.chmod(view, 0o755)
    atexit.register(os.rmdir, view)
    return view


# run by unshare: $0 the checkout, $1 the view, $2 the cwd in the view; then the command. The
# view is a world-readable tmpfs holding each entry of the checkout bind-mounted: a bind mount of
# the checkout itself would keep its own mode (a `mktemp -d` clone's 0700)
_VIEW_SCRIPT = (
    'mount -t tmpfs -o mode=755 shmwin-view "$1" && '
    'for e in "$0"/* "$0"/.[!.]*; do [ -e "$e" ] || continue; t="$1/${e##*/}"; '
    'if [ -d "$e" ]; then mkdir "$t"; else : > "$t"; fi; mount --bind "$e" "$t" || exit 1; done && '
    'cd "$2" && shift 2 && exec "$@"'
)


def through_view(
    argv: Sequence[str], env: dict[str, str], cwd: str | Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` that another uid can run, from ``cwd``: unchanged if it can read this
    checkout; else run in a private mount namespace where the checkout is also at a
    world-readable path (:func:`_view_dir`), with every mention of the checkout in ``argv``,
    ``env`` and ``cwd`` pointing there (the caller's Popen still starts in ``cwd``)."""
    if not checkout_hidden():
        return list(argv), env
    root, view = str(ROOT), _view_dir()

    def swap(text: str) -> str:
        return text.replace(root, view)

    wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _VIEW_SCRIPT, root, view]
    wrapped += [swap(str(cwd or os.getcwd())), *(swap(a) for a in argv)]
    return wrapped, {name: swap(value) for name, value in env.items()}


class ChildError(RuntimeError):
    """The function run by :func:`run_as` raised something that could not be sent back."""


def run_as(uid: int, gid: int, fn: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
    """Run ``fn(*args)`` in a forked child as ``uid``/``gid`` (no supplementary groups) and
    return its result; an exception it raises is raised here, its traceback in the message.
    The child shares nothing with the caller but what fork copies; it ends with ``os._exit``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.close(read_fd)
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            outcome: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:
            outcome = ("raised", (exc, traceback.format_exc()))
        try:
            data = pickle.dumps(outcome)
        except Exception:
            data = pickle.dumps(("raised", (None, traceback.format_exc() + f"\nunpicklable: {outcome!r}")))
        with os.fdopen(write_fd, "wb") as out:
            out.write(data)
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as inp:
        data = _read_within(inp, pid, timeout)
    _, status = os.waitpid(pid, 0)
    if not data:
        raise ChildError(f"child as uid {uid} died without an answer (wait status {status})")
    kind, value = pickle.loads(data)
    if kind == "ok":
        return value
    exc, text = value
    if isinstance(exc, BaseException):
        if hasattr(exc, "add_note"):  # 3.11+
            exc.add_note(f"in the child as uid {uid}:\n{text}")
        raise exc
    raise ChildError(f"child as uid {uid} failed:\n{text}")


def _read_within(inp: Any, pid: int, timeout: float) -> bytes:
    if not select.select([inp], [], [], timeout)[0]:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise ChildError(f"child {pid} gave no answer within {timeout} s; killed")
    return bytes(inp.read())


def command_as(uid: int, gid: int, argv: Sequence[str]) -> list[str]:
    """``argv`` run as ``uid``/``gid`` with no supplementary groups (through ``setpriv``)."""
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def python_argv(code: str, *args: str) -> list[str]:
    """This interpreter running ``code`` (``python -c``); put :data:`ROOT` on PYTHONPATH
    (:func:`run_in_namespace` does) so that it imports this checkout's shmwin."""
    return [sys.executable, "-c", code, *args]


def namespace_argv(
    argv: Sequence[str],
    *,
    hidepid: int | None = 2,
    shm_size: str = "4m",
    shm_inodes: int | None = None,
) -> list[str]:
    """``argv`` run in new mount and PID namespaces (a child of PID 1, a shell; everything
    in the namespace is killed when ``unshare`` is, e.g. on a timeout) with a
    fresh /proc (mounted ``hidepid=<hidepid>`` unless None) and a tmpfs on /dev/shm of
    ``shm_size`` bytes (``"1m"``, ``"64k"``) and at most ``shm_inodes`` files (the root
    directory counts as one), mode 1777 as the host's."""
    proc_opts = f"-o hidepid={hidepid} " if hidepid is not None else ""
    shm_opts = f"size={shm_size},mode=1777" + (f",nr_inodes={shm_inodes}" if shm_inodes else "")
    script = (
        f"mount -t proc {proc_opts}proc /proc && "
        f"mount -t tmpfs -o {shm_opts} shmwin-test /dev/shm && "
        '"$@"'  # not exec'd: sh stays PID 1 and reaps orphans; the namespace dies with it
    )
    unshare = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private"]
    return [*unshare, "sh", "-c", script, "sh", *argv]


def run_in_namespace(
    argv: Sequence[str],
    *,
    hidepid: int | None = 2,
    shm_size: str = "4m",
    shm_inodes: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run :func:`namespace_argv` to completion; text output captured, this checkout on
    PYTHONPATH. The caller checks ``returncode`` (a failed mount shows in ``stderr``)."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    argv, full_env = through_view(argv, full_env)  # the other uids it may run as read the checkout
    command = namespace_argv(argv, hidepid=hidepid, shm_size=shm_size, shm_inodes=shm_inodes)
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout)


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    """A failure message for ``proc``: its command, exit code and output."""
    cmd = proc.args if isinstance(proc.args, str) else shlex.join(proc.args)
    return f"{cmd}\nexit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


# marks last: their probes use the helpers above
needs_root = pytest.mark.skipif(root_skip_reason() is not None, reason=str(root_skip_reason()))
needs_setpriv = pytest.mark.skipif(setpriv_skip_reason() is not None, reason=str(setpriv_skip_reason()))
needs_namespace = pytest.mark.skipif(namespace_skip_reason() is not None, reason=str(namespace_skip_reason()))
