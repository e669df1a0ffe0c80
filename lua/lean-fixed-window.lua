-- The fixed window's lean count: `lean` for lua/lean.lua, which decides the common shape (one limit, a cost of 1)
-- around it. Joined after lua/prelude.lua (text), in front of lua/ban-index.lua, lua/strikes.lua and
-- lua/lean.lua. It reads and writes the counters as lua/fixed-window.lua keeps them for limit 1 (a HASH: s1 the
-- start of the window counted, c1 its count; living at least to the end of the window counted), with HMGET
-- s1 c1, then, allowed, HSET c1 (a new window, or one counted down to 0: HSET s1 c1), and PEXPIRE when the
-- counters are new or their TTL ends before this window does (PTTL). A denial writes nothing. The start is
-- compared as text: the count is the only number read. It hands back (4) counters of another type, and those
-- lua/fixed-window.lua reads in its own way: a start of the next window (requests wait for it, maxWait; this
-- window's count is then o1), a start it reads as this window's though spelled otherwise, this window's count
-- that is no number. Those cost nothing on the common path: the start is read as a number only when it is not
-- this window's text.
--
-- lean(counters, max, window, burst, now, base, i) -> status, count, reset, retry (lua/lean.lua's header)

local function lean (counters, max, window, burst, now, base, i)
  local stored = redis.pcall('HMGET', counters, 's1', 'c1')
  if stored.err then
    return 4, 0, 0, 0
  end
  local start = now - now % window
  local at = text(start)
  local n = 0
  if stored[1] == at then
    n = tonumber(stored[2])
    if not n then
      return 4, 0, 0, 0
    end
  elseif stored[1] and (tonumber(stored[1]) or start - 1) >= start then
    -- This window's start spelled otherwise, or the next window's: requests wait for it (maxWait).
    return 4, 0, 0, 0
  end
  -- The window's end: when one more unit is free, and when the counters expire.
  local reset = start + window - now
  if n + 1 > max then
    return 1, n, n > 0 and reset or 0, reset
  end
  if n == 0 then
    redis.call('HSET', counters, 's1', at, 'c1', '1')
  else
    -- The window's start is written already.
    redis.call('HSET', counters, 'c1', text(n + 1))
  end
  -- The counters outlive this window. A TTL already longer stays (another limit's fields, kept for when an
  -- override ends); one shorter is this window's count left by a shorter window that began at the same moment
  -- (a window lengthened by an override or a new configuration), which would otherwise vanish mid-window. The
  -- TTL given runs past the window's end by up to a second (at most the time left), so a later request of this
  -- window, whose clock read and PTTL a millisecond's tick or a pause may part, still reads it as long enough.
  if not stored[1] or redis.call('PTTL', counters) < reset then
    redis.call('PEXPIRE', counters, text(reset + math.min(reset, 1000)))
  end
  return 0, n + 1, reset, 0
end
