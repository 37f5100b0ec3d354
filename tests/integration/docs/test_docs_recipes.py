"""The docs' deployment recipes (docs/deploying.md), run as they are written there.

Every code block of README.md or docs/**/*.md preceded by ``<!-- recipe: NAME -->`` is taken
from the page itself and run here, with only this test's segment prefix for ``myapp``, a free
port for 8000, loopback for 0.0.0.0 and 2 workers for 4: Flask-Limiter under a real gunicorn,
slowapi and limits.aio under a real uvicorn started by the docs' ``serve.py``, the
Prometheus collector in the gunicorn app and ``shmwin export`` for node_exporter, the
compose and Kubernetes snippets. The memory table under ``<!-- memory-table -->`` is
measured again (``st_blocks`` of every segment), and Docker's default 64 MiB ``/dev/shm``
is filled in a private tmpfs of that size until the first ``OutOfSpaceError``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli_support import promtool_check
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace
from support.servers import ROOT, Server, free_port, get, hammer, python_module

import shmwin
from shmwin.inspector.attached import attached

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]  # where recipes may stand
RECIPE = re.compile(r"^<!-- recipe: ([a-z0-9-]+) -->\n```[a-z]+\n(.*?)^```$", re.MULTILINE | re.DOTALL)
RUN_HERE = {
    "flask-app", "gunicorn-conf", "fastapi-slowapi", "uvicorn-serve", "fastapi-aio", "compose", "kubernetes",
    "flask-metrics", "textfile-export",
}  # fmt: skip
MIB = 1 << 20


def recipes() -> dict[str, str]:
    found: dict[str, str] = {}
    for page in PAGES:
        for name, code in RECIPE.findall(page.read_text()):
            assert name not in found, f"two recipes are named {name!r} (one in {page.relative_to(ROOT)})"
            found[name] = code
    return found


def _page_with(marker: str) -> str:
    """The text of the one page of the docs that holds ``marker``."""
    (text,) = [t for t in (p.read_text() for p in PAGES) if marker in t]
    return text


def test_every_recipe_in_the_docs_is_run_here():
    assert set(recipes()) == RUN_HERE


def _adapt(code: str, prefix: str, port: int) -> str:
    """The recipe as this test runs it: its own segment prefix, port, loopback, 2 workers."""
    code = code.replace("myapp", prefix).replace("0.0.0.0", "127.0.0.1").replace("8000", str(port))
    return re.sub(r"workers( ?= ?)4", r"workers\g<1>2", code)


def _app_dir(tmp_path: Path, prefix: str, port: int, files: dict[str, list[str]]) -> Path:
    """Write each file from the recipes named for it, joined, into a fresh directory."""
    found = recipes()
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    for filename, names in files.items():
        (app_dir / filename).write_text("\n\n".join(_adapt(found[n], prefix, port) for n in names))
    return app_dir


def _segments(prefix: str) -> list[str]:
    return [n for n in shmwin.names() if n.startswith(prefix + ".")]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"SHMWIN_LOG_DIR": str(tmp_path)}


def _limit_holds_across_workers(server: Server, prefix: str) -> None:
    """12 requests to the 5/minute route pass exactly 5 times; more batches, all refused,
    until two workers have the limit's segment open (so both answered from it)."""
    statuses, _ = hammer(server.port, 12, "/login")
    assert statuses == {200: 5, 429: 7}, server.output()
    (segment,) = _segments(prefix)  # the one limit: <prefix>.moving.5.1m
    assert segment == f"{prefix}.moving.5.1m"
    deadline = time.monotonic() + 30  # a worker still importing its app accepts nothing yet
    while len(attached(segment).pids) < 2 and time.monotonic() < deadline:
        assert hammer(server.port, 12, "/login")[0] == {429: 12}, server.output()
        time.sleep(0.05)
    assert len(attached(segment).pids) >= 2, "one worker answered every request"


