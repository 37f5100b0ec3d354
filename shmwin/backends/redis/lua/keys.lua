-- keys.lua: the keys of a keyed window that have counts inside the window.
-- (window_lib.lua is put in front of it.)
--
-- KEYS[1]  the keys zset: shmwin:{NAME}:keys, key -> newest write in microseconds
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  span in microseconds
--
-- Returns: the keys written within the last span, oldest write first.
-- Guarantees: atomic, one round trip.

local span_us = tonumber(ARGV[2])

return live_keys(KEYS[1], now_us(KEYS[2]), span_us)
