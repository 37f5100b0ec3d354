"""The commands: ls, show, watch, export, rm, set, gc. Each takes the parsed arguments and the
output stream and returns the exit status; errors they cannot explain propagate to main."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..backends.shm import segment
from ..errors import GeometryMismatchError, NotSupportedError, ShmwinError, WindowNotFoundError
from ..inspector import redis_scan, snapshots
from ..inspector.attached import Attached, attached_many
from ..local_share import SUFFIX
from .text import clip, human_s, safe
from .views import ls_lines, window_lines
from .watch import watch


def width() -> int:
    """Columns to fit: the terminal's (or $COLUMNS), 80 when not a terminal."""
    return max(shutil.get_terminal_size((80, 24)).columns, 20)


def dump(value: Any, out: TextIO) -> None:
    json.dump(value, out, indent=2, allow_nan=False)  # non-finite values are strings already
    out.write("\n")


def available(args: argparse.Namespace) -> list[str]:
    return segment.names() if args.backend is None else snapshots.redis_names(args.backend)


def chosen(args: argparse.Namespace, patterns: list[str] | None) -> list[str]:
    """The windows named or matched by ``patterns`` (every window if None or empty). Exact
    names only: no listing (a server away is then met by the name's own open)."""
    if patterns and not any(snapshots.is_glob(p) for p in patterns):
        if args.backend is not None:
            redis_scan.check_readable(args.backend)  # not opened as a two-tier name: no segment made
        return snapshots.select(patterns, ())
    return snapshots.select(patterns or None, available(args))


@contextmanager
def opened(name: str, backend: str | None) -> Iterator[Any]:
    w = snapshots.open_window(name, backend)
    try:
        yield w
    finally:
        w.close()


# -- ls ----------------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace, out: TextIO) -> int:
    selected = chosen(args, args.patterns)
    if args.backend is None:
        rows = snapshots.infos(selected)
        usage = snapshots.shm_usage(rows)
    else:
        rows, usage = [snapshots.redis_info(n, args.backend) for n in selected], None
    if args.json:
        dump({"windows": [r.as_dict() for r in rows], "shm": usage and usage.as_dict()}, out)
        return 0
    reason = next((r.attached_reason for r in rows if not r.attached_complete), "")
    out.write("\n".join(ls_lines(rows, usage, width(), reason)) + "\n")
    return 0


# -- show / export -----------------------------------------------------------------------------


READ_ERRORS = (ShmwinError, OSError, ValueError, OverflowError)  # what one unreadable window raises


class Snapshots:
    """A snapshot of each window chosen, in order. One that cannot be read (junk, removed
    meanwhile, a sum past int64) is reported on stderr as ``shmwin: NAME: message`` and
    skipped, so the others are still shown; ``failed_named`` says whether one of those was
    named exactly (the command then exits 2)."""

    def __init__(self, args: argparse.Namespace, patterns: list[str] | None, **how: Any):
        self.names = chosen(args, patterns)
        self.exact = {p for p in patterns or () if not snapshots.is_glob(p)}
        self.backend, self.how = args.backend, how
        self.failed_named = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import sys

        for name in self.names:
            try:
                with opened(name, self.backend) as w:
                    snap = snapshots.snapshot(w, **self.how)
            except READ_ERRORS as exc:
                share = self._local_share(name) if name in self.exact else None
                said = f"; this host's local share of it ({safe(name)}{SUFFIX}) instead" if share else ""
                sys.stderr.write(f"shmwin: {safe(name)}: {exc}{said}\n")
                if share is not None:  # a redis limiter on its host's share (on_error="local")
                    yield share
                    continue
                self.failed_named = self.failed_named or name in self.exact
                continue
            yield snap

    def _local_share(self, name: str) -> dict[str, Any] | None:
        """The snapshot of ``NAME.local`` (on_error="local"), if this host has one: what decides
        here while NAME's server is away, and where ``shmwin show`` finds that it is."""
        try:
            with opened(name + SUFFIX, None) as w:
                return snapshots.snapshot(w, **self.how)
        except READ_ERRORS:
            return None

    @property
    def status(self) -> int:
        return 2 if self.failed_named else 0


def _single(patterns: list[str] | None) -> bool:
    """One exact name: JSON is that window's object; otherwise a list of them."""
    return bool(patterns) and len(patterns or []) == 1 and not snapshots.is_glob(patterns[0])  # type: ignore[index]


