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
--            own fields there too (start, prev, curr, next, weighted). Returns true when allowed, false
--            when denied (a denial writes nothing).
--   settle(counters, limits, member, at, now, cost, final)
--            the request `member`, counted at `at` (ms, Redis's time of its decision) for `cost` units,
--            counts `final` instead (0: given back): see settle below. Returns nothing.
--   reserve(counters, limits, now, member, cost, wait, queue, entries) -> wait, or nil
--            a request count() denied, which every limit lets through `wait` ms from now (within the
--            policy's maxWait), is counted in the window of each limit that holds now + wait: the current one
--            (it weighs from now on, and happens in this window), or the next (where the requests waiting for
--            it are counted as they come). One window ahead at most: a request whose wait ends later
--            (the next window full of requests waiting, or a longer limit's wait past a shorter one's next
--            window) is refused, as when `queue` units wait for a limit's next window already: nil. Fills
--            entries as they will be when the wait ends.
-- Uses lua/prelude.lua's text, field, largest and moved.
--
-- state    counters  HASH, per limit i: w<i> = the latest window's start (ms), p<i> = the count of the window
--                    before it, c<i> = its count. While requests wait for the next window (maxWait), that is
--                    the window w<i> and c<i> count, p<i> is this window's count and o<i> the previous one's;
--                    once it has come, the fields read as always. lua/lean-sliding-window.lua reads w1, p1 and
--                    c1 alone, and hands back a start ahead of its clock. It lives until the latest window's
--                    requests stop counting, at the end of the window after it.
-- A request waiting for the next window counts in this one's estimate too, as if it were in this window: so a
-- request this window lets through never leaves the next window's estimate past max when the waiting ones go.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = the estimate, rounded up; reset = ms until it falls far enough for one more unit
--          to fit than fits now (0: none counted): as the previous window's weight fades, or once this
--          window's requests are the previous ones, so up to two windows away.
-- A request of cost c counts c units; it is allowed when every limit's estimate with them is at most its max.
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- counters keep no members.

-- Ms until a request of `cost` fits, for one that does not fit now: later in this window, as the previous
-- window's weight fades; or (when this window alone has no room for it) once this window's requests are the
-- previous ones; or (when the requests waiting for the next window fill it) once those are.
local function fits (entry, max, window, cost, now)
  local curr, next = entry.curr, entry.next
  if curr + next + cost <= max then
    return entry.start + window - math.floor((max - curr - next - cost) * window / entry.prev) - now
  elseif next == 0 or next + cost <= max then
    return entry.start + 2 * window - math.floor((max - next - cost) * window / curr) - now
  end
  return entry.start + 3 * window - math.floor((max - cost) * window / next) - now
end

-- Limit i's counters at `now`, from the stored fields: its window's start, the previous window's count, this
-- window's and the units waiting for the next (w<i> a window ahead: c<i> counts them, p<i> this window, o<i>
-- the previous one). A later window still (of this length) is one a clock ahead of `now` counted in (under
-- `clock: 'app'`, an instance's; or Redis's, set back): the request counts in it, the previous window weighing in
-- whole, so clocks apart never reset each other's count.
local function current (fields, i, window, now)
  local start = now - now % window
  local w = fields[field('w', i)]
  if w == start then
    return start, fields[field('p', i)], fields[field('c', i)], 0
  elseif w == start + window then
    return start, fields[field('o', i)] or 0, fields[field('p', i)], fields[field('c', i)]
  elseif w == start - window then
    return start, fields[field('c', i)], 0, 0
  elseif w and w > start and (w - start) % window == 0 then
    return w, fields[field('p', i)], fields[field('c', i)], 0
  end
  return start, 0, 0, 0
end

-- Limit i counts `curr` units in this window (entry.start): in c<i>, or in p<i> while w<i> is the next window.
local function store (counters, i, entry, curr)
  if entry.next > 0 then
    redis.call('HSET', counters, field('p', i), text(curr))
  else
    redis.call('HSET', counters, field('w', i), text(entry.start), field('p', i), text(entry.prev), field('c', i), text(curr))
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
    local window, max = limit.window, limit.max
    local start, prev, curr, next = current(fields, i, window, now)
    local weighted = prev * math.min(window, window - now + start)
    entry.start, entry.prev, entry.curr, entry.next, entry.weighted = start, prev, curr, next, weighted
    entry.count, entry.reset, entry.retry = 0, 0, 0
    if weighted + (curr + next + cost) * window > max * window then
      entry.retry = fits(entry, max, window, cost, now)
      allowed = false
    end
  end

  local ttl = 0
  for i = 1, #limits do
    local max, window, entry = limits[i].max, limits[i].window, entries[i]
    if allowed and not peek then
      entry.curr = entry.curr + cost
      store(counters, i, entry, entry.curr)
      ttl = math.max(ttl, entry.start + (entry.next > 0 and 3 or 2) * window - now)
    end
    entry.count = entry.curr + entry.next + math.floor((entry.weighted + window - 1) / window)
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

local function reserve (counters, limits, now, member, cost, wait, queue, entries)
  local at, ttl = now + wait, 0
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local ahead = at - at % limit.window - entry.start
    if ahead == limit.window then
      if entry.next >= queue then
        return nil
      end
    elseif ahead ~= 0 then
      return nil
    end
    entry.ahead = ahead
  end
  for i = 1, #limits do
    local entry, window = entries[i], limits[i].window
    local next = entry.next
    if entry.ahead == 0 then
      store(counters, i, entry, entry.curr + cost)
    else
      next = next + cost
      redis.call('HSET', counters, field('w', i), text(entry.start + window), field('p', i), text(entry.curr),
        field('c', i), text(next), field('o', i), text(entry.prev))
    end
    ttl = math.max(ttl, entry.start + (next > 0 and 3 or 2) * window - now)
  end
  redis.call('PEXPIRE', counters, text(ttl))
  -- What its limits will say when it is let through.
  count(counters, limits, at, member, true, entries, 0)
  return wait
end

-- A request of `cost` counted at `at` counts `final` instead (0: given back), in the window it was counted in
-- (now the current or the previous one; for one that waited, at the end of its wait); after that, nothing
-- changes. A counter ends it at most at its max plus the largest (lua/prelude.lua), and at 2^51 / window: a count
-- times its window stays below 2^51 (at least twice max, which the options bound by 2^50 / window), so the
-- weighing above stays exact.
local function settle (counters, limits, member, at, now, cost, final)
  local most = largest(limits)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, field('w', i), field('p', i), field('c', i), field('o', i))
    local w, start = tonumber(stored[1]), at - at % limit.window
    local name, n
    if w == start then
      name, n = field('c', i), tonumber(stored[3])
    elseif w == start + limit.window then
      name, n = field('p', i), tonumber(stored[2])
    elseif w == start + 2 * limit.window and w > now then
      -- The previous window's, while requests wait for the next.
      name, n = field('o', i), tonumber(stored[4])
    end
    if n and n > 0 then
      local ceiling = math.min(limit.max + most, math.floor(2 ^ 51 / limit.window))
      redis.call('HINCRBY', counters, name, text(moved(n, final - cost, ceiling)))
    end
  end
end
