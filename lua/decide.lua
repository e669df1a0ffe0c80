-- The decision around every algorithm: loaded after one algorithm's file (lua/<algorithm>.lua), which
-- defines count(state, limits, now, member, peek) and undo(state, limits, member, at, now). One call decides
-- one request against every limit of a budget, atomically, on Redis's clock.
--
-- KEYS[1]  state     the budget's state for all its limits (see the algorithm's file)
-- KEYS[2]  strikes   SET of the members of the requests denied in the current strike window (per identity)
-- KEYS[3]  banned    STRING present while the identity is banned (per identity)
-- KEYS[4]  offences  STRING integer: bans started since the identity was last forgiven (per identity)
-- KEYS[5]  override  STRING limits, as ARGV[6], that replace the budget's for this identity (setOverride)
-- ARGV[1]  mode      'decide'; 'peek' (report, count nothing); 'undo' (give back the request ARGV[2] counted at ARGV[7])
-- ARGV[2]  member    unique id of this request, made by the plugin (a log entry, a strike)
-- ARGV[3]  threshold denials within one window of the limit hit that start a ban (0: bans off)
-- ARGV[4]  ladder    ban lengths in ms, 'd1 d2 ...': the nth ban in a row lasts dn, the last one repeating
-- ARGV[5]  forget    ms after a ban ends that it still counts toward the next one's length
-- ARGV[6]  limits    'max window burst;...' (requests, ms, requests; burst is max but for the token bucket):
--                     a request is allowed when every limit allows it
-- ARGV[7]  at        undo only: the `at` of the decision being undone (ms)
--
-- Reply: { status, retry, offence, at, n, limit1, window1, count1, reset1, ..., limitN, windowN, countN, resetN }
--   status   0 allowed, 1 rate limited, 2 banned
--   retry    ms until this request would pass every limit (0 when allowed; the remaining ban when banned)
--   offence  the ban this request started: 1 for the first in a row, 2 for the next...; 0 when it started none
--   at       Redis's time of the decision (ms)
--   n        how many limits follow, each: its capacity (burst, requests), window (ms), the count after this
--            decision and the ms until that count starts falling to zero (reset; 0: nothing counted)
-- Integers only. A denied request counts nothing on any limit and writes only its strike; every key written
-- carries a TTL, but an override set as permanent.

local function milliseconds (time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local now = milliseconds(redis.call('TIME'))

local mode = ARGV[1]
local member = ARGV[2]

local function parse (text)
  local limits = {}
  for max, window, burst in string.gmatch(text, '(%d+) (%d+) (%d+)') do
    limits[#limits + 1] = { max = tonumber(max), window = tonumber(window), burst = tonumber(burst) }
  end
  return limits
end

local limits

local function reply (status, retry, offence, entries)
  local out = { status, retry, offence, now, #limits }
  for i, limit in ipairs(limits) do
    local entry = entries and entries[i]
    out[#out + 1] = limit.burst
    out[#out + 1] = limit.window
    out[#out + 1] = entry and entry.count or 0
    out[#out + 1] = entry and entry.reset or 0
  end
  return out
end

-- A banned client is answered first and at the least cost: its reply shows the budget's own limits.
if mode ~= 'undo' then
  local banned = redis.call('PTTL', KEYS[3])
  if banned > 0 then
    limits = parse(ARGV[6])
    return reply(2, banned, 0, nil)
  end
end

limits = parse(redis.call('GET', KEYS[5]) or ARGV[6])
if mode == 'undo' then
  undo(KEYS[1], limits, member, tonumber(ARGV[7]), now)
  return { 0 }
end

local allowed, entries = count(KEYS[1], limits, now, member, mode == 'peek')
if allowed then
  return reply(0, 0, 0, entries)
end

-- Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
local retry, strikeWindow = 0, 0
for i, entry in ipairs(entries) do
  if entry.retry > retry then
    retry, strikeWindow = entry.retry, limits[i].window
  end
end
local threshold = tonumber(ARGV[3])
if mode == 'peek' or threshold == 0 then
  return reply(1, retry, 0, entries)
end

-- Redis keeps a key through its expiry millisecond (PTTL 0): that is the next window already, so such
-- strikes start over too.
if redis.call('PTTL', KEYS[2]) <= 0 then
  redis.call('DEL', KEYS[2])
  redis.call('SADD', KEYS[2], member)
  redis.call('PEXPIRE', KEYS[2], strikeWindow)
else
  redis.call('SADD', KEYS[2], member)
end
if redis.call('SCARD', KEYS[2]) < threshold then
  return reply(1, retry, 0, entries)
end

-- The ban: its length climbs the ladder with each ban the identity earns before the last is forgotten.
local ladder = {}
for ms in string.gmatch(ARGV[4], '%d+') do
  ladder[#ladder + 1] = tonumber(ms)
end
local offence = 1
if #ladder > 1 then
  offence = redis.call('INCR', KEYS[4])
end
local duration = ladder[math.min(offence, #ladder)]
if #ladder > 1 then
  redis.call('PEXPIRE', KEYS[4], duration + tonumber(ARGV[5]))
end
redis.call('SET', KEYS[3], '1', 'PX', duration)
redis.call('DEL', KEYS[2])
return reply(2, duration, offence, entries)
