"""`shmwin --backend redis://...`: the same views of a real redis-server's windows and limiters."""

from __future__ import annotations

import json

from support.cli_support import cli, promtool_check

from shmwin import Limiter, Window


def test_ls_show_and_export_of_redis_windows(redis_server, make_name):
    url = redis_server.url
    routes, login = make_name("routes"), make_name("login")
    w = Window(routes, span=60, buckets=60, fields=("req", "err"), capacity=16, backend=url)
    lim = Limiter(login, "5/minute;100/hour", backend=url)
    try:
        for key, n in (("GET /a", 3), ("GET /b", 9)):
            w.add(n, "req", key=key)
        w.add(1, "err", key="GET /a")
        for _ in range(7):
            lim.hit("203.0.113.7")
        lim.hit("198.51.100.1")

        listed = {r["name"]: r for r in json.loads(cli("ls", "--backend", url, "--json").stdout)["windows"]}
        assert listed[routes]["kind"] == "window" and listed[routes]["keys"] == 2
        assert listed[routes]["resolutions"] == ["1m/1s"] and listed[routes]["fields"] == ["req", "err"]
        assert listed[login]["kind"] == "limiter" and listed[login]["rates"] == ["5/minute", "100/hour"]
        assert routes in cli("ls", "--backend", url).stdout

        snap = json.loads(cli("show", routes, "--backend", url, "--json").stdout)
        assert snap["resolutions"][0]["totals"] == {"req": 12, "err": 1}
        assert snap["top"] == [["GET /b", 9], ["GET /a", 3]]
        shown = json.loads(cli("show", login, "--backend", url, "--json").stdout)
        assert [(e["key"], [r["used"] for r in e["rates"]]) for e in shown["top"]] == [
            ("203.0.113.7", [5, 5]), ("198.51.100.1", [1, 1]),
        ]  # fmt: skip
        assert [r["resolution"] for r in shown["resolutions"]] == ["1m/3s", "1h/3m"]
        assert "203.0.113.7" in cli("show", login, "--backend", url).stdout

        text = cli("export", routes, login, "--backend", url, "--format", "prometheus", "--top", "5").stdout
        promtool_check(text)
        assert f'shmwin_window_value{{field="req",resolution="1m/1s",window="{routes}"}} 12.0' in text
        assert f'shmwin_limiter_limit{{resolution="1m/3s",window="{login}"}} 5.0' in text
        assert 'key="GET /b"' in text

        missing = cli("show", make_name("missing"), "--backend", url, check=False)
        assert missing.returncode == 2 and "no window named" in missing.stderr
        removed = cli("rm", routes, login, "--backend", url)  # for every host: geometry and counts
        assert removed.stdout.splitlines() == [
            f"removed {n} from {url} (processes that still have it open write on: restart them)"
            for n in (routes, login)
        ], removed.stdout  # fmt: skip
        assert routes not in cli("ls", "--backend", url).stdout
        gone = cli("rm", routes, "--backend", url, check=False)
        assert gone.returncode == 1 and f"no window named {routes!r}" in gone.stdout, gone
    finally:
        for x in (w, lim):
            x.unlink()
            x.close()


def test_an_unreachable_redis_is_a_clear_error(own_redis):
    url = own_redis.url
    own_redis.stop()
    down = cli("ls", "--backend", url, check=False)
    assert down.returncode == 2 and "unavailable" in down.stderr and "Traceback" not in down.stderr
