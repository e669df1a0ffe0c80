-- Sliding window (two-counter approximation). Windows of `window` ms are aligned to the epoch; a limit's
-- count is its current window's requests plus its previous window's, weighted by how much of that window the
-- sliding window still covers: prev x (window - elapsed) / window. That assumes the previous window's
-- requests were spread evenly: an estimate, in O(1) memory per client. Integer arithmetic only, so the
-- in-process twin (lib/algorithms/sliding-window.ts) decides the same. Loaded after lua/prelude.lua, in front
-- of lua/ban-index.lua and lua/decide.lua, which reads the keys and arguments and builds the reply (see its
-- header); this file counts.
--
-- Provides, for lua/decide.lua (which calls them once per request, passing the request's state key):
--   count(counters, limits, now, member, peek, entries, cost) -> allowed
--            decides a request of `cost` units (1 or more), `member` its id, at `now` (ms, Redis's time),
--            against every limit of `limits` (limits[i] = { max, window, burst }), and counts it when every
--            limit allows it, unless `peek` (report, write nothing). Fills entries[i], for limit i: count and
--            reset (below), and retry, the ms until the request fits that limit (0: it does). It keeps its
--            own fields there too (start, prev, curr, weighted). Returns true when allowed, false when denied
--            (a denial writes nothing).
--   settle(counters, limits, member, at, now, cost, final)
--            the request `member`, counted at `at` (ms, Redis's time of its decision) for `cost` units,
--            counts `final` instead (0: given back): see settle below. Returns nothing.
--   reserve  none: no request waits on this algorithm yet (maxWait is refused at registration for it).
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    counters  HASH, per limit i: w<i> = current window's start (ms), p<i> = previous window's count,
--                    c<i> = current window's count. It lives until the current windows' requests stop
--                    counting, at the end of the next window.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = the estimate, rounded up; reset = ms until it falls far enough for one more unit
--          to fit than fits now (0: none counted): as the previous window's weight fades, or once this
--          window's requests are the previous ones, so up to two windows away.
-- A request of cost c counts c units; it is allowed when every limit's estimate with them is at most its max.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- counters keep no members.

-- Ms until a request of `cost` fits, for one that does not fit now: later in this window, as the previous
-- window's weight fades, or (when this window alone has no room for it) once this window's requests are the
-- previous ones.
local function fits (entry, max, window, cost, now)
  if entry.curr + cost <= max then
    return entry.start + window - math.floor((max - entry.curr - cost) * window / entry.prev) - now
  end
  return entry.start + 2 * window - math.floor((max - cost) * window / entry.curr) - now
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
    local window, max = limit.window, limit.max
    local start = now - now % window
    local prev, curr = 0, 0
    local w = fields[field('w', i)]
    if w == start then
      prev, curr = fields[field('p', i)], fields[field('c', i)]
    elseif w == start - window then
      prev = fields[field('c', i)]
    end
    local weighted = prev * (window - now + start)
    entry.start, entry.prev, entry.curr, entry.weighted = start, prev, curr, weighted
    entry.count, entry.reset, entry.retry = 0, 0, 0
    if weighted + (curr + cost) * window > max * window then
      entry.retry = fits(entry, max, window, cost, now)
      allowed = false
    end
  end

  local ttl = 0
  for i = 1, #limits do
    local max, window, entry = limits[i].max, limits[i].window, entries[i]
    if allowed and not peek then
      entry.curr = entry.curr + cost
      redis.call('HSET', counters, field('w', i), text(entry.start), field('p', i), text(entry.prev),
        field('c', i), text(entry.curr))
      ttl = math.max(ttl, entry.start + 2 * window - now)
    end
    entry.count = entry.curr + math.floor((entry.weighted + window - 1) / window)
    -- One more unit than fits now: when a request of that many more units than are left (one, when none
    -- are) fits.
    if entry.count > 0 then
      local left = max - entry.count
      if left < 0 then
        left = 0
      end
      entry.reset = fits(entry, max, window, left + 1, now)
    end
  end
  if ttl > 0 then
    redis.call('PEXPIRE', counters, text(ttl))
  end
  return allowed
end

-- A request of `cost` counted at `at` counts `final` instead (0: given back), in the window it was counted in
-- (now the current or the previous one); after that, nothing changes. A counter ends it at most at its max
-- plus the largest (lua/prelude.lua), and at 2^51 / window: a count times its window stays below 2^51
-- (at least twice max, which the options bound by 2^50 / window), so the weighing above stays exact.
-- maxWait: not built for this algorithm (see the header).
local reserve = nil

local function settle (counters, limits, member, at, now, cost, final)
  local most = largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, field('w', i), field('p', i), field('c', i))
    local start = at - at % limit.window
    local prev, curr = tonumber(stored[2]), tonumber(stored[3])
    local ceiling = math.min(limit.max + most, math.floor(2 ^ 51 / limit.window))
    if tonumber(stored[1]) == start and curr > 0 then
      redis.call('HINCRBY', counters, field('c', i), text(moved(curr, final - cost, ceiling)))
    elseif tonumber(stored[1]) == start + limit.window and prev > 0 then
      redis.call('HINCRBY', counters, field('p', i), text(moved(prev, final - cost, ceiling)))
    end
  end
end
