"""A typical Flask-Limiter API on the default ``shm://`` storage: 14 limits, clients by address.

The app of the memory issue: 2 default limits (``200 per day``, ``50 per hour``) and 12 routes
each with its own limit. As Flask-Limiter does by default, a route's own limit replaces the
defaults there; the defaults apply to the one undecorated route, ``/``. Every limit is keyed by
the client's address (``get_remote_address``, i.e. ``REMOTE_ADDR``), so each request meets
exactly one route's limits and creates, for a new client, one key per limit it meets.

The storage URI is the default one, ``shm://NAME`` with no option: what a full ``/dev/shm``
does is the storage's default ``on_full``, and a storage error is Flask-Limiter's default
answer, HTTP 500.

Two ways in:

* ``create_app(name, strategy)``, or
* ``flask_fourteen:app`` (gunicorn, ``flask run``), built from ``$SHMWIN_TEST_NAME`` and
  ``$SHMWIN_STRATEGY`` (default ``fixed-window``) on first use.

The rest drives it the fast way, as a WSGI server would, with no HTTP and no test client:
:func:`requests` plans each client's 1-3 requests to random routes (seeded),
:func:`call` makes one request and :func:`expected_status` says what a strict limiter must
answer it while nothing expires (:class:`FrozenTime` holds the clock nearly still).
"""

from __future__ import annotations

import io
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from limits import parse

import shmwin.integrations.limits  # noqa: F401  (registers shm://)

STRATEGIES = ("fixed-window", "moving-window", "sliding-window-counter")
DEFAULT_LIMITS = ["200 per day", "50 per hour"]
# route rule -> its own limit; None: the defaults apply. Realistic, and varied on purpose:
# every period from a second to a day, limits from 1 (the low ones answer 429 to a client
# that comes back) to 1000 (the large exact logs the issue measured).
ROUTES: dict[str, str | None] = {
    "/": None,
    "/login": "5/minute",
    "/signup": "3 per hour",
    "/password-reset": "1/minute",
    "/search": "30/minute",
    "/items": "100/hour",
    "/items/<int:item_id>": "1000/day",
    "/upload": "10 per day",
    "/export": "2/hour",
    "/feed": "10/second",
    "/comments": "20/minute",
    "/profile": "500/day",
    "/status": "60 per minute",
}
LIMITED = [rule for rule, limit in ROUTES.items() if limit is not None]
assert len(DEFAULT_LIMITS) + len(LIMITED) == 14
# rule -> its limit's amount, parsed once: expected_status runs for each of 400,000 requests in
# tests/integration/deploy/test_memory_tmpfs.py, where parsing it each time took 15% of the CPU
AMOUNTS = {rule: parse(limit).amount for rule, limit in ROUTES.items() if limit is not None}


def create_app(name: str, strategy: str) -> Flask:
    """The app on ``shm://NAME`` with limits' ``strategy`` (one of :data:`STRATEGIES`)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {STRATEGIES}")
    app = Flask(f"flask_fourteen.{name}")
    limiter = Limiter(
        get_remote_address,
        app=app,
        default_limits=list(DEFAULT_LIMITS),
        storage_uri=f"shm://{name}",
        strategy=strategy,
    )
    for rule, limit in ROUTES.items():
        view = _view(rule)
        if limit is not None:
            view = limiter.limit(limit)(view)
        app.add_url_rule(rule, view.__name__, view)
    return app


def _view(rule: str) -> Callable[..., str]:
    def view(**params: Any) -> str:
        return f"{rule} {params}" if params else rule

    view.__name__ = rule.strip("/").replace("/", "_").replace("<int:", "").replace(">", "") or "index"
    return view


def __getattr__(attr: str) -> Flask:  # ``flask_fourteen:app``, from the environment, once
    if attr != "app":
        raise AttributeError(attr)
    built = create_app(os.environ["SHMWIN_TEST_NAME"], os.environ.get("SHMWIN_STRATEGY", "fixed-window"))
    globals()["app"] = built
    return built


# -- driving it ------------------------------------------------------------------------------


def address(index: int) -> str:
    """Client ``index``'s address: distinct for every index below 2**24."""
    return f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"


