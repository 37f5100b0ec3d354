"""Ready-made gunicorn hooks: create in the master, tidy up after dead workers, unlink at the end.

Wire them into ``gunicorn.conf.py`` in three lines::

    from shmwin.gunicorn import Hooks
    shmwin_hooks = Hooks(limiters={"api": "50/hour"}, windows={"requests": {"fields": ("ok", "error")}},
                         prefixes=["shm://myapp"])  # a Flask-Limiter / slowapi storage to clean up
    on_starting, child_exit, on_exit = shmwin_hooks.on_starting, shmwin_hooks.child_exit, shmwin_hooks.on_exit

and open the same names in the app (``Limiter("api", "50/hour")``,
``Window("requests", ...)``): workers attach lazily, by name, whatever started
them. The hooks keep no state beyond the names -- gunicorn re-executes the config
file on HUP -- and:

* ``on_starting`` creates every declared segment in the master (or checks that an
  existing one has the declared geometry), so a mistake stops the server early. With
  ``--user``/``--group`` the master (root) creates them owned by the workers' user and
  group (``server.cfg.uid``/``gid``), so workers open them; the master trusts that user;
* ``child_exit`` (it runs even when a worker was SIGKILLed; ``worker_exit`` does not)
  frees the stripes of dead workers in striped windows -- not needed for
  correctness, a newcomer would adopt them anyway, but it keeps ``stripe_owners()`` honest;
* ``reset_metrics=["myapp"]`` (opt-in): ``on_starting`` removes those apps' prometheus_client
  metrics segments (``shp.multiprocess("myapp")``, docs/metrics.md), so counts restart from zero
  at each start, as wiping ``PROMETHEUS_MULTIPROC_DIR`` did -- unless another master is alive;
* ``on_exit`` unlinks the segments, and every segment of the ``prefixes`` (a ``shm://``
  storage's, created lazily by workers; see :func:`shmwin.backends.shm.segment.unlink_prefix`), except
  while another master of the same server is alive: the successor started by USR2
  (``server.reexec_pid``) or, in a successor not yet promoted, the old master
  (``server.master_pid``).

Other servers: call :func:`shmwin.backends.shm.segment.unlink_prefix` (and :func:`shmwin.unlink`) when
the last process of the server is done.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from .backends.shm.owners import pid_alive
from .backends.shm.segment import check_name, on_behalf_of, unlink, unlink_prefix
from .front import decisions_name as window_name
from .limiter import Limiter
from .window import Window


class Hooks:
    """Hooks for the declared windows and limiters; see the module docstring."""

    def __init__(
        self,
        windows: Mapping[str, Mapping[str, Any]] | None = None,
        limiters: Mapping[str, str | Mapping[str, Any]] | None = None,
        prefixes: Iterable[str] = (),
        reset_metrics: Iterable[str] = (),
    ):
        self.prefixes = [storage_prefix(p) for p in prefixes]
        # opt-in: these apps' prometheus_client metrics (shp.multiprocess(app)) restart from zero
        # when the master starts, as wiping PROMETHEUS_MULTIPROC_DIR did (docs/metrics.md)
        self.reset_metrics = list(reset_metrics)
        for app in self.reset_metrics:
            check_name(app)
        if self.reset_metrics and not _master_started and not _reexec_of_a_live_master():
            from .integrations.prometheus_shm import reset_before_use  # prometheus_client is optional

            for app in self.reset_metrics:  # before the app's import: preload_app imports it before
                reset_before_use(app)  # on_starting, and its workers inherit what it made
        self.windows = {name: dict(spec) for name, spec in (windows or {}).items()}
        self.limiters = {
            name: {"rates": spec} if isinstance(spec, str) else dict(spec)
            for name, spec in (limiters or {}).items()
        }

    @property
    def names(self) -> list[str]:
        return [*self.windows, *self.limiters]

    def on_starting(self, server: Any) -> None:
        global _master_started
        _master_started = True  # a HUP reads the config again in this process: no reset then
        _import_for_workers()
        self._reset_metrics(server)
        with _for_workers(server):
            for name, spec in self.windows.items():
                Window(name, **spec).close()
            for name, spec in self.limiters.items():
                Limiter(name, **spec).close()
        _log(server, f"shmwin: shared segments ready: {', '.join(self.names)}")

    def _reset_metrics(self, server: Any) -> None:
        if not self.reset_metrics:
            return
        from .integrations.prometheus_shm import reset_pending  # prometheus_client is optional

        if _other_master_alive(server):  # a USR2 successor starting: the old workers still count
            reset_pending(cancel=True)
            _log(server, "shmwin: metrics kept: another master of this server is alive")
            return
        # what the config asked and no preloaded app opened yet (a preloaded one was reset right
        # before its first metric, in this process)
        for app in reset_pending():
            _log(server, f"shmwin: metrics of {app!r} reset")

    def child_exit(self, server: Any, worker: Any) -> None:
        for name in self.windows:
            try:
                with _for_workers(server), Window.attach(name) as w:
                    freed = w.reclaim()
            except Exception as exc:  # a hook must never take the master down
                _log(server, f"shmwin: could not reclaim stripes of {name!r}: {exc}", error=True)
                continue
            if freed:
                _log(server, f"shmwin: freed {freed} stripe(s) of {name!r} after worker {worker.pid}")

    def on_exit(self, server: Any) -> None:
        if _other_master_alive(server):
            return  # a USR2 successor (or predecessor) still serves from these segments
        for name in self.names:
            unlink(name)
        for name in self.limiters:  # and each limiter's decisions window (shmwin.front)
            decisions = window_name(name)
            if decisions is not None:
                unlink(decisions)
        for prefix in self.prefixes:
            removed = unlink_prefix(prefix)
            if removed:
                _log(server, f"shmwin: removed {len(removed)} segment(s) of storage {prefix!r}")


_master_started = False  # this process ran on_starting: it is a master, and a HUP re-reads the config


def _reexec_of_a_live_master() -> bool:
    """A master started by USR2 (gunicorn passes the old master's pid in GUNICORN_PID) while
    the old one still serves: its metrics must not be reset."""
    old = os.environ.get("GUNICORN_PID", "")
    return old.isdigit() and pid_alive(int(old))


def _other_master_alive(server: Any) -> bool:
    """Is a USR2 successor (``reexec_pid``) or, in a successor, the old master alive?"""
    return any(other and pid_alive(other) for other in (getattr(server, "reexec_pid", 0),
                                                          getattr(server, "master_pid", 0)))  # fmt: skip


def storage_prefix(spec: str) -> str:
    """The window-name prefix of a ``shm://`` or ``async+shm://`` storage URI
    (``shm://myapp?capacity=100`` -> ``myapp``, the rule of the limits storage), or ``spec``
    itself if it is already a prefix; validated as a window name."""
    if "://" in spec:
        parsed = urllib.parse.urlparse(spec)
        if parsed.scheme not in ("shm", "async+shm"):
            raise ValueError(f"{spec!r} is not a shm:// (or async+shm://) storage URI")
        spec = (parsed.netloc + parsed.path).strip("/") or "limits"
    check_name(spec)
    return spec


# What shmwin imports only at first use (numpy: a read; uuid: a segment's creation; socket: a local
# share; asyncio: an async wait). A worker forked from the master has what the master imported, and
# may import nothing more: with --user, a Python under a home the workers' user cannot read
# (pyenv's under /root) stays unreadable to them, so the master imports these for them.
_FIRST_USE = ("numpy", "uuid", "socket", "asyncio")


def _import_for_workers() -> None:
    for module in _FIRST_USE:
        with suppress(ImportError):
            importlib.import_module(module)


@contextmanager
def _for_workers(server: Any) -> Iterator[None]:
    """Create segments owned by the workers' user and group (``--user``/``--group``) and trust
    that user's segments; a no-op when the workers run as this process."""
    cfg = getattr(server, "cfg", None)
    uid, gid = getattr(cfg, "uid", None), getattr(cfg, "gid", None)
    uid = None if uid is None or uid == os.geteuid() else int(uid)
    gid = None if gid is None or gid == os.getegid() else int(gid)
    with on_behalf_of(uid, gid):
        yield


def _log(server: Any, message: str, error: bool = False) -> None:
    log = getattr(server, "log", None)
    if log is not None:
        (log.error if error else log.info)(message)
