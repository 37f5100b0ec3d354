-- token.lua: a token bucket's take or test (GCRA), the native core's token_check on redis.
--
-- KEYS[1]  the key's state: shmwin:{NAME}:k:KEY, a string: its theoretical arrival time (us,
--          the name's clock), from which the bucket is full; no key: a full bucket
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- KEYS[3]  the name's generation key: shmwin:{NAME}:gen (see change.lua)
-- KEYS[4..] the key's states in earlier layouts (change.lua's history: another rate or burst)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the cost: tokens to take, 0..BURST (the caller checks it)
-- ARGV[3]  '1' to take them if the bucket holds them, '0' to test only
-- ARGV[4]  T, the emission interval in whole microseconds (one token comes back per T)
-- ARGV[5]  BURST, the most tokens the bucket holds
-- ARGV[6]  the generation of T and BURST (see change.lua)
-- ARGV[7]  H, the earlier layouts' states given as KEYS[4 ..]; then for each: the time (us) its
--          states are all full again, its T and its BURST
--
-- A key with no state in this layout whose states of earlier layouts have tokens in use starts
-- with them in use (the carry of a change of rate or burst, bucket4j's "as is"): the whole
-- tokens each old state has not given back yet, summed -- past BURST too, so that a change
-- never hands out a token (burst 6 -> 5 -> 6 with 6 in use leaves 6 in use, not 5); the old
-- states go.
--
-- At now the bucket holds (now + BURST x T - tat) // T tokens (BURST when tat <= now).
-- Taking cost is allowed iff max(tat, now) + cost x T - BURST x T <= now; then
-- tat = max(tat, now) + cost x T. Integers below 2**53 throughout: exact in Lua's doubles.
--
-- Returns: {-1} if the generation key is not ARGV[6] (nothing is written: the caller syncs
--          with change.lua and asks again); else {allowed 1/0, whole tokens left, us until cost tokens are there (0: now),
--           us until the bucket is full}.
-- Guarantees: atomic, one round trip, one GET and at most one SET; the key expires (PX) once
-- its bucket is full again, when it would read as full anyway.

local gen = tonumber(ARGV[6])
local seen = tonumber(redis.call('GET', KEYS[3]) or '0')
if gen ~= seen then return {-1} end  -- stale, or a key left behind: change.lua's 'sync' repairs

local now = now_us(KEYS[2])
local cost, commit = tonumber(ARGV[2]), ARGV[3] == '1'
local T, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
local tol = burst * T

local n_olds = tonumber(ARGV[7])
if n_olds > 0 and redis.call('EXISTS', KEYS[1]) == 0 then  -- the carry
  local used = 0
  for h = 1, n_olds do
    local at = 8 + (h - 1) * 3
    local old_tat = tonumber(redis.call('GET', KEYS[3 + h]) or '')
    if old_tat and tonumber(ARGV[at]) > now and old_tat > now then
      used = used + math.ceil((old_tat - now) / tonumber(ARGV[at + 1]))
    end
    redis.call('DEL', KEYS[3 + h])
  end
  if used > 0 then  -- all of them, past BURST too: such a bucket waits until they come back
    redis.call('SET', KEYS[1], string.format('%.0f', now + used * T), 'PX', math.floor(used * T / 1000) + 1)
  end
end

local tat = tonumber(redis.call('GET', KEYS[1]) or '') or now
if tat < now then tat = now end
local next_tat = tat + cost * T
local allowed = next_tat - tol <= now
if allowed and commit and cost > 0 then
  tat = next_tat
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.floor((tat - now) / 1000) + 1)
end
local left, tokens, wait = now + tol - tat, 0, 0
if left > 0 then tokens = math.floor(left / T) end
if not allowed then wait = next_tat - tol - now end
return {allowed and 1 or 0, tokens, wait, tat - now}
