-- The token bucket's lean count: `lean` for lua/lean.lua, which decides the common shape (one limit, a cost of
-- 1) around it. Joined after lua/prelude.lua (text), in front of lua/ban-index.lua, lua/strikes.lua and
-- lua/lean.lua. It reads and writes the bucket as lua/token-bucket.lua keeps it (a HASH whose t1 and f1 hold
-- limit 1's TAT, living until the bucket is full again), with that file's arithmetic for one limit at a cost of
-- 1 and these commands: HMGET t1 f1; allowed, HSET t1 f1 and PEXPIRE. As that file does, it reads limit 1's
-- fields of a bucket that holds several limits', and a t1 that is no number as a full bucket. It hands back (4)
-- a bucket of another type, and one whose t1 is a number but f1 is not (that file's error for the request).
--
-- lean(bucket, max, window, burst, now, base, i) -> status, count, reset, retry (lua/lean.lua's header)
--
-- Floor and ceil are q - q % 1 and, when q % 1 > 0, that plus 1: Lua's % is a - floor(a / b) x b, so for a
-- finite q >= 0 (every quotient here) they are math.floor's and math.ceil's, without the two lookups and the
-- call each of those costs; the ceil leaves an infinity (a denial on a foreign t1 of 'inf') as math.ceil does.

local function lean (bucket, max, window, burst, now, base, i)
  local stored = redis.pcall('HMGET', bucket, 't1', 'f1')
  if stored.err then
    return 4, 0, 0, 0
  end
  -- Ticks from now until the bucket is full again (0: full).
  local tat = 0
  local t = tonumber(stored[1])
  if t then
    local f = tonumber(stored[2])
    if not f then
      return 4, 0, 0, 0
    end
    tat = (t - now) * max + f
    -- math.max(0, tat), as lua/token-bucket.lua has it.
    if not (tat > 0) then
      tat = 0
    end
  end
  local over = tat + window - burst * window
  if over > 0 then
    -- Denied: the tokens in use, rounded up; one more unit is free when a token is back (more in use than the
    -- bucket holds, after a settle charged more: when the first is back in it); the request's, at retry.
    local count, reset, retry = tat / window, 0, over / max
    if count % 1 > 0 then
      count = count - count % 1 + 1
    end
    if tat ~= 0 then
      reset = (tat - ((burst < count and burst or count) - 1) * window) / max
      if reset % 1 > 0 then
        reset = reset - reset % 1 + 1
      end
    end
    if retry % 1 > 0 then
      retry = retry - retry % 1 + 1
    end
    return 1, count, reset, retry
  end
  -- Allowed: the TAT stored as whole ms and ticks past them; the key lives until the bucket is full again.
  tat = tat + window
  local count, ms = tat / window, tat / max
  local part = ms % 1
  ms = ms - part
  redis.call('HSET', bucket, 't1', text(now + ms), 'f1', text(tat - ms * max))
  redis.call('PEXPIRE', bucket, text(part > 0 and ms + 1 or ms))
  if count % 1 > 0 then
    count = count - count % 1 + 1
  end
  local reset = (tat - (count - 1) * window) / max
  if reset % 1 > 0 then
    reset = reset - reset % 1 + 1
  end
  return 0, count, reset, 0
end
