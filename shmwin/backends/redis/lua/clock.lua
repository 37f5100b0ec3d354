-- clock.lua: the time of one name, which never goes back when the server's clock does.
-- Not run on its own: scripts.py puts it in front of every script that reads or writes
-- with a time (hit, hit_one, add, read, keys, top).
--
-- KEYS     none of its own: now_us() takes the name's clock key, shmwin:{NAME}:clock
--          (under the name's hash tag: one cluster slot with its rows)
-- ARGV[1]  '' to read the server's TIME -- always, but in tests: a reading in microseconds
--          of the ONE clock a test drives the name with (shmwin.backends.redis.testing). Never a
--          host's clock: readings from sources that disagree (hosts a day apart, or processes
--          whose readings arrive out of order) would move the time forward by their gap at
--          each alternation -- a step forward as far as this script can tell.
--
-- The clock key is a string '<now> <reading>': the newest time handed out and the clock
-- reading it came from, both in microseconds. The time moves on by what the clock moved
-- since that reading when it moved forward, and by nothing when it stepped back:
--   - it never goes back, so no count is dated in the past or lost early;
--   - after a step back it goes on at the clock's pace from where it was (it does not wait
--     for the clock to catch up), so the times reported (reset_after, wait) hold in real time
--     and a key's TTL, relative to its write, still outlives its counts;
--   - a step forward moves it forward as far: hits age by the step, no more.
-- The key has no TTL: it lives as long as the name (unlink and reset remove it).

local function now_us(clock_key)
  local reading = tonumber(ARGV[1])
  if not reading then
    local t = redis.call('TIME')
    reading = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local now = reading
  local kept = redis.call('GET', clock_key)
  if kept then
    local last_now, last_reading = string.match(kept, '^(%d+) (%d+)$')
    last_now, last_reading = tonumber(last_now), tonumber(last_reading)
    if last_now then
      if reading == last_reading then return last_now end
      now = last_now + math.max(reading - last_reading, 0)
    end
  end
  redis.call('SET', clock_key, string.format('%.0f %.0f', now, reading))
  return now
end
