-- hit_one.lua: the lean hit of a one-rate limiter: check and count in one bucket ring.
-- A template: scripts.py writes the ring's shape into the first line of code, so there is one
-- script per period and buckets; a hit sends now, the cost, the limit and the generation (they
-- change live: as ARGV, a change of them adds no script to the server's cache).
--
-- KEYS[1]  the key's ring: shmwin:{NAME}:k:KEY, a string of big-endian i64 words
--            [head epoch][running total of the live buckets] then N x [bucket epoch][hits]
--          (0 = empty: real epochs are positive); the layout hit.lua reads with BITFIELD
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- KEYS[3]  the name's generation key: shmwin:{NAME}:gen (see change.lua)
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the cost: hits to count, a positive integer
-- ARGV[3]  LIMIT, hits allowed in the window
-- ARGV[4]  GEN, the generation of the rates given (see change.lua), or '*': count with them
--          whatever the generation key holds (a hit that met a change at each of its reads)
-- ARGV[5]  '1' if earlier layouts may hold the key's hits (a change of periods): a key with no
--          row then needs hit.lua's carry, answered -3 (nothing written); else '0'
-- Constants: TTL_MS the key's time to live in milliseconds (span + 2 buckets),
--            BUCKET_US bucket width in microseconds, N buckets in the ring
--
-- Returns: 1 if the hits fit and were counted, 0 if not (nothing is written then), -3 if the
--          key needs a carry (ARGV[5]), -1 if the
--          generation key is not GEN (nothing is written: the caller syncs and asks again).
-- Guarantees: atomic, one round trip, one GET and at most one SET of the ring (and of the
-- clock, clock.lua's: the time never goes back); the TTL starts again
-- when a hit opens a bucket, so the key outlives every later write in it by a span.

local TTL_MS, BUCKET_US, N = ${ttl_ms}, ${bucket_us}, ${n}
local LIMIT = tonumber(ARGV[3])
if ARGV[4] ~= '*' and ARGV[4] ~= (redis.call('GET', KEYS[3]) or '0') then return -1 end  -- stale, or a key left behind: change.lua's 'sync' repairs
local now = now_us(KEYS[2])
local cost = tonumber(ARGV[2])

local now_e = math.floor(now / BUCKET_US)
local ring = redis.call('GET', KEYS[1])
if not ring then
  if ARGV[5] == '1' then return -3 end  -- its first hit since the change: hit.lua carries
  ring = ''
end
if #ring < 16 + 16 * N then  -- hit.lua's BITFIELD writes may leave it shorter: pad with empty words
  ring = ring .. string.rep('\0', 16 + 16 * N - #ring)
end
local head, total = struct.unpack('>i8>i8', ring)
if head == 0 or now_e - head >= N then
  total = 0
elseif now_e > head then
  for gone = head - N + 1, now_e - N do
    local e, v = struct.unpack('>i8>i8', ring, 17 + 16 * (gone % N))
    if e == gone then total = total - v end
  end
end
if total + cost > LIMIT then return 0 end
local at = 17 + 16 * (now_e % N)
local e, v = struct.unpack('>i8>i8', ring, at)
local fresh = e ~= now_e
if fresh then v = 0 end
ring = struct.pack('>i8>i8', now_e, total + cost) .. string.sub(ring, 17, at - 1)
       .. struct.pack('>i8>i8', now_e, v + cost) .. string.sub(ring, at + 16)
if fresh then
  redis.call('SET', KEYS[1], ring, 'PX', TTL_MS)  -- a new bucket: the TTL starts again
else
  redis.call('SET', KEYS[1], ring, 'KEEPTTL')
end
return 1
