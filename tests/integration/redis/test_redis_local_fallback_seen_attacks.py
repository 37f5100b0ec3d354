"""on_error="local" as the tools see it, attacked from outside: ``shmwin show`` (NAME and
NAME.local), the Prometheus export and ``fallback_status`` must say the fallback is active and
since when while the server is away, and stop once a call gets through. The server is a real
one, SIGSTOPped (support/fallback.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.fallback import BACKENDS, TIMEOUT_S, S, frozen, open_local, until_back, url_of

from shmwin import Limiter, ManualClock
from shmwin import local_share as local_share_module


@pytest.fixture
def probe_every_call(monkeypatch):
    monkeypatch.setattr(local_share_module, "PROBE_S", 0.0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_fallback_is_reported_over_as_soon_as_the_server_answers(own_redis, name, kind, probe_every_call):
    """``shmwin show NAME.local`` and the export say ACTIVE while away, and stop once a call got
    through (failed on main: still active for ACTIVE_S = 5 s after the switch back, since the
    record held only the failures). The host's clock: ``shmwin show`` reads with it."""
    lim = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    try:
        assert lim.hit("k")
        with frozen(own_redis):
            lim.hit("k")
            away = local_share_module.fallback_status(name)
        until_back(lim)
        back = local_share_module.fallback_status(name)
        shown = subprocess.run([sys.executable, "-m", "shmwin", "show", "--json", name + ".local"],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
        assert away is not None and away["active"], away
        assert back is not None and not back["active"], back  # the run is over, its times kept
        assert abs(back["since"] - away["since"]) <= 1.5, (away, back)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["fallback"]["active"] is False, shown.stdout
    finally:
        lim.unlink()
        lim.close()


def test_show_name_of_a_redis_limiter_on_its_share_shows_the_share(own_redis, name):
    """``shmwin show NAME`` of a redis:// limiter (no segment NAME on the host), and ``shmwin show
    --backend URL NAME`` while that server is away, show the host's share and that the fallback
    is active (failed on main: "no window named" / "unavailable", exit 2)."""
    lim = Limiter(name, "10/minute", backend=own_redis.url, on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    show = [sys.executable, "-m", "shmwin", "show"]
    try:
        assert lim.hit("k")
        with frozen(own_redis):
            assert lim.hit("k")  # on the share now
            runs = [subprocess.run([*show, *how, name], capture_output=True, text=True, timeout=60)
                    for how in ([], ["--json"], ["--backend", own_redis.url, "--json"])]  # fmt: skip
        for done in runs:
            assert done.returncode == 0, (done.args, done.stdout, done.stderr)
        assert "fallback: ACTIVE since" in runs[0].stdout, runs[0].stdout
        for done in runs[1:]:
            snap = json.loads(done.stdout)
            assert snap["name"] == name + ".local" and snap["fallback"]["active"] is True, snap
        assert "local share" in runs[0].stderr, runs[0].stderr  # it says what it shows instead
    finally:
        lim.unlink()
        lim.close()


def test_the_export_of_a_limiter_named_exactly_says_its_fallback(own_redis, name):
    """The Prometheus export asked for one limiter by its name (``exposition([NAME])``, ``shmwin
    export --format prometheus NAME``) has its shmwin_fallback_active while the host is on its
    share (failed on main: only a glob that also matched ``NAME.local.away`` had it)."""
    from shmwin.integrations.prometheus import exposition

    lim = Limiter(name, "10/minute", backend=own_redis.url, on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    try:
        assert lim.hit("k")
        with frozen(own_redis):
            assert lim.hit("k")
            text = exposition([name])
            cli = subprocess.run([sys.executable, "-m", "shmwin", "export", "--format", "prometheus", name],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
        for out in (text, cli.stdout):
            assert f'shmwin_fallback_active{{window="{name}"}} 1.0' in out, (out, cli.stderr)
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_new_outage_after_a_switch_back_is_a_new_run(own_redis, name, kind, probe_every_call, monkeypatch):
    """Away, back, and away again 30 s later (on the writers' clock): the fallback is active
    since the second outage began, not the first (failed on main: quiet spells under GAP_S
    joined the two outages into one run, though a call got through in between)."""
    monkeypatch.setattr(local_share_module, "CLOCK_EVERY", 1)
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, fallback="3/minute")
    try:
        assert lim.test("k")
        with frozen(own_redis):
            lim.hit("k")
            first = local_share_module.fallback_status(name, clock)
        until_back(lim)
        clock.advance(30)
        with frozen(own_redis):
            lim.hit("k")
            clock.advance(2)
            lim.hit("k")
            second = local_share_module.fallback_status(name, clock)
        assert first is not None and second is not None and second["active"], (first, second)
        assert abs(second["since"] - (second["last"] - 2)) <= 1, second  # the second outage's start
    finally:
        lim.unlink()
        lim.close()
