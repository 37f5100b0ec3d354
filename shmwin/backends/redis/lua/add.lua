-- add.lua: add an amount to one field of one window row, in the current bucket.
-- (window_lib.lua is put in front of it.)
--
-- KEYS[1]  the row: shmwin:{NAME}:k:KEY, a hash, e<slot> = bucket epoch, v<slot>.<field> = value
-- KEYS[2]  the keys zset: shmwin:{NAME}:keys, key -> newest write in microseconds
-- KEYS[3]  the name's clock: shmwin:{NAME}:clock (see clock.lua)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  bucket width in microseconds
-- ARGV[3]  number of buckets in the ring
-- ARGV[4]  field number, 1-based
-- ARGV[5]  the amount: an integer, or a float's repr for a float64 window
-- ARGV[6]  '1' for a float64 window (HINCRBYFLOAT), '0' for int64 (HINCRBY)
-- ARGV[7]  time to live of the row and the zset in milliseconds (span + a bucket)
-- ARGV[8]  the key ('' for an unkeyed window)
-- ARGV[9]  '1' if the window is keyed: the key's newest write goes into the zset
-- ARGV[10] number of fields
-- ARGV[11] span in microseconds: zset entries older than this are dropped
-- ARGV[12] '1' to return the field's total over the row's window after the add, else '0'
--
-- Returns: now in microseconds, as integer text; with ARGV[12] = '1', the field's total
--          over the row's whole window, this add included, as text ('hi:lo' = hi * 10^9 + lo
--          for int64, '%.17g' for float64).
-- Guarantees: atomic, one round trip: no other add to the row lands between the add and
-- its total. A slot holding an older epoch is emptied before it counts again; the row
-- (and the zset) expire a span and a bucket after the last add.

local bucket_us, n = tonumber(ARGV[2]), tonumber(ARGV[3])
local field, amount, floats = ARGV[4], ARGV[5], ARGV[6] == '1'
local ttl_ms, key, keyed = ARGV[7], ARGV[8], ARGV[9] == '1'
local n_fields, span_us, with_total = tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12] == '1'
local row, zset = KEYS[1], KEYS[2]

local now = now_us(KEYS[3])
local epoch = math.floor(now / bucket_us)
local slot = epoch % n
local e = int(epoch)
if redis.call('HGET', row, 'e' .. slot) ~= e then
  for f = 1, n_fields do redis.call('HDEL', row, 'v' .. slot .. '.' .. f) end
  redis.call('HSET', row, 'e' .. slot, e)
end
if floats then
  redis.call('HINCRBYFLOAT', row, 'v' .. slot .. '.' .. field, amount)
else
  redis.call('HINCRBY', row, 'v' .. slot .. '.' .. field, amount)
end
redis.call('PEXPIRE', row, ttl_ms)
if keyed then
  redis.call('ZADD', zset, now, key)
  redis.call('ZREMRANGEBYSCORE', zset, '-inf', '(' .. int(now - span_us))
  redis.call('PEXPIRE', zset, ttl_ms)
end
if with_total then
  local sums = new_sums(n, not floats)
  add_row(sums, row, epoch - n + 1, n, n, {field})
  local total = new_sums(1, not floats)
  for j = 1, n do total.hi[1], total.lo[1] = total.hi[1] + sums.hi[j], total.lo[1] + sums.lo[j] end
  return sum_text(total, 1)
end
return int(now)
