-- token.lua: a token bucket's take or test (GCRA), the native core's token_check on redis.
--
-- KEYS[1]  the key's state: shmwin:{NAME}:k:KEY, a string: its theoretical arrival time (us,
--          the name's clock), from which the bucket is full; no key: a full bucket
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the cost: tokens to take, 0..BURST (the caller checks it)
-- ARGV[3]  '1' to take them if the bucket holds them, '0' to test only
-- ARGV[4]  T, the emission interval in whole microseconds (one token comes back per T)
-- ARGV[5]  BURST, the most tokens the bucket holds
--
-- At now the bucket holds (now + BURST x T - tat) // T tokens (BURST when tat <= now).
-- Taking cost is allowed iff max(tat, now) + cost x T - BURST x T <= now; then
-- tat = max(tat, now) + cost x T. Integers below 2**53 throughout: exact in Lua's doubles.
--
-- Returns: {allowed 1/0, whole tokens left, us until cost tokens are there (0: now),
--           us until the bucket is full}.
-- Guarantees: atomic, one round trip, one GET and at most one SET; the key expires (PX) once
-- its bucket is full again, when it would read as full anyway.

local now = now_us(KEYS[2])
local cost, commit = tonumber(ARGV[2]), ARGV[3] == '1'
local T, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
local tol = burst * T

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