class HostCpuReading:
    """The host's CPU use for a shedder's view, in millicpu, over the time since the last
    reading (the first one waits ``first_s`` to have two samples of /proc/stat)."""

    def __init__(self, first_s: float = 0.25):
        from ..overload.cpu import HostCpu

        self._cpu = HostCpu(interval=first_s, beta=0.0)
        self._first_s = first_s

    def __call__(self) -> int | None:
        value = self._cpu()
        if not self._cpu.known:
            time.sleep(self._first_s)
            value = self._cpu()
        return value if self._cpu.known else None


def _metrics_apps(names: list[str]) -> list[str] | None:
    """The apps, if every name is an app's metrics segment (``APP.metrics``, docs/metrics.md)."""
    from ..backends.shm.roles import series

    if not all(n.endswith(series.SUFFIX) and series.peek(n) is not None for n in names):
        return None
    return [n[: -len(series.SUFFIX)] for n in names]


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    apps = _metrics_apps(args.names) if args.backend is None else None
    if apps:  # prometheus_client's values: what a scrape of each app serves
        from ..integrations.prometheus_shm import exposition as metrics_text

        if args.json:  # each app's samples: name, labels, value
            from prometheus_client.parser import text_string_to_metric_families

            found = [{"app": app, "samples": [{"name": s.name, "labels": s.labels, "value": s.value}
                                              for f in text_string_to_metric_families(metrics_text(app))
                                              for s in f.samples]} for app in apps]  # fmt: skip
            dump(found[0] if len(found) == 1 else found, out)
            return 0
        out.write("\n".join(metrics_text(app) for app in apps))
        return 0
    cpu = HostCpuReading() if args.backend is None else None
    snaps = Snapshots(args, args.names, key=args.key, last=args.last, top=args.top, cpu=cpu)
    if args.json:
        found = list(snaps)
        if found or not _single(args.names):
            dump(found[0] if _single(args.names) else found, out)
        return snaps.status
    for i, snap in enumerate(snaps):
        out.write(("\n" if i else "") + "\n".join(window_lines(snap, width())) + "\n")
    return snaps.status


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    if args.metrics:  # an app's prometheus_client metrics (docs/metrics.md): the scrape's text
        from ..integrations.prometheus_shm import exposition as metrics_text

        out.write(metrics_text(args.metrics))
        return 0
    if args.format == "prometheus":
        try:
            from ..integrations.prometheus import exposition
        except ImportError as exc:
            raise ShmwinError(
                f"--format prometheus needs prometheus_client: pip install 'shmwin[prometheus]' ({exc})"
            ) from exc
        chosen(args, args.names)  # a glob that matches nothing is an error here too
        out.write(exposition(args.names or None, top_keys=args.top or 0, backend=args.backend))
        return 0
    top = 10 if args.top is None else args.top
    snaps = Snapshots(args, args.names, top=top)
    found = list(snaps)
    if found or not _single(args.names):
        dump(found[0] if _single(args.names) else found, out)
    return snaps.status


# -- watch -------------------------------------------------------------------------------------


def cmd_watch(args: argparse.Namespace, out: TextIO) -> int:
    names = chosen(args, [args.name])
    if len(names) != 1:
        some = ", ".join(names[:5])
        raise ValueError(f"{args.name!r} matches {len(names)} windows ({some}...); watch shows one")
    name = names[0]
    apps = _metrics_apps([name]) if args.backend is None else None
    if apps:  # an app's prometheus_client metrics: what a scrape serves, redrawn
        return _watch_metrics(apps[0], name, args, out)
    cpu = HostCpuReading() if args.backend is None else None
    with opened(name, args.backend) as w:

        def render(cols: int) -> list[str]:
            snap = snapshots.snapshot(w, key=args.key, last=args.last, top=args.top, cpu=cpu)
            return window_lines(snap, cols)

        return watch(render, args.interval, out, f"shmwin watch {safe(name)}", _gone(name, args.backend))


def _watch_metrics(app: str, name: str, args: argparse.Namespace, out: TextIO) -> int:
    """``shmwin watch APP.metrics``: the samples a scrape of the app serves (comments left out),
    each line clipped to the terminal's width."""
    from ..integrations.prometheus_shm import exposition as metrics_text

    def render(cols: int) -> list[str]:
        samples = [line for line in metrics_text(app).splitlines() if line and not line.startswith("#")]
        head = f"{name} (prometheus_client metrics of app {app!r}): {len(samples)} samples"
        return [clip(safe(line), cols) for line in (head, *samples)]

    return watch(render, args.interval, out, f"shmwin watch {safe(name)}", _gone(name, None))


