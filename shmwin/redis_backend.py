"""The same Window and Limiter contract on Redis, for limits and windows that span hosts.

    Window("api", span=60, fields=("ok", "error"), backend="redis://10.0.0.5:6379/0")
    Limiter("login", "5/minute", backend="redis://10.0.0.5:6379/0", on_error="deny")

Every operation is **one round trip**: a Lua script that keeps the bucket ring in
a Redis hash, reads the time with ``TIME`` (hosts with skewed clocks still agree)
and does the whole check-and-count atomically. Each key's hash expires by itself
a span (plus a bucket) after its last write, i.e. once its window is empty.

Keys, under one hash tag so a window lives in one cluster slot::

    shmwin:{NAME}:meta      hash: the geometry, checked by every process that opens NAME
    shmwin:{NAME}:k:KEY     the ring of one key ("" for an unkeyed window)
                              window:  a hash, e<slot> = epoch, v<slot>.<field> = value
                              limiter: a string of i64 words (see _HIT), O(1) BITFIELD access
    shmwin:{NAME}:keys      sorted set: key -> newest write (µs), for keys() and top()

Lua numbers are doubles: times are integer microseconds (exact below 2**53), and
integers leave the scripts through ``%.0f``, never ``tostring``.

``clock=`` (monotonic ns, as elsewhere) replaces ``TIME``; it exists so one test
suite can drive both backends by hand.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .clock import Clock
from .duration import NS_PER_S, Duration, format_ns, to_ns
from .errors import BackendUnavailableError, GeometryMismatchError, ShmwinError, UnknownFieldError
from .keys import Key
from .layout import Geometry, Ring
from .limiter import DEFAULT_BUCKETS, ON_FULL, LimitStats
from .limiter import _geometry as limiter_geometry
from .rate import Rate, parse_many
from .ring import buckets_for

NS_PER_US = 1000
ON_ERROR = ("raise", "allow", "deny")

_NOW = """
local function now_us()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function int(x) return string.format('%.0f', x) end
"""

_OPEN = """
local have = redis.call('HGET', KEYS[1], 'geometry')
if have and have ~= ARGV[1] then return have end
if not have then redis.call('HSET', KEYS[1], 'geometry', ARGV[1]) end
return ''
"""

# KEYS: row, keys-zset.
# ARGV: now|'', bucket_us, n, field, amount, float?, ttl_ms, key, keyed?, n_fields, span_us
_ADD = (
    _NOW
    + """
local now = now_us()
local b, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local epoch = math.floor(now / b)
local slot = epoch % n
local e = int(epoch)
if redis.call('HGET', KEYS[1], 'e' .. slot) ~= e then
  for f = 1, tonumber(ARGV[10]) do redis.call('HDEL', KEYS[1], 'v' .. slot .. '.' .. f) end
  redis.call('HSET', KEYS[1], 'e' .. slot, e)
end
if ARGV[6] == '1' then
  redis.call('HINCRBYFLOAT', KEYS[1], 'v' .. slot .. '.' .. ARGV[4], ARGV[5])
else
  redis.call('HINCRBY', KEYS[1], 'v' .. slot .. '.' .. ARGV[4], ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if ARGV[9] == '1' then
  redis.call('ZADD', KEYS[2], now, ARGV[8])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. int(now - tonumber(ARGV[11])))
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
return int(now)
"""
)

# KEYS: row, keys-zset. ARGV: now|'', bucket_us, n, k, n_fields, all-keys?, row-prefix, span_us
# -> {now, then k*n_fields sums (oldest bucket first, fields within)}
_READ = (
    _NOW
    + """
