-- hit.lua: check (and count) a cost against every rate of a limiter, all or none.
--
-- KEYS[1]  the key's rings: shmwin:{NAME}:k:KEY, a string of i64 words (BITFIELD, O(1) per
--          word); rate r's ring starts at its word offset:
--            [head epoch][running total of the live buckets] then n x [bucket epoch][hits]
--          (0 = empty: real epochs are positive)
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- KEYS[3]  the name's generation key: shmwin:{NAME}:gen (see change.lua)
-- KEYS[4..] the key's rows in earlier layouts (change.lua's history), newest first
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the cost: hits to count (0 with ARGV[3] = '0' only reads)
-- ARGV[3]  '1' to count the cost if every rate allows it, '0' to only check, '2' to count it
--          whatever the rates say (on_error="local" carrying a host's hits back: local_share.py)
-- ARGV[4]  '1' to also return when each rate's oldest hit leaves and when the cost would fit,
--          '0' not to (both then 0)
-- ARGV[5]  the key's time to live in milliseconds (the longest span + 2 buckets)
-- ARGV[6]  the generation of the rates given here (see change.lua), or '*' to count with them
--          whatever the generation key holds: a hit that met a change at each of its reads
-- ARGV[7]  H, the earlier layouts' rows given as KEYS[4 ..]; then for each: the time (us) its
--          hits are all gone, its rates R, then R x (bucket width us, buckets, word offset)
-- then per rate, 4 entries each: bucket width in microseconds, number of buckets, limit
--          (hits per window), word offset of the rate's ring in KEYS[1]
--
-- A key with no row in this layout whose rows of earlier layouts hold hits starts with them
-- (the carry of a change of periods or buckets): each old bucket's hits dated at its end, so in
-- every new rate they leave later than they would have, never sooner (see the carry below).
--
-- Returns: {-1} if the generation key is not ARGV[6] (nothing is written: the caller syncs
--          with change.lua and asks again); else
--          {allowed (1 or 0), now in microseconds, hits in use per rate (after counting),
--          per rate the microseconds until its oldest counted hit leaves (0: none),
--          microseconds until the cost would fit (0: it fits; -1: never, it exceeds a limit)}
--          -- the answer of the native core's check(), computed as its timing() does.
-- Guarantees: atomic, one round trip. A hit reads each ring's head, total and current
-- bucket, drops the buckets that just expired from the total, and writes only when it
-- counts -- in every rate or in none. The TTL is refreshed when a hit opens a bucket: the
-- key then outlives every later write in that bucket by at least a span.

local gen = tonumber(ARGV[6])  -- nil for '*': a hit taking the rates given as final (a storm of changes)
local seen = tonumber(redis.call('GET', KEYS[3]) or '0')
if ARGV[6] ~= '*' and gen ~= seen then return {-1} end  -- stale, or a key left behind: change.lua's 'sync' repairs

local now = now_us(KEYS[2])
local cost, commit, detail = tonumber(ARGV[2]), ARGV[3] ~= '0', ARGV[4] == '1'
local force = ARGV[3] == '2'
local ttl_ms = ARGV[5]
local olds, at = {}, 8  -- olds[h] = {row, gone_at, rates = {{bucket_us, n, word}, ...}}
for h = 1, tonumber(ARGV[7]) do
  local old = {row = KEYS[3 + h], gone_at = tonumber(ARGV[at]), rates = {}}
  for r = 1, tonumber(ARGV[at + 1]) do
    local w = at + 2 + (r - 1) * 3
    old.rates[r] = {bucket_us = tonumber(ARGV[w]), n = tonumber(ARGV[w + 1]), word = tonumber(ARGV[w + 2])}
  end
  olds[h], at = old, at + 2 + 3 * #old.rates
end
local rates = {}  -- rates[r] = {bucket_us, n, limit, word}
for r = 1, (#ARGV - at + 1) / 4 do
  local w = at + (r - 1) * 4
  rates[r] = {
    bucket_us = tonumber(ARGV[w]), n = tonumber(ARGV[w + 1]),
    limit = tonumber(ARGV[w + 2]), word = tonumber(ARGV[w + 3]),
  }
end

-- appends BITFIELD subcommands reading the i64 pair (epoch, value) at word w
local function get_pair(cmd, w)
  local m = #cmd
  cmd[m + 1], cmd[m + 2], cmd[m + 3] = 'GET', 'i64', '#' .. w
  cmd[m + 4], cmd[m + 5], cmd[m + 6] = 'GET', 'i64', '#' .. (w + 1)
end

-- a count as BITFIELD takes it: a whole number in digits, at most 2^53 (past it Lua's doubles
-- are no longer exact, and Redis would get '1e+17' and refuse every later write of the key)
local MOST = 2 ^ 53
local function word(v) return string.format('%.0f', math.max(math.min(v, MOST), -MOST)) end

-- appends BITFIELD subcommands writing the i64 pair (a, b) at word w
local function set_pair(cmd, w, a, b)
  local m = #cmd
  cmd[m + 1], cmd[m + 2], cmd[m + 3], cmd[m + 4] = 'SET', 'i64', '#' .. w, word(a)
  cmd[m + 5], cmd[m + 6], cmd[m + 7], cmd[m + 8] = 'SET', 'i64', '#' .. (w + 1), word(b)
end

-- the word of the bucket of epoch e in a rate's ring
local function slot_word(rate, e) return rate.word + 2 + 2 * (e % rate.n) end

-- a rate's running total at now_e: its total less the buckets that left the window since head
local function live(row, rate, head, total, now_e)
  if head == 0 or now_e - head >= rate.n then return 0 end
  if now_e > head then
    local f = {}
    for gone = head - rate.n + 1, now_e - rate.n do get_pair(f, slot_word(rate, gone)) end
    local ev = redis.call('BITFIELD', row, unpack(f))
    local gone = head - rate.n + 1
    for i = 1, #ev, 2 do
      if ev[i] == gone then total = total - ev[i + 1] end
      gone = gone + 1
    end
  end
  return total
end

-- the carry: a key new in this layout starts with the hits its rows of earlier layouts hold,
-- each dated at the end of its old bucket (never sooner than it was made): in every new rate,
-- those of the last span count. Every layout still live is read (they are not removed: a later
-- layout may need them again, as ping-pong between two rates does). Each ring of each row is
-- one view of the same hits, and rows overlap: a row holds its own hits and those it carried,
-- dated later than in the row it carried them from (at the end of that row's bucket). So the
-- views are not added but merged from the newest bucket back: the hits placed at new epoch e
-- or after are the most any one view has there (a suffix maximum). No hit is counted twice
-- (the total is the largest view's) and none is dated sooner than a view dates it. A sum, or
-- a maximum per bucket, counted a hit again whenever two views put it in different buckets:
-- ping-pong between two layouts then doubled a key's count at every change (red team F14).
local function merge_views(views)  -- views[v][e] = hits: the placement {e = hits} they agree on
  local epochs, seen = {}, {}
  for _, per in ipairs(views) do
    for e in pairs(per) do
      if not seen[e] then seen[e], epochs[#epochs + 1] = true, e end
    end
  end
  table.sort(epochs, function(a, b) return a > b end)
  local out, upto, most = {}, {}, 0  -- upto[v]: view v's hits at epochs >= e
  for _, e in ipairs(epochs) do
    local best = most
    for v, per in ipairs(views) do
      upto[v] = (upto[v] or 0) + (per[e] or 0)
      if upto[v] > best then best = upto[v] end
    end
    if best > most then out[e], most = best - most, best end
  end
  return out, most
end

if #olds > 0 and redis.call('EXISTS', KEYS[1]) == 0 then
  local views, carried, rows = {}, 0, {}  -- views[r] = {per view: {new epoch = hits}}
  for r in ipairs(rates) do views[r] = {} end
  for _, old in ipairs(olds) do
    if old.gone_at > now and redis.call('EXISTS', old.row) == 1 then rows[#rows + 1] = old end
  end
  for _, old in ipairs(rows) do
    for _, ring in ipairs(old.rates) do
      local f = {}
      for i = 0, ring.n - 1 do get_pair(f, ring.word + 2 + 2 * i) end
      local ev = redis.call('BITFIELD', old.row, unpack(f))
      for r, rate in ipairs(rates) do
        local now_e, per = math.floor(now / rate.bucket_us), {}
        for i = 1, #ev, 2 do
          if ev[i] > 0 and ev[i + 1] > 0 then
            local e = math.floor(math.min((ev[i] + 1) * ring.bucket_us - 1, now) / rate.bucket_us)
            if now_e - e < rate.n then per[e] = (per[e] or 0) + ev[i + 1] end
          end
        end
        views[r][#views[r] + 1] = per
      end
    end
  end
  local placed = {}
  for r in ipairs(rates) do
    local most
    placed[r], most = merge_views(views[r])
    carried = carried + most
  end
  if carried > 0 then
    local set = {}
    for r, rate in ipairs(rates) do
      local now_e, total = math.floor(now / rate.bucket_us), 0
      for e, v in pairs(placed[r]) do
        set_pair(set, slot_word(rate, e), e, v)
        total = total + v
      end
      set_pair(set, rate.word, now_e, total)
    end
    redis.call('BITFIELD', KEYS[1], unpack(set))
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
  end
end

-- one BITFIELD: every rate's head and total, and its current bucket
local get = {}
for _, rate in ipairs(rates) do
  rate.now_e = math.floor(now / rate.bucket_us)
  rate.slot = slot_word(rate, rate.now_e)
  get_pair(get, rate.word)
  get_pair(get, rate.slot)
end
local got = redis.call('BITFIELD', KEYS[1], unpack(get))

local allowed, used = true, {}
for r, rate in ipairs(rates) do
  local at = (r - 1) * 4
  local head, total = got[at + 1], got[at + 2]
  rate.bucket_e, rate.bucket_v = got[at + 3], got[at + 4]
  total = live(KEYS[1], rate, head, total, rate.now_e)
  used[r] = total
  if total + cost > rate.limit then allowed = false end
end

if (allowed or force) and commit then
  local set, new_bucket = {}, false
  for r, rate in ipairs(rates) do
    local v = cost
    if rate.bucket_e == rate.now_e then v = v + rate.bucket_v else new_bucket = true end
    used[r] = used[r] + cost
    set_pair(set, rate.word, rate.now_e, used[r])
    set_pair(set, rate.slot, rate.now_e, v)
  end
  redis.call('BITFIELD', KEYS[1], unpack(set))
  if new_bucket then redis.call('PEXPIRE', KEYS[1], ttl_ms) end
end

-- when each rate's oldest hit leaves, and when the cost fits: scan the live buckets oldest
-- first, stopping at the first that answers (the order and the rules of _core.c's timing())
local reset, wait = {}, 0
for r, rate in ipairs(rates) do
  reset[r] = 0
  local need = 0
  if cost > rate.limit - used[r] then need = used[r] - (rate.limit - cost) end
  local blocks = (not allowed) and need > 0
  if blocks and cost > rate.limit then wait = -1 end
  if detail and used[r] > 0 then
    local f = {}
    for e = rate.now_e - rate.n + 1, rate.now_e do get_pair(f, slot_word(rate, e)) end
    local ev = redis.call('BITFIELD', KEYS[1], unpack(f))
    local e, freed = rate.now_e - rate.n + 1, 0
    for i = 1, #ev, 2 do
      if ev[i] == e and ev[i + 1] ~= 0 then
        local leaves = math.max((e + rate.n) * rate.bucket_us - now, 0)
        if reset[r] == 0 then reset[r] = leaves end
        freed = freed + ev[i + 1]
        if not blocks or wait < 0 then break end
        if freed >= need then
          wait = math.max(wait, leaves)
          break
        end
      end
      e = e + 1
    end
  end
end
if not detail then wait = 0 end

local out = {allowed and 1 or 0, now}
for r = 1, #rates do out[#out + 1] = used[r] end
for r = 1, #rates do out[#out + 1] = reset[r] end
out[#out + 1] = wait
return out
