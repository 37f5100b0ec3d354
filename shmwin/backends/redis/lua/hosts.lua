-- hosts.lua: say this host is alive, and count the hosts seen recently (on_error="local").
--
-- KEYS[1]  the hosts zset: shmwin:{NAME}:hosts (member: a host's id, score: when seen, in microseconds)
-- ARGV[1]  now in microseconds, or '' for the server's TIME
-- ARGV[2]  this host's id
-- ARGV[3]  how long a host counts after it was last seen, in microseconds
--
-- Returns: the number of hosts seen within ARGV[3], this one included.
-- Guarantees: atomic, one round trip; the zset expires when no host was seen for ARGV[3].

local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local horizon = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - horizon)
redis.call('PEXPIRE', KEYS[1], math.ceil(horizon / 1000))
return redis.call('ZCARD', KEYS[1])
