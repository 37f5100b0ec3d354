"""The Lua scripts of the redis backend, read once from the package's ``lua/`` files.

Each ``lua/*.lua`` file begins with a header naming its KEYS and ARGV. Every script
that reads or writes with a time runs with ``clock.lua`` in front of it: the name's
time, which never goes back when the server's clock steps back. The window scripts
(add, read, keys, top) also have ``window_lib.lua`` in front of them: the live keys and
the one loop that sums a row's live buckets. ``hit_one.lua`` is a template:
:func:`hit_one` writes one limiter's constants into it.

A :class:`Script` is text and its SHA1, computed once; the caller runs it with
EVALSHA and loads it (SCRIPT LOAD) only when the server answers NOSCRIPT. Nothing
here imports ``redis``: the backend needs that package only once it connects.
"""

from __future__ import annotations

import functools
import hashlib
import string
from dataclasses import dataclass
from importlib import resources

PACKAGE = __name__.rpartition(".")[0]  # shmwin.backends.redis: lua/ ships as its package data
LUA_DIR = "lua"
WINDOW_LIB = "window_lib.lua"
CLOCK_LIB = "clock.lua"
LIBRARIES = (WINDOW_LIB, CLOCK_LIB)  # put in front of other scripts, never run alone


@dataclass(frozen=True)
class Script:
    """One script as the server runs it: its name (for errors), text and SHA1."""

    name: str
    text: str
    sha: str

    @classmethod
    def of(cls, name: str, text: str) -> Script:
        return cls(name, text, hashlib.sha1(text.encode("utf-8")).hexdigest())


@functools.cache
def source(filename: str) -> str:
    """The text of ``lua/<filename>`` as shipped in the package (read once)."""
    return resources.files(PACKAGE).joinpath(LUA_DIR).joinpath(filename).read_text("utf-8")


def _load(filename: str, *libs: str) -> Script:
    return Script.of(filename, "\n".join([*map(source, libs), source(filename)]))


OPEN = _load("open.lua")  # run with EVAL once per open: not worth a SHA round trip
ADD = _load("add.lua", WINDOW_LIB, CLOCK_LIB)
READ = _load("read.lua", WINDOW_LIB, CLOCK_LIB)
KEYS = _load("keys.lua", WINDOW_LIB, CLOCK_LIB)
CLEAR = _load("clear.lua")
TOP = _load("top.lua", WINDOW_LIB, CLOCK_LIB)
HIT = _load("hit.lua", CLOCK_LIB)
TOKEN = _load("token.lua", CLOCK_LIB)
LEASE = _load("lease.lua", CLOCK_LIB)  # the two-tier backend's leases (shmwin.backends.twotier)
CHANGE = _load("change.lua", CLOCK_LIB)  # a limiter's claim, or a change of its rates (live.py)
GEN = _load("gen.lua")  # a spread group's generation raised after a change
HOSTS = _load("hosts.lua")  # the hosts seen recently: on_error="local" divides the limit by them


@functools.lru_cache(maxsize=256)
def hit_one(ttl_ms: int, bucket_us: int, n: int) -> Script:
    """The lean one-rate hit with this ring's shape written in (one script per period and
    buckets: the limit and the generation, which change live, are ARGV)."""
    shape = {"ttl_ms": int(ttl_ms), "bucket_us": int(bucket_us), "n": int(n)}
    text = string.Template(source("hit_one.lua")).substitute(shape)
    return Script.of("hit_one.lua", source(CLOCK_LIB) + "\n" + text)


# every file the code runs, for tests and packaging checks
FILES = ("window_lib.lua", "clock.lua", "open.lua", "add.lua", "read.lua", "keys.lua", "clear.lua", "top.lua",
         "hit.lua", "hit_one.lua", "token.lua", "lease.lua", "hosts.lua", "change.lua",
         "gen.lua")  # fmt: skip