local now = now_us()
local b, n, k, nf = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local first = math.floor(now / b) - k + 1
local rows = {KEYS[1]}
if ARGV[6] == '1' then
  rows = {}
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], now - tonumber(ARGV[8]), '+inf')) do
    rows[#rows + 1] = ARGV[7] .. key
  end
end
local sums = {}
for i = 1, k * nf do sums[i] = 0 end
for _, row in ipairs(rows) do
  local flat = redis.call('HGETALL', row)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  for j = 0, k - 1 do
    local slot = (first + j) % n
    if h['e' .. slot] == int(first + j) then
      for f = 1, nf do
        local v = h['v' .. slot .. '.' .. f]
        if v then sums[j * nf + f] = sums[j * nf + f] + tonumber(v) end
      end
    end
  end
end
local out = {int(now)}
for i = 1, k * nf do out[i + 1] = string.format('%.17g', sums[i]) end
return out
"""
)

# KEYS: keys-zset. ARGV: now|'', span_us  -> live keys
_KEYS = (
    _NOW
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], now_us() - tonumber(ARGV[2]), '+inf')
"""
)

# KEYS: row, keys-zset. ARGV: now|'', key
_CLEAR = """
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
"""

# KEYS: keys-zset. ARGV: now|'', bucket_us, n, k, field, top_n, row-prefix, span_us
# -> {key, total, key, total, ...} busiest first
_TOP = (
    _NOW
    + """
local now = now_us()
local b, n, k = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local field, top_n = ARGV[5], tonumber(ARGV[6])
local first = math.floor(now / b) - k + 1
local found = {}
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], now - tonumber(ARGV[8]), '+inf')) do
  local flat = redis.call('HGETALL', ARGV[7] .. key)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  local total = 0
  for j = 0, k - 1 do
    local slot = (first + j) % n
    if h['e' .. slot] == int(first + j) then
      total = total + (tonumber(h['v' .. slot .. '.' .. field]) or 0)
    end
  end
  if total ~= 0 then found[#found + 1] = {key, total} end
end
table.sort(found, function(x, y) return x[2] > y[2] end)
local out = {}
for i = 1, math.min(top_n, #found) do
  out[#out + 1] = found[i][1]
  out[#out + 1] = string.format('%.17g', found[i][2])
end
return out
"""
)

# The common case, one rate: the whole ring is read with GET, decoded with struct (big-endian
# i64, the layout BITFIELD uses), and written back with one SET. The limiter's constants are
# written into the script (one script per geometry), so a hit sends only now and cost.
# KEYS: row. ARGV: now|'', cost  -> 1 (counted) or 0: one integer, one read
_HIT1 = """
local TTL_MS, BUCKET_US, N, LIMIT = %(ttl_ms)d, %(bucket_us)d, %(n)d, %(limit)d
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost = tonumber(ARGV[2])
local now_e = math.floor(now / BUCKET_US)
local ring = redis.call('GET', KEYS[1]) or string.rep('\\0', 16 + 16 * N)
local head, total = struct.unpack('>i8>i8', ring)
if head == 0 or now_e - head >= N then
  total = 0
elseif now_e > head then
  for gone = head - N + 1, now_e - N do
    local e, v = struct.unpack('>i8>i8', ring, 17 + 16 * (gone %% N))
    if e == gone then total = total - v end
  end
end
if total + cost > LIMIT then return 0 end
local at = 17 + 16 * (now_e %% N)
local e, v = struct.unpack('>i8>i8', ring, at)
local fresh = e ~= now_e
if fresh then v = 0 end
ring = struct.pack('>i8>i8', now_e, total + cost) .. string.sub(ring, 17, at - 1)
       .. struct.pack('>i8>i8', now_e, v + cost) .. string.sub(ring, at + 16)
if fresh then
  redis.call('SET', KEYS[1], ring, 'PX', TTL_MS)  -- a new bucket: the TTL starts again
else
  redis.call('SET', KEYS[1], ring, 'KEEPTTL')
end
return 1
"""

