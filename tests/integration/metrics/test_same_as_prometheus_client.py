"""Workloads run twice, in fresh interpreters: once on prometheus_client's own multiprocess mode
(PROMETHEUS_MULTIPROC_DIR, its MultiProcessCollector), once on shmwin's; the scraped samples must
be the same."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.helpers import ROOT

pytestmark = pytest.mark.integration

PRELUDE = r"""
import os, sys, shutil, tempfile
mode, app = sys.argv[1], sys.argv[2]
WORKER = {"id": 0}
ident = lambda: WORKER["id"]
from prometheus_client import values, Gauge, Counter, CollectorRegistry, generate_latest
if mode == "pc":
    d = tempfile.mkdtemp(); os.environ["PROMETHEUS_MULTIPROC_DIR"] = d
    values.ValueClass = values.MultiProcessValue(ident)
else:
    import shmwin.integrations.prometheus as shp
    shp.multiprocess(app, process_identifier=ident)
"""
SCRAPE = r"""
reg = CollectorRegistry()
if mode == "pc":
    from prometheus_client import multiprocess; multiprocess.MultiProcessCollector(reg)
else:
    shp.MultiProcessCollector(reg, app)
sys.stdout.write(generate_latest(reg).decode())
if mode == "pc": shutil.rmtree(d)
else: shp.reset(app)
"""


def _samples(workload: str, mode: str, app: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    proc = subprocess.run([sys.executable, "-c", PRELUDE + workload + SCRAPE, mode, app], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(proc.stdout) for s in f.samples}  # fmt: skip


def test_a_process_identifier_seen_again_goes_on_with_its_gauges(make_name):
    """process_identifier = a worker index, each index's worker recycled 3 times: each gauge
    mode counts an index once (shmwin counted it once per lifetime: mem_sum 906 for 304)."""
    workload = r"""
gs = {m: Gauge("mem_" + m, "h", multiprocess_mode=m) for m in ("all", "sum", "max", "min", "mostrecent")}
c = Counter("reqs", "h")
for gen in range(3):
    for idx in (1, 2):
        pid = os.fork()
        if pid == 0:
            WORKER["id"] = idx
            for g in gs.values(): g.set(100 * idx + gen)
            c.inc()
            os._exit(0)
        os.waitpid(pid, 0)
"""
    app = make_name("app")
    ours, theirs = _samples(workload, "shm", app), _samples(workload, "pc", app)
    assert ours == theirs
    assert ours[("mem_sum", ())] == 304.0
