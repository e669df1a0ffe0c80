-- Sliding-window log: exact. Loaded in front of lua/decide.lua, which reads the keys and arguments and
-- builds the reply (see its header); this file counts.
--
-- KEYS[1]  log  ZSET of the requests counted: score = arrival (ms, Redis time), member = the request's id.
--               One log serves every limit of the budget: it keeps the longest window, and a limit counts
--               the entries inside its own window. It never holds more than the longest window's max. It
--               lives until its newest entry leaves, and at most one longest window more: its TTL is set
--               to two windows when less than one is left, not on every request.
-- ARGV     per limit: max (requests), window (ms); burst is not used.
-- Reply    per limit: count = entries in its window; reset = ms until the oldest of them leaves.
--
-- Safe to replay: run again with the same member (a client re-sending a command whose reply it lost), a
-- decision counts nothing twice: the entry is added once (ZADD NX), and a denied replay of a request that
-- was counted is answered as allowed, as it was.

-- The score of the entry at `rank` (0: the oldest), or nil. Numbers go to Redis as text (lua/numbers.lua).
local function score (log, rank)
  local at = text(rank)
  return tonumber(redis.call('ZRANGE', log, at, at, 'WITHSCORES')[2])
end

local function count (log, limits, now, member, peek, entries)
  local longest = 0
  for i = 1, #limits do
    longest = math.max(longest, limits[i].window)
  end
  -- Most decisions find nothing to trim, and the oldest entry is their reset. A peek writes nothing, so it
  -- counts around the entries that have left instead of removing them.
  local oldest = score(log, 0)
  if oldest and oldest <= now - longest and not peek then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', text(now - longest))
    oldest = score(log, 0)
  end
  local total = oldest and redis.call('ZCARD', log) or 0

  local allowed = true
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    local n, first = total, oldest
    if total > 0 and (peek or limit.window < longest) then
      n = redis.call('ZCOUNT', log, '(' .. text(now - limit.window), '+inf')
      if n > 0 and total > n then
        first = score(log, total - n)
      end
    end
    entry.count, entry.reset, entry.retry = n, 0, 0
    if n > 0 then
      entry.reset = first + limit.window - now
    end
    -- The wait is until enough entries leave this window for one more to fit.
    if n >= limit.max then
      entry.retry = (n == limit.max and first or score(log, total - limit.max)) + limit.window - now
      allowed = false
    end
  end

  if allowed then
    if not peek and redis.call('ZADD', log, 'NX', text(now), member) == 1 then
      for i = 1, #limits do
        local entry, window = entries[i], limits[i].window
        -- The new entry is the oldest when the log was empty, or when the clock stepped back.
        if entry.count == 0 or entry.reset > window then
          entry.reset = window
        end
        entry.count = entry.count + 1
      end
      -- The log must outlive its newest entry by a window. A new log has no TTL yet; a TTL of one window or
      -- more already does (its expiry only ever moves later, so a clock step back changes nothing).
      if total == 0 or redis.call('PTTL', log) < longest then
        redis.call('PEXPIRE', log, text(2 * longest))
      end
    end
    return true
  end

  -- A replay of a request that was counted when the log had room: it was allowed, and still is.
  if not peek and redis.call('ZSCORE', log, member) then
    for i = 1, #limits do
      entries[i].retry = 0
    end
    return true
  end
  return false
end

local function undo (log, limits, member, at, now)
  redis.call('ZREM', log, member)
end