# KEYS: row. ARGV: now|'', cost, commit?, detail?, ttl_ms, then per rate: bucket_us, n, limit, word
# A limiter key is one string of i64 words (BITFIELD, O(1) per word); rate r starts at `word`:
#   [head epoch][running total of the live buckets] then n x [bucket epoch][hits]
# (0 = empty: real epochs are positive). A hit reads head, total and the current bucket,
# drops the buckets that just expired from the total, and writes only when it counts.
# -> {allowed, now, used per rate..., and with detail: per rate, hits per bucket oldest first}
_HIT = """
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local cost, commit, detail = tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4] == '1'
local rates = (#ARGV - 5) / 4
local get, now_es, slots = {}, {}, {}
for r = 0, rates - 1 do
  local now_e = math.floor(now / tonumber(ARGV[6 + r * 4]))
  local word = tonumber(ARGV[9 + r * 4])
  local slot_word = word + 2 + 2 * (now_e % tonumber(ARGV[7 + r * 4]))
  now_es[r], slots[r] = now_e, slot_word
  local i = r * 12
  get[i + 1], get[i + 2], get[i + 3] = 'GET', 'i64', '#' .. word
  get[i + 4], get[i + 5], get[i + 6] = 'GET', 'i64', '#' .. (word + 1)
  get[i + 7], get[i + 8], get[i + 9] = 'GET', 'i64', '#' .. slot_word
  get[i + 10], get[i + 11], get[i + 12] = 'GET', 'i64', '#' .. (slot_word + 1)
end
local got = redis.call('BITFIELD', KEYS[1], unpack(get))
local allowed, used = true, {}
for r = 0, rates - 1 do
  local n, word, now_e = tonumber(ARGV[7 + r * 4]), tonumber(ARGV[9 + r * 4]), now_es[r]
  local head, total = got[r * 4 + 1], got[r * 4 + 2]
  if head == 0 or now_e - head >= n then
    total = 0
  elseif now_e > head then
    local f = {}
    for gone = head - n + 1, now_e - n do
      local w = word + 2 + 2 * (gone % n)
      f[#f + 1], f[#f + 2], f[#f + 3] = 'GET', 'i64', '#' .. w
      f[#f + 1], f[#f + 2], f[#f + 3] = 'GET', 'i64', '#' .. (w + 1)
    end
    local ev = redis.call('BITFIELD', KEYS[1], unpack(f))
    local gone = head - n + 1
    for i = 1, #ev, 2 do
      if ev[i] == gone then total = total - ev[i + 1] end
      gone = gone + 1
    end
  end
  used[r + 1] = total
  if total + cost > tonumber(ARGV[8 + r * 4]) then allowed = false end
end
if allowed and commit then
  local set, new_bucket = {}, false
  for r = 0, rates - 1 do
    local word, v = tonumber(ARGV[9 + r * 4]), cost
    if got[r * 4 + 3] == now_es[r] then v = v + got[r * 4 + 4] else new_bucket = true end
    used[r + 1] = used[r + 1] + cost
    local i = r * 16
    set[i + 1], set[i + 2], set[i + 3], set[i + 4] = 'SET', 'i64', '#' .. word, now_es[r]
    set[i + 5], set[i + 6], set[i + 7], set[i + 8] = 'SET', 'i64', '#' .. (word + 1), used[r + 1]
    set[i + 9], set[i + 10], set[i + 11], set[i + 12] = 'SET', 'i64', '#' .. slots[r], now_es[r]
    set[i + 13], set[i + 14], set[i + 15], set[i + 16] = 'SET', 'i64', '#' .. (slots[r] + 1), v
  end
  redis.call('BITFIELD', KEYS[1], unpack(set))
  -- the TTL (span + 2 buckets) is refreshed when a hit opens a bucket: the key then
  -- outlives every later write in that bucket by at least a span
  if new_bucket then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
end
local out = {allowed and 1 or 0, now}
for r = 1, rates do out[#out + 1] = used[r] end
if detail then
  for r = 0, rates - 1 do
    local n, word, f = tonumber(ARGV[7 + r * 4]), tonumber(ARGV[9 + r * 4]), {}
    for e = now_es[r] - n + 1, now_es[r] do
      local w = word + 2 + 2 * (e % n)
      f[#f + 1], f[#f + 2], f[#f + 3] = 'GET', 'i64', '#' .. w
      f[#f + 1], f[#f + 2], f[#f + 3] = 'GET', 'i64', '#' .. (w + 1)
    end
    local ev = redis.call('BITFIELD', KEYS[1], unpack(f))
    local e = now_es[r] - n + 1
    for i = 1, #ev, 2 do
      out[#out + 1] = (ev[i] == e) and ev[i + 1] or 0
      e = e + 1
    end
  end
end
return out
"""


