-- window_lib.lua: functions shared by the window scripts (add, read, keys, top).
-- Not run on its own: scripts.py puts it in front of each of those scripts, so it
-- reads the same ARGV[1] as they do and touches only the keys it is given.
--
-- KEYS     none of its own: its functions take key names as arguments
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
--
-- Lua numbers are doubles: times are integer microseconds (exact below 2^53), and
-- integers leave a script through int() ('%.0f'), never tostring.

-- Now in microseconds: ARGV[1] when the caller drives the clock, else the server's TIME
-- (so hosts with skewed clocks still agree).
local function now_us()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- An integer as text, without exponent or fraction.
local function int(x) return string.format('%.0f', x) end

-- The keys of a keyed window written within the last span_us microseconds
-- (zset: key -> newest write in microseconds).
local function live_keys(zset, now, span_us)
  return redis.call('ZRANGEBYSCORE', zset, now - span_us, '+inf')
end

-- Adds one row's live buckets into sums: for the k buckets of epochs first .. first + k - 1
-- (oldest first, j = 0 .. k - 1) whose slot still holds that epoch,
--   sums[j * #fields + i] += the value of field number fields[i]
-- A row is a hash: e<slot> = epoch of the bucket in that slot, v<slot>.<field> = its value.
-- Stale slots and unset fields add nothing.
local function add_row(sums, row, first, k, n, fields)
  local flat = redis.call('HGETALL', row)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  local nf = #fields
  for j = 0, k - 1 do
    local slot = (first + j) % n
    if h['e' .. slot] == int(first + j) then
      for i = 1, nf do
        local v = h['v' .. slot .. '.' .. fields[i]]
        if v then sums[j * nf + i] = sums[j * nf + i] + tonumber(v) end
      end
    end
  end
end
