-- gen.lua: raise one spread group's generation key to a limiter's new generation (never lower).
--
-- KEYS[1]  shmwin:{NAME#group}:gen, the newest generation a hit of that group saw
-- ARGV[1]  unused (the time every script is sent; this one reads none)
-- ARGV[2]  the name's new generation (see change.lua)
--
-- Returns: the group's generation after the call.
-- Guarantees: atomic, one round trip, one GET and at most one SET. Spread over N hash tags, a change cannot set
-- every group's key in its own atomic step (they are on other slots): the changer raises each
-- one after change.lua, so that from its return on no process that has not seen the change
-- counts a hit in any group.

local have = tonumber(redis.call('GET', KEYS[1]) or '0')
local want = tonumber(ARGV[2])
if want > have then
  redis.call('SET', KEYS[1], ARGV[2])
  return ARGV[2]
end
return string.format('%.0f', have)