def _client(url: str, timeout: float) -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ShmwinError("the redis backend needs the redis package: pip install 'shmwin[redis]'") from exc
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def _unavailable(url: str, exc: Exception) -> BackendUnavailableError:
    where = urllib.parse.urlsplit(url)._replace(netloc=urllib.parse.urlsplit(url).hostname or "").geturl()
    return BackendUnavailableError(f"redis at {where} is unavailable: {exc}")


class _RedisBase:
    """Connection, scripts, naming and error mapping shared by RedisWindow and RedisLimiter."""

    def __init__(self, name: str, url: str, clock: Clock | None, timeout: float):
        from .segment import check_name

        check_name(name)  # the same names as shared memory: one namespace of spellings
        self.name = name
        self.url = url
        self._clock = clock
        self._redis = _client(url, timeout)
        import redis

        self._errors: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._prefix = f"shmwin:{{{name}}}:"
        self._scripts: dict[str, Any] = {}
        self._closed = False

    def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        if self._closed:
            from .errors import WindowClosedError

            raise WindowClosedError(f"{self.name!r} is closed")
        runner = self._scripts.get(script)
        if runner is None:
            runner = self._scripts[script] = self._redis.register_script(script)
        now = "" if self._clock is None else str(self._clock() // NS_PER_US)
        try:
            return runner(keys=list(keys), args=[now, *args])
        except self._errors as exc:
            raise _unavailable(self.url, exc) from exc

    def _row(self, key: Key | None) -> str:
        if key is None:
            return self._prefix + "k:"
        return self._prefix + "k:" + (key if isinstance(key, str) else key.decode("latin-1"))

    def _open_geometry(self, geometry: str) -> None:
        try:
            have = self._redis.eval(_OPEN, 1, self._prefix + "meta", geometry)
        except self._errors as exc:
            raise _unavailable(self.url, exc) from exc
        if have:
            self.close()
            raise GeometryMismatchError(
                f"{self.name!r} exists on redis with geometry [{have.decode()}], "
                f"not the requested [{geometry}]"
            )

    def _read_geometry(self) -> str:
        try:
            have = self._redis.hget(self._prefix + "meta", "geometry")
        except self._errors as exc:
            raise _unavailable(self.url, exc) from exc
        if have is None:
            from .errors import WindowNotFoundError

            raise WindowNotFoundError(f"no window named {self.name!r} on redis")
        return str(have.decode())

    def _drop(self, pattern: str) -> int:
        """Delete this name's keys matching ``pattern`` (SCAN: no index to trust). Not a hot path."""
        dropped = 0
        try:
            batch = []
            for found in self._redis.scan_iter(match=self._prefix + pattern, count=1000):
                batch.append(found)
                if len(batch) == 500:
                    dropped += self._redis.delete(*batch)
                    batch = []
            if batch:
                dropped += self._redis.delete(*batch)
        except self._errors as exc:
            raise _unavailable(self.url, exc) from exc
        return dropped

    def _local_ns(self) -> int:
        """This host's clock, for timeouts (the test clock when one was given)."""
        return self._clock() if self._clock is not None else time.monotonic_ns()

    def unlink(self) -> bool:
        """Remove the name, its geometry and every key's counts, for every host."""
        return self._drop("*") > 0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._redis.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisWindow(_RedisBase):
    """``Window`` on Redis: fields, keys, total/totals/rate/series, keys(), top(), clear()."""

    def __init__(
        self,
        name: str,
        span: Duration | None = None,
        buckets: int | None = None,
        fields: tuple[str, ...] | list[str] | str = ("count",),
        *,
        backend: str,
        dtype: str = "int64",
        capacity: int = 0,
        clock: Clock | None = None,
        timeout: float = 1.0,
        resolutions: Any = None,
        mode: str | None = None,
        **_shm_only: Any,
    ):
        if resolutions is not None:
            raise ValueError("the redis backend keeps one resolution per window: use span and buckets")
        super().__init__(name, backend, clock, timeout)
        from .geometry import ring_of

        ring = ring_of(60 if span is None else span, 60 if buckets is None else buckets)
        fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self._g = Geometry((ring,), fields, dtype, "locked", 0, capacity)  # validates
        if ring.bucket_ns % NS_PER_US:
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        self._open_geometry(_window_spec(self._g))

    @classmethod
    def attach(
        cls, name: str, *, backend: str, clock: Clock | None = None, timeout: float = 1.0
    ) -> RedisWindow:
        probe = _RedisBase(name, backend, clock, timeout)
        try:
            spec = probe._read_geometry()
        finally:
            probe.close()
        g = _parse_window_spec(spec)
        return cls(
            name, g.span_ns / NS_PER_S, g.n_buckets, g.fields, backend=backend, dtype=g.dtype,
            capacity=g.capacity, clock=clock, timeout=timeout,
        )  # fmt: skip

    # geometry, as Window has it
    geometry = property(lambda self: self._g)
    fields = property(lambda self: self._g.fields)
    span = property(lambda self: self._g.span_ns / NS_PER_S)
    span_ns = property(lambda self: self._g.span_ns)
    bucket_ns = property(lambda self: self._g.bucket_ns)
    buckets = property(lambda self: self._g.n_buckets)
    capacity = property(lambda self: self._g.capacity)
    closed = property(lambda self: self._closed)

    @property
    def resolutions(self) -> list[str]:
        return [f"{format_ns(self._g.span_ns)}/{format_ns(self._g.bucket_ns)}"]

    def _field(self, field: str | None) -> int:
        if field is None:
            return 1
        if field not in self._g.fields:
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return self._g.fields.index(field) + 1

    def _check_key(self, key: Key | None, write: bool) -> None:
        if self._g.keyed and key is None and write:
            raise TypeError(f"window {self.name!r} is keyed: pass key=")
        if not self._g.keyed and key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")

    def add(self, n: float = 1, field: str | None = None, key: Key | None = None) -> None:
        self._check_key(key, write=True)
        f = self._field(field)
        if self._g.dtype == "int64" and not isinstance(n, int | np.integer):
            raise TypeError(f"add() takes an int for an int64 window, not {n!r}")
        g = self._g
        ttl_ms = (g.span_ns + g.bucket_ns) // 1_000_000 + 1
        self._run(
            _ADD, [self._row(key), self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, f, repr(n) if isinstance(n, float) else int(n),
             int(g.dtype == "float64"), ttl_ms, _key_text(key), int(g.keyed), len(g.fields),
             g.span_ns // NS_PER_US],
        )  # fmt: skip

    def _series_all(self, last: Duration | None, key: Key | None) -> tuple[npt.NDArray[Any], int, int]:
        """(k x fields sums oldest first, now ns, k): one round trip."""
        self._check_key(key, write=False)
        g = self._g
        k = g.n_buckets if last is None else buckets_for(to_ns(last, "last"), g.bucket_ns, g.n_buckets)
        out = self._run(
            _READ, [self._row(key), self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, len(g.fields), int(g.keyed and key is None),
             self._prefix + "k:", g.span_ns // NS_PER_US],
        )  # fmt: skip
        dtype = np.int64 if g.dtype == "int64" else np.float64
        values = (
            np.array([float(v) for v in out[1:]], dtype=np.float64).astype(dtype).reshape(k, len(g.fields))
        )
        return values, int(out[0]) * NS_PER_US, k

    def total(
        self, field: str | None = None, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> Any:
        f = self._field(field)
        values, _, _ = self._series_all(last, key)
        return _scalar(values[:, f - 1].sum(), self._g.dtype)

    def totals(
        self, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> dict[str, Any]:
        values, _, _ = self._series_all(last, key)
        return {name: _scalar(values[:, i].sum(), self._g.dtype) for i, name in enumerate(self._g.fields)}

    def rate(
        self, field: str | None = None, last: Duration | None = 1, key: Key | None = None, **_shm_only: Any
    ) -> float:
        f = self._field(field)
        values, now_ns, k = self._series_all(last, key)
        covered_ns = now_ns - (now_ns // self._g.bucket_ns - k + 1) * self._g.bucket_ns
        return float(values[:, f - 1].sum()) * NS_PER_S / max(covered_ns, 1)

    def series(
        self, field: str | None = None, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> Any:
        f = self._field(field)
        values, _, _ = self._series_all(last, key)
        return values[:, f - 1]

    def keys(self) -> list[str]:
        """Keys with counts inside the window: one round trip."""
        self._keyed()
        found = self._run(_KEYS, [self._prefix + "keys"], [self._g.span_ns // NS_PER_US])
        return [k.decode("latin-1") for k in found]

    def top(
        self, n: int = 10, field: str | None = None, last: Duration | None = None
    ) -> list[tuple[str, Any]]:
        """The ``n`` busiest keys of ``field``, summed on the server: one round trip."""
        self._keyed()
        f, g = self._field(field), self._g
        k = g.n_buckets if last is None else buckets_for(to_ns(last, "last"), g.bucket_ns, g.n_buckets)
        flat = self._run(
            _TOP, [self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, f, max(n, 0), self._prefix + "k:",
             g.span_ns // NS_PER_US],
        )  # fmt: skip
        return [
            (flat[i].decode("latin-1"), _scalar(float(flat[i + 1]), g.dtype)) for i in range(0, len(flat), 2)
        ]

    def clear(self, key: Key) -> None:
        """Forget every count of ``key``: one round trip."""
        self._keyed()
        self._run(_CLEAR, [self._row(key), self._prefix + "keys"], [_key_text(key)])

    def reset(self) -> None:
        self._drop("k:*")
        self._drop("keys")

    def _keyed(self) -> None:
        if not self._g.keyed:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")

    def __repr__(self) -> str:
        return f"<shmwin.Window {self.name!r} on {self.url} {self._g}>"


class RedisLimiter(_RedisBase):
    """``Limiter`` on Redis: strict multi-rate check-and-count in one atomic script."""

    def __init__(
        self,
        name: str,
        rates: str | Rate | list[str | Rate] | tuple[str | Rate, ...],
        *,
        backend: str,
        capacity: int = 10_000,
        buckets: int = DEFAULT_BUCKETS,
        on_full: str = "raise",
        on_error: str = "raise",
        clock: Clock | None = None,
        timeout: float = 1.0,
        **_shm_only: Any,
    ):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, not {on_full!r}")
        self.rates = parse_many(rates)
        g = limiter_geometry(self.rates, buckets, capacity)  # validates, as shared memory does
        if any(r.bucket_ns % NS_PER_US for r in g.rings):
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        super().__init__(name, backend, clock, timeout)
        self.on_error = on_error
        self._rings: list[Ring] = list(g.rings)
        self._open_geometry(_limiter_spec(g))
        words, self._args = 0, []
        for r in self._rings:  # each rate's words: head, total, then n x (epoch, hits)
            self._args += [str(r.bucket_ns // NS_PER_US), str(r.n_buckets), str(r.limit), str(words)]
            words += 2 + 2 * r.n_buckets
        self._ttl_ms = max(r.span_ns + r.bucket_ns for r in self._rings) // 1_000_000 + 1
        ring = self._rings[0]
        one_rate_real_clock = len(self._rings) == 1 and clock is None
        self._hit1_runner: Any = None
        self._hit1 = _HIT1 % {
            "ttl_ms": self._ttl_ms, "bucket_us": ring.bucket_ns // NS_PER_US,
            "n": ring.n_buckets, "limit": ring.limit,
        }  # fmt: skip
        if one_rate_real_clock:
            import redis

            self._no_script = redis.exceptions.NoScriptError
            self._hit1_sha = self._redis.register_script(self._hit1).sha
            self._hit1_runner = self._redis.evalsha
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Any] = getattr(clock, "async_sleep", None) or _asyncio_sleep

    @classmethod
    def attach(
        cls, name: str, *, backend: str, clock: Clock | None = None, on_error: str = "raise"
    ) -> RedisLimiter:
        probe = _RedisBase(name, backend, clock, 1.0)
        try:
            spec = probe._read_geometry()
        finally:
            probe.close()
        rates, buckets = _parse_limiter_spec(spec)
        return cls(name, rates, backend=backend, buckets=buckets, clock=clock, on_error=on_error)

    def _check(
        self, key: Key, cost: int, commit: bool, detail: bool = False
    ) -> tuple[bool, int, list[int], list[list[int]]]:
        """One round trip: (allowed, now ns, used per rate, hits per bucket per rate if detail)."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0 or (commit and cost == 0):
            raise ValueError(f"cost must be a positive int, not {cost!r}")
        _key_text(key)
        if commit and not detail and len(self._rings) == 1:  # a plain hit: the lean script
            return bool(self._run(self._hit1, [self._row(key)], [cost])), 0, [], []
        out = self._run(_HIT, [self._row(key)], [cost, int(commit), int(detail), self._ttl_ms, *self._args])
        n_rates = len(self._rings)
        used = [int(v) for v in out[2 : 2 + n_rates]]
        per_rate, start = [], 2 + n_rates
        for r in self._rings if detail else ():
            per_rate.append([int(v) for v in out[start : start + r.n_buckets]])
            start += r.n_buckets
        return bool(out[0]), int(out[1]) * NS_PER_US, used, per_rate

    def _guarded(self, key: Key, cost: int, detail: bool = False) -> tuple[bool, int | None]:
        """hit, with the on_error policy; (allowed, ns until cost fits or None)."""
        try:
            allowed, now_ns, used, per_rate = self._check(key, cost, commit=True, detail=detail)
        except BackendUnavailableError:
            if self.on_error == "raise":
                raise
            return self.on_error == "allow", None
        if allowed or not detail:
            return allowed, None
        return allowed, self._wait_ns(now_ns, cost, used, per_rate)

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them: one round trip."""
        evalsha = self._hit1_runner
        if evalsha is not None and type(key) is str and type(cost) is int and cost > 0:
            try:  # the common case: EVALSHA of the lean script, nothing in between
                return bool(evalsha(self._hit1_sha, 1, self._prefix + "k:" + key, "", cost))
            except self._no_script:  # a restarted server forgot it: load it, once
                self._redis.script_load(self._hit1)
                return self.hit(key, cost)
            except self._errors as exc:
                if self.on_error == "raise":
                    raise _unavailable(self.url, exc) from exc
                return self.on_error == "allow"
        return self._guarded(key, cost)[0]

    def close(self) -> None:
        self._hit1_runner = None
        super().close()

    def test(self, key: Key, cost: int = 1) -> bool:
        try:
            return self._check(key, cost, commit=False)[0]
        except BackendUnavailableError:
            if self.on_error == "raise":
                raise
            return self.on_error == "allow"

    def stats_all(self, key: Key) -> list[LimitStats]:
        _, now_ns, used, per_rate = self._check(key, 0, commit=False, detail=True)
        out = []
        for rate, ring, u, buckets in zip(self.rates, self._rings, used, per_rate, strict=True):
            oldest_age = next((age for age, hits in enumerate(buckets) if hits), None)
            reset_ns = 0
            if oldest_age is not None:
                first_epoch = now_ns // ring.bucket_ns - ring.n_buckets + 1
                reset_ns = (first_epoch + oldest_age + ring.n_buckets) * ring.bucket_ns - now_ns
            out.append(LimitStats(rate, rate.limit, u, max(rate.limit - u, 0), max(reset_ns, 0) / NS_PER_S))
        return out

    def stats(self, key: Key) -> LimitStats:
        return min(self.stats_all(key), key=lambda s: (s.remaining, -s.reset_after))

    def clear(self, key: Key) -> None:
        try:
            self._redis.delete(self._row(key))
        except self._errors as exc:
            raise _unavailable(self.url, exc) from exc

    def _wait_ns(self, now_ns: int, cost: int, used: list[int], per_rate: list[list[int]]) -> int | None:
        wait = 0
        for ring, total, buckets in zip(self._rings, used, per_rate, strict=True):
            if total + cost <= ring.limit:
                continue
            if cost > ring.limit:
                return None
            need, freed = total + cost - ring.limit, 0
            first_epoch = now_ns // ring.bucket_ns - ring.n_buckets + 1
            for age, hits in enumerate(buckets):
                freed += hits
                if freed >= need:
                    wait = max(wait, (first_epoch + age + ring.n_buckets) * ring.bucket_ns - now_ns)
                    break
        return wait

    def acquire(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """Wait (sleeping, not spinning) until ``cost`` hits are allowed and count them."""
        deadline = None if timeout is None else self._local_ns() + round(timeout * NS_PER_S)
        while True:
            allowed, wait_ns = self._guarded(key, cost, detail=True)
            pause = _pause(allowed, wait_ns, deadline, self._local_ns())
            if pause is None:
                return allowed
            self._sleep(pause)

    async def acquire_async(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        deadline = None if timeout is None else self._local_ns() + round(timeout * NS_PER_S)
        while True:
            allowed, wait_ns = self._guarded(key, cost, detail=True)
            pause = _pause(allowed, wait_ns, deadline, self._local_ns())
            if pause is None:
                return allowed
            await self._async_sleep(pause)

    def __repr__(self) -> str:
        return f"<shmwin.Limiter {self.name!r} {';'.join(map(str, self.rates))} on {self.url}>"


async def _asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _pause(allowed: bool, wait_ns: int | None, deadline_ns: int | None, now_ns: int) -> float | None:
    """Seconds to sleep before trying again, or None to return ``allowed`` now."""
    if allowed or wait_ns is None:
        return None
    if deadline_ns is not None:
        if deadline_ns <= now_ns:
            return None
        wait_ns = min(wait_ns, deadline_ns - now_ns)
    return max(wait_ns, 1_000_000) / NS_PER_S


def _key_text(key: Key | None) -> str:
    if key is None:
        return ""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return bytes(key).decode("latin-1")
    raise TypeError(f"a key is a str or bytes, not {type(key).__name__}")


def _scalar(x: Any, dtype: str) -> Any:
    return int(x) if dtype == "int64" else float(x)


def _window_spec(g: Geometry) -> str:
    return f"window;{g.bucket_ns};{g.n_buckets};{','.join(g.fields)};{g.dtype};{g.capacity}"


def _parse_window_spec(spec: str) -> Geometry:
    kind, bucket_ns, n, fields, dtype, capacity = spec.split(";")
    if kind != "window":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a window")
    return Geometry(
        (Ring(int(bucket_ns), int(n)),), tuple(fields.split(",")), dtype, "locked", 0, int(capacity)
    )


def _limiter_spec(g: Geometry) -> str:
    return "limiter;" + ";".join(f"{r.bucket_ns},{r.n_buckets},{r.limit}" for r in g.rings)


def _parse_limiter_spec(spec: str) -> tuple[list[str | Rate], int]:
    kind, *rings = spec.split(";")
    if kind != "limiter":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a limiter")
    parsed = [tuple(int(v) for v in ring.split(",")) for ring in rings]
    buckets = parsed[0][1] - 1
    rates: list[str | Rate] = [Rate(limit, bucket_ns * buckets) for bucket_ns, _, limit in parsed]
    return rates, buckets
