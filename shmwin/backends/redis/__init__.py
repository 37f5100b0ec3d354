"""The same Window and Limiter contract on Redis, for limits and windows that span hosts.

    Window("api", span=60, fields=("ok", "error"), backend="redis://10.0.0.5:6379/0")
    Limiter("login", "5/minute", backend="redis://10.0.0.5:6379/0", on_error="deny")
    Limiter("login", "5/minute", backend="redis+cluster://10.0.0.5:7000,10.0.0.6:7000/")

Every operation is **one round trip**: a Lua script (``lua/*.lua``, see
:mod:`.scripts`) that keeps the bucket ring in Redis, reads the time with ``TIME``
(hosts with skewed clocks still agree) and does the whole check-and-count
atomically. That time never goes back: when the server's clock steps back, the name's
time goes on from the newest it handed out (``lua/clock.lua``). Each key expires by
itself a span (plus a bucket) after its last write, i.e. once its window is empty.

Keys, under one hash tag so a name lives in one Redis Cluster slot (every script runs on
one node; ``redis+cluster://`` URLs use redis-py's RedisCluster, see :mod:`.client`)::

    shmwin:{NAME}:meta      hash: the geometry, checked by every process that opens NAME; for a
                              limiter also its live state (lua/change.lua: generation, layout,
                              earlier layouts, last change)
    shmwin:{NAME}:gen       a limiter's generation: a hit of a process that knows an older
                              one is refused, and it reads the newest rates (live.py)
    shmwin:{NAME}:k:KEY     the ring of one key ("" for an unkeyed window); a limiter's rows
                              after a change of periods or buckets: shmwin:{NAME}:k<L>:KEY
                              window:  a hash, e<slot> = epoch, v<slot>.<field> = value
                              limiter: a string of i64 words (see lua/hit.lua), O(1) BITFIELD access
    shmwin:{NAME}:keys      sorted set: key -> newest write (µs), for keys() and top()
    shmwin:{NAME}:clock     string '<now> <reading>' (µs): the name's time, which never goes
                              back, and the clock reading it came from; no TTL

Lua numbers are doubles: times are integer microseconds (exact below 2**53), and
integers leave the scripts through ``%.0f``, never ``tostring``.

``clock=`` is refused (:func:`.client.server_time`): time is ``TIME`` and nowhere else, so no
host's clock can move a name's clock. Tests drive it by hand through the explicit hook
:class:`.testing.ServerTime`, so one test suite can drive both backends.

Both classes keep the contract of :mod:`shmwin.backends.contract`; what redis cannot do
(several resolutions, stamped batches, a segment's size or header) raises
:class:`~shmwin.errors.NotSupportedError`. Modules: :mod:`.client` (connection, script
running, the geometry claim, errors), :mod:`.scripts` (the Lua files), :mod:`.window`
(RedisWindow), :mod:`.limiter` (RedisLimiter), :mod:`.live` (a limiter's live rates).
None of them imports ``shmwin.window``
or ``shmwin.limiter``, and the ``redis`` package is imported only when a connection is
made.
"""

from __future__ import annotations

from .client import OPTIONS
from .limiter import RedisLimiter
from .token_bucket import RedisTokenBucket
from .window import RedisWindow

__all__ = ["OPTIONS", "RedisLimiter", "RedisTokenBucket", "RedisWindow"]
