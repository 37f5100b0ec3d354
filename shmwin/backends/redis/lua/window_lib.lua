-- window_lib.lua: functions shared by the window scripts (add, read, keys, top).
-- Not run on its own: scripts.py puts it in front of each of those scripts (and
-- clock.lua, whose now_us() they all read the time from), so it touches only the keys
-- it is given.
--
-- KEYS     none of its own: its functions take key names as arguments
-- ARGV[1]  now in microseconds, or '' (read by clock.lua, never here)
--
-- Lua numbers are doubles: times are integer microseconds (exact below 2^53), and
-- integers leave a script through int() ('%.0f'), never tostring.

-- An integer as text, without exponent or fraction.
local function int(x) return string.format('%.0f', x) end

-- The keys of a keyed window written within the last span_us microseconds
-- (zset: key -> newest write in microseconds).
local function live_keys(zset, now, span_us)
  return redis.call('ZRANGEBYSCORE', zset, now - span_us, '+inf')
end

-- A sum that stays exact for int64 values: Lua numbers are doubles (exact below 2^53), so
-- each stored integer (text, as HINCRBY keeps it) is split into hi * 10^9 + lo, both exact,
-- and the two parts are summed apart. Float64 windows sum plain doubles in hi.
local function new_sums(size, ints)
  local acc = {hi = {}, lo = {}, ints = ints}
  for i = 1, size do acc.hi[i], acc.lo[i] = 0, 0 end
  return acc
end

local function add_value(acc, i, text)
  if not acc.ints then
    acc.hi[i] = acc.hi[i] + tonumber(text)
    return
  end
  local neg = string.sub(text, 1, 1) == '-'
  local digits = neg and string.sub(text, 2) or text
  local cut = #digits - 9
  local hi = cut > 0 and tonumber(string.sub(digits, 1, cut)) or 0
  local lo = tonumber(string.sub(digits, math.max(cut + 1, 1)))
  if neg then hi, lo = -hi, -lo end
  acc.hi[i], acc.lo[i] = acc.hi[i] + hi, acc.lo[i] + lo
end

-- Sum i as text: 'hi:lo' (the value is hi * 10^9 + lo, exactly) for int64, '%.17g' for float64.
local function sum_text(acc, i)
  if acc.ints then return int(acc.hi[i]) .. ':' .. int(acc.lo[i]) end
  return string.format('%.17g', acc.hi[i])
end

-- Sum i as a double, for ordering.
local function sum_value(acc, i) return acc.hi[i] * (acc.ints and 1e9 or 1) + acc.lo[i] end

-- Adds one row's live buckets into acc: for the k buckets of epochs first .. first + k - 1
-- (oldest first, j = 0 .. k - 1) whose slot still holds that epoch,
--   sum number j * #fields + i  +=  the value of field number fields[i]
-- A row is a hash: e<slot> = epoch of the bucket in that slot, v<slot>.<field> = its value.
-- Stale slots and unset fields add nothing.
local function add_row(acc, row, first, k, n, fields)
  local flat = redis.call('HGETALL', row)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  local nf = #fields
  for j = 0, k - 1 do
    local slot = (first + j) % n
    if h['e' .. slot] == int(first + j) then
      for i = 1, nf do
        local v = h['v' .. slot .. '.' .. fields[i]]
        if v then add_value(acc, j * nf + i, v) end
      end
    end
  end
end
