-- Sliding-window log: exact. Loaded after lua/prelude.lua, in front of lua/ban-index.lua and lua/decide.lua,
-- which reads the keys and arguments and builds the reply (see its header); this file counts.
--
-- Provides, for lua/decide.lua (which calls them once per request, passing the request's state key):
--   count(log, limits, now, member, peek, entries, cost) -> allowed
--            decides a request of `cost` units (1 or more), `member` its id, at `now` (ms, Redis's time),
--            against every limit of `limits` (limits[i] = { max, window, burst }), and counts it when every
--            limit allows it, unless `peek` (report, write nothing). Fills entries[i], for limit i: count and
--            reset (below), and retry, the ms until the request fits that limit (0: it does). Returns true
--            when allowed (or when it replays a request that was counted), false when denied (a denial
--            writes nothing).
--   settle(log, limits, member, at, now, cost, final)
--            the request `member`, counted at `at` (ms, Redis's time of its decision) for `cost` units,
--            counts `final` instead (0: given back): see settle below. Returns nothing.
--   reserve(log, limits, now, member, cost, wait, queue, entries) -> wait, or nil
--            a request count() denied, which every limit would allow `wait` ms from now (its retry, within
--            the policy's maxWait), is counted at now + wait: an entry ahead of the clock, which every later
--            decision counts as it counts the others (so the requests waiting never pass a limit, and are let
--            through in the order they came). Not when `queue` requests of the log wait already: nil. Fills
--            entries as they will be when the wait ends (count() peeking then). Returns the ms it waits.
-- Uses lua/prelude.lua's text and largest.
--
-- state    log  ZSET of the requests counted: score = arrival (ms, Redis time; for a request that waits, the end
--               of its wait, ahead of the clock), member = the request's id,
--               followed by '*' and its cost when that is more than 1 ('<id>*15'). While any entry costs more
--               than 1, the member UNITS ('+', no request's id: those always hold a '.') is first in the log,
--               at score -(the sum over the entries of cost - 1): the log's units are its entries plus that.
--               One log serves every limit of the budget: it keeps the longest window, and a limit counts
--               the units inside its own window. It never holds more than the longest window's max units, and
--               the requests waiting (up to maxQueue) ahead of the clock. It
--               lives until its newest entry leaves, and at most one longest window more: its TTL is set
--               to two windows when less than one is left, not on every request.
-- limits   per limit: max (units: requests, unless they cost more), window (ms); burst is not used.
-- entries  per limit: count = units in its window; reset = ms until one more unit is free than now: until
--          the oldest of them leaves (0: none counted), or, past the limit (a settle charged more than the
--          cost), until enough have left for the count to be one below it.
--
-- A log of requests that cost 1 (no UNITS) is counted in O(1) commands whatever its length: ZCARD, ranks.
-- One with costlier entries reads the entries it needs: those leaving it, and a window's when its units are
-- counted apart from the whole log's (a shorter limit's, a peek's) or a denial's wait is looked for.
--
-- Safe to replay: run again with the same member (a client re-sending a command whose reply it lost), a
-- decision counts nothing twice: the entry is added once (ZADD NX), and a denied replay of a request that
-- was counted is answered as allowed, as it was (one counted ahead of the clock: as waiting until then).

local UNITS = '+'

-- The ZSET's rank of the log's first entry: 1 behind UNITS, else 0. Set by count() and settle().
local offset = 0

-- The score of the entry at `rank` (0: the oldest), or nil. Numbers go to Redis as text (lua/prelude.lua).
local function score (log, rank)
  local at = text(rank + offset)
  return tonumber(redis.call('ZRANGE', log, at, at, 'WITHSCORES')[2])
end

-- The units of a member: its cost.
local function weight (member)
  local cost = string.match(member, '%*(%d+)$')
  return cost and tonumber(cost) or 1
end

-- The units above one each of `members` (a ZRANGEBYSCORE reply, WITHSCORES when `step` is 2).
local function surplus (members, step)
  local sum = 0
  for i = 1, #members, step do
    sum = sum + weight(members[i]) - 1
  end
  return sum
end

-- Stores the log's units above one per entry (removing UNITS at 0).
local function setUnits (log, extra)
  if extra > 0 then
    redis.call('ZADD', log, text(-extra), UNITS)
    offset = 1
  else
    redis.call('ZREM', log, UNITS)
    offset = 0
  end
end

-- The log's units above one per entry, and the score of its oldest entry (nil: empty).
local function head (log)
  offset = 0
  local first = redis.call('ZRANGE', log, '0', '0', 'WITHSCORES')
  if first[1] ~= UNITS then
    return 0, tonumber(first[2])
  end
  offset = 1
  return -tonumber(first[2]), score(log, 0)
end

-- Ms until `need` units (at most its count) have left the window of a limit: its entries are the newest `n`
-- of the log's `total`; a costlier log's are listed (`listed`, WITHSCORES, read here when not yet), and the list
-- is handed back.
local function untilLeft (log, need, total, n, extra, listed, window, now)
  if extra == 0 then
    return score(log, total - n + need - 1) + window - now, listed
  end
  listed = listed or redis.call('ZRANGEBYSCORE', log, '(' .. text(now - window), '+inf', 'WITHSCORES')
  for j = 1, #listed, 2 do
    need = need - weight(listed[j])
    if need <= 0 then
      return tonumber(listed[j + 1]) + window - now, listed
    end
  end
  return 0, listed
end

-- The longest window of `limits` (ms): the one log keeps it.
local function longestOf (limits)
  local most = 0
  for i = 1, #limits do
    most = math.max(most, limits[i].window)
  end
  return most
end

-- One limit's count of the log (trimmed: `total` entries, `extra` units above one each, the oldest at `oldest`)
-- for a request of `cost` units at `now`: fills its entry, and says whether the request fits it.
local function measure (log, limit, entry, now, cost, peek, longest, total, extra, oldest)
  local window = limit.window
  -- Its entries (n), their units, the oldest of them; a costlier log lists the window's entries.
  local n, units, first, listed = total, total + extra, oldest, nil
  if total > 0 and (peek or window < longest) then
    local since = '(' .. text(now - window)
    n = redis.call('ZCOUNT', log, since, '+inf')
    units = n
    if n > 0 and total > n then
      first = score(log, total - n)
    end
    if extra > 0 and n > 0 then
      listed = redis.call('ZRANGEBYSCORE', log, since, '+inf', 'WITHSCORES')
      units = n + surplus(listed, 2)
    end
  end
  entry.count, entry.reset, entry.retry = units, 0, 0
  -- One more unit is free once the oldest leaves.
  if n > 0 then
    entry.reset = first + window - now
  end
  -- The wait is until enough units leave this window for the request's to fit.
  local need = units + cost - limit.max
  if need <= 0 then
    return true
  end
  entry.retry, listed = untilLeft(log, need, total, n, extra, listed, window, now)
  -- Past the limit (a settle charged more than the cost), one more unit is free once the count is one
  -- below it: the wait of a request of one unit.
  if units > limit.max then
    entry.reset = cost == 1 and entry.retry or untilLeft(log, units + 1 - limit.max, total, n, extra, listed, window, now)
  end
  return false
end

local function count (log, limits, now, member, peek, entries, cost)
  local longest = longestOf(limits)
  -- Most decisions find nothing to trim, and the oldest entry is their reset. A peek writes nothing, so it
  -- counts around the entries that have left instead of removing them.
  local extra, oldest = head(log)
  if oldest and oldest <= now - longest and not peek then
    local leaving = text(now - longest)
    if extra > 0 then
      extra = extra - surplus(redis.call('ZRANGEBYSCORE', log, '0', leaving), 1)
      setUnits(log, extra)
    end
    redis.call('ZREMRANGEBYSCORE', log, '0', leaving)
    oldest = score(log, 0)
  end
  local total = oldest and redis.call('ZCARD', log) - offset or 0

  local allowed = true
  for i = 1, #limits do
    -- Every limit is measured, a denied request's too: its entries say what each limit holds.
    allowed = measure(log, limits[i], entries[i], now, cost, peek, longest, total, extra, oldest) and allowed
  end

  local name = cost > 1 and member .. '*' .. text(cost) or member
  if allowed then
    if not peek and redis.call('ZADD', log, 'NX', text(now), name) == 1 then
      if cost > 1 then
        setUnits(log, extra + cost - 1)
      end
      for i = 1, #limits do
        local entry, window = entries[i], limits[i].window
        -- The new entry is the oldest when the log was empty, or when the clock stepped back.
        if entry.count == 0 or entry.reset > window then
          entry.reset = window
        end
        entry.count = entry.count + cost
      end
      -- The log must outlive its newest entry by a window. A new log has no TTL yet; a TTL of one window or
      -- more already does (its expiry only ever moves later, so a clock step back changes nothing).
      if total == 0 or redis.call('PTTL', log) < longest then
        redis.call('PEXPIRE', log, text(2 * longest))
      end
    end
    return true
  end

  -- A replay of a request that was counted when the log had room: it was allowed, and still is. One counted
  -- ahead of the clock waits until then (reserve).
  local counted = not peek and tonumber(redis.call('ZSCORE', log, name))
  if counted then
    for i = 1, #limits do
      entries[i].retry = math.max(counted - now, 0)
    end
    return counted <= now
  end
  return false
end

local function reserve (log, limits, now, member, cost, wait, queue, entries)
  local name = cost > 1 and member .. '*' .. text(cost) or member
  -- A replay of a request counted ahead of the clock: it waits until then, as it did.
  local counted = tonumber(redis.call('ZSCORE', log, name))
  if counted then
    return counted - now
  end
  if redis.call('ZCOUNT', log, '(' .. text(now), '+inf') >= queue then
    return nil
  end
  redis.call('ZADD', log, text(now + wait), name)
  if cost > 1 then
    setUnits(log, head(log) + cost - 1)
  end
  -- The log must outlive its newest entry by a window.
  local longest = longestOf(limits)
  if redis.call('PTTL', log) < wait + longest then
    redis.call('PEXPIRE', log, text(wait + 2 * longest))
  end
  -- What its limits will say when it is let through.
  count(log, limits, now + wait, member, true, entries, 0)
  return wait
end

-- The entry a request of `cost` counted at `at` becomes one of `final` units (0: removed), at the same time.
-- An entry that has left the log stays gone: what it counted is over. It weighs at most the largest capacity
-- (lua/prelude.lua): every limit is as full as it can be until it leaves, so more would change nothing.
local function settle (log, limits, member, at, now, cost, final)
  final = math.min(final, math.max(largest(limits), cost))
  local old = cost > 1 and member .. '*' .. text(cost) or member
  if final == 0 then
    if redis.call('ZREM', log, old) == 0 then
      return
    end
  else
    if final == cost or not redis.call('ZSCORE', log, old) then
      return
    end
    -- The new entry before the old one goes: a log emptied on the way would be deleted, and lose its TTL.
    redis.call('ZADD', log, text(at), final > 1 and member .. '*' .. text(final) or member)
    redis.call('ZREM', log, old)
  end
  if cost > 1 or final > 1 then
    local extra = head(log)
    setUnits(log, extra - (cost - 1) + math.max(final - 1, 0))
  end
end
