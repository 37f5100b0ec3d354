"""Tests that run code as another uid need it to read this checkout: a checkout in a private
folder (a ``mktemp -d`` clone) gets there through a view, a bind mount in a private mount
namespace (``support.rootenv.through_view``). Forced here, so that it is tried in every run,
not only in the runs from a private folder."""

from __future__ import annotations

import os
import subprocess

from support import rootenv
from support.rootenv import NOBODY, ROOT, command_as, describe, needs_namespace, python_argv

WHO = "import os, numpy, shmwin; print(shmwin.__file__, os.getuid())"


@needs_namespace  # root, and unshare for the view's mount namespace
def test_another_uid_imports_this_checkout_through_the_view(monkeypatch):
    monkeypatch.setattr(rootenv, "checkout_hidden", lambda: True)
    as_nobody = command_as(NOBODY, NOBODY, python_argv(WHO))
    argv, env = rootenv.through_view(as_nobody, dict(os.environ, PYTHONPATH=str(ROOT)))
    # unshare ... sh -c SCRIPT checkout view, then the cwd and the command, in the view
    assert argv[7:9] == [str(ROOT), rootenv._view_dir()] and str(ROOT) not in " ".join(argv[9:])
    assert env["PYTHONPATH"] == rootenv._view_dir()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, describe(proc)
    path, uid = proc.stdout.split()
    assert uid == str(NOBODY) and path == f"{rootenv._view_dir()}/shmwin/__init__.py"
    assert os.listdir(rootenv._view_dir()) == []  # the mount was the namespace's only


def test_a_readable_checkout_runs_as_it_is(monkeypatch):
    monkeypatch.setattr(rootenv, "checkout_hidden", lambda: False)
    assert rootenv.through_view(["python", str(ROOT)], {"PYTHONPATH": str(ROOT)}) == (
        ["python", str(ROOT)], {"PYTHONPATH": str(ROOT)},
    )
