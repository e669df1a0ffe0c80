-- The decision around every algorithm: loaded after one algorithm's file (lua/<algorithm>.lua), which
-- defines count(state, limits, now, member, peek) and undo(state, limits, member, at, now). One call decides
-- a batch of requests (often one), each against every limit of its budget, atomically, on Redis's clock.
--
-- KEYS     five per request, request i at KEYS[5i-4] .. KEYS[5i]:
--   state     the budget's state for all its limits (see the algorithm's file)
--   strikes   SET of the members of the requests denied in the current strike window (per identity)
--   banned    STRING present while the identity is banned (per identity)
--   offences  STRING integer: bans started since the identity was last forgiven (per identity)
--   override  STRING limits, as a policy's, that replace the budget's for this identity (setOverride)
-- ARGV[1]  mode      'decide'; 'peek' (report, count nothing); 'undo' (give back what each request counted)
-- ARGV[2]  p         how many policies follow, then 4 arguments for each:
--   threshold denials within one window of the limit hit that start a ban (0: bans off)
--   ladder    ban lengths in ms, 'd1 d2 ...': the nth ban in a row lasts dn, the last one repeating
--   forget    ms after a ban ends that it still counts toward the next one's length
--   limits    'max window burst;...' (requests, ms, requests; burst is max but for the token bucket):
--             a request is allowed when every limit allows it
-- then 3 arguments for each request:
--   policy    which of the policies decides it (1 to p)
--   member    unique id of this request, made by the plugin (a log entry, a strike)
--   at        undo only: Redis's time (ms) of the decision being undone; otherwise 0
--
-- Reply: each request's answer in turn (none for undo):
--   { status, retry, offence, at, n, limit1, window1, count1, reset1, ..., limitN, windowN, countN, resetN }
--   status   0 allowed, 1 rate limited, 2 banned
--   retry    ms until this request would pass every limit (0 when allowed; the remaining ban when banned)
--   offence  the ban this request started: 1 for the first in a row, 2 for the next...; 0 when it started none
--   at       Redis's time of the decision (ms); 0 for a client found banned, who is answered before the clock is read
--   n        how many limits follow, each: its capacity (burst, requests), window (ms), the count after this
--            decision and the ms until that count starts falling to zero (reset; 0: nothing counted). A client
--            found banned gets n = 0: the budget's own limits, nothing counted.
-- Integers only. A denied request counts nothing on any limit and writes only its strike; every key written
-- carries a TTL, but an override set as permanent.

local function milliseconds (time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- Read once, and only when a request needs it (not for a client found banned).
local now
local function clock ()
  now = now or milliseconds(redis.call('TIME'))
  return now
end

local mode = ARGV[1]
local policies = tonumber(ARGV[2])
local first = 3 + 4 * policies

local function parse (text)
  local limits = {}
  for max, window, burst in string.gmatch(text, '(%d+) (%d+) (%d+)') do
    limits[#limits + 1] = { max = tonumber(max), window = tonumber(window), burst = tonumber(burst) }
  end
  return limits
end

-- Each policy's limits, parsed once per call.
local parsed = {}
local function policyLimits (p)
  local limits = parsed[p]
  if not limits then
    limits = parse(ARGV[2 + 4 * p])
    parsed[p] = limits
  end
  return limits
end

local out, o = {}, 0
local function reply (status, retry, offence, limits, entries)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = status, retry, offence, now, #limits
  o = o + 5
  for i, limit in ipairs(limits) do
    local entry = entries[i]
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = limit.burst, limit.window, entry.count, entry.reset
    o = o + 4
  end
end

-- The ban: its length climbs the ladder with each ban the identity earns before the last is forgotten.
local function ban (p, banned, offences)
  local ladder = {}
  for ms in string.gmatch(ARGV[4 * p], '%d+') do
    ladder[#ladder + 1] = tonumber(ms)
  end
  local offence = 1
  if #ladder > 1 then
    offence = redis.call('INCR', offences)
  end
  local duration = ladder[math.min(offence, #ladder)]
  if #ladder > 1 then
    redis.call('PEXPIRE', offences, duration + tonumber(ARGV[1 + 4 * p]))
  end
  redis.call('SET', banned, '1', 'PX', duration)
  return duration, offence
end

local function decide (k, p, member)
  -- A banned client is answered first and at the least cost.
  local banned = redis.call('PTTL', KEYS[k + 3])
  if banned > 0 then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 2, banned, 0, 0, 0
    o = o + 5
    return
  end

  local override = redis.call('GET', KEYS[k + 5])
  local limits = override and parse(override) or policyLimits(p)
  local allowed, entries = count(KEYS[k + 1], limits, clock(), member, mode == 'peek')
  if allowed then
    return reply(0, 0, 0, limits, entries)
  end

  -- Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
  local retry, strikeWindow = 0, 0
  for i, entry in ipairs(entries) do
    if entry.retry > retry then
      retry, strikeWindow = entry.retry, limits[i].window
    end
  end
  local threshold = tonumber(ARGV[4 * p - 1])
  if mode == 'peek' or threshold == 0 then
    return reply(1, retry, 0, limits, entries)
  end

  -- Redis keeps a key through its expiry millisecond (PTTL 0): that is the next window already, so such
  -- strikes start over too.
  local strikes = KEYS[k + 2]
  if redis.call('PTTL', strikes) <= 0 then
    redis.call('DEL', strikes)
    redis.call('SADD', strikes, member)
    redis.call('PEXPIRE', strikes, strikeWindow)
  else
    redis.call('SADD', strikes, member)
  end
  if redis.call('SCARD', strikes) < threshold then
    return reply(1, retry, 0, limits, entries)
  end
  local duration, offence = ban(p, KEYS[k + 3], KEYS[k + 4])
  redis.call('DEL', strikes)
  return reply(2, duration, offence, limits, entries)
end

for i = 1, #KEYS / 5 do
  local k, a = 5 * i - 5, first + 3 * i - 3
  local p, member = tonumber(ARGV[a]), ARGV[a + 1]
  if mode == 'undo' then
    local override = redis.call('GET', KEYS[k + 5])
    undo(KEYS[k + 1], override and parse(override) or policyLimits(p), member, tonumber(ARGV[a + 2]), clock())
  else
    decide(k, p, member)
  end
end
return out