class Request(NamedTuple):  # a tuple: built 400,000 times a run, a frozen dataclass cost 3x as much
    client: int  # the client's index, in order of arrival
    addr: str
    rule: str  # the route's rule, a key of ROUTES
    path: str


def requests(n_clients: int, seed: int = 14) -> Iterator[Request]:
    """Clients 0..n-1 in order, each making 1-3 requests to random routes in a row. The
    addresses are handed out in a random order too (the key table sees no pattern)."""
    rng = random.Random(seed)
    ids = list(range(n_clients))
    rng.shuffle(ids)
    rules = list(ROUTES)
    for client, ident in enumerate(ids):
        addr = address(ident)
        for _ in range(rng.randint(1, 3)):
            rule = rng.choice(rules)
            path = rule.replace("<int:item_id>", str(rng.randrange(1, 10_000)))
            yield Request(client, addr, rule, path)


def environ(addr: str, path: str) -> dict[str, Any]:
    """The WSGI environ a server would pass for ``GET path`` from ``addr``."""
    return {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": addr,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }


def call(app: Any, addr: str, path: str) -> tuple[int, bytes]:
    """One request straight through the WSGI interface: (status code, body)."""
    status: list[str] = []

    def start_response(line: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        status.append(line)
        return lambda data: None

    chunks = app(environ(addr, path), start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return int(status[-1].split(None, 1)[0]), body


def native_caller(app: Flask) -> Callable[[str, str], int]:
    """``call`` without Flask: one request's limits hit through the app's own Flask-Limiter
    storage and strategy (``Limiter.limiter``), with the keys Flask-Limiter makes for it, so
    each answer and each byte of ``/dev/shm`` are the ones the request through WSGI would
    give (the memory tests check it: the app answers clients this path counted). A Flask
    request costs ~180 us here and this ~4 us: it lets the tests drive 200,000 clients
    per strategy in a few seconds, with a sample of them through the real app."""
    (extension,) = app.extensions["limiter"]
    strategy = extension.limiter
    # per rule: its endpoint (Flask-Limiter's scope) and its limits, in the order it tries them
    plans = {rule: (_view(rule).__name__, sorted(parse(x) for x in ([limit] if limit else DEFAULT_LIMITS)))
             for rule, limit in ROUTES.items()}  # fmt: skip

    def native_call(addr: str, rule: str) -> int:
        endpoint, items = plans[rule]
        for item in items:  # Flask-Limiter stops at the first limit breached, with a 429
            if not strategy.hit(item, addr, endpoint, cost=1):
                return 429
        return 200

    return native_call


def expected_status(rule: str, earlier: int) -> int:
    """What a strict limiter answers a client's request to ``rule`` when it made ``earlier``
    requests there before, all still inside every window. Refused hits count or not (limits'
    fixed window counts them, the moving window does not): past the limit, either way, 429."""
    amount = AMOUNTS.get(rule)
    if amount is None:  # the defaults, 50 per hour at least: never reached by 3 requests
        return 200
    return 429 if earlier >= amount else 200


class FrozenTime:
    """``time.time`` held at ``start`` (now, by default: ``shmwin ls`` afterwards, on the real
    clock, sees the keys live), moved only by :meth:`tick` (``step_s`` each): every window
    the app opens stays live for the whole run, and the answers are deterministic."""

    def __init__(self, start: float | None = None, step_s: float = 1e-6):
        self._real = time.time
        self.now, self.step_s = float(int(self._real())) if start is None else start, step_s

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.step_s

    def __enter__(self) -> FrozenTime:
        time.time = self
        return self

    def __exit__(self, *exc: object) -> None:
        time.time = self._real
