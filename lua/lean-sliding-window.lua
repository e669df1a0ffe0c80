-- The sliding window's lean count: `lean` for lua/lean.lua, which decides the common shape (one limit, a cost
-- of 1) around it. Joined after lua/prelude.lua (text), in front of lua/ban-index.lua, lua/strikes.lua and
-- lua/lean.lua. It reads and writes the counters as lua/sliding-window.lua keeps them for limit 1 (a HASH:
-- w1 = the current window's start, p1 = the previous window's count, c1 = the current window's; living until
-- the end of the next window) and reports what that file's count does, with these commands: HMGET w1 p1 c1;
-- when allowed, HSET (of c1 alone while w1 is this window's start) and PEXPIRE. It hands back (4) counters of
-- another type, those whose w1 is the next window's start (requests wait for it, maxWait: read only when w1 is
-- not this window's text, so it costs the common path nothing), and those holding what lua/sliding-window.lua
-- cannot count (a field it reads that is missing or no number): that file raises the request's error.
--
-- lean(counters, max, window, burst, now, base, i) -> status, count, reset, retry (lua/lean.lua's header)

local function lean (counters, max, window, burst, now, base, i)
  local stored = redis.pcall('HMGET', counters, 'w1', 'p1', 'c1')
  if stored.err then
    return 4, 0, 0, 0
  end
  -- A batch shares its clock and most often its window: the start is formatted once per call, and w1, as
  -- this file and lua/sliding-window.lua write it, compared as text. Any other text is read as a number.
  local start = now - now % window
  local at = text(start)
  local w, prev, curr = stored[1], 0, 0
  local same = w == at
  local was = not same and w and tonumber(w)
  if same or was == start then
    -- A client's first window, and any after a quiet one, has p1 '0': no number to read.
    prev, curr = stored[2] == '0' and 0 or tonumber(stored[2]), tonumber(stored[3])
  elseif was == start - window then
    prev = tonumber(stored[3])
  elseif was and was > start then
    -- The next window's start: requests wait for it (maxWait), lua/sliding-window.lua counts them.
    return 4, 0, 0, 0
  end
  if not (prev and curr) then
    return 4, 0, 0, 0
  end

  local weighted = prev * (window - now + start)
  local allowed = weighted + (curr + 1) * window <= max * window
  if allowed then
    curr = curr + 1
    if same then
      redis.call('HSET', counters, 'c1', text(curr))
    else
      redis.call('HSET', counters, 'w1', at, 'p1', text(prev), 'c1', text(curr))
    end
    redis.call('PEXPIRE', counters, text(start + 2 * window - now))
  end
  -- As lua/sliding-window.lua's fits, for `units` (one more than are left) and for this request's one: ms
  -- until they fit, later in this window as the previous window's weight fades, or once this window's
  -- requests are the previous ones.
  local count, reset = curr + math.floor((weighted + window - 1) / window), 0
  if count > 0 then
    local units = (max > count and max - count or 0) + 1
    if curr + units <= max then
      reset = start + window - math.floor((max - curr - units) * window / prev) - now
    else
      reset = start + 2 * window - math.floor((max - units) * window / curr) - now
    end
  end
  if allowed then
    return 0, count, reset, 0
  end
  if curr + 1 <= max then
    return 1, count, reset, start + window - math.floor((max - curr - 1) * window / prev) - now
  end
  return 1, count, reset, start + 2 * window - math.floor((max - 1) * window / curr) - now
end
