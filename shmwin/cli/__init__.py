"""``shmwin``: look at the windows on this host. Read-only unless told to remove.

shmwin ls                          every window: kind, fields, size, keys, processes, idle; /dev/shm use
shmwin show 'api*' --last 10s      totals, rates and sparklines per field and resolution
shmwin show login                  a limiter: its busiest keys, used / remaining / reset per rate
shmwin show payments               a breaker: drop ratio, accepts, total; a shedder: in flight,
                                   passes, drops, min RT, max in flight; an adaptive limiter's rates
shmwin watch api                   a live view; q or Ctrl-C quits
shmwin export --format prometheus  every window (or some: names, globs) for scripts and cron
shmwin rm api                      remove a window no process has open (--force: even then;
                                   --backend URL: from Redis)
shmwin gc --dry-run                what gc would remove: idle for a whole span, open in no process
shmwin ls --backend redis://host   the same views of a Redis server's windows
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from ..errors import ShmwinError
from . import commands


def _version() -> str:
    from .. import __version__

    return f"shmwin {__version__}"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="shmwin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    top.add_argument("--version", action="version", version=_version())
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--backend", metavar="URL",
        help="look at the windows of a Redis server (redis://host:6379/0) or cluster (redis+cluster://host:7000/)",
    )  # fmt: skip
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, example: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help_text, description=f"{help_text}\n\nexample:\n  {example}", parents=[common],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip

    p = command("ls", "List windows: kind (or what they are for: breaker, shedder, in-flight, "
                "adaptive, health), fields, size in /dev/shm, keys, processes that have them open, "
                "age, idle time; then /dev/shm's use.", "shmwin ls --json")  # fmt: skip
    p.add_argument("patterns", nargs="*", metavar="NAME", help="names or globs (default: every window)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=commands.cmd_ls)

    p = command("show", "Totals, rates and sparklines of windows, per resolution; for a limiter, "
                "its busiest keys' used / remaining / reset; for a breaker, shedder or adaptive "
                "limiter, what it decides by.",
                "shmwin show 'api-*' --last 10s --key 'GET /users'")  # fmt: skip
    p.add_argument("names", nargs="+", metavar="NAME", help="names or globs such as 'api-*'")
    p.add_argument("--key", help="one key of a keyed window or limiter (default: every key)")
    p.add_argument("--last", help="a span such as 10s, 5m, 1h (default: each resolution's span)")
    p.add_argument("--top", type=_count, default=10, help="busiest keys to list (keyed windows, limiters)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=commands.cmd_show)

    p = command("watch", "A live view of one window, redrawn in place to fit the terminal; "
                "q or Ctrl-C quits.", "shmwin watch api --interval 0.5")  # fmt: skip
    p.add_argument("name", help="a name, or a glob matching one window")
    p.add_argument("--interval", type=_interval, default=1.0, help="seconds between refreshes")
    p.add_argument("--key", help="one key of a keyed window or limiter")
    p.add_argument("--last", help="a span such as 10s (default: each resolution's span)")
    p.add_argument("--top", type=_count, default=10, help="busiest keys to show (keyed windows, limiters)")
    p.set_defaults(run=commands.cmd_watch)

    p = command("export", "One snapshot of windows (every one by default) for scripts and cron.",
                "shmwin export --format prometheus > /var/lib/node_exporter/shmwin.prom")  # fmt: skip
    p.add_argument("names", nargs="*", metavar="NAME", help="names or globs (default: every window)")
    p.add_argument("--format", choices=("json", "prometheus"), default="json",
                   help="json: an object for one name, else a list; prometheus: text 0.0.4")  # fmt: skip
    p.add_argument("--top", type=_count, default=None,
                   help="busiest keys per keyed window: listed in json (default 10); in prometheus, "
                   "series of their own (default 0: none; at most 1000)")  # fmt: skip
    p.add_argument("--metrics", metavar="APP",
                   help="prometheus_client's metrics of app APP (docs/metrics.md)")  # fmt: skip
    p.set_defaults(run=commands.cmd_export)

    p = command("rm", "Remove windows. A window some process has open is kept (they are named) "
                "unless --force. With --backend, from a Redis server or cluster, for every host "
                "(Redis cannot say who has it open).",
                "shmwin rm 'test-*'\n  shmwin rm --backend redis://10.0.0.5:6379/0 routes")  # fmt: skip
    p.add_argument("names", nargs="+", metavar="NAME", help="names or globs")
    p.add_argument("--force", action="store_true",
                   help="remove even windows in use (their processes keep the old one)")  # fmt: skip
    p.set_defaults(run=commands.cmd_rm)

    p = command("set", "Change a live limiter's rates (a token bucket's rate and burst, a concurrency's "
                "limit) for every process that uses it, at each one's next call (the counts carried "
                "over: docs/operating.md, \"Changing limits live\").",
                "shmwin set api '200/minute;5000/hour'; shmwin set tb 10/second --burst 20; "
                "shmwin set conc 8")  # fmt: skip
    p.add_argument("name", help="a shared-memory limiter's, token bucket's or concurrency's name")
    p.add_argument("rates", help="its new rates, such as '200/minute' or '10/second;200/minute' (a token "
                   "bucket's rate; a concurrency's limit: a whole number of holders)")  # fmt: skip
    p.add_argument("--burst", type=_count, default=None, help="a token bucket's new burst (default: kept)")
    p.add_argument("--reset", action="store_true", help="start the counts again from zero (a concurrency: "
                   "the slots held are forgotten)")  # fmt: skip
    p.set_defaults(run=commands.cmd_set)

    p = command("gc", "Remove windows idle for a whole span that no live process has open.",
                "shmwin gc --dry-run 'myapp-*'")  # fmt: skip
    p.add_argument("patterns", nargs="*", metavar="NAME", help="names or globs (default: every window)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    p.add_argument("--force", action="store_true",
                   help="also when some processes could not be checked (hidepid, other users)")  # fmt: skip
    p.set_defaults(run=commands.cmd_gc)
    return top


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _interval(text: str) -> float:
    value = float(text)
    if not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0.05 and 3600 seconds, not {text}")
    return value


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return int(args.run(args, out))
    except FileNotFoundError as exc:
        sys.stderr.write(f"shmwin: {exc}\n")
        return 2
    except (ShmwinError, ValueError, LookupError) as exc:
        sys.stderr.write(f"shmwin: {args.command}: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
