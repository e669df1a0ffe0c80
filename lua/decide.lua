-- The decision around every algorithm: the last part of each algorithm's script, after lua/prelude.lua (text),
-- the algorithm's file (lua/<algorithm>.lua), which defines count(state, limits, now, member, peek, entries,
-- cost) and settle(state, limits, member, at, now, cost, final), lua/quota.lua (calendar quotas, beside any
-- algorithm), lua/ban-index.lua and lua/strikes.lua (strike and ban). One call decides a batch of requests
-- (often one), each against every limit of its budget, atomically, on Redis's clock. lua/lean.lua decides the
-- common shape faster, with the same answers.
--
-- KEYS     each request's in turn: three, three more under a ban policy, one more under overLimit, one for quotas:
--   state     the budget's state for all its limits (see the algorithm's file)
--   banned    STRING present while the identity is banned (per identity)
--   override  STRING limits 'max window burst;...' that replace the policy's for this identity (setOverride)
--   strikes   SET of the members of the requests denied in the current strike window (per identity)
--   offences  STRING integer: bans started since the identity was last forgiven (per identity)
--   index     ZSET the ban index (per nameSpace; on a Cluster per hash slot, this identity's): a ban started
--             here is entered in it (lua/ban-index.lua)
--   over      STRING integer k: the over-limit key, denials in a row on this budget (per identity), alive
--             while the client waits
--   quota     HASH the budget's calendar quotas (lua/quota.lua)
--          strikes, offences and index are sent when a request is decided (not peeked) under a ban policy; over,
--          after them, when it is decided or peeked under a policy whose over is not 'none'; quota, last, when
--          its policy has a calendar quota (decided, peeked or settled: a request to settle sends state, banned,
--          override and quota).
-- ARGV[1]  mode      'decide'; 'peek' (report, count nothing); 'settle' (each request counted counts its final
--                    cost instead: 0 gives it all back)
-- ARGV[2]  base      request i's member (its unique id: a log entry, a strike) is base .. i
-- ARGV[3]  requests  how many requests follow
-- ARGV[4]  p         how many policies follow, each as:
--   threshold denials within one window of the limit hit that start a ban (0: bans off)
--   ladder    ban lengths in ms, 'd1 d2 ...': the nth ban in a row lasts dn, the last one repeating
--   forget    ms after a ban ends that it still counts toward the next one's length
--   over      what a request over the limit does: 'none' (counts nothing, its algorithm alone decides);
--             'continue' or 'backoff' (it holds the client off, see below)
--   wait      maxWait, ms (0: none): a request denied that every limit would allow within it waits instead,
--             counted ahead of the clock by the algorithm's reserve (see below); never under an over
--   queue     maxQueue: at most this many of the state's requests wait at once
--   n         how many limits follow, each: max (units), window (ms), burst (units; max but for the
--             token bucket). A request is allowed when every limit allows it. A calendar quota's window is
--             'c<start>:<end>:<next>' (lua/quota.lua): it is counted there, the algorithm counting the others;
--             the quotas come after the other limits.
-- then, for each request, the policy that decides it (1 to p), followed by '*' and its cost when that is not
-- 1 ('2*15': policy 2, 15 units); to settle, also its member, Redis's time (ms) of the decision being settled and
-- its final cost.
--
-- Reply: each request's answer in turn (none to settle):
--   { status, retry, offence, at, n, limit1, window1, count1, reset1, ..., limitN, windowN, countN, resetN }
--   or, for a request Redis could not decide (a foreign value at one of its keys, an override that names no
--   limit), { 3, error }: that request alone gets its error text, and the others are decided as usual. The
--   text ends with where it was raised, ' at user_script:<line>' (a line of the joined script, which
--   lib/stores/scripts.ts names as its file's line), but for this file's own 'ERR rate-guard: ' errors.
--   status   0 allowed, 1 rate limited, 2 banned, 4 allowed once it has waited `retry` ms (maxWait)
--   retry    ms until this request would pass every limit (0 when allowed; the remaining ban when banned; the
--            wait when it waits); 0 when limited: its cost is more than a limit's capacity, so it never
--            passes (no strike counted)
--   offence  the ban this request started: 1 for the first in a row, 2 for the next...; 0 when it started none
--   at       Redis's time of the decision (ms), or, for a request that waits, of its wait's end (when it is
--            counted); 0 for a client found banned, who is answered before the clock is read
--   n        how many limits follow, each: its capacity (burst, requests), window (ms), the count after this
--            decision and the ms until one more unit is free than now (reset: the count falls by one, or, past
--            the capacity, below it; 0: nothing counted). A client found banned gets n = 0: the budget's own
--            limits, nothing counted.
-- Counts are in units: a request costs its cost on every limit (1 unless said). Integers only, but an error's text. A denied request counts nothing on any limit and writes only its strike
-- (and under overLimit, the over-limit key); every key written carries a TTL, but an override set as permanent.
--
-- Over the limit ('continue' as @fastify/rate-limit's continueExceeding, 'backoff' as its exponentialBackoff),
-- with W = the longest window of the request's limits, a decision (not a peek) goes:
--   the over-limit key alive (PTTL > 0): denied without counting on the algorithm; k = INCR, and the client
--     waits W ('continue') or W x 2^(k-1) ('backoff'), the key's new TTL;
--   else the algorithm decides; when it denies, the key is set to 1 for W ms, and the client waits W.
-- No wait passes the longest duration, 2^53 - 1024 ms (LONGEST; @fastify/rate-limit stops at 2^53 - 1). A
-- denial over the limit reports every limit at its capacity (none left), reset = the wait. Strikes count
-- these denials as any other's (a denial under the key strikes within W). The key keeps no members: a
-- replayed denial (the same member, re-sent) is one strike, but is held once more (and under 'backoff',
-- doubles the wait once more).
-- A peek writes nothing. The key alive, let left = W - (wait_k - PTTL), wait_k being the wait the last denial
-- set (k = the key's value): what is left of one window W since that denial.
-- While left > 0 the peek is limited for left, every limit one over its capacity (exceeded), reset = left;
-- otherwise it is the algorithm's peek. So a peek sees what @fastify/rate-limit's read sees.
--
-- Lean on purpose: Lua allocations (tables, closures, strings from string.gmatch) cost Redis more than most of
-- the commands here, so each call makes a handful of tables, whatever the batch's size.

-- Read once, and only when a request needs it (not for a client found banned).
local now
local function clock ()
  now = now or milliseconds(redis.call('TIME'))
  return now
end

-- The longest duration (lib/duration.ts): the longest wait over the limit, a reply ioredis 6 reads exactly.
local LONGEST = 2 ^ 53 - 1024

-- Where each key and argument sits (the header above), named once. Constants, not a table per request.
-- A request's keys, counted from k, the last key of the request before it: KEYS[k + STATE]...
local STATE, BANNED, OVERRIDE = 1, 2, 3
local STRIKES, OFFENCES, INDEX = 4, 5, 6
-- How many keys a request sends: ALWAYS; BANNING under a ban policy (decided, not peeked); one more after
-- them, its over-limit key, under an overLimit.
local ALWAYS, BANNING = 3, 6
-- A policy's fields, counted from s, where it starts: ARGV[s + THRESHOLD]...; then its limits, from
-- s + FIELDS, PER_LIMIT arguments each: ARGV[l + MAX]...
local THRESHOLD, LADDER, FORGET, OVER, WAIT, QUEUE, LIMITS = 0, 1, 2, 3, 4, 5, 6
local FIELDS = 7
local MAX, WINDOW, BURST = 0, 1, 2
local PER_LIMIT = 3
-- A request to settle: its policy at r, then ARGV[r + MEMBER]...; PER_SETTLE arguments in all. A request
-- decided or peeked sends its policy alone.
local MEMBER, AT, FINAL = 1, 2, 3
local PER_SETTLE = 4

local mode = ARGV[1]
local peek = mode == 'peek'
local base = ARGV[2]

-- Where each policy's arguments start; its limits are read when a request first needs them (a client
-- found banned needs none).
local starts = {}
-- Each request names its policy as text ('1', '2'...): looked up here, not parsed again for each request.
local policyOf = {}
-- Whether a policy has calendar quotas (a window that is no number): its requests send the quota key.
local quoted = {}
-- The first policy starts after mode, base, requests and p.
local a = 5
for p = 1, tonumber(ARGV[4]) do
  starts[p] = a
  policyOf[text(p)] = p
  local n = tonumber(ARGV[a + LIMITS])
  quoted[p] = n > 0 and string.byte(ARGV[a + FIELDS + PER_LIMIT * (n - 1) + WINDOW]) == 99
  a = a + FIELDS + PER_LIMIT * n
end
local first = a

-- A policy's limits: all of them (the reply's order: the others, then the calendar quotas), those its
-- algorithm counts, and its calendar quotas (each in the period that holds now).
local policies = {}
local NONE = {}
local function policyLimits (p)
  local limits = policies[p]
  if not limits then
    limits = {}
    local s = starts[p]
    for i = 1, tonumber(ARGV[s + LIMITS]) do
      local l = s + FIELDS + PER_LIMIT * (i - 1)
      limits[i] = { max = tonumber(ARGV[l + MAX]), window = tonumber(ARGV[l + WINDOW]), burst = tonumber(ARGV[l + BURST]) }
      -- A calendar quota's window is its periods' text (lua/quota.lua): the period that holds now.
      if not limits[i].window then
        local start, finish = quotaSteps().period(ARGV[l + WINDOW], clock())
        limits[i].start, limits[i].finish, limits[i].window = start, finish, finish - start
      end
    end
    if quoted[p] then
      local counted, quotas = {}, {}
      for i = 1, #limits do
        if limits[i].start then
          quotas[#quotas + 1] = limits[i]
        else
          counted[#counted + 1] = limits[i]
        end
      end
      limits = { limits, counted, quotas }
    end
    policies[p] = limits
  end
  if quoted[p] then
    return limits[1], limits[2], limits[3]
  end
  return limits, limits, NONE
end

local function parse (text)
  local limits = {}
  for max, window, burst in string.gmatch(text, '(%d+) (%d+) (%d+)') do
    limits[#limits + 1] = { max = tonumber(max), window = tonumber(window), burst = tonumber(burst) }
  end
  return limits
end

-- A policy's limits under the override `text` (setOverride): the limits it names for the algorithm, or the
-- policy's when it names only quotas; its quotas' maxes (lua/quota.lua). All of them, the algorithm's, the
-- quotas; nothing when it names no limit.
local function overridden (text, counted, quotas)
  local named = parse(text)
  local changed = #quotas > 0 and quotaSteps().overridden(text, quotas) or quotas
  if #named == 0 and changed == quotas then
    return nil
  end
  counted = #named > 0 and named or counted
  if #changed == 0 then
    return counted, counted, changed
  end
  local limits = { unpack(counted) }
  for j = 1, #changed do
    limits[#counted + j] = changed[j]
  end
  return limits, counted, changed
end

-- One answer table per limit, filled by count() for each request in turn.
local entries = {}
local out, o = {}, 0
-- The status of a request let through once it has waited (its retry): counted at the end of the wait.
local WAITS = 4
local function reply (status, retry, offence, limits)
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = status, retry, offence, status == WAITS and now + retry or now, #limits
  o = o + 5
  for i = 1, #limits do
    local limit, entry = limits[i], entries[i]
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = limit.burst, limit.window, entry.count, entry.reset
    o = o + 4
  end
end

-- The wait over the limit after k denials in a row ('backoff' doubles it each time), at most LONGEST.
local function wait (longest, k, doubles)
  if doubles then
    longest = longest * 2 ^ (k - 1)
  end
  return math.min(longest, LONGEST)
end

-- Every limit reported at `count` past its capacity (0: at it, none left), counting down from `reset`.
local function exceeded (limits, reset, count)
  for i = 1, #limits do
    entries[i].count, entries[i].reset = limits[i].burst + count, reset
  end
end

-- The request being decided, set by the loop below before it calls decide(): xpcall passes no arguments.
-- k: the last key before its keys; p: its policy; member: its id; bans: whether a denial strikes (its keys
-- hold strikes, offences and index); over: its over-limit key, or false; quota: its calendar quotas' key, or
-- false; cost: its units.
local k, p, member, bans, over, quota, cost

local function decide ()
  -- Most identities have neither a ban nor an override: one EXISTS says so (an MGET of both would cost Redis
  -- more, its reply being a table). A banned client is answered first and at the least cost.
  local override = false
  if redis.call('EXISTS', KEYS[k + BANNED], KEYS[k + OVERRIDE]) > 0 then
    local banned = redis.call('PTTL', KEYS[k + BANNED])
    if banned > 0 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 2, banned, 0, 0, 0
      o = o + 5
      return
    end
    override = redis.call('GET', KEYS[k + OVERRIDE])
  end
  -- An override replaces what it names: the limits its algorithm counts (all of them), a calendar quota's max.
  local limits, counted, quotas = policyLimits(p)
  if override then
    limits, counted, quotas = overridden(override, counted, quotas)
    if not limits then
      error('ERR rate-guard: the override at ' .. KEYS[k + OVERRIDE] .. ' names no limit', 0)
    end
  end
  for i = #entries + 1, #limits do
    entries[i] = {}
  end
  -- A request that costs more than a limit holds never passes: refused as it is, nothing counted, no strike.
  if cost > 1 then
    for i = 1, #limits do
      if cost > limits[i].burst then
        if #counted > 0 then
          count(KEYS[k + STATE], counted, clock(), member, true, entries, 1)
        end
        if #quotas > 0 then
          quotaSteps().fit(quota, quotas, clock(), 1, entries, #counted)
        end
        return reply(1, 0, 0, limits)
      end
    end
  end

  local retry, strikeWindow, longest = 0, 0, 0
  local waits = 0
  if over then
    clock()
    for i = 1, #limits do
      longest = math.max(longest, limits[i].window)
    end
    waits = redis.call('PTTL', over)
  end
  local s = starts[p]
  local doubles = ARGV[s + OVER] == 'backoff'
  if waits > 0 and not peek then
    -- Held off: denied, nothing counted on the algorithm.
    retry, strikeWindow = wait(longest, redis.call('INCR', over), doubles), longest
    redis.call('PEXPIRE', over, retry)
    exceeded(limits, retry, 0)
  else
    if waits > 0 then
      local left = longest - (wait(longest, tonumber(redis.call('GET', over)), doubles) - waits)
      if left > 0 then
        exceeded(limits, left, 1)
        return reply(1, left, 0, limits)
      end
    end
    -- The quotas first: when one is full, the algorithm is only asked (peeked), so nothing is counted.
    local fits = #quotas == 0 or quotaSteps().fit(quota, quotas, clock(), cost, entries, #counted)
    if (#counted == 0 or count(KEYS[k + STATE], counted, clock(), member, peek or not fits, entries, cost)) and fits then
      if not peek and #quotas > 0 then
        quotaSteps().count(quota, quotas, now, entries, #counted, cost)
      end
      return reply(0, 0, 0, limits)
    end
    -- Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
    for i = 1, #limits do
      if entries[i].retry > retry then
        retry, strikeWindow = entries[i].retry, limits[i].window
      end
    end
    -- Allowed within maxWait: it waits, counted at the end of its wait (not under an over, a peek, or a cost no
    -- wait lets through), unless its queue is full. Never for a full quota: its period is what it waits for;
    -- a quota with room counts the request now, in this period.
    local most = tonumber(ARGV[s + WAIT])
    if most > 0 and not peek and retry > 0 and retry <= most and fits then
      local waited = reserve(KEYS[k + STATE], counted, now, member, cost, retry, tonumber(ARGV[s + QUEUE]), entries)
      if waited then
        if #quotas > 0 then
          quotaSteps().count(quota, quotas, now, entries, #counted, cost)
        end
        return reply(WAITS, waited, 0, limits)
      end
    end
    -- Over the limit: held off for the longest window, from now.
    if over and not peek then
      retry = wait(longest, 1, false)
      redis.call('SET', over, '1', 'PX', retry)
      exceeded(limits, retry, 0)
    end
  end
  if not bans then
    return reply(1, retry, 0, limits)
  end

  if not strike(KEYS[k + STRIKES], member, strikeWindow, tonumber(ARGV[s + THRESHOLD])) then
    return reply(1, retry, 0, limits)
  end
  local duration, offence = ban(ARGV[s + LADDER], tonumber(ARGV[s + FORGET]), KEYS[k + BANNED], KEYS[k + OFFENCES], KEYS[k + INDEX], clock())
  redis.call('DEL', KEYS[k + STRIKES])
  return reply(2, duration, offence, limits)
end

-- Where in `level` (counted up the stack from here) an error was raised, as Lua names it
-- ('user_script:<line>: ', in a FUNCTION library 'user_function:<line>: '), or '' for a function of Redis's (redis.call, error).
local function where (level)
  local _, at = pcall(error, '', level)
  return at
end
local OURS = 'ERR rate-guard: '
-- A request's error as its text, with where it was raised: xpcall calls this before the stack unwinds.
-- 4 is the function that raised it (5, its caller, when that is redis.call or error). A Lua error names
-- its line already; this file's own errors say what is wrong in their own words.
local function located (err)
  local message = type(err) == 'table' and err.err or tostring(err)
  if string.find(message, 'user_script:', 1, true) or string.find(message, 'user_function:', 1, true) or string.sub(message, 1, #OURS) == OURS then
    return message
  end
  local at = where(4)
  if at == '' then
    at = where(5)
  end
  return message .. ' at ' .. string.sub(at, 1, -3)
end

local r = first
k = 0
for i = 1, tonumber(ARGV[3]) do
  p, cost = policyOf[ARGV[r]], 1
  if not p then
    local policy, units = string.match(ARGV[r], '^(%d+)%*(%d+)$')
    p, cost = policyOf[policy], tonumber(units)
  end
  if mode == 'settle' then
    local override = redis.call('GET', KEYS[k + OVERRIDE])
    local _, counted, quotas = policyLimits(p)
    -- An override that names no limit settles nothing (as a decision, it is an error).
    if override then
      local all, named, changed = overridden(override, counted, quotas)
      counted, quotas = all and named or NONE, all and changed or NONE
    end
    local at, final = tonumber(ARGV[r + AT]), tonumber(ARGV[r + FINAL])
    if #counted > 0 then
      settle(KEYS[k + STATE], counted, ARGV[r + MEMBER], at, clock(), cost, final)
    end
    if #quotas > 0 then
      quotaSteps().settle(KEYS[k + ALWAYS + 1], quotas, math.max(largest(counted), largest(quotas)), at, clock(), cost, final)
    end
    k, r = k + ALWAYS + (quoted[p] and 1 or 0), r + PER_SETTLE
  else
    -- Under a ban policy a denial counts a strike and may start a ban (a peek counts nothing): BANNING keys
    -- instead of ALWAYS. Under overLimit, the over-limit key: one more. With calendar quotas, their key, the last.
    local s = starts[p]
    bans = not peek and ARGV[s + THRESHOLD] ~= '0'
    local n = bans and BANNING or ALWAYS
    over = ARGV[s + OVER] ~= 'none'
    if over then
      n = n + 1
      over = KEYS[k + n]
    end
    quota = quoted[p]
    if quota then
      n = n + 1
      quota = KEYS[k + n]
    end
    member = base .. text(i)
    -- One request's error is its own: it writes nothing to the reply before its last step.
    local ok, err = xpcall(decide, located)
    if not ok then
      out[o + 1], out[o + 2] = 3, err
      o = o + 2
    end
    k, r = k + n, r + 1
  end
end
return out
