-- The sliding log's lean count: `lean` for lua/lean.lua, which decides the common shape (one limit, a cost of 1)
-- around it. Joined after lua/prelude.lua (text), in front of lua/ban-index.lua, lua/strikes.lua and
-- lua/lean.lua. It reads and writes the log as lua/sliding-log.lua keeps it (a ZSET of members scored by their
-- time, living two windows past its oldest entry), with that file's commands for this shape: ZRANGE 0 0, ZCARD,
-- ZADD NX, PTTL. It hands back (4) a log of another type, and one holding costlier entries (member '+').
--
-- lean(log, max, window, burst, now, base, i) -> status, count, reset, retry (lua/lean.lua's header)

local function lean (log, max, window, burst, now, base, i)
  local head = redis.pcall('ZRANGE', log, '0', '0', 'WITHSCORES')
  if head.err or head[1] == '+' then
    return 4, 0, 0, 0
  end
  local oldest = tonumber(head[2])
  if oldest and oldest <= now - window then
    redis.call('ZREMRANGEBYSCORE', log, '0', text(now - window))
    oldest = tonumber(redis.call('ZRANGE', log, '0', '0', 'WITHSCORES')[2])
  end
  local count = oldest and redis.call('ZCARD', log) or 0
  -- One more unit is free once the oldest leaves (a clock step back can put it past one window).
  local reset = oldest and oldest + window - now or 0
  -- The request's member, made only here and for a replay's ZSCORE: the other lean files need none.
  local member = base .. text(i)
  if count < max then
    if redis.call('ZADD', log, 'NX', text(now), member) == 1 then
      if count == 0 or reset > window then
        reset = window
      end
      -- The log must outlive its newest entry by a window.
      if count == 0 or redis.call('PTTL', log) < window then
        redis.call('PEXPIRE', log, text(2 * window))
      end
      count = count + 1
    end
    return 0, count, reset, 0
  end
  -- Denied: until the oldest of the newest `max` leaves. Past the limit (an override's entries), that is also
  -- when one more unit is free.
  local retry = reset
  if count > max then
    retry = tonumber(redis.call('ZRANGE', log, text(count - max), text(count - max), 'WITHSCORES')[2]) + window - now
    reset = retry
  end
  -- A replay of a request that was counted when the log had room: it was allowed, and still is.
  if redis.call('ZSCORE', log, member) then
    return 0, count, reset, 0
  end
  return 1, count, reset, retry
end
