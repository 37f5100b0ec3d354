"""The command line and an app's metrics segment: ``shmwin ls`` lists it as one (series in use
of its capacity), ``shmwin show APP.metrics`` and ``shmwin export --metrics APP`` print what a
scrape serves, and a missing app is a clear error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from prometheus_client import Counter
from support.metrics import scrape
from support.servers import ROOT

import shmwin.integrations.prometheus as shp

pytestmark = [pytest.mark.integration]


def _shmwin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shmwin", *args], cwd=ROOT, capture_output=True, text=True)


def test_ls_show_and_export_an_apps_metrics(app):
    shp.multiprocess(app, max_series=500)
    Counter("reqs", "Requests", ["route"], registry=None).labels("a").inc(3)
    listed = json.loads(_shmwin("ls", "--json", app + ".metrics").stdout)["windows"]
    assert [(w["name"], w["kind"], w["role"], w["keys"], w["capacity"]) for w in listed] == [
        (app + ".metrics", "metrics", "series", 1, 500)
    ]
    line = _shmwin("ls", app + ".metrics").stdout.splitlines()[1]
    assert " series " in line and " 1/500 " in line
    shown, exported = _shmwin("show", app + ".metrics"), _shmwin("export", "--metrics", app)
    assert shown.returncode == exported.returncode == 0
    assert shown.stdout == exported.stdout == scrape(app)
    assert 'reqs_total{route="a"} 3.0' in exported.stdout
    assert _shmwin("gc", app + ".metrics").stdout == "nothing to remove\n"  # counts never go idle


def test_export_of_a_missing_app_says_so(make_name):
    missing = _shmwin("export", "--metrics", make_name("nothing"))
    assert missing.returncode != 0 and "no metrics segment for app" in missing.stderr


def test_show_json_gives_the_samples_and_the_window_export_leaves_the_segment_alone(app):
    """show --json printed text; the windows' exporter called a healthy metrics segment
    unreadable (shmwin_window_readable 0: an alert for nothing)."""
    shp.multiprocess(app)
    Counter("reqs", "Requests", ["route"], registry=None).labels("a").inc(3)
    shown = json.loads(_shmwin("show", "--json", app + ".metrics").stdout)
    assert shown["app"] == app
    assert {"name": "reqs_total", "labels": {"route": "a"}, "value": 3.0} in shown["samples"]
    exported = _shmwin("export", "--format", "prometheus", app + ".metrics").stdout
    assert "shmwin_window_readable" not in exported, exported
