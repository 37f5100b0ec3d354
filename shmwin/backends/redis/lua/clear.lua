-- clear.lua: forget every count of one key of a keyed window.
--
-- KEYS[1]  the row: shmwin:{NAME}:k:KEY
-- KEYS[2]  the keys zset: shmwin:{NAME}:keys
-- ARGV[1]  now in microseconds, or '' (unused: sent with every window script)
-- ARGV[2]  the key
--
-- Returns: 1.
-- Guarantees: atomic, one round trip: the row and its zset entry go together.

local row, zset, key = KEYS[1], KEYS[2], ARGV[2]

redis.call('DEL', row)
redis.call('ZREM', zset, key)
return 1
