-- Fixed window: one decision, atomically, on Redis's clock. One counter per window of `window` ms aligned to
-- the epoch (every client's window ends at the same moment), so a client can pass up to 2 x max within a
-- short span across a window boundary: max at the end of one window, max at the start of the next.
--
-- KEYS[1]  counter  STRING: requests counted in the current window; it expires when the window ends
-- KEYS[2]  strikes  SET of the members of the requests denied in the current window (per identity)
-- KEYS[3]  banned   STRING present while the identity is banned (per identity)
-- ARGV[1]  max             requests allowed in one window (integer >= 1)
-- ARGV[2]  window          window length (ms, integer >= 1)
-- ARGV[3]  ban threshold   denials within one window that start a ban (0: bans off)
-- ARGV[4]  ban duration    ms
-- ARGV[5]  member          unique id for this request, made by the plugin (a strike's member)
-- ARGV[6]  peek            1: report without counting or striking, 0: decide and count
--
-- Reply: { status, count, reset, retry, banStarted }, integers only
--   status      0 allowed, 1 rate limited, 2 banned
--   count       requests counted in the current window after this decision (a denied request adds none)
--   reset       ms until the window ends and the count starts over (0: nothing counted)
--   retry       ms until this request would be allowed (0 when allowed; the remaining ban when banned)
--   banStarted  1 when this request started a ban
--
-- Every key written carries a TTL; a denied request writes only its strike. A replayed denial is one strike
-- (strikes are a set of members); a replayed allowed request counts again: a counter keeps no members.

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

-- Redis keeps a key through its expiry millisecond (PTTL 0): that is the next window already.
local count = 0
local reset = 0
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  count = tonumber(redis.call('GET', KEYS[1]))
  reset = ttl
end

if count < max then
  if not peek then
    if count == 0 then
      reset = window - now % window
      redis.call('SET', KEYS[1], 1, 'PX', reset)
    else
      redis.call('INCR', KEYS[1])
    end
    count = count + 1
  end
  return { 0, count, reset, 0, 0 }
end

-- Denied: nothing is counted. The request fits when the window ends.
local retry = reset
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
