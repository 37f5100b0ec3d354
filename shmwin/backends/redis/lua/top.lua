-- top.lua: the busiest keys of a keyed window for one field, summed on the server.
-- (window_lib.lua is put in front of it.)
--
-- KEYS[1]  the keys zset: shmwin:{NAME}:keys, key -> newest write in microseconds
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  bucket width in microseconds
-- ARGV[3]  number of buckets in the ring
-- ARGV[4]  k: how many buckets to sum, ending with the current one
-- ARGV[5]  field number, 1-based
-- ARGV[6]  how many keys to return at most
-- ARGV[7]  the row prefix: shmwin:{NAME}:k:, to which a key is appended
-- ARGV[8]  span in microseconds
-- ARGV[9]  '1' for an int64 window (exact sums), '0' for float64
--
-- Returns: {key, total, key, total, ...}, busiest first, totals as text ('hi:lo' =
--          hi * 10^9 + lo for int64, '%.17g' for float64); keys whose total is 0 are left out.
-- Guarantees: atomic, one round trip: every key is read at the same instant.

local bucket_us, n, k = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local field, top_n = ARGV[5], tonumber(ARGV[6])
local row_prefix, span_us, ints = ARGV[7], tonumber(ARGV[8]), ARGV[9] == '1'

local now = now_us(KEYS[2])
local first = math.floor(now / bucket_us) - k + 1
local found = {}
for _, key in ipairs(live_keys(KEYS[1], now, span_us)) do
  local sums = new_sums(k, ints)
  add_row(sums, row_prefix .. key, first, k, n, {field})
  local total = new_sums(1, ints)
  for j = 1, k do total.hi[1], total.lo[1] = total.hi[1] + sums.hi[j], total.lo[1] + sums.lo[j] end
  if sum_value(total, 1) ~= 0 then found[#found + 1] = {key, sum_value(total, 1), sum_text(total, 1)} end
end
table.sort(found, function(x, y) return x[2] > y[2] end)
local out = {}
for i = 1, math.min(top_n, #found) do
  out[#out + 1] = found[i][1]
  out[#out + 1] = found[i][3]
end
return out
