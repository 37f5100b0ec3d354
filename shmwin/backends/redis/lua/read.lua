-- read.lua: the last k buckets of one row, or summed over every live key, per field.
-- (window_lib.lua is put in front of it.)
--
-- KEYS[1]  the row: shmwin:{NAME}:k:KEY (ignored when ARGV[6] is '1')
-- KEYS[2]  the keys zset: shmwin:{NAME}:keys, key -> newest write in microseconds
-- KEYS[3]  the name's clock: shmwin:{NAME}:clock (see clock.lua)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  bucket width in microseconds
-- ARGV[3]  number of buckets in the ring
-- ARGV[4]  k: how many buckets to read, ending with the current one
-- ARGV[5]  number of fields
-- ARGV[6]  '1' to sum the rows of every key in the zset written within a span, else '0'
-- ARGV[7]  the row prefix: shmwin:{NAME}:k:, to which a key is appended
-- ARGV[8]  span in microseconds
-- ARGV[9]  '1' for an int64 window (exact sums), '0' for float64
--
-- Returns: {now in microseconds, then k * n_fields sums as text ('hi:lo' = hi * 10^9 + lo,
--          exact, for int64; '%.17g' for float64): oldest bucket first, the fields in order
--          within a bucket}.
-- Guarantees: atomic, one round trip: every row is read at the same instant.

local bucket_us, n, k = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n_fields, all_keys = tonumber(ARGV[5]), ARGV[6] == '1'
local row_prefix, span_us, ints = ARGV[7], tonumber(ARGV[8]), ARGV[9] == '1'

local now = now_us(KEYS[3])
local first = math.floor(now / bucket_us) - k + 1
local rows = {KEYS[1]}
if all_keys then
  rows = {}
  for _, key in ipairs(live_keys(KEYS[2], now, span_us)) do rows[#rows + 1] = row_prefix .. key end
end
local fields = {}
for f = 1, n_fields do fields[f] = f end
local sums = new_sums(k * n_fields, ints)
for _, row in ipairs(rows) do add_row(sums, row, first, k, n, fields) end
local out = {int(now)}
for i = 1, k * n_fields do out[i + 1] = sum_text(sums, i) end
return out
