"""Readers degrade per window, never per scrape: a window whose sum passes int64, or whose
segment is junk, is an error line in the CLI and ``shmwin_window_readable 0`` in a scrape,
while the windows beside it are still shown and scraped."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli_support import cli, promtool_check

import shmwin
from shmwin import TotalOverflowError, Window
from shmwin.backends.shm.segment import path_of
from shmwin.integrations.prometheus import exposition

HALF = 2**62  # two of them pass int64


def _add_half(name: str) -> None:
    with Window.attach(name) as w:
        w.add(HALF)  # this process's own stripe


def _past_int64(name: str) -> Window:
    """A striped window whose two stripes (this process's and a forked child's) hold 2**62
    each: every bucket and the total are 2**63, one past int64's largest."""
    w = Window(name, span=60, buckets=6)
    w.add(HALF)
    child = mp.get_context("fork").Process(target=_add_half, args=(name,))
    child.start()
    child.join()
    assert child.exitcode == 0
    return w


def _values(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["window"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "window" in s.labels and s.name in ("shmwin_window_value", "shmwin_window_readable")
    }


@pytest.fixture
def big_and_ok(make_name):
    big, ok = make_name("big"), make_name("ok")
    with _past_int64(big) as b, Window(ok, span=60, buckets=6) as o:
        o.add(3)
        with pytest.raises(TotalOverflowError, match="past int64"):
            b.total()
        with pytest.raises(OverflowError):  # still the builtin a caller would catch
            b.total()
        yield big, ok
        b.unlink()
        o.unlink()


def test_a_scrape_reports_the_window_past_int64_and_shows_the_other(big_and_ok):
    big, ok = big_and_ok
    text = exposition([big, ok])
    promtool_check(text)
    seen = _values(text)
    assert seen[("shmwin_window_readable", big)] == 0
    assert ("shmwin_window_value", big) not in seen  # nothing half-added for it
    assert seen[("shmwin_window_readable", ok)] == 1
    assert seen[("shmwin_window_value", ok)] == 3


def test_the_cli_names_the_window_past_int64_and_shows_the_other(big_and_ok, name_prefix):
    big, ok = big_and_ok
    globbed = cli("show", f"{name_prefix}-*", check=False)
    assert globbed.returncode == 0, globbed
    assert globbed.stderr.startswith(f"shmwin: {big}: ") and "past int64" in globbed.stderr
    assert "Traceback" not in globbed.stderr
    assert f"{ok} (window)" in globbed.stdout and big not in globbed.stdout

    named = cli("show", big, ok, check=False)  # named explicitly: still shows ok, exits 2
    assert named.returncode == 2, named
    assert f"{ok} (window)" in named.stdout
    assert named.stderr.count("shmwin: ") == 1 and f"shmwin: {big}: " in named.stderr

    exported = cli("export", f"{name_prefix}-*", check=False)
    assert exported.returncode == 0 and f"shmwin: {big}: " in exported.stderr
    assert [s["name"] for s in json.loads(exported.stdout)] == [ok]
    assert cli("export", big, check=False).returncode == 2

    prom = cli("export", "--format", "prometheus", f"{name_prefix}-*", check=False)
    assert prom.returncode == 0, prom
    assert _values(prom.stdout)[("shmwin_window_readable", big)] == 0
    assert _values(prom.stdout)[("shmwin_window_value", ok)] == 3

    listed = cli("ls", f"{name_prefix}-*", check=False)
    assert listed.returncode == 0 and big in listed.stdout and ok in listed.stdout


def test_a_junk_segment_beside_a_good_one(make_name, name_prefix):
    junk, ok = make_name("junk"), make_name("ok")
    with Window(junk, span=60, buckets=6), Window(ok, span=60, buckets=6) as o:
        o.add(7)
        fd = os.open(path_of(junk), os.O_RDWR)
        try:
            os.pwrite(fd, b"\xff" * 64, 256)  # field names: under the header checksum
        finally:
            os.close(fd)
        seen = _values(exposition([junk, ok]))
        assert seen[("shmwin_window_readable", junk)] == 0
        assert seen[("shmwin_window_value", ok)] == 7
        shown = cli("show", junk, ok, check=False)
        assert shown.returncode == 2 and f"shmwin: {junk}: " in shown.stderr
        assert f"{ok} (window)" in shown.stdout
        o.unlink()
    shmwin.unlink(junk)
