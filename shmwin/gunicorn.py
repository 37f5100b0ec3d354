"""Ready-made gunicorn hooks: create in the master, tidy up after dead workers, unlink at the end.

Wire them into ``gunicorn.conf.py`` in three lines::

    from shmwin.gunicorn import Hooks
    shmwin_hooks = Hooks(limiters={"api": "50/hour"}, windows={"requests": {"fields": ("ok", "error")}})
    on_starting, child_exit, on_exit = shmwin_hooks.on_starting, shmwin_hooks.child_exit, shmwin_hooks.on_exit

and open the same names in the app (``Limiter("api", "50/hour")``,
``Window("requests", ...)``): workers attach lazily, by name, whatever started
them. The hooks keep no state beyond the names -- gunicorn re-executes the config
file on HUP -- and:

* ``on_starting`` creates every declared segment in the master (or checks that an
  existing one has the declared geometry), so a mistake stops the server early;
* ``child_exit`` (it runs even when a worker was SIGKILLed; ``worker_exit`` does not)
  frees the stripes of dead workers in striped windows -- not needed for
  correctness, a newcomer would adopt them anyway, but it keeps ``stripe_owners()`` honest;
* ``on_exit`` unlinks the segments, except while another master of the same
  server is alive: the successor started by USR2 (``server.reexec_pid``) or, in a
  successor not yet promoted, the old master (``server.master_pid``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .limiter import Limiter
from .owners import pid_alive
from .segment import unlink
from .window import Window


class Hooks:
    """Hooks for the declared windows and limiters; see the module docstring."""

    def __init__(
        self,
        windows: Mapping[str, Mapping[str, Any]] | None = None,
        limiters: Mapping[str, str | Mapping[str, Any]] | None = None,
    ):
        self.windows = {name: dict(spec) for name, spec in (windows or {}).items()}
        self.limiters = {
            name: {"rates": spec} if isinstance(spec, str) else dict(spec)
            for name, spec in (limiters or {}).items()
        }

    @property
    def names(self) -> list[str]:
        return [*self.windows, *self.limiters]

    def on_starting(self, server: Any) -> None:
        for name, spec in self.windows.items():
            Window(name, **spec).close()
        for name, spec in self.limiters.items():
            Limiter(name, **spec).close()
        _log(server, f"shmwin: shared segments ready: {', '.join(self.names)}")

    def child_exit(self, server: Any, worker: Any) -> None:
        for name in self.windows:
            try:
                with Window.attach(name) as w:
                    freed = w.reclaim()
            except Exception as exc:  # a hook must never take the master down
                _log(server, f"shmwin: could not reclaim stripes of {name!r}: {exc}", error=True)
                continue
            if freed:
                _log(server, f"shmwin: freed {freed} stripe(s) of {name!r} after worker {worker.pid}")

    def on_exit(self, server: Any) -> None:
        for other in (getattr(server, "reexec_pid", 0), getattr(server, "master_pid", 0)):
            if other and pid_alive(other):
                return  # a USR2 successor (or predecessor) still serves from these segments
        for name in self.names:
            unlink(name)


def _log(server: Any, message: str, error: bool = False) -> None:
    log = getattr(server, "log", None)
    if log is not None:
        (log.error if error else log.info)(message)