def _gone(name: str, backend: str | None) -> Any:
    """A check that says why the view should end: the window was removed or replaced."""
    if backend is not None:
        return lambda: None
    path = segment.path_of(name)
    inode = os.stat(path).st_ino

    def gone() -> str | None:
        try:
            now = os.stat(path).st_ino
        except FileNotFoundError:
            return f"window {name!r} was removed; bye"
        return None if now == inode else f"window {name!r} was replaced by a new one; watch it again"

    return gone


# -- rm / gc -----------------------------------------------------------------------------------


def holders_text(pids: list[int], limit: int = 8) -> str:
    """Who holds a window: "pid 123 (gunicorn), pid 456 (python3)"."""
    named = []
    for pid in pids[:limit]:
        try:
            with open(f"/proc/{pid}/comm") as f:
                named.append(f"pid {pid} ({safe(f.read().strip())})")
        except OSError:
            named.append(f"pid {pid}")
    more = f" and {len(pids) - limit} more" if len(pids) > limit else ""
    return ", ".join(named) + more


def _holders(a: Attached) -> list[int]:
    return [p for p in a.pids if p != os.getpid()]


def cmd_rm(args: argparse.Namespace, out: TextIO) -> int:
    status, two_tier = 0, False
    if args.backend is not None:  # a two-tier name's URL too: its Redis part is dropped
        args.backend, two_tier = args.backend.removeprefix("shm+"), args.backend.startswith("shm+")
    try:
        selected = chosen(args, args.names)
    except LookupError as exc:
        out.write(f"{exc}\n")
        return 1
    if args.backend is not None:
        return _rm_redis(selected, args.backend, out, two_tier)
    found = attached_many(selected)
    for name in selected:
        holders = _holders(found[name])
        if holders and not args.force and os.path.lexists(segment.path_of(name)):
            out.write(f"refusing to remove {safe(name)}: it is open in {holders_text(holders)}. Stop them "
                      "first, or use --force (they keep counting into the removed window, and new "
                      "processes get a new, empty one)\n")  # fmt: skip
            status = 1
        elif segment.unlink(name):
            note = f" (was open in {holders_text(holders)})" if holders else ""
            if not holders and not found[name].complete:
                note = f" (note: {found[name].reason}; such processes may still hold it)"
            out.write(f"removed {safe(name)}{note}\n")
        else:
            out.write(f"no window named {name!r}\n")
            status = 1
    return status


def _rm_redis(selected: list[str], url: str, out: TextIO, two_tier: bool) -> int:
    """Drop each name from a Redis server or cluster: its geometry and every key's counts, for
    every host (a window whose buckets changed, a limiter to start anew). Redis cannot say who
    has a name open: a process that still does writes on with what it opened. A name the URL
    does not open as it is (a two-tier limiter's, one spread without the URL's ``?spread=N``)
    is dropped by its keys, as its claim says."""
    status = 0
    for name in selected:
        try:
            with opened(name, url) as w:
                w.unlink()
            dropped = True
        except WindowNotFoundError:
            dropped = False
        except (GeometryMismatchError, NotSupportedError):  # a two-tier name's, a spread one's
            dropped = redis_scan.drop_name(url, name) > 0
        if not dropped:
            out.write(f"no window named {name!r} on {url}\n")
            status = 1
            continue
        hosts = f" (each host's lease segment stays: 'shmwin rm {safe(name)}' there)" if two_tier else ""
        out.write(f"removed {safe(name)} from {url}{hosts} (processes that still have it open write on: "
                  "restart them)\n")  # fmt: skip
    return status


