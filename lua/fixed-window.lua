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
--   reserve  none: no request waits on this algorithm yet (maxWait is refused at registration for it).
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    counters  HASH, per limit i: s<i> = start of the window counted (ms), c<i> = units counted in it.
--                    It lives until the last of those windows ends.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = units counted in the current window; reset = ms until it ends, when one more unit
--          is free (0: none counted).
-- A request of cost c is allowed when every limit's count + c is at most its max, and counts c on each.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- a counter keeps no members.

local function count (counters, limits, now, member, peek, entries, cost)
  local stored = redis.call('HGETALL', counters)
  local fields = {}
  for i = 1, #stored, 2 do
    fields[stored[i]] = tonumber(stored[i + 1])
  end

  local allowed = true
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local start = now - now % limit.window
    local n = 0
    if fields[field('s', i)] == start then
      n = fields[field('c', i)]
    end
    entry.count, entry.reset, entry.retry, entry.start = n, 0, 0, start
    if n > 0 then
      entry.reset = start + limit.window - now
    end
    if n + cost > limit.max then
      entry.retry = start + limit.window - now
      allowed = false
    end
  end
  if not allowed or peek then
    return allowed
  end

  -- The counters live until the last of the windows counted ends. A TTL already longer stays (fields of
  -- limits not in this decision: an override's, kept for when it ends); one shorter is a window's count left by
  -- a shorter window that began at the same moment (a window lengthened by an override or a configuration),
  -- which would otherwise vanish mid-window. The TTL given runs past that end by up to a second (at most the
  -- time left), so a later request of the window, whose clock read and PTTL a millisecond's tick or a pause may part,
  -- still reads it as long enough (lua/lean-fixed-window.lua does the same).
  local ttl = 0
  for i = 1, #limits do
    local entry = entries[i]
    entry.count = entry.count + cost
    entry.reset = entry.start + limits[i].window - now
    ttl = math.max(ttl, entry.reset)
    redis.call('HSET', counters, field('s', i), text(entry.start), field('c', i), text(entry.count))
  end
  if #stored == 0 or redis.call('PTTL', counters) < ttl then
    redis.call('PEXPIRE', counters, text(ttl + math.min(ttl, 1000)))
  end
  return true
end

-- A request of `cost` counted at `at` counts `final` instead (0: given back), in the window it was counted in;
-- once that window is over, nothing changes. A counter ends it at most at its max plus the largest
-- (lua/prelude.lua), and below 2^52 (a max above that stays its own ceiling).
-- maxWait: not built for this algorithm (see the header).
local reserve = nil

local function settle (counters, limits, member, at, now, cost, final)
  local most = largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, field('s', i), field('c', i))
    local n = tonumber(stored[2])
    if tonumber(stored[1]) == at - at % limit.window and n > 0 then
      local ceiling = math.min(limit.max + most, math.max(limit.max, 2 ^ 52))
      redis.call('HINCRBY', counters, field('c', i), text(moved(n, final - cost, ceiling)))
    end
  end
end
