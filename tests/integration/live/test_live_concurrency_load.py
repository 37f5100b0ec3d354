"""A Concurrency's limit changed again and again while holders in forked, spawned and
``python -c`` processes take and give back slots on their own: a shared log of who is inside
(each admission and its line one event, under the log's flock; each change too) replayed after
shows that, for each on_change rule, no admission ever left more inside than the limit in force
(with "reset": more than those admitted since), and every holder's release went cleanly (a
release that raised would have ended its process with status 1)."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import time

import pytest
from support.conc_live import change, check_log, hold_loop, loop_command, wait_opened

from shmwin import Concurrency

pytestmark = pytest.mark.integration

LIMITS = (2, 5, 1, 4, 3)  # down, past the first, to one, up again
FIRST = 3


@pytest.mark.parametrize("rule", ["carry", "reset"])
def test_holders_on_their_own_never_pass_the_limit_in_force(name, tmp_path, rule):
    log, stop = tmp_path / "log", tmp_path / "stop"
    log.touch()
    with Concurrency(name, FIRST) as mine:
        procs = [mp.get_context(kind).Process(target=hold_loop, args=(name, FIRST, str(log), str(stop), seed))
                 for seed, kind in enumerate(("fork", "fork", "spawn", "spawn"))]  # fmt: skip
        for p in procs:
            p.start()
        cmds = [subprocess.Popen(loop_command(name, FIRST, log, stop, 10 + i)) for i in range(2)]
        try:
            wait_opened(stop, len(procs) + len(cmds))
            for limit in LIMITS:
                time.sleep(0.3)  # load between changes: not a timing assertion
                change(log, limit, rule, lambda n, how: mine.set_limit(n, on_change=how))
            time.sleep(0.3)
        finally:
            stop.touch()
            for p in procs:
                p.join(60)
            codes = [p.exitcode for p in procs] + [c.wait(60) for c in cmds]
        assert codes == [0] * 6, f"a holder failed (a release that raised?): {codes}"
        admitted, most = check_log(log, FIRST)
        assert admitted >= 6 and most >= 2, f"too little load to show anything: {admitted}, {most}"
        assert mine.count("k") == 0 and mine.limit == LIMITS[-1]
        mine.unlink()


def test_the_log_replay_catches_an_over_admission(tmp_path):
    """The check itself: a log with one holder too many after a lowered limit fails it, and a
    reset's forgotten holders do not count against the limit after it."""
    log = tmp_path / "log"
    log.write_text("in 1\nin 2\nlimit 1 carry\nout 1\nin 3\n")
    with pytest.raises(AssertionError, match="2 inside after an admission, limit 1"):
        check_log(log, 2)
    log.write_text("in 1\nin 2\nlimit 1 reset\nin 3\nout 1\nout 3\nin 1\n")
    assert check_log(log, 2) == (4, 2)