def _gunicorn(app_dir: Path, port: int, tmp_path: Path) -> Server:
    import gunicorn.config

    control = ["--no-control-socket"] if hasattr(gunicorn.config, "ControlSocket") else []  # gunicorn >= 24
    args = python_module("gunicorn", "-c", "gunicorn.conf.py", *control, "app:app")
    return Server(args, port, _env(tmp_path), cwd=app_dir)


def test_flask_limiter_under_gunicorn(make_name, tmp_path):
    pytest.importorskip("flask_limiter")
    prefix, port = make_name("app"), free_port()
    files = {"app.py": ["flask-app"], "gunicorn.conf.py": ["gunicorn-conf"]}
    server = _gunicorn(_app_dir(tmp_path, prefix, port, files), port, tmp_path)
    try:
        _limit_holds_across_workers(server, prefix)
    finally:
        assert server.stop() == 0
    assert _segments(prefix) == []  # on_exit removed the storage's segments
    assert f"removed 1 segment(s) of storage {prefix!r}" in Path(server.log.name).read_text()


@pytest.mark.parametrize("app", ["fastapi-slowapi", "fastapi-aio"])
def test_fastapi_under_uvicorn_workers(make_name, tmp_path, app):
    pytest.importorskip("slowapi")
    prefix, port = make_name("app"), free_port()
    app_dir = _app_dir(tmp_path, prefix, port, {"main.py": [app], "serve.py": ["uvicorn-serve"]})
    server = Server([sys.executable, "serve.py"], port, _env(tmp_path), cwd=app_dir)
    try:
        _limit_holds_across_workers(server, prefix)
    finally:
        assert server.stop() == 0
    assert _segments(prefix) == []  # serve.py's finally removed them once the workers were gone


