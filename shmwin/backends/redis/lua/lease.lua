-- lease.lua: a two-tier limiter's leases -- give back what hosts did not spend, then take a
-- lease of hits for one host (or only answer), in one atomic step. See docs/several-hosts.md.
--
-- KEYS[1]  the key's leases: shmwin:{NAME}:L:KEY, a hash, '<lease id>:<t0>' -> '<t> <hits>'
--          (us, hits): every rate's exact log of the key, one entry per lease, stamped at its
--          deadline d (or, once given back, at the time the host stopped spending it, never
--          later than d)
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- KEYS[3]  the name's generation key: shmwin:{NAME}:gen (see change.lua): the rates below change
--          live; the log is of hits, whatever the rates, so a change of them carries it as is
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  hits wanted: the lease's size k at most (0: take nothing, only give back and answer)
-- ARGV[3]  hits needed: grant nothing below it (the caller's cost); -1: count the ARGV[2] hits
--          whatever the limits say (on_error="local": the hits a host admitted on its local share,
--          carried back; with D = 0 an entry stamped now, spent, which no host spends)
-- ARGV[4]  the lease's spend time D in microseconds: its deadline is d = now + D
-- ARGV[5]  the new lease's id: a random token in [1, 2**62) the host drew (decimal; kept as
--          a string, never a Lua number, which would round it)
-- ARGV[6]  the rates R, then R x (bucket width in microseconds, buckets n, limit): an entry
--          at t counts for a rate until (floor(t / width) + n) x width, as a limiter's ring
--          forgets a hit (between P and P + a bucket after it; an exact rate: width 1, n = P)
-- then     give-backs G, then G x (lease id, grant time t0 us, hits spent, time us the host
--          stopped spending); t0 = -1: the grant time is unknown (the round trip that asked
--          for the lease lost its answer: it may or may not have run), the entry is found by
--          the id alone and goes whole (nothing of it was spent)
-- last     the generation of the rates given (see change.lua)
--
-- A give-back touches only the entry of the lease it took: the entry is named by the host's
-- random id AND the grant time t0. Ids are never handed out by a counter here: a counter that
-- Redis loses (a restart without persistence, a rollback to an RDB snapshot, a failover to a
-- replica that lagged) hands the same ids out again, and an old give-back would then shrink or
-- delete another host's live lease -- hits admitted that no entry counts. An entry a give-back
-- does not find (lost with the server's state) is left alone: the give-back is a no-op.
--
-- Returns: {-1} if the generation key is not the last ARGV (nothing is written: the caller
--          syncs with change.lua and asks again); else {granted (0: refused), lease id, now us (t0), d us, wait us (refused: until the
--          needed hits fit; -1: never, they exceed a limit), then per rate the hits counted
--          (after), then per rate us until its oldest entry leaves (0: none)}.
-- Guarantees: atomic, one round trip: the give-backs, the count and the grant together, so
-- no other lease is granted between them. Entries no rate counts any more are dropped; the
-- key expires by itself once its newest entry has left the longest period.
--
-- The strictness argument: an entry counts for a rate at least while its time t > now - P,
-- entries stamped in the future too. A lease is granted at t0 only if, for every rate, the hits of
-- the entries counted at t0 plus k fit the limit; its host spends it only in [t0, d]. For any
-- interval [a, a + P), take the last lease granted (at t*) among those spent in it: every
-- other one was granted before t*, has d >= a > t* - P, and so was counted at t*. Hence the
-- sum of their k -- at least what the interval admitted -- fits the limit. A give-back
-- replaces (d, k) with (tr, spent), tr >= every spend of the lease: the argument holds, as
-- long as it replaces its own lease's entry and no other (hence the ids above).

if ARGV[#ARGV] ~= (redis.call('GET', KEYS[3]) or '0') then return {-1} end  -- stale rates, or a wipe

local now = now_us(KEYS[2])
local want, need, spend_us = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local token = ARGV[5]
local n_rates = tonumber(ARGV[6])
local rates = {}
for r = 1, n_rates do
  local at = 4 + 3 * r
  rates[r] = {width = tonumber(ARGV[at]), n = tonumber(ARGV[at + 1]), limit = tonumber(ARGV[at + 2])}
end
local at = 7 + 3 * n_rates

-- when an entry stamped at t stops counting for a rate, and for every rate
local function forget(rate, t) return (math.floor(t / rate.width) + rate.n) * rate.width end
local function forgotten(t)
  local last = 0
  for _, rate in ipairs(rates) do last = math.max(last, forget(rate, t)) end
  return last
end
local n_back = tonumber(ARGV[at])

-- the hash field of lease id (a decimal string) granted at t0 (us)
local function entry_of(id, t0) return id .. ':' .. t0 end

-- the field of lease id whatever its grant time (t0 = -1): read once, only for such give-backs
local fields_by_id = nil
local function entry_by_id(id)
  if not fields_by_id then
    fields_by_id = {}
    for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
      local of = string.match(field, '^(%d+):%d+$')
      if of then fields_by_id[of] = field end
    end
  end
  return fields_by_id[id]
end

-- give-backs: (d, k) becomes (min(tr, d), min(spent, k)); nothing spent: the entry goes
for g = 1, n_back do
  local base = at + 4 * g - 4
  local id, t0 = ARGV[base + 1], ARGV[base + 2]
  local spent, tr = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local kept = nil
  if string.match(id, '^%d+$') and string.match(t0, '^%d+$') then
    id = entry_of(id, t0)
  elseif string.match(id, '^%d+$') and t0 == '-1' then
    id, spent = entry_by_id(id), 0  -- never installed by its host: none of it was spent
  else
    id = nil
  end
  if id then kept = redis.call('HGET', KEYS[1], id) end
  if kept then
    local t, k = string.match(kept, '^(%d+) (%d+)$')
    t, k = tonumber(t), tonumber(k)
    if t and spent < k or (t and tr < t) then
      spent, tr = math.min(spent, k), math.min(tr, t)
      if spent <= 0 then
        redis.call('HDEL', KEYS[1], id)
      else
        redis.call('HSET', KEYS[1], id, string.format('%.0f %.0f', tr, spent))
      end
    end
  end
end

-- the entries, oldest first; those no rate counts any more leave
local entries, newest = {}, 0
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local t, k = string.match(flat[i + 1], '^(%d+) (%d+)$')
  t, k = tonumber(t), tonumber(k)
  if not t or now >= forgotten(t) then
    redis.call('HDEL', KEYS[1], flat[i])
  else
    entries[#entries + 1] = {t = t, k = k}
    if t > newest then newest = t end
  end
end
table.sort(entries, function(x, y) return x.t < y.t end)

local used, room = {}, nil
for r, rate in ipairs(rates) do
  used[r] = 0
  for _, e in ipairs(entries) do
    if now < forget(rate, e.t) then used[r] = used[r] + e.k end
  end
  local free = math.max(rate.limit - used[r], 0)
  if room == nil or free < room then room = free end
end

local granted, id, d, wait = 0, 0, 0, 0
if want > 0 then
  granted = need < 0 and want or math.min(want, room)  -- need -1: counted anyway (not a grant)
  if granted < need then granted = 0 end
end
if granted > 0 and not string.match(token, '^[1-9]%d*$') then
  return redis.error_reply('lease.lua: the lease id ' .. token .. ' is not a positive decimal')
end
if granted > 0 then
  d = now + spend_us
  -- HSETNX: an id drawn twice at the same microsecond (odds 2**-62) is refused, never merged
  if redis.call('HSETNX', KEYS[1], entry_of(token, string.format('%.0f', now)),
                string.format('%.0f %.0f', d, granted)) == 1 then
    id = token
  else
    granted, d = 0, 0
  end
end
if granted > 0 then
  if d > newest then newest = d end
  for r = 1, n_rates do used[r] = used[r] + granted end
elseif need > room then  -- when the needed hits fit: the entries that must leave, oldest first
  for r, rate in ipairs(rates) do
    local excess = used[r] + need - rate.limit
    if need > rate.limit then
      wait = -1
    elseif excess > 0 and wait >= 0 then
      for _, e in ipairs(entries) do
        if now < forget(rate, e.t) then
          excess = excess - e.k
          if excess <= 0 then
            wait = math.max(wait, forget(rate, e.t) - now)
            break
          end
        end
      end
    end
  end
end
if newest > 0 and (granted > 0 or n_back > 0) then
  redis.call('PEXPIRE', KEYS[1], math.floor((forgotten(newest) - now) / 1000) + 1)
end

local out = {granted, id, now, d, wait}
for r = 1, n_rates do out[#out + 1] = used[r] end
for r, rate in ipairs(rates) do
  local reset = 0
  for _, e in ipairs(entries) do
    if now < forget(rate, e.t) then
      reset = forget(rate, e.t) - now
      break
    end
  end
  out[#out + 1] = reset
end
return out