def cmd_set(args: argparse.Namespace, out: TextIO) -> int:
    """A shared-memory limiter's rates changed live (Limiter.set_rates), a token bucket's rate
    and burst (TokenBucket.set_rate), a concurrency's limit (Concurrency.set_limit): carried,
    or --reset."""
    from ..limiter import Limiter  # imported late: ``shmwin ls`` needs no front
    from ..window import Window

    if args.backend is not None:  # redis:// and shm+redis://: a limiter, else a token bucket
        try:
            Limiter.attach(args.name, backend=args.backend).close()
        except GeometryMismatchError:
            return _set_tokens(args, out)
        role = None
    else:
        with Window.attach(args.name, ready_timeout=0.5) as w:
            role = w.geometry.role
    if role in SETTERS:
        return SETTERS[role](args, out)
    if args.burst is not None:
        raise ValueError(f"{args.name!r} is not a token bucket: --burst is a token bucket's")
    with Limiter.attach(args.name, **_attach_options(args)) as lim:
        before = ";".join(str(r) for r in lim.rates)
        lim.set_rates(args.rates, on_change="reset" if args.reset else "carry")
        after = ";".join(str(r) for r in lim.rates)
    how = "counts reset" if args.reset else "counts carried"
    out.write(f"{safe(args.name)}: {before} -> {after} ({how}; every process follows at its next call)\n")
    return 0


def _attach_options(args: argparse.Namespace) -> dict[str, Any]:
    """``shmwin set``'s attach: shared memory waits a moment for a segment being made."""
    return {"ready_timeout": 0.5} if args.backend is None else {"backend": args.backend}


def _set_tokens(args: argparse.Namespace, out: TextIO) -> int:
    """``shmwin set`` of a token bucket: its rate (and --burst; else its burst kept)."""
    from ..limiter import TokenBucket

    with TokenBucket.attach(args.name, **_attach_options(args)) as tb:
        before = f"{tb.rate} burst {tb.burst}"
        tb.set_rate(args.rates, burst=args.burst, on_change="reset" if args.reset else "carry")
        after = f"{tb.rate} burst {tb.burst}"
    how = "buckets full again" if args.reset else "tokens used carried"
    out.write(f"{safe(args.name)}: {before} -> {after} ({how}; every process follows at its next call)\n")
    return 0


def _set_concurrency(args: argparse.Namespace, out: TextIO) -> int:
    """``shmwin set`` of a concurrency: its limit, a whole number of holders."""
    from ..concurrency import Concurrency

    if args.burst is not None:
        raise ValueError(f"{args.name!r} is a concurrency: --burst is a token bucket's")
    text = args.rates.strip()
    if not (text.isascii() and text.isdigit()):  # int() takes "3_0", "+3" and other scripts' digits
        raise ValueError(f"a concurrency's limit is a whole number of holders, such as 8, not {args.rates!r}")
    limit = int(text)
    with Concurrency.attach(args.name) as conc:
        before = conc.limit
        conc.set_limit(limit, on_change="reset" if args.reset else "carry")
        after = conc.limit
    how = "slots held forgotten" if args.reset else "slots held kept"
    out.write(f"{safe(args.name)}: limit {before} -> {after} ({how}; every process follows at its next call)"
              "\n")
    return 0


SETTERS = {"token-bucket": _set_tokens, "concurrency": _set_concurrency}


def cmd_gc(args: argparse.Namespace, out: TextIO) -> int:
    """Remove the windows that were idle for a whole span and that no live process has open."""
    if args.backend is not None:
        raise ValueError("gc tidies this host's /dev/shm; Redis keys expire by themselves")
    candidates = []
    for r in snapshots.infos(chosen(args, args.patterns), who=False):
        if r.error:
            out.write(f"skip {safe(r.name)}: unreadable ({safe(r.error)}); remove it with `shmwin rm` "
                      "if it is junk\n")  # fmt: skip
            continue
        idle = r.idle_s if r.idle_s is not None else r.age_s
        if idle > r.span_s:
            candidates.append((r, idle))
    found = attached_many(r.name for r, _ in candidates)
    removed = 0
    verb = "would remove" if args.dry_run else "removed"
    for r, idle in candidates:
        a, why = found[r.name], f"idle {human_s(idle)} > span {human_s(r.span_s)}"
        holders = _holders(a)
        if holders:
            out.write(f"keep {safe(r.name)}: {why}, but open in {holders_text(holders)}\n")
            continue
        if not a.complete and not args.force:
            out.write(f"keep {safe(r.name)}: {why}, but {a.reason}, so it may be open; "
                      "--force removes it anyway\n")  # fmt: skip
            continue
        if args.dry_run or segment.unlink(r.name):
            removed += 1
            out.write(f"{verb} {safe(r.name)} ({why}, open in no process)\n")
    if not removed:
        out.write("nothing to remove\n")
    return 0
