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
--            counts now (a limit that allows it now), or the next (n<i>), where the requests waiting for it
--            are counted as they come, so they never pass its max. One window ahead at most: a request whose
--            wait ends later than a limit's next window (that window full of requests waiting, or a longer
--            limit's wait past a shorter one's next window) is refused, as when `queue` units wait for a
--            limit's next window already: nil. Fills entries as they will be when the wait ends.
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    counters  HASH, per limit i: s<i> = start of the window counted (ms), c<i> = units counted in it,
--                    and, only while requests wait for the window after it (maxWait), n<i> = their units: once
--                    that window has come, they are its count. It lives until the last of those windows ends.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = units counted in the current window; reset = ms until it ends, when one more unit
--          is free (0: none counted); retry = ms until the request fits: the next window, or, when requests
--          waiting for that one fill it, the one after.
-- A request of cost c is allowed when every limit's count + c is at most its max, and counts c on each.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- a counter keeps no members.

-- Limit i's window at `now` from the stored fields: its start, the units counted in it (the stored count when
-- it is the window counted; the units that waited for it when it is the one after), and the units waiting for
-- the window after it.
local function current (fields, i, window, now)
  local start = now - now % window
  local s, waiting = fields[field('s', i)], fields[field('n', i)] or 0
  if s == start then
    return start, fields[field('c', i)], waiting
  elseif s == start - window then
    return start, waiting, 0
  end
  return start, 0, 0
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
    -- Kept for reserve: whether the stored n<i> was for a window now over or begun (it goes).
    entry.stale = fields[field('n', i)] ~= nil and fields[field('s', i)] ~= start
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
    redis.call('HSET', counters, field('s', i), text(entry.start), field('c', i), text(entry.count))
    if entry.stale then
      redis.call('HDEL', counters, field('n', i))
    end
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
      redis.call('HSET', counters, field('s', i), text(entry.start), field('c', i), text(entry.count + cost))
      if entry.stale then
        redis.call('HDEL', counters, field('n', i))
      end
    else
      redis.call('HSET', counters, field('s', i), text(entry.start), field('c', i), text(entry.count), field('n', i), text(entry.waiting + cost))
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
-- (for one that waited, at the end of its wait: n<i> while that window has not been counted yet); once that
-- window is over, nothing changes. A counter ends it at most at its max plus the largest (lua/prelude.lua),
-- and below 2^52 (a max above that stays its own ceiling).
local function settle (counters, limits, member, at, now, cost, final)
  local most = largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, field('s', i), field('c', i), field('n', i))
    local s, start = tonumber(stored[1]), at - at % limit.window
    local name, n = field('c', i), tonumber(stored[2])
    if s and s + limit.window == start then
      name, n, s = field('n', i), tonumber(stored[3]), start
    end
    if s == start and n and n > 0 then
      local ceiling = math.min(limit.max + most, math.max(limit.max, 2 ^ 52))
      redis.call('HINCRBY', counters, name, text(moved(n, final - cost, ceiling)))
    end
  end
end
