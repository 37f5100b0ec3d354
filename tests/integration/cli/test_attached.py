"""Who has a window open (shmwin.inspector.attached): real processes mapping real segments."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

from support.cli_support import hold, release
from support.rootenv import NOBODY, command_as, describe, needs_namespace, needs_setpriv, python_argv, run_as
from support.rootenv import run_in_namespace as in_namespace

from shmwin import Window
from shmwin.inspector.attached import attached, attached_many, proc_mount_options


def test_a_python_c_process_holds_a_window_until_it_exits(name):
    Window(name).close()
    assert os.getpid() not in attached(name).pids  # closed here: not mapped any more
    holder = hold(name)
    try:
        assert holder.pid in attached(name).pids
    finally:
        release(holder)
    assert holder.pid not in attached(name).pids
    Window.attach(name).unlink()


def _child_waits(ready, go) -> None:
    ready.set()
    go.wait(30)


def test_a_forked_child_holds_the_mapping_it_inherited(name):
    ctx = mp.get_context("fork")
    with Window(name) as w:
        ready, go = ctx.Event(), ctx.Event()
        child = ctx.Process(target=_child_waits, args=(ready, go))
        child.start()
        try:
            assert ready.wait(30)
            assert {os.getpid(), child.pid} <= set(attached(name).pids)
        finally:
            go.set()
            child.join(30)
        w.unlink()


def test_a_process_mapping_an_older_window_of_the_same_name_does_not_hold_the_new_one(name):
    Window(name).close()
    old_holder = hold(name)
    try:
        Window.attach(name).unlink()  # old_holder keeps the removed segment mapped
        Window(name).close()  # a new window, same name, another inode
        assert old_holder.pid not in attached(name).pids
        new_holder = hold(name)
        try:
            many = attached_many([name, name + "-missing"])
            assert new_holder.pid in many[name].pids and old_holder.pid not in many[name].pids
            assert many[name + "-missing"].pids == ()
        finally:
            release(new_holder)
    finally:
        release(old_holder)
    Window.attach(name).unlink()


def _scan_as_nobody(name: str) -> tuple[tuple[int, ...], bool, str]:
    a = attached(name)
    return a.pids, a.complete, a.reason


@needs_setpriv
def test_processes_that_cannot_be_read_make_the_answer_incomplete(name):
    with Window(name) as w:
        pids, complete, reason = run_as(NOBODY, NOBODY, _scan_as_nobody, name)
        assert not complete and "could not be read" in reason and "run as root" in reason
        assert os.getpid() not in pids  # root's mapping is not visible to nobody
        w.unlink()


SCAN = """
import json, sys
from shmwin import Window
from shmwin.inspector.attached import attached
w = Window("ns-w")
a = attached("ns-w")
print(json.dumps({"pids": a.pids, "complete": a.complete, "reason": a.reason}))
w.unlink()
"""


@needs_namespace
def test_root_with_a_private_proc_sees_every_process_and_says_so():
    proc = in_namespace(python_argv(SCAN), hidepid=None)
    assert proc.returncode == 0, describe(proc)
    answer = json.loads(proc.stdout)
    assert answer["complete"] is True and answer["reason"] == "" and len(answer["pids"]) == 1


@needs_namespace
def test_hidepid_makes_the_answer_incomplete_for_other_users():
    proc = in_namespace(command_as(NOBODY, NOBODY, python_argv(SCAN)), hidepid=2)
    assert proc.returncode == 0, describe(proc)
    answer = json.loads(proc.stdout)
    assert answer["complete"] is False and "hidepid=" in answer["reason"], answer
    as_root = in_namespace(python_argv(SCAN), hidepid=2)  # root sees through hidepid
    assert json.loads(as_root.stdout)["complete"] is True, describe(as_root)


def test_proc_mount_options_are_read_from_mountinfo():
    text = (
        "22 27 0:21 / /proc rw,relatime shared:12 - proc proc rw\n"
        "25 22 0:19 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n"
        "63 45 0:39 / /proc rw,relatime - proc proc rw,hidepid=invisible,gid=4\n"
    )
    assert proc_mount_options(text) == {"rw": "", "hidepid": "invisible", "gid": "4"}  # the last mount wins
    assert proc_mount_options("22 27 0:21 / /proc rw - proc proc rw\n") == {"rw": ""}
    assert proc_mount_options("") == {}
