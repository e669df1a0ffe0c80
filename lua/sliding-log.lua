-- Sliding-window log: exact. Loaded in front of lua/decide.lua, which reads the keys and arguments and
-- builds the reply (see its header); this file counts.
--
-- KEYS[1]  log  ZSET of the requests counted: score = arrival (ms, Redis time), member = ARGV[2]. One log
--               serves every limit of the budget: it keeps the longest window, and a limit counts the
--               entries inside its own window. It never holds more than the longest window's max.
-- ARGV     per limit: max (requests), window (ms); burst is not used.
-- Reply    per limit: count = entries in its window; reset = ms until the oldest of them leaves.
--
-- Safe to replay: run again with the same member (a client re-sending a command whose reply it lost), a
-- decision counts nothing twice: the entry is added once (ZADD NX), and a denied replay of a request that
-- was counted is answered as allowed, as it was.

local function count (log, limits, now, member, peek)
  local longest = 0
  for _, limit in ipairs(limits) do
    longest = math.max(longest, limit.window)
  end
  -- A peek writes nothing, so it counts around the entries that have left instead of removing them.
  if not peek then
    redis.call('ZREMRANGEBYSCORE', log, '-inf', now - longest)
  end
  local total = redis.call('ZCARD', log)
  local function leaves (rank, window)
    local entry = redis.call('ZRANGE', log, rank, rank, 'WITHSCORES')
    return tonumber(entry[2]) + window - now
  end

  local entries, allowed = {}, true
  for i, limit in ipairs(limits) do
    local n = total
    if peek or limit.window < longest then
      n = redis.call('ZCOUNT', log, '(' .. (now - limit.window), '+inf')
    end
    local entry = { count = n, reset = 0, retry = 0 }
    if n > 0 then
      entry.reset = leaves(total - n, limit.window)
    end
    -- The wait is until enough entries leave this window for one more to fit.
    if n >= limit.max then
      entry.retry = leaves(total - limit.max, limit.window)
      allowed = false
    end
    entries[i] = entry
  end

  if allowed then
    if not peek and redis.call('ZADD', log, 'NX', now, member) == 1 then
      for i, entry in ipairs(entries) do
        -- The new entry is the oldest when the log was empty, or when the clock stepped back.
        if entry.count == 0 or entry.reset > limits[i].window then
          entry.reset = limits[i].window
        end
        entry.count = entry.count + 1
      end
      -- The log lives until its newest entry leaves: after a clock step back, now is not the newest.
      if redis.call('PTTL', log) < longest then
        redis.call('PEXPIRE', log, longest)
      end
    end
    return true, entries
  end

  -- A replay of a request that was counted when the log had room: it was allowed, and still is.
  if not peek and redis.call('ZSCORE', log, member) then
    for _, entry in ipairs(entries) do
      entry.retry = 0
    end
    return true, entries
  end
  return false, entries
end

local function undo (log, limits, member, at, now)
  redis.call('ZREM', log, member)
end
