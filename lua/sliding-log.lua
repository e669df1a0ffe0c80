-- Sliding-window log: one decision, atomically, on Redis's clock.
--
-- KEYS[1]  log      ZSET of the requests counted in the window: score = arrival (ms), member = unique id
-- KEYS[2]  strikes  STRING counter of denials in the current window (per identity)
-- KEYS[3]  banned   STRING present while the identity is banned (per identity)
-- ARGV[1]  max             requests allowed in the window (integer >= 1)
-- ARGV[2]  window          window length (ms, integer >= 1)
-- ARGV[3]  ban threshold   denials within one window that start a ban (0: bans off)
-- ARGV[4]  ban duration    ms
-- ARGV[5]  member          unique id for this request's log entry, made by the plugin
-- ARGV[6]  peek            1: report without counting or striking, 0: decide and count
--
-- Reply: { status, count, reset, retry, banStarted }, integers only
--   status      0 allowed, 1 rate limited, 2 banned
--   count       entries in the window after this decision (a denied request adds none)
--   reset       ms until the oldest counted entry leaves the window (0: the log is empty)
--   retry       ms until this request would be allowed (0 when allowed; the remaining ban when banned)
--   banStarted  1 when this request started a ban
--
-- Every key written carries a TTL; the log never holds more than max entries.

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

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])

local function leaves (index)
  local entry = redis.call('ZRANGE', KEYS[1], index, index, 'WITHSCORES')
  return tonumber(entry[2]) + window - now
end

if count < max then
  if not peek then
    redis.call('ZADD', KEYS[1], now, ARGV[5])
    -- The log lives until its newest entry leaves: after a clock step back, now is not the newest.
    if redis.call('PTTL', KEYS[1]) < window then
      redis.call('PEXPIRE', KEYS[1], window)
    end
    count = count + 1
  end
  if count == 0 then
    return { 0, 0, 0, 0, 0 }
  end
  return { 0, count, leaves(0), 0, 0 }
end

-- Denied: the request is not logged. The wait is until enough entries leave for one more to fit.
local reset = leaves(0)
local retry = leaves(count - max)
if peek or threshold == 0 then
  return { 1, count, reset, retry, 0 }
end

-- Strikes count for one window from the first. Redis keeps a key through its expiry millisecond (PTTL 0):
-- that is the next window already, so such strikes start over too.
local strikes = 1
if redis.call('PTTL', KEYS[2]) > 0 then
  strikes = redis.call('INCR', KEYS[2])
else
  redis.call('SET', KEYS[2], 1, 'PX', window)
end
if strikes < threshold then
  return { 1, count, reset, retry, 0 }
end

local duration = tonumber(ARGV[4])
redis.call('SET', KEYS[3], '1', 'PX', duration)
redis.call('DEL', KEYS[2])
return { 2, count, reset, duration, 1 }
