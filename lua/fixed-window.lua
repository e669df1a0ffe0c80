-- Fixed window: a counter per window of `window` ms aligned to the epoch (every client's window ends at the
-- same moment), so a client can pass up to 2 x max within a short span across a window boundary: max at the
-- end of one window, max at the start of the next. Loaded after lua/prelude.lua, in front of
-- lua/ban-index.lua and lua/decide.lua, which reads the keys and arguments and builds the reply (see its
-- header); this file counts.
--
-- Provides, for lua/decide.lua (which calls them once per request, passing the request's state key):
--   count(counters, limits, now, member, peek, entries, cost) -> allowed
--            decides a request of `cost` units (1 or more), `member` its id, at `now` (ms, Redis's time),
--            against every limit of `limits` (limits[i] = { max, window, burst }), and counts it when every
--            limit allows it, unless `peek` (report, write nothing). Fills entries[i], for limit i: count and
--            reset (below), and retry, the ms until the request fits that limit (0: it does). It keeps its
--            own field there too (start). Returns true when allowed, false when denied (a denial writes
--            nothing).
--   settle(counters, limits, member, at, now, cost, final)
--            the request `member`, counted at `at` (ms, Redis's time of its decision) for `cost` units,
--            counts `final` instead (0: given back): see settle below. Returns nothing.
--   reserve(counters, limits, now, member, cost, wait, queue, entries) -> wait, or nil
--            a request count() denied, which every limit lets through `wait` ms from now (within the
--            policy's maxWait), is counted in the window of each limit that holds now + wait: the one it
--            counts now (a limit that allows it now), or the next, where the requests waiting for it are
--            counted as they come, so they never pass its max. One window ahead at most: a request whose
--            wait ends later than a limit's next window (that window full of requests waiting, or a longer
--            limit's wait past a shorter one's next window) is refused, as when `queue` units wait for a
--            limit's next window already: nil. Fills entries as they will be when the wait ends.
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    counters  HASH, per limit i: s<i> = start of the latest window counted (ms), c<i> = units counted
--                    in it. While requests wait for the next window (maxWait), that is the one s<i> and c<i>
--                    count, and o<i> holds this window's count; once it has come, it is simply this window.
--                    lua/lean-fixed-window.lua reads s1 and c1 alone, and hands back a start ahead of its clock.
--                    It lives until the last of those windows ends.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = units counted in the current window; reset = ms until it ends, when one more unit
--          is free (0: none counted); retry = ms until the request fits: the next window, or, when requests
--          waiting for that one fill it, the one after.
-- A request of cost c is allowed when every limit's count + c is at most its max, and counts c on each.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- a counter keeps no members.

-- Limit i's window at `now` from the stored fields: its start, the units counted in it, and the units waiting
-- for the next window (s<i> a window ahead: c<i> counts them, o<i> this window). A later window still (of this
-- length) is one a clock ahead of `now` counted in (under `clock: 'app'`, an instance's; or Redis's, set back):
-- the request counts in it, so clocks apart never reset each other's count.
local function current (fields, i, window, now)
  local start = now - now % window
  local s = fields[field('s', i)]
  if s == start then
    return start, fields[field('c', i)], 0
  elseif s == start + window then
    return start, fields[field('o', i)] or 0, fields[field('c', i)]
  elseif s and s > start and (s - start) % window == 0 then
    return s, fields[field('c', i)], 0
  end
  return start, 0, 0
end

-- Limit i counts `n` units in this window (entry.start): in c<i>, or in o<i> while s<i> is the next window.
local function store (counters, i, entry, n)
  if entry.waiting > 0 then
    redis.call('HSET', counters, field('o', i), text(n))
  else
    redis.call('HSET', counters, field('s', i), text(entry.start), field('c', i), text(n))
  end
end

local function count (counters, limits, now, member, peek, entries, cost)
  local stored = redis.call('HGETALL', counters)
  local fields = {}
  for i = 1, #stored, 2 do
    fields[stored[i]] = tonumber(stored[i + 1])
  end

  local allowed = true
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local start, n, waiting = current(fields, i, limit.window, now)
    entry.count, entry.reset, entry.retry, entry.start, entry.waiting = n, 0, 0, start, waiting
    if n > 0 then
      entry.reset = start + limit.window - now
    end
    if n + cost > limit.max then
      entry.retry = start + limit.window - now
      if waiting > 0 and waiting + cost > limit.max then
        entry.retry = entry.retry + limit.window
      end
      allowed = false
    end
  end
  if not allowed or peek then
    return allowed
  end

  -- The counters live until the last of the windows counted ends (the window after, while requests wait for
  -- it). A TTL already longer stays (fields of limits not in this decision: an override's, kept for when it
  -- ends); one shorter is a window's count left by a shorter window that began at the same moment (a window
  -- lengthened by an override or a configuration), which would otherwise vanish mid-window. The TTL given runs
  -- past that end by up to a second (at most the time left), so a later request of the window, whose clock read
  -- and PTTL a millisecond's tick or a pause may part, still reads it as long enough (lua/lean-fixed-window.lua
  -- does the same).
  local ttl = 0
  for i = 1, #limits do
    local entry, window = entries[i], limits[i].window
    entry.count = entry.count + cost
    entry.reset = entry.start + window - now
    ttl = math.max(ttl, entry.waiting > 0 and entry.reset + window or entry.reset)
    store(counters, i, entry, entry.count)
  end
  if #stored == 0 or redis.call('PTTL', counters) < ttl then
    redis.call('PEXPIRE', counters, text(ttl + math.min(ttl, 1000)))
  end
  return true
end

local function reserve (counters, limits, now, member, cost, wait, queue, entries)
  local at, ttl = now + wait, 0
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local ahead = at - at % limit.window - entry.start
    if ahead == limit.window then
      if entry.waiting >= queue or entry.waiting + cost > limit.max then
        return nil
      end
    elseif ahead ~= 0 then
      return nil
    end
    entry.ahead = ahead
  end
  for i = 1, #limits do
    local entry, window = entries[i], limits[i].window
    if entry.ahead == 0 then
      store(counters, i, entry, entry.count + cost)
    else
      redis.call('HSET', counters, field('s', i), text(entry.start + window), field('c', i), text(entry.waiting + cost),
        field('o', i), text(entry.count))
    end
    ttl = math.max(ttl, entry.start + entry.ahead + window - now)
  end
  if redis.call('PTTL', counters) < ttl then
    redis.call('PEXPIRE', counters, text(ttl + math.min(ttl, 1000)))
  end
  -- What its limits will say when it is let through.
  count(counters, limits, at, member, true, entries, 0)
  return wait
end

-- A request of `cost` counted at `at` counts `final` instead (0: given back), in the window it was counted in
-- (for one that waited, at the end of its wait); once that window is over, nothing changes. A counter ends it
-- at most at its max plus the largest (lua/prelude.lua), and below 2^52 (a max above that stays its own
-- ceiling).
local function settle (counters, limits, member, at, now, cost, final)
  local most = largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, field('s', i), field('c', i), field('o', i))
    local s, start = tonumber(stored[1]), at - at % limit.window
    local name, n
    if s == start then
      name, n = field('c', i), tonumber(stored[2])
    elseif s == start + limit.window and s > now then
      -- Counted in this window while requests wait for the next.
      name, n = field('o', i), tonumber(stored[3])
    end
    if n and n > 0 then
      local ceiling = math.min(limit.max + most, math.max(limit.max, 2 ^ 52))
      redis.call('HINCRBY', counters, name, text(moved(n, final - cost, ceiling)))
    end
  end
end
