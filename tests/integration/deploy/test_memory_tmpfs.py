"""The memory issue, as a deployment meets it: a 14-limit Flask-Limiter app (tests/apps/
flask_fourteen.py) on the default ``shm://`` storage, in a /dev/shm of Docker's default size.

* In 64 MiB, 200,000 distinct clients each make 1-3 requests to random routes, and every
  answer is the one a strict limiter owes them: 200, or 429 exactly where the client went
  past a route's limit. Never a 500.
* In 8 MiB, 30,000 clients fill the tmpfs: every answer is still 200 or 429 (the storage's
  ``on_full`` policy, not an error), a client known before the tmpfs filled is still
  limited, and ``shmwin ls --json`` counts the requests that met a full table.

Each test runs the app in one process inside a mount namespace with a private tmpfs on
/dev/shm (tests/support/rootenv.py), called straight through WSGI -- no HTTP, no test client -- for
a sample of the clients (every 20th, every 5th in 8 MiB, and the first and last thousand); the
others' requests go through the same app's Flask-Limiter storage and strategy with the keys
Flask-Limiter makes (flask_fourteen.native_caller: the same segments and bytes, ~40 times
cheaper than Flask's ~180 us a request, which made these runs ~500 s of CI), and 400 of those
clients are asked again through the app, which must answer from the counts they left. With
``time.time`` held still (flask_fourteen.FrozenTime: one microsecond per request), so every
window stays live for the whole run and the answers, and where a first error appears, are
the same in every run. The tmpfs vanishes with the namespace: nothing reaches the host's
/dev/shm. The driver stops at the first answer that is neither 200 nor 429 and reports it
(client index, path, status, body and the exception behind it).
"""

from __future__ import annotations

import json

import pytest
from support.helpers import ROOT
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

APPS = str(ROOT / "tests" / "apps")
STRATEGIES = ("fixed-window", "moving-window", "sliding-window-counter")  # flask_fourteen.STRATEGIES

DRIVE = r"""
import collections, json, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import flask
import flask_fourteen as ff

name, strategy, n_clients, then = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
flask_every, flask_ends = int(sys.argv[6]), int(sys.argv[7])
app = ff.create_app(name, strategy)
native = ff.native_caller(app)
raised = []
flask.got_request_exception.connect(lambda sender, exception, **kw: raised.append(repr(exception)), app,
                                    weak=False)
app.logger.disabled = True  # the exception is reported below, once, without a traceback per request


def through_flask(client):
    return client % flask_every == 0 or client < flask_ends or client >= n_clients - flask_ends


def serve(r):
    if through_flask(r.client):
        return ff.call(app, r.addr, r.path)
    try:
        return native(r.addr, r.rule), b""
    except Exception as exc:  # what Flask-Limiter would answer with a 500
        raised.append(repr(exc))
        return 500, b""


result = {"answers": {}, "first_bad": None, "mismatches": 0, "first_mismatch": None,
          "via_flask": 0, "crossed": collections.Counter()}
answers, seen = collections.Counter(), collections.Counter()
native_served = {}  # (client, rule) -> (addr, path): asked again through Flask at the end
known = ("10.255.255.254", "/password-reset")  # 1/minute: a client known before the table fills


def check(r, status, crossed=False):
    want = ff.expected_status(r.rule, seen[r.client, r.rule])
    seen[r.client, r.rule] += 1
    if status != want:
        result["mismatches"] += 1
        result["first_mismatch"] = result["first_mismatch"] or {
            "client": r.client, "path": r.path, "status": status, "expected": want, "crossed": crossed}
    return want


started = time.perf_counter()
with ff.FrozenTime() as clock:
    result["known_first"] = ff.call(app, *known)[0]
    for r in ff.requests(n_clients):
        clock.tick()
        status, body = serve(r)
        answers[status] += 1
        result["via_flask"] += through_flask(r.client)
        if status not in (200, 429):
            result["first_bad"] = {"client": r.client, "path": r.path, "status": status,
                                   "body": body.decode(errors="replace")[:300], "raised": raised[-1:]}
            break
        check(r, status)
        if not through_flask(r.client) and ff.ROUTES[r.rule] and len(native_served) < 400:
            native_served[r.client, r.rule] = r
    # the app answers a client the native path counted as it would have: the same keys, the same
    # segments (a 429 here is a count that only the native path made)
    for again in native_served.values():
        clock.tick()
        status = ff.call(app, again.addr, again.path)[0]
        result["crossed"][check(again, status, crossed=True)] += 1
    clock.tick()
    result["known_again"] = ff.call(app, *known)[0]
result["seconds"] = round(time.perf_counter() - started, 1)
result["answers"] = dict(answers)
result["clients_done"] = r.client + (result["first_bad"] is None)
if then == "ls":
    ls = subprocess.run([sys.executable, "-m", "shmwin", "ls", "--json"], capture_output=True, text=True)
    result["ls"] = json.loads(ls.stdout) if ls.returncode == 0 else {"error": ls.stderr}
print("RESULT " + json.dumps(result))
"""


