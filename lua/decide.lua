-- The decision around every algorithm: loaded after one algorithm's file (lua/<algorithm>.lua), which
-- defines count(state, limits, now, member, peek, entries) and undo(state, limits, member, at, now). One
-- call decides a batch of requests (often one), each against every limit of its budget, atomically, on
-- Redis's clock.
--
-- KEYS     each request's in turn: three, or five when it is decided under a ban policy (its strikes count):
--   state     the budget's state for all its limits (see the algorithm's file)
--   banned    STRING present while the identity is banned (per identity)
--   override  STRING limits 'max window burst;...' that replace the policy's for this identity (setOverride)
--   strikes   SET of the members of the requests denied in the current strike window (per identity)
--   offences  STRING integer: bans started since the identity was last forgiven (per identity)
-- ARGV[1]  mode      'decide'; 'peek' (report, count nothing); 'undo' (give back what each request counted)
-- ARGV[2]  base      request i's member (its unique id: a log entry, a strike) is base .. i
-- ARGV[3]  requests  how many requests follow
-- ARGV[4]  p         how many policies follow, each as:
--   threshold denials within one window of the limit hit that start a ban (0: bans off)
--   ladder    ban lengths in ms, 'd1 d2 ...': the nth ban in a row lasts dn, the last one repeating
--   forget    ms after a ban ends that it still counts toward the next one's length
--   n         how many limits follow, each: max (requests), window (ms), burst (requests; max but for the
--             token bucket). A request is allowed when every limit allows it.
-- then, for each request, the policy that decides it (1 to p); for undo, also its member and Redis's time
-- (ms) of the decision being undone.
--
-- Reply: each request's answer in turn (none for undo):
--   { status, retry, offence, at, n, limit1, window1, count1, reset1, ..., limitN, windowN, countN, resetN }
--   or, for a request Redis could not decide (a foreign value at one of its keys, an override that names no
--   limit), { 3, error }: that request alone gets its error text, and the others are decided as usual.
--   status   0 allowed, 1 rate limited, 2 banned
--   retry    ms until this request would pass every limit (0 when allowed; the remaining ban when banned)
--   offence  the ban this request started: 1 for the first in a row, 2 for the next...; 0 when it started none
--   at       Redis's time of the decision (ms); 0 for a client found banned, who is answered before the clock is read
--   n        how many limits follow, each: its capacity (burst, requests), window (ms), the count after this
--            decision and the ms until that count starts falling to zero (reset; 0: nothing counted). A client
--            found banned gets n = 0: the budget's own limits, nothing counted.
-- Integers only, but an error's text. A denied request counts nothing on any limit and writes only its strike; every key written
-- carries a TTL, but an override set as permanent.
--
-- Lean on purpose: Lua allocations (tables, closures, strings from string.gmatch) cost Redis more than most of
-- the commands here, so each call makes a handful of tables, whatever the batch's size.

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
local peek = mode == 'peek'
local base = ARGV[2]

-- Where each policy's arguments start; its limits are read when a request first needs them (a client
-- found banned needs none).
local starts = {}
local a = 5
for p = 1, tonumber(ARGV[4]) do
  starts[p] = a
  a = a + 4 + 3 * tonumber(ARGV[a + 3])
end
local first = a

local policies = {}
local function policyLimits (p)
  local limits = policies[p]
  if not limits then
    limits = {}
    local s = starts[p]
    for i = 1, tonumber(ARGV[s + 3]) do
      local l = s + 1 + 3 * i
      limits[i] = { max = tonumber(ARGV[l]), window = tonumber(ARGV[l + 1]), burst = tonumber(ARGV[l + 2]) }
    end
    policies[p] = limits
  end
  return limits
end

local function parse (text)
  local limits = {}
  for max, window, burst in string.gmatch(text, '(%d+) (%d+) (%d+)') do
    limits[#limits + 1] = { max = tonumber(max), window = tonumber(window), burst = tonumber(burst) }
  end
  return limits
end

-- One answer table per limit, filled by count() for each request in turn.
local entries = {}
local out, o = {}, 0
local function reply (status, retry, offence, limits)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = status, retry, offence, now, #limits
  o = o + 5
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = limit.burst, limit.window, entry.count, entry.reset
    o = o + 4
  end
end

-- The ban: its length climbs the ladder with each ban the identity earns before the last is forgotten.
local function ban (s, banned, offences)
  local ladder = {}
  for ms in string.gmatch(ARGV[s + 1], '%d+') do
    ladder[#ladder + 1] = tonumber(ms)
  end
  local offence = 1
  if #ladder > 1 then
    offence = redis.call('INCR', offences)
  end
  local duration = ladder[math.min(offence, #ladder)]
  if #ladder > 1 then
    redis.call('PEXPIRE', offences, duration + tonumber(ARGV[s + 2]))
  end
  redis.call('SET', banned, '1', 'PX', duration)
  return duration, offence
end

local function decide (k, p, member, bans)
  -- A banned client is answered first and at the least cost.
  local banned = redis.call('PTTL', KEYS[k + 2])
  if banned > 0 then
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 2, banned, 0, 0, 0
    o = o + 5
    return
  end

  local override = redis.call('GET', KEYS[k + 3])
  local limits = override and parse(override) or policyLimits(p)
  if #limits == 0 then
    error('ERR rate-guard: the override at ' .. KEYS[k + 3] .. ' names no limit', 0)
  end
  for i = #entries + 1, #limits do
    entries[i] = {}
  end
  if count(KEYS[k + 1], limits, clock(), member, peek, entries) then
    return reply(0, 0, 0, limits)
  end

  -- Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
  local retry, strikeWindow = 0, 0
  for i = 1, #limits do
    if entries[i].retry > retry then
      retry, strikeWindow = entries[i].retry, limits[i].window
    end
  end
  if not bans then
    return reply(1, retry, 0, limits)
  end

  -- Redis keeps a key through its expiry millisecond (PTTL 0): that is the next window already, so such
  -- strikes start over too.
  local strikes = KEYS[k + 4]
  if redis.call('PTTL', strikes) <= 0 then
    redis.call('DEL', strikes)
    redis.call('SADD', strikes, member)
    redis.call('PEXPIRE', strikes, strikeWindow)
  else
    redis.call('SADD', strikes, member)
  end
  if redis.call('SCARD', strikes) < tonumber(ARGV[starts[p]]) then
    return reply(1, retry, 0, limits)
  end
  local duration, offence = ban(starts[p], KEYS[k + 2], KEYS[k + 5])
  redis.call('DEL', strikes)
  return reply(2, duration, offence, limits)
end

local k, r = 0, first
for i = 1, tonumber(ARGV[3]) do
  local p = tonumber(ARGV[r])
  if mode == 'undo' then
    local override = redis.call('GET', KEYS[k + 3])
    undo(KEYS[k + 1], override and parse(override) or policyLimits(p), ARGV[r + 1], tonumber(ARGV[r + 2]), clock())
    k, r = k + 3, r + 3
  else
    -- Under a ban policy a denial counts a strike (a peek counts nothing): two keys more.
    local bans = not peek and ARGV[starts[p]] ~= '0'
    -- One request's error is its own: it writes nothing to the reply before its last step.
    local ok, err = pcall(decide, k, p, base .. i, bans)
    if not ok then
      out[o + 1], out[o + 2] = 3, type(err) == 'table' and err.err or tostring(err)
      o = o + 2
    end
    k, r = k + (bans and 5 or 3), r + 1
  end
end
return out
