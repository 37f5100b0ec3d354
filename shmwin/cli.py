"""``shmwin``: look at the windows on this host. Read-only unless told to remove.

shmwin ls                          every window: fields, resolutions, size, keys, stripes, age
shmwin show api --last 10s         totals and rates per field, and sparklines
shmwin watch api                   a live view; q or Ctrl-C quits
shmwin export api --format prometheus
shmwin rm api                      remove one window (workers keep their mapping)
shmwin gc --dry-run                what gc would remove: dead creator, idle for a whole span
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from . import metrics, segment
from .errors import ShmwinError

BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    top = max((v for v in values if v), default=0)
    if not top:
        return BARS[0] * len(values)
    return "".join(BARS[max(0, min(8, round(v / top * 8)))] for v in values)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1000
    return f"{size:.1f}GB"


def _human_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


# -- commands ---------------------------------------------------------------------------------


def cmd_ls(args: argparse.Namespace, out: TextIO) -> int:
    rows = metrics.infos()
    if args.json:
        json.dump([r.as_dict() for r in rows], out, indent=2)
        out.write("\n")
        return 0
    if not rows:
        out.write("no shmwin windows on this host\n")
        return 0
    out.write(f"{'NAME':<28} {'KIND':<8} {'FIELDS':<18} {'RESOLUTIONS':<22} {'SIZE':>8} "
              f"{'KEYS':>13} {'STRIPES':>8} {'CREATOR':>14} {'AGE':>7} {'IDLE':>7}\n")  # fmt: skip
    for r in rows:
        if r.error:
            out.write(f"{r.name:<28} unreadable ({_human_bytes(r.nbytes)}): {r.error}\n")
            continue
        keys = f"{r.keys}/{r.capacity}" if r.capacity else "-"
        stripes = f"{r.stripes_in_use}/{r.stripes}" if r.stripes else "-"
        creator = f"{r.creator_pid} {'alive' if r.creator_alive else 'dead'}"
        out.write(f"{r.name:<28} {r.kind:<8} {','.join(r.fields):<18} {' '.join(r.resolutions):<22} "
                  f"{_human_bytes(r.nbytes):>8} {keys:>13} {stripes:>8} {creator:>14} "
                  f"{_human_s(r.age_s):>7} {_human_s(r.idle_s):>7}\n")  # fmt: skip
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    with _open(args.name) as w:
        snap = metrics.snapshot(w, key=args.key, last=args.last, top=args.top)
    if args.json:
        json.dump(snap, out, indent=2)
        out.write("\n")
        return 0
    out.write(_render(snap))
    return 0


def _render(snap: dict[str, Any]) -> str:
    lines = [f"{snap['name']} ({snap['kind']})" + (f"  key={snap['key']!r}" if snap["key"] else "")]
    for row in snap["resolutions"]:
        lines.append(f"  {row['resolution']:>8}  last {row['last']}")
        for f in snap["fields"]:
            total, rate = row["totals"][f], row["rates"][f] or 0.0
            lines.append(f"    {f:<14} {total:>14,}  {rate:>12,.2f}/s  {sparkline(row['series'][f])}")
    if snap.get("top"):
        lines.append(f"  busiest keys ({snap['keys']} live):")
        lines += [f"    {total:>14,}  {key}" for key, total in snap["top"]]
    return "\n".join(lines) + "\n"


def cmd_export(args: argparse.Namespace, out: TextIO) -> int:
    with _open(args.name) as w:
        if args.format == "json":
            json.dump(metrics.snapshot(w, top=args.top), out, indent=2)
            out.write("\n")
        else:
            out.write(metrics.prometheus_text(metrics.samples(w, top=args.top)))
    return 0


def cmd_rm(args: argparse.Namespace, out: TextIO) -> int:
    status = 0
    for name in args.names:
        if segment.unlink(name):
            out.write(f"removed {name}\n")
        else:
            out.write(f"no window named {name!r}\n")
            status = 1
    return status


def cmd_gc(args: argparse.Namespace, out: TextIO) -> int:
    removed = 0
    for r in metrics.infos():
        if r.error:
            out.write(f"skip {r.name}: unreadable ({r.error}); remove it with `shmwin rm` if it is junk\n")
            continue
        idle = r.idle_s if r.idle_s is not None else r.age_s
        if r.creator_alive or idle <= r.span_s:
            continue
        verb = "would remove" if args.dry_run else "removed"
        if args.dry_run or segment.unlink(r.name):
            removed += 1
            out.write(f"{verb} {r.name} (creator {r.creator_pid} dead, idle {_human_s(idle)} > span)\n")
    if not removed:
        out.write("nothing to remove\n")
    return 0


def cmd_watch(args: argparse.Namespace, out: TextIO) -> int:
    path = segment.path_of(args.name)
    with _open(args.name) as w, _keys_without_echo(sys.stdin) as keys:
        try:
            while True:
                if not os.path.exists(path):
                    out.write(f"\nwindow {args.name!r} was removed; bye\n")
                    return 0
                snap = metrics.snapshot(w, last=args.last, top=args.top)
                out.write("\x1b[H\x1b[2J" + time.strftime("%H:%M:%S  ") + _render(snap))
                out.write("\n(q to quit)\n")
                out.flush()
                if keys.wait(args.interval) == "q":
                    return 0
        except KeyboardInterrupt:
            return 0


class _Keys:
    def __init__(self, stream: TextIO | None):
        self._stream = stream

    def wait(self, seconds: float) -> str | None:
        """Wait up to ``seconds`` for a key press; the key, or None."""
        if self._stream is None:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select([self._stream], [], [], seconds)
        return os.read(self._stream.fileno(), 1).decode(errors="replace") if ready else None


@contextlib.contextmanager
def _keys_without_echo(stream: TextIO) -> Iterator[_Keys]:
    """Read single key presses when on a terminal; restore the terminal however we leave."""
    if not stream.isatty():
        yield _Keys(None)
        return
    import termios
    import tty

    saved = termios.tcgetattr(stream.fileno())
    try:
        tty.setcbreak(stream.fileno())
        yield _Keys(stream)
    finally:
        termios.tcsetattr(stream.fileno(), termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _open(name: str) -> Iterator[Any]:
    w = metrics.open_window(name)
    try:
        yield w
    finally:
        w.close()


# -- entry point ----------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="shmwin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, example: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_text, description=f"{help_text}\n\nexample:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip

    p = command("ls", "List every window on this host.", "shmwin ls --json")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_ls)

    p = command("show", "Totals, rates and sparklines of one window, per resolution.",
                "shmwin show api --last 10s --key 'GET /users'")  # fmt: skip
    p.add_argument("name")
    p.add_argument("--key", help="one key of a keyed window (default: every key)")
    p.add_argument("--last", help="a span such as 10s, 5m, 1h (default: each resolution's span)")
    p.add_argument("--top", type=int, default=10, help="busiest keys to list (keyed windows)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=cmd_show)

    p = command("watch", "A live view of one window, refreshed in place; q or Ctrl-C quits.",
                "shmwin watch api --interval 0.5")  # fmt: skip
    p.add_argument("name")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    p.add_argument("--last", help="a span such as 10s (default: each resolution's span)")
    p.add_argument("--top", type=int, default=10, help="busiest keys to show (keyed windows)")
    p.set_defaults(run=cmd_watch)

    p = command("export", "One snapshot of a window for scripts and cron.",
                "shmwin export api --format prometheus > /var/lib/node_exporter/api.prom")  # fmt: skip
    p.add_argument("name")
    p.add_argument("--format", choices=("json", "prometheus"), default="json")
    p.add_argument("--top", type=int, default=100, help="keys to export (keyed windows)")
    p.set_defaults(run=cmd_export)

    p = command("rm", "Remove windows (processes attached keep their mapping).", "shmwin rm api")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.set_defaults(run=cmd_rm)

    p = command("gc", "Remove windows whose creator is dead and that were idle for a whole span.",
                "shmwin gc --dry-run")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.set_defaults(run=cmd_gc)
    return top


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return int(args.run(args, out))
    except FileNotFoundError as exc:
        sys.stderr.write(f"shmwin: {exc}\n")
        return 2
    except (ShmwinError, ValueError) as exc:
        sys.stderr.write(f"shmwin: {args.command}: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