def _samples(text: str, window: str) -> dict[str, float]:
    """``family`` -> value for the ``hits`` samples of ``window`` (one resolution each)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("window") == window and s.labels.get("field", "hits") == "hits":
                assert s.name not in found, f"two {s.name} samples for {window}"
                found[s.name] = s.value
    return found


STRATEGY_LINE = '    strategy="moving-window",  # exact, as on memory://; "fixed-window" is the default\n'


@pytest.mark.parametrize("strategy", ["moving-window", "fixed-window"])
def test_prometheus_in_the_gunicorn_app_and_shmwin_export(make_name, tmp_path, strategy):
    """The docs' recipe as written (moving window), and with its ``strategy=`` line taken
    out: Flask-Limiter's default, the fixed window, whose counts every tool must read too."""
    pytest.importorskip("flask_limiter")
    pytest.importorskip("prometheus_client")
    prefix, port = make_name("app"), free_port()
    files = {"app.py": ["flask-app", "flask-metrics"], "gunicorn.conf.py": ["gunicorn-conf"]}
    app_dir = _app_dir(tmp_path, prefix, port, files)
    if strategy == "fixed-window":
        app = (app_dir / "app.py").read_text()
        assert STRATEGY_LINE in app
        (app_dir / "app.py").write_text(app.replace(STRATEGY_LINE, ""))
    server = _gunicorn(app_dir, port, tmp_path)
    # limits' fixed window counts every request (12), its moving window the admitted ones (5)
    moving = strategy == "moving-window"
    window, value = (f"{prefix}.moving.5.1m", 5) if moving else (f"{prefix}.fixed.1m", 12)
    try:
        assert hammer(server.port, 12, "/login")[0] == {200: 5, 429: 7}
        for _ in range(4):  # whichever worker answers, the same numbers
            status, text = get(port, "/metrics")
            assert status == 200, text
            seen = _samples(text, window)
            assert seen["shmwin_window_value"] == value, text
            assert seen.get("shmwin_limiter_limit") == (5 if moving else None)
            assert seen["shmwin_window_keys"] == 1 and seen["shmwin_window_readable"] == 1
        assert not [line for line in text.splitlines()
                    if line.startswith("shmwin_window_readable") and line.endswith(" 0.0")], text
        promtool_check(text)
        shown = subprocess.run([sys.executable, "-m", "shmwin", "show", f"{prefix}.*"], env=_cli_env(),
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert shown.returncode == 0 and not shown.stderr, shown
        assert re.search(rf"^{re.escape(window)} \(", shown.stdout, re.M), shown.stdout
        total = rf"^\s+period 1m: 1 key counting, {value} in all"
        assert re.search(total, shown.stdout, re.M), shown.stdout
        textfile = tmp_path / "textfile"
        textfile.mkdir()
        export = recipes()["textfile-export"].replace("myapp", prefix)
        export = export.replace("/var/lib/node_exporter/textfile", str(textfile))
        subprocess.run(["bash", "-ec", export], env=_cli_env(), check=True, timeout=60)
        assert sorted(p.name for p in textfile.iterdir()) == ["shmwin.prom"]
        exported = (textfile / "shmwin.prom").read_text()
        promtool_check(exported)
        assert _samples(exported, window)["shmwin_window_value"] == value
        as_json = subprocess.run([sys.executable, "-m", "shmwin", "export", f"{prefix}.*"], env=_cli_env(),
                                 capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
        (snap,) = [s for s in json.loads(as_json.stdout) if s["name"] == window]
        if moving:  # role moving-log: the hits of the last period, and the limit
            assert snap["moving-log"]["total"] == value and snap["moving-log"]["limit"] == 5
        else:  # per-key state (role fixed-window): each key's live count
            assert snap["fixed-window"]["total"] == value and snap["top"][0][1] == value
    finally:
        assert server.stop() == 0
    assert _segments(prefix) == []


def _cli_env() -> dict[str, str]:
    """The environment for the shmwin command and the docs' shell snippets."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                PYTHONPATH=str(ROOT))  # fmt: skip


def test_the_container_snippets_give_dev_shm_its_size():
    yaml = pytest.importorskip("yaml")
    found = recipes()
    web = yaml.safe_load(found["compose"])["services"]["web"]
    assert web["shm_size"] == "256m" and "gunicorn.conf.py" in web["command"]
    pod = yaml.safe_load(found["kubernetes"])
    (volume,) = pod["volumes"]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    (container,) = pod["containers"]
    assert {"name": volume["name"], "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["resources"]["limits"]["memory"]


# -- memory: the docs' table, measured again ------------------------------------------------------

MEASURE = """
import json, os, sys, time
now = [1_800_000_000.0]
time.time = lambda: now[0]   # limits and shm:// read the wall clock through time.time
import shmwin.integrations.limits
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES
from shmwin.errors import OutOfSpaceError
from shmwin.backends.shm.segment import unlink_prefix

def held(prefix):
    return sum(os.stat("/dev/shm/" + e).st_blocks * 512 for e in os.listdir("/dev/shm")
               if e.startswith("shmwin." + prefix + "."))

prefix, strategy, rate, query = sys.argv[1:5]
clients, periods, max_step = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
limiter = STRATEGIES[strategy](storage_from_string("shm://" + prefix + query))
item = parse(rate)
step = min(item.get_expiry() / max(clients, 1000), max_step)
fit = 0
try:
    for period in range(periods):  # each client comes back once a period: the steady state
        for c in range(clients):
            now[0] += step
            limiter.hit(item, f"10.{c >> 16}.{(c >> 8) & 255}.{c & 255}", "/login")
            fit = max(fit, c + 1)
except OutOfSpaceError:
    assert limiter.hit(item, "10.0.0.0", "/login")  # a known client is still counted
out = {"held": held(prefix), "fit": fit}
unlink_prefix(prefix)
print(json.dumps(out))
"""


def _memory_table() -> dict[tuple[str, str, int], float]:
    """(strategy, URI query, limit) -> KiB per client, from the docs' table; a row that
    names no strategy ("the same with `?buckets=20`") is the row above's with that query."""
    text = _page_with("<!-- memory-table -->\n").split("<!-- memory-table -->\n", 1)[1]
    rows = [line.strip("|").split("|") for line in text.split("\n\n", 1)[0].splitlines()]
    limits = [int(re.sub(r"\D", "", cell)) for cell in rows[0][1:]]
    table = {}
    strategies: list[str] = []
    for row in rows[2:]:
        strategies = re.findall(r"`([a-z-]+)`", row[0]) or strategies
        query = "".join(re.findall(r"`(\?[a-z]+=\d+)`", row[0]))
        for strategy in strategies:
            for limit, cell in zip(limits, row[1:], strict=True):
                table[(strategy, query, limit)] = float(cell.replace("KiB", "").replace(",", ""))
    return table


def _measure(
    prefix: str, strategy: str, rate: str, clients: int, periods: int, query: str = "",
    max_step_s: float = float("inf"), **namespace
) -> dict:  # fmt: skip
    """Run MEASURE (in a private /dev/shm if ``namespace`` gives its size): bytes held, clients fit.
    The clients of a period are spread over the period, ``max_step_s`` apart at most."""
    argv = python_argv(MEASURE, prefix, strategy, rate, query, str(clients), str(periods), str(max_step_s))
    if namespace:
        proc = run_in_namespace(argv, hidepid=None, **namespace)
    else:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert proc.returncode == 0, describe(proc)
    return dict(json.loads(proc.stdout))


def test_the_memory_table_is_what_a_thousand_clients_hold(make_name):
    """Each cell: 1,000 clients on one limit, in the steady state (4 periods are measured
    for fixed windows, 2 for the others), per client; the docs' figure is rounded up, and
    not far above."""
    table = _memory_table()
    assert len(table) == 12, table
    measured = {}
    for strategy, query, limit in table:
        rate = f"{limit}/minute" if limit <= 5 else f"{limit}/hour"
        periods = 4 if strategy == "fixed-window" else 2
        held = _measure(make_name("mem"), strategy, rate, 1000, periods, query)["held"]
        measured[(strategy, query, limit)] = held / 1000 / 1024
    for cell, kib in table.items():  # fixed windows vary more with where their periods start
        low = 0.6 if cell[0] == "fixed-window" else 0.75
        assert low * kib <= measured[cell] <= kib, f"{cell}: the docs say {kib} KiB, measured {measured}"


# each a test of its own: ~17 s each, they spread over the suite's workers
DOCKER_CLAIMS = {
    "100/hour": "holds about 800,000 live clients of `100/hour`",
    "5/minute": "800,000 of `5/minute`",
    "1000/day": "800,000 of `1000/day`",
}


@needs_namespace
@pytest.mark.parametrize("rate", DOCKER_CLAIMS)
def test_dockers_default_dev_shm_holds_what_the_docs_say(make_name, rate):
    """In a private 64 MiB tmpfs (Docker's default ``/dev/shm``), clients come until the
    first OutOfSpaceError; a known client is still counted after it."""
    text = " ".join(_page_with("<!-- memory-table -->").split())  # as if on one line
    claim = DOCKER_CLAIMS[rate]
    assert claim in text, f"the docs no longer say {claim!r}"
    said = int(re.search(r"[\d,]+", claim).group().replace(",", ""))
    # The limiter's clock moves 0.5 ms a client at most: 100/hour's pace already (3,600 s over
    # 8,000,000 clients). Spread over a day, 1000/day's moved 10.8 ms a client, and once the
    # tmpfs was full the index's rebuild and reclaim scans (at most once a second of that clock:
    # index.c, may_rebuild) ran every 93 clients: 80% of the test's 26 CPU-s. Either pace keeps
    # every client live to the end (800,000 x 0.5 ms = 400 s, far inside an hour or a day;
    # 5/minute's 7.5 us a client is unchanged), so the same keys hold the same bytes.
    fit = _measure(make_name("docker"), "moving-window", rate, 10 * said, 1, "?on_full=raise",
                   max_step_s=0.0005, shm_size="64m", timeout=600)["fit"]  # fmt: skip  (~3 s alone)
    assert 0.9 * said <= fit <= 1.3 * said, f"{rate}: the docs say {said:,} fit in 64 MiB, {fit:,} did"
