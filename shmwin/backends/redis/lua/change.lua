-- change.lua: claim a limiter's name, or change its rates live, in one atomic step (the
-- contract is docs/operating.md's "Changing limits live"; its Redis side is docs/redis.md's).
--
-- KEYS[1]  shmwin:{NAME}:meta, a hash:
--            geometry  the spec in force, 'limiter[/spread=N];<bucket ns>,<n>,<limit>;...'
--            gen       the name's generation: the name's time (us) of its claim or last change;
--                      every hit carries the generation its process knows (see gen below)
--            layout    the generation whose change made the rows' layout (0: the first one):
--                      a key's row of layout L is k:KEY for L = 0, else kL:KEY
--            history   earlier layouts whose rows may still hold live hits, ';'-separated
--                      'L:<bucket ns>,<n>,...:<until us>' (until: the time its hits are all gone)
--            changed   the name's time (us) of its last change, changes: how many
-- KEYS[2]  the name's clock: shmwin:{NAME}:clock (see clock.lua, put in front of this script)
-- KEYS[3]  the name's generation key, shmwin:{NAME}:gen: the newest generation any hit saw
-- ARGV[1]  now in microseconds, or '' to read the server's TIME
-- ARGV[2]  the spec wanted
-- ARGV[3]  'raise' (another spec is refused), 'carry' (changed: in place when only the limits
--          differ, else a new layout whose first hit of each key carries the old rows' hits),
--          'reset' (changed: a new layout, the old rows forgotten), 'attach' (no change), or
--          'sync': a hit met another generation than its process knows (ARGV[4]) -- see Repair;
--          'renew': 'reset' even when the spec wanted is the one in force (a reset asked for:
--          Limiter.set_rates, shmwin set --reset; an open with on_change='reset' sends 'reset');
--          'deferred-<on_change>': an open's claim deferred past it (see Deferred)
-- ARGV[4]  'sync' only: the generation the process knows (0: none), whose spec is ARGV[2];
--          'deferred-*' only: how long before now (us, by the opener's own clock) it opened
-- ARGV[5]  'sync' only: the generation the hit met in its (group's) generation key
-- ARGV[6]  the newest time (us) of the name's spread groups' clocks (0: not spread): the name's
--          own clock moves only here, so after the server's TIME stepped back it may stand
--          behind them, and an old layout's end must be dated on the newest clock
--
-- Returns: {1, spec, gen, layout, history, changed, changes, moved ('1' if this call changed
--          the rates, else '0')} -- the name's state after the call;
--          {0, spec in force} if it was refused (another kind or spread, or 'raise').
-- Guarantees: atomic, one round trip. A generation never goes back (the name's time, one past
-- the previous one at least), so a hit of a process that has not seen the change is refused by
-- the hit scripts (their generation check), and that process reads this state again. The
-- generation key moves only here, with the meta, in one step: after any call they agree.
-- Repair ('sync'): the meta and the generations the processes know can disagree only when the
-- keys were wiped (FLUSHDB, a restart without persistence, an unlink) or rolled back (a restart
-- from an older RDB snapshot). Then:
--   - no meta: the first claim makes a fresh name with the claimer's spec, dated with the
--     generation it knew (even if the generation key holds a newer one: the meta alone was
--     evicted); a process that knew a newer generation re-claims its spec at its next call
--     (below), so the newest rates any live process knows win again;
--   - the process knows a newer generation than the meta: its spec is re-claimed as a change
--     with carry (the meta was rolled back past it), dated with that generation (not a new
--     one: a process that knew a newer still re-claims after it);
--   - the hit met a newer generation than the meta's (a generation key or a spread group's
--     left ahead): the meta's spec is kept and its generation raised past it;
--   - else the process simply reads the state (it was stale).
-- Never an error: every case ends with a meta and a generation key that agree.
-- Deferred: an open while the server was away (on_error) claims at its process's first call
-- that gets through. Rates claimed or changed after that open are newer than the opener's: it
-- follows them ('sync'); rates older than the open are what its deploy replaces: it changes them
-- by its on_change, as the open would have had the server answered ('raise' follows: a call
-- has no open to refuse).

local MAX_OLDS = 4  -- earlier layouts kept readable (see the carry below)
local meta, gen_key = KEYS[1], KEYS[3]
local want, mode = ARGV[2], ARGV[3]
local known, floor = tonumber(ARGV[4] or '0') or 0, tonumber(ARGV[5] or '0') or 0
local now = math.max(now_us(KEYS[2]), tonumber(ARGV[6] or '0') or 0)

local f = redis.call('HMGET', meta, 'geometry', 'gen', 'layout', 'history', 'changed', 'changes')
local have = f[1]
local gen, layout, history = tonumber(f[2] or '0'), tonumber(f[3] or '0'), f[4] or ''
local changed, changes = tonumber(f[5] or '0'), tonumber(f[6] or '0')

local rule = string.match(mode, '^deferred%-(%a+)$')
if rule then
  local opened = now - known
  known = 0
  local same_kind = have and string.match(have, '^[^;]*') == string.match(want, '^[^;]*')
  local newer = same_kind and gen < opened and (rule == 'carry' or rule == 'reset')
  mode = newer and rule or 'sync'  -- the opener's rates changed after the open, or the name's
end

local moved = '0'
local reclaim_at = nil  -- 'sync': the generation a process re-claims its rates with
local function state(spec)
  return {1, spec, string.format('%.0f', gen), string.format('%.0f', layout), history,
          string.format('%.0f', changed), changes, moved}
end
local function kind(spec) return string.match(spec, '^[^;]*') end
local function shape(spec)  -- the rings without their limits: what a row's layout depends on
  local out = {}
  for b, n in string.gmatch(spec, ';(%d+),(%d+),%d+') do out[#out + 1] = b .. ',' .. n end
  return table.concat(out, ',')
end
local function life_us(spec)  -- a hit written now is gone from every ring of spec by now + this
  local most = 0
  for b, n in string.gmatch(spec, ';(%d+),(%d+),%d+') do
    most = math.max(most, math.ceil(tonumber(b) / 1000) * (tonumber(n) + 1))
  end
  return most
end
local function gen_key_value() return tonumber(redis.call('GET', gen_key) or '0') end
local function next_gen()  -- the name's time, and after every generation handed out or met before
  gen = math.max(now, gen + 1, gen_key_value() + 1, known + 1, floor + 1)
end
local function save()  -- the meta and the generation key, together
  redis.call('HSET', meta, 'geometry', have, 'gen', string.format('%.0f', gen),
             'layout', string.format('%.0f', layout), 'history', history,
             'changed', string.format('%.0f', changed), 'changes', changes)
  redis.call('SET', gen_key, string.format('%.0f', gen))
  return state(have)
end

if not have then  -- a new name, or one wiped: claimed as wanted
  if mode == 'attach' or want == '' then return {0, ''} end
  if mode == 'sync' and known > 0 then
    -- dated as its claimer knew it, even below a generation the key still holds (the meta
    -- alone evicted): a process that knew a newer one then meets another generation and
    -- re-claims its spec, which wins; above every known one, this stale spec would win
    gen = known
  else
    next_gen()
  end
  have, layout, history = want, 0, ''
  return save()
end
if mode == 'sync' then
  if known > gen and kind(have) == kind(want) and want ~= '' then  -- the meta went back past it
    -- re-claimed with the generation it knew, not a newer one: after a rollback past two
    -- changes the process that knew the newest re-claims after it, and its rates win
    if have == want then
      gen = known
      return save()
    end
    mode, reclaim_at = 'carry', known  -- its spec, claimed again below as a change
  elseif floor > gen or gen_key_value() ~= gen then  -- a generation key ahead of (or behind) the meta
    if floor > gen or gen_key_value() > gen then next_gen() end
    return save()
  else
    return state(have)
  end
end
if (have == want and mode ~= 'renew') or mode == 'attach' then return state(have) end
if mode == 'raise' or kind(have) ~= kind(want) then return {0, have} end

if reclaim_at then gen = reclaim_at else next_gen() end
changed, changes, moved = gen, changes + 1, '1'
if mode == 'carry' and (shape(have) == shape(want) or kind(have) == 'lease-limiter') then
  -- in place: the rows keep their layout, the hits their buckets; only the limits move (a
  -- two-tier limiter's rows are logs of leases, whatever the rates: always in place)
else
  local kept = {}
  if mode == 'carry' then
    -- every earlier layout whose rows may hold hits still inside a new rate's window stays
    -- readable (hit.lua's carry sums them): the hits of a layout retired now are dated at most
    -- now, so they count for at most the longest of its and the new rates' lives
    local gone_by = now + math.max(life_us(have), life_us(want))
    for entry in string.gmatch(history, '[^;]+') do
      local l, s, u = string.match(entry, '^(%d+):([^:]*):(%d+)$')
      if tonumber(u) > now then
        kept[#kept + 1] = string.format('%s:%s:%.0f', l, s, math.max(tonumber(u), gone_by))
      end
    end
    kept[#kept + 1] = string.format('%.0f:%s:%.0f', layout, shape(have), gone_by)
    -- at most MAX_OLDS: each key's hit reads them all while they live (a storm of changes would
    -- make every hit slower); the newest carry what the older ones held, dated, within their spans
    while #kept > MAX_OLDS do table.remove(kept, 1) end
  end
  history, layout = table.concat(kept, ';'), gen
end
have = want
return save()
