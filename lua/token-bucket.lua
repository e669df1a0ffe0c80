-- Token bucket, as GCRA: one theoretical arrival time (TAT) per limit. A limit lets `max` requests through
-- per `window` ms at a steady rate, one every window / max ms, and up to `burst` at once from a full bucket.
-- To stay exact in integers, time is counted in ticks of 1/max ms: a request costs `window` ticks per unit (a
-- request of cost c, c x window) and the bucket holds burst x window ticks. Loaded after lua/prelude.lua, in
-- front of lua/ban-index.lua and lua/decide.lua, which reads the keys and arguments and builds the reply (see
-- its header); this file counts.
--
-- Provides, for lua/decide.lua (which calls them once per request, passing the request's state key):
--   count(bucket, limits, now, member, peek, entries, cost) -> allowed
--            decides a request of `cost` units (1 or more), `member` its id, at `now` (ms, Redis's time),
--            against every limit of `limits` (limits[i] = { max, window, burst }), and counts it when every
--            limit allows it, unless `peek` (report, write nothing). Fills entries[i], for limit i: count and
--            reset (below), and retry, the ms until the request fits that limit (0: it does). It keeps its
--            own field there too (tat). Returns true when allowed, false when denied (a denial writes nothing).
--   settle(bucket, limits, member, at, now, cost, final)
--            the request `member`, counted at `at` (ms, Redis's time of its decision) for `cost` units,
--            counts `final` instead (0: given back): see settle below. Returns nothing.
--   reserve(bucket, limits, now, member, cost, wait, queue, entries) -> wait, or nil
--            a request count() denied, which every limit lets through `wait` ms from now (within the
--            policy's maxWait), takes its tokens now, past the bucket's size: a debt the drip pays off by the
--            end of its wait, which every later decision counts. Not when a limit owes `queue` units already
--            (the requests waiting, in units): nil. Fills entries as they will be when the wait ends.
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    bucket  HASH, per limit i: t<i> = the TAT's whole ms, f<i> = its ticks past t<i> (0 to max - 1).
--                  The bucket is full again at the TAT; the key lives until the last limit's TAT.
-- limits   per limit: max (units per window), window (ms), burst (units at once, the capacity).
-- entries  per limit: capacity = burst; count = tokens in use, rounded up; reset = ms until one more unit is
--          free than now: one token back (0: the bucket is full). Retry is exact: the first millisecond at
--          which the request's tokens are back.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- a TAT keeps no members.

-- Below 2^53 (the plugin bounds max x window by 2^50), a float quotient is never rounded across an
-- integer, so floor and ceil of a / b are exact.
local function ceildiv (a, b)
  return math.ceil(a / b)
end
-- Ms until one more unit is free than with `tat` ticks in use: the next token back, or (more in use than the
-- bucket holds, after a settle charged more) the first one back in the bucket.
local function nextUnit (tat, max, window, burst)
  if tat == 0 then
    return 0
  end
  return ceildiv(tat - (math.min(ceildiv(tat, window), burst) - 1) * window, max)
end
local function store (bucket, i, now, tat, max)
  local ms = math.floor(tat / max)
  redis.call('HSET', bucket, field('t', i), text(now + ms), field('f', i), text(tat - ms * max))
end

local function count (bucket, limits, now, member, peek, entries, cost)
  local stored = redis.call('HGETALL', bucket)
  local fields = {}
  for i = 1, #stored, 2 do
    fields[stored[i]] = tonumber(stored[i + 1])
  end

  local allowed = true
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local max, window = limit.max, limit.window
    -- Ticks from now until the bucket is full again (0: full).
    local tat = 0
    local t = fields[field('t', i)]
    if t then
      tat = math.max(0, (t - now) * max + fields[field('f', i)])
    end
    entry.count, entry.retry, entry.tat = ceildiv(tat, window), 0, tat
    local over = tat + cost * window - limit.burst * window
    if over > 0 then
      entry.retry = ceildiv(over, max)
      allowed = false
    end
  end
  if not allowed or peek then
    for i = 1, #limits do
      local entry, limit = entries[i], limits[i]
      entry.reset = nextUnit(entry.tat, limit.max, limit.window, limit.burst)
    end
    return allowed
  end

  -- The key lives until the last limit's bucket is full again.
  local ttl = 0
  for i = 1, #limits do
    local entry, max, window = entries[i], limits[i].max, limits[i].window
    local tat = entry.tat + cost * window
    -- Allowed: no more than the bucket's size is in use, and some; one more unit is free once what is above
    -- count - 1 has dripped out.
    entry.count = ceildiv(tat, window)
    entry.reset = ceildiv(tat - (entry.count - 1) * window, max)
    ttl = math.max(ttl, ceildiv(tat, max))
    store(bucket, i, now, tat, max)
  end
  redis.call('PEXPIRE', bucket, text(ttl))
  return true
end

-- A request of `cost` counts `final` instead (0: given back): the difference is taken from the bucket, or put
-- back, now. A bucket that has refilled takes only what is more. A TAT ends it at most at the bucket's burst
-- plus the largest (lua/prelude.lua) in ticks, and at 2^51 ticks (at least twice burst x window, which the
-- options bound by 2^50): the bucket is empty and owes at most one largest capacity, exactly.
local function reserve (bucket, limits, now, member, cost, wait, queue, entries)
  for i = 1, #limits do
    local owed = entries[i].tat - limits[i].burst * limits[i].window
    if owed > 0 and ceildiv(owed, limits[i].window) >= queue then
      return nil
    end
  end
  -- The key lives until the last limit's bucket is full again.
  local ttl = 0
  for i = 1, #limits do
    local max, window = limits[i].max, limits[i].window
    local tat = entries[i].tat + cost * window
    ttl = math.max(ttl, ceildiv(tat, max))
    store(bucket, i, now, tat, max)
  end
  redis.call('PEXPIRE', bucket, text(ttl))
  -- What its limits will say when it is let through.
  count(bucket, limits, now + wait, member, true, entries, 0)
  return wait
end

local function settle (bucket, limits, member, at, now, cost, final)
  local delta, ttl, most = final - cost, 0, largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', bucket, field('t', i), field('f', i))
    if stored[1] or delta > 0 then
      local tat = 0
      if stored[1] then
        tat = math.max(0, (tonumber(stored[1]) - now) * limit.max + tonumber(stored[2]))
      end
      tat = tat + moved(tat, delta * limit.window, math.min((limit.burst + most) * limit.window, 2 ^ 51))
      store(bucket, i, now, tat, limit.max)
      ttl = math.max(ttl, ceildiv(tat, limit.max))
    end
  end
  -- More taken: the bucket is full again later. Less: its TTL is already long enough.
  if delta > 0 then
    redis.call('PEXPIRE', bucket, text(ttl))
  end
end
