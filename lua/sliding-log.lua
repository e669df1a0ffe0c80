-- Sliding-window log: one decision, atomically, on Redis's clock.
--
-- KEYS[1]  log      ZSET of the requests counted in the window: score = arrival (ms), member = unique id
-- KEYS[2]  strikes  SET of the members of the requests denied in the current window (per identity)
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
-- Safe to replay: run again with the same member (a client re-sending a command whose reply it lost), a
-- decision counts nothing twice: the entry is added once, and the denial is one strike.

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
    count = count + redis.call('ZADD', KEYS[1], 'NX', now, ARGV[5])
    -- The log lives until its newest entry leaves: after a clock step back, now is not the newest.
    if redis.call('PTTL', KEYS[1]) < window then
      redis.call('PEXPIRE', KEYS[1], window)
    end
  end
  if count == 0 then
    return { 0, 0, 0, 0, 0 }
  end
  return { 0, count, leaves(0), 0, 0 }
end

-- A replay of a request that was counted when the log had room: it was allowed, and still is.
if not peek and redis.call('ZSCORE', KEYS[1], ARGV[5]) then
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