def drive(name: str, strategy: str, n_clients: int, shm_size: str, flask_every: int, then: str = "-") -> dict:
    """Drive ``n_clients`` through the app: every ``flask_every``-th client, and the first and
    last thousand, through Flask (WSGI); the others through the app's own limiter and storage
    (flask_fourteen.native_caller), then 400 of those asked again through Flask."""
    proc = run_in_namespace(
        python_argv(DRIVE, APPS, name, strategy, str(n_clients), then, str(flask_every), "1000"),
        shm_size=shm_size, hidepid=None, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0 and "RESULT " in proc.stdout, describe(proc)
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    print(f"{strategy}, {n_clients:,} clients in {shm_size}: {result['seconds']} s, {result['answers']}, "
          f"{result['via_flask']:,} requests through Flask")  # fmt: skip
    assert result["via_flask"] >= 0.05 * sum(result["answers"].values()), result["via_flask"]
    return result


def first_bad(result: dict) -> str:
    bad = result["first_bad"]
    return (
        f"client {bad['client']:,} (of {result['clients_done']:,} served before it) got {bad['status']} "
        f"for {bad['path']}: {bad['raised']} {bad['body']!r}"
    )


# The moving window keeps each client's hit times in memory that follows the hits held (role
# "moving-log": two in the key's 96-byte row, more in chunks from a shared free list), so
# 64 MiB holds this app's 200,000 clients as it does for the other strategies.
@needs_namespace
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_docker_default_dev_shm_serves_200_000_clients(name_prefix, strategy):
    """64 MiB (Docker's default --shm-size): 200,000 clients, ~400,000 requests, and every
    answer is what a strict limiter owes (no 500, no 200 past a limit, no stray 429)."""
    result = drive(name_prefix, strategy, 200_000, "64m", flask_every=20)
    assert result["first_bad"] is None, first_bad(result)
    assert result["clients_done"] == 200_000
    assert result["mismatches"] == 0, result["first_mismatch"]
    # the app read the native path's counts: it refused where they were spent, served where not
    assert result["crossed"].get("429", 0) > 0 and result["crossed"].get("200", 0) > 0, result["crossed"]
    answers = result["answers"]
    assert set(answers) == {"200", "429"} and answers["429"] > 1_000, answers  # the low limits did refuse
    assert sum(answers.values()) > 2 * 200_000 * 0.95, answers  # 1-3 requests each, 2 on average
    assert (result["known_first"], result["known_again"]) == (200, 429)


@needs_namespace
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_full_dev_shm_answers_200_or_429_and_ls_counts_it(name_prefix, strategy):
    """8 MiB cannot hold 30,000 clients: past the point where it is full, the app goes on
    answering 200 or 429 (on_full) and never 500; a client known before still gets its 429;
    ``shmwin ls --json`` says how many requests met a full table."""
    result = drive(name_prefix, strategy, 30_000, "8m", flask_every=5, then="ls")
    assert result["first_bad"] is None, first_bad(result)
    assert result["clients_done"] == 30_000
    assert set(result["answers"]) <= {"200", "429"} and result["answers"]["200"] > 0, result["answers"]
    # its key was made before the tmpfs filled: still counted, still limited (1/minute)
    assert (result["known_first"], result["known_again"]) == (200, 429)

    listed = result["ls"]
    assert "windows" in listed, listed
    ours = [w for w in listed["windows"] if w["name"].startswith(name_prefix)]
    assert ours and all(w["error"] is None for w in ours), ours
    assert listed["shm"]["size_bytes"] == 8 * 2**20
    # `full`: each keyed segment's count of requests that met a full table (the FULL column)
    assert all("full" in w for w in ours), sorted(ours[0])
    met_full = sum(w["full"] or 0 for w in ours)
    requests = sum(result["answers"].values())
    assert 0 < met_full <= requests, (met_full, requests, {w["name"]: w["full"] for w in ours})
