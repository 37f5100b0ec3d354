-- open.lua: claim a name for one geometry, or report the geometry it already has.
--
-- KEYS[1]  shmwin:{NAME}:meta, a hash; its field 'geometry' holds the spec
-- ARGV[1]  the geometry spec wanted, e.g. 'window;<bucket ns>;<n>;<fields>;<dtype>;<capacity>'
--          or 'limiter;<bucket ns>,<n>,<limit>;...' (text, compared as is)
--
-- Returns: '' if the name now has this geometry (it was free, or already had it),
--          else the other geometry it has (nothing is written then).
-- Guarantees: atomic, one round trip: two hosts opening one name with different
-- geometries cannot both win.

local meta, wanted = KEYS[1], ARGV[1]

local have = redis.call('HGET', meta, 'geometry')
if have and have ~= wanted then return have end
if not have then redis.call('HSET', meta, 'geometry', wanted) end
return ''
