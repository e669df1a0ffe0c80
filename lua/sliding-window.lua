-- Sliding window (two-counter approximation): one decision, atomically, on Redis's clock. Windows of
-- `window` ms are aligned to the epoch; the count is the current window's requests plus the previous
-- window's, weighted by how much of it the sliding window still covers: prev x (window - elapsed) / window.
-- That assumes the previous window's requests were spread evenly: an estimate, in O(1) memory per client.
-- Integer arithmetic only, so the in-process twin (lib/algorithms/sliding-window.ts) decides the same.
--
-- KEYS[1]  counters HASH { w = current window's start (ms), p = previous window's count, c = current count }
-- KEYS[2]  strikes  SET of the members of the requests denied in the current window (per identity)
-- KEYS[3]  banned   STRING present while the identity is banned (per identity)
-- ARGV[1]  max             requests allowed in the sliding window (integer >= 1)
-- ARGV[2]  window          window length (ms, integer >= 1)
-- ARGV[3]  ban threshold   denials within one window that start a ban (0: bans off)
-- ARGV[4]  ban duration    ms
-- ARGV[5]  member          unique id for this request, made by the plugin (a strike's member)
-- ARGV[6]  peek            1: report without counting or striking, 0: decide and count
--
-- Reply: { status, count, reset, retry, banStarted }, integers only
--   status      0 allowed, 1 rate limited, 2 banned
--   count       the estimate after this decision, rounded up (a denied request adds none)
--   reset       ms until every counted request stops counting (0: nothing counted)
--   retry       ms until this request would be allowed (0 when allowed; the remaining ban when banned)
--   banStarted  1 when this request started a ban
--
-- Every key written carries a TTL (until the current window's requests stop counting, at the end of the
-- next window); a denied request writes only its strike. A replayed denial is one strike (strikes are a set
-- of members); a replayed allowed request counts again: counters keep no members.

local max = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local threshold = tonumber(ARGV[3])
local peek = ARGV[6] == '1'

local function milliseconds (time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local now = milliseconds(redis.call('TIME'))

local banned = redis.call('PTTL', KEYS[3])
if banned > 0 then
  return { 2, 0, 0, banned, 0 }
end

local start = now - now % window
local prev = 0
local curr = 0
-- Redis keeps a key through its expiry millisecond (PTTL 0): nothing it holds counts any more.
if redis.call('PTTL', KEYS[1]) > 0 then
  local stored = redis.call('HMGET', KEYS[1], 'w', 'p', 'c')
  local w = tonumber(stored[1])
  if w == start then
    prev = tonumber(stored[2])
    curr = tonumber(stored[3])
  elseif w == start - window then
    prev = tonumber(stored[3])
  end
end

local weighted = prev * (window - now + start)
local function estimate (c)
  return c + math.floor((weighted + window - 1) / window)
end
local function resets (c)
  if c > 0 then
    return start + 2 * window - now
  elseif prev > 0 then
    return start + window - now
  end
  return 0
end

if weighted + (curr + 1) * window <= max * window then
  if not peek then
    curr = curr + 1
    redis.call('HSET', KEYS[1], 'w', start, 'p', prev, 'c', curr)
    redis.call('PEXPIRE', KEYS[1], start + 2 * window - now)
  end
  return { 0, estimate(curr), resets(curr), 0, 0 }
end

-- Denied: nothing is counted. The request fits later in this window, as the previous window's weight
-- fades, or (when this window alone is full) once this window's requests are the previous ones.
local count = estimate(curr)
local reset = resets(curr)
local retry
if curr < max then
  retry = start + window - math.floor((max - curr - 1) * window / prev) - now
else
  retry = start + 2 * window - math.floor((max - 1) * window / curr) - now
end
if peek or threshold == 0 then
  return { 1, count, reset, retry, 0 }
end

-- Strikes count for one window from the first. Redis keeps a key through its expiry millisecond (PTTL 0):
-- that is the next window already, so such strikes start over too.
if redis.call('PTTL', KEYS[2]) <= 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SADD', KEYS[2], ARGV[5])
  redis.call('PEXPIRE', KEYS[2], window)
else
  redis.call('SADD', KEYS[2], ARGV[5])
end
if redis.call('SCARD', KEYS[2]) < threshold then
  return { 1, count, reset, retry, 0 }
end

local duration = tonumber(ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', duration)
redis.call('DEL', KEYS[2])
return { 2, count, reset, duration, 1 }
