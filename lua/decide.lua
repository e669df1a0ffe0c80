-- The decision around every algorithm: the last part of each algorithm's script, after lua/prelude.lua (text),
-- the algorithm's file (lua/<algorithm>.lua), which defines count(state, limits, now, member, peek, entries,
-- cost) and settle(state, limits, member, at, now, cost, final), lua/quota.lua (calendar quotas, beside any
-- algorithm), lua/ban-index.lua and lua/strikes.lua (strike and ban). One call decides a batch of requests
-- (often one), each against every limit of its budget, atomically, on Redis's clock. lua/lean.lua decides the
-- common shape faster, with the same answers.
--
-- KEYS and ARGV: lib/stores/layout.ts's DECIDE_LAYOUT names them in the order scriptArgs sends them, and
-- the line `-- layout: DECIDE` below becomes the Lua that declares where each sits (KEYS[k + KEY_STATE], k the
-- last key of the requests before; ARGV[s + POLICY_LADDER], s where the policy starts). What each one is:
-- KEY      state     the budget's state for all its limits (see the algorithm's file)
--          banned    STRING present while the identity is banned (per identity)
--          override  STRING limits 'max window burst;...' that replace the policy's for this identity (setOverride)
-- BAN_KEY  strikes   SET of the members of the requests denied in the current strike window (per identity)
--          offences  STRING integer: bans started since the identity was last forgiven (per identity)
--          index     ZSET the ban index (per nameSpace; on a Cluster per hash slot, this identity's): a ban started
--                    here is entered in it (lua/ban-index.lua)
--          sent when a request is decided (not peeked) under a ban policy; then, one each, in this order:
--          over      STRING integer k: the over-limit key, denials in a row on this budget (per identity), alive
--                    while the client waits; sent when a request is decided or peeked under a policy whose over
--                    is not 'none'
--          quota     HASH the budget's calendar quotas (lua/quota.lua); sent when its policy has a calendar quota
--                    (decided, peeked or settled: a request to settle sends KEY and quota)
-- HEAD     mode      'decide'; 'peek' (report, count nothing); 'settle' (each request counted counts its final
--                    cost instead: 0 gives it all back)
--          base      request i's member (its unique id: a log entry, a strike) is base .. i
--          requests  how many requests follow; policies: how many policies follow, each a POLICY:
-- POLICY   threshold denials within one window of the limit hit that start a ban (0: bans off)
--          ladder    ban lengths in ms, 'd1 d2 ...': the nth ban in a row lasts dn, the last one repeating
--          forget    ms after a ban ends that it still counts toward the next one's length
--          over      what a request over the limit does: 'none' (counts nothing, its algorithm alone decides);
--                    'continue' or 'backoff' (it holds the client off, see below)
--          wait      maxWait, ms (0: none): a request denied that every limit would allow within it waits instead,
--                    counted ahead of the clock by the algorithm's reserve (see below); never under an over
--          queue     maxQueue: at most this many of the state's requests wait at once
--          limits    how many limits follow, each a LIMIT: max (units), window (ms), burst (units; max but for
--                    the token bucket). A request is allowed when every limit allows it. A calendar quota's window
--                    is 'c<start>:<end>:<next>' (lua/quota.lua): it is counted there, the algorithm counting the
--                    others; the quotas come after the other limits.
-- REQUEST  policy    then, for each request, the policy that decides it (1 to p), followed by '*' and its cost
--                    when that is not 1 ('2*15': policy 2, 15 units); to settle, a SETTLE: the policy, then the
--                    member, Redis's time (ms) of the decision being settled (at) and its final cost.
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
-- Counts are in units: a request costs its cost on every limit (1 unless said). Integers only, but an error's
-- text. A denied request counts nothing on any limit and writes only its strike
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
-- the commands here, so each call makes a handful of tables, whatever the batch's size: a record per policy, one
-- request record filled in for each request in turn, one answer table per limit (the layout is locals).

-- layout: DECIDE (lib/stores/layout.ts's withLayout makes this line the locals KEY_STATE, ..., SETTLE_SIZE)

-- Read once, and only when a request needs it (not for a client found banned).
local now
local function clock ()
  now = now or milliseconds(redis.call('TIME'))
  return now
end

-- The longest duration (lib/duration.ts): the longest wait over the limit, a reply ioredis 6 reads exactly.
local LONGEST = 2 ^ 53 - 1024
-- The status of a request let through once it has waited (its retry): counted at the end of the wait.
local WAITS = 4

local mode = ARGV[HEAD_MODE]
local peek = mode == 'peek'
local base = ARGV[HEAD_BASE]

-- Each policy, by the text requests name it by ('1', '2'...: looked up, not parsed again for each request): where
-- its arguments start (s), whether its denials strike (bans), its over-limit wait (over: 'none' when it has none;
-- doubles: 'backoff'), whether it has calendar quotas (quoted: a window that is no number; its requests send the
-- quota key). Its limits are read when a request first needs them (a client found banned needs none).
local policyOf = {}
local a = HEAD_SIZE + 1
for p = 1, tonumber(ARGV[HEAD_POLICIES]) do
  local n = tonumber(ARGV[a + POLICY_LIMITS])
  local over = ARGV[a + POLICY_OVER]
  policyOf[text(p)] = { s = a, limits = false, bans = ARGV[a + POLICY_THRESHOLD] ~= '0', over = over ~= 'none', doubles = over == 'backoff',
    quoted = n > 0 and string.byte(ARGV[a + POLICY_SIZE + LIMIT_SIZE * (n - 1) + LIMIT_WINDOW]) == 99 }
  a = a + POLICY_SIZE + LIMIT_SIZE * n
end
local first = a

-- A policy's limits: all of them (the reply's order: the others, then the calendar quotas), those its
-- algorithm counts, and its calendar quotas (each in the period that holds now).
local NONE = {}
local function policyLimits (policy)
  local limits = policy.limits
  if not limits then
    limits = {}
    local s = policy.s
    for i = 1, tonumber(ARGV[s + POLICY_LIMITS]) do
      local l = s + POLICY_SIZE + LIMIT_SIZE * (i - 1)
      limits[i] = { max = tonumber(ARGV[l + LIMIT_MAX]), window = tonumber(ARGV[l + LIMIT_WINDOW]),
        burst = tonumber(ARGV[l + LIMIT_BURST]) }
      -- A calendar quota's window is its periods' text (lua/quota.lua): the period that holds now.
      if not limits[i].window then
        local start, finish = quotaSteps().period(ARGV[l + LIMIT_WINDOW], clock())
        limits[i].start, limits[i].finish, limits[i].window = start, finish, finish - start
      end
    end
    if policy.quoted then
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
    policy.limits = limits
  end
  if policy.quoted then
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

-- One answer table per limit, filled by count() for the request being decided (each in turn).
local entries = {}
local out, o = {}, 0
-- A request's answer (lua/decide.lua's reply, the header); limits nil for a client found banned: n = 0, at = 0.
local function reply (status, retry, offence, limits)
  local at = limits and (status == WAITS and now + retry or now) or 0
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = status, retry, offence, at, limits and #limits or 0
  o = o + 5
  for i = 1, limits and #limits or 0 do
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

-- The request being decided: one record, filled in from KEYS and ARGV (through the layout) before each request
-- is decided, and read by its steps below. Its keys (state, banned, override; strikes, offences, index when its
-- denial strikes; over and quota, or false), its policy (a record of policyOf), member and cost.
-- Made with every field, so filling it in never grows it.
local request = { state = false, banned = false, override = false, strikes = false, offences = false, index = false,
  over = false, quota = false, policy = false, cost = 1, member = false, bans = false }

-- Fills `request` with request i's keys, from KEYS[k + 1], under `policy`, for `cost` units: the last key of its.
local function read (k, i, policy, cost)
  local req = request
  req.state, req.banned, req.override = KEYS[k + KEY_STATE], KEYS[k + KEY_BANNED], KEYS[k + KEY_OVERRIDE]
  req.policy, req.cost, req.member = policy, cost, base .. text(i)
  -- Under a ban policy a denial counts a strike and may start a ban (a peek counts nothing).
  req.bans = not peek and policy.bans
  local n = KEY_SIZE
  if req.bans then
    req.strikes, req.offences, req.index = KEYS[k + BAN_KEY_STRIKES], KEYS[k + BAN_KEY_OFFENCES], KEYS[k + BAN_KEY_INDEX]
    n = n + BAN_KEY_SIZE
  end
  req.over, req.quota = false, false
  if policy.over then
    n = n + 1
    req.over = KEYS[k + n]
  end
  if policy.quoted then
    n = n + 1
    req.quota = KEYS[k + n]
  end
  return k + n
end

-- The ban step: a client found banned is answered first and at the least cost: its ban's ms left. Else 0, and
-- the override's text, or false. Most identities have neither: one EXISTS says so (an MGET of both would cost
-- Redis more, its reply being a table).
local function banOf (req)
  if redis.call('EXISTS', req.banned, req.override) == 0 then
    return 0, false
  end
  local banned = redis.call('PTTL', req.banned)
  if banned > 0 then
    return banned, false
  end
  return 0, redis.call('GET', req.override)
end

-- The override step: an override replaces what it names, the limits its algorithm counts (all of them), a
-- calendar quota's max. The request's limits, those its algorithm counts, its quotas.
local function limitsOf (req, override)
  local limits, counted, quotas = policyLimits(req.policy)
  if override then
    limits, counted, quotas = overridden(override, counted, quotas)
    if not limits then
      error('ERR rate-guard: the override at ' .. req.override .. ' names no limit', 0)
    end
  end
  for i = #entries + 1, #limits do
    entries[i] = {}
  end
  return limits, counted, quotas
end

-- Whether the request costs more than a limit holds: it never passes, refused as it is, nothing counted, no
-- strike (its limits reported as a request of one unit finds them).
local function beyond (req, limits, counted, quotas)
  for i = 1, #limits do
    if req.cost > limits[i].burst then
      if #counted > 0 then
        count(req.state, counted, clock(), req.member, true, entries, 1)
      end
      if #quotas > 0 then
        quotaSteps().fit(req.quota, quotas, clock(), 1, entries, #counted)
      end
      return true
    end
  end
  return false
end

-- Under an overLimit: W, the longest window of the request's limits, and the over-limit key's PTTL (0: none).
local function overKey (req, limits)
  if not req.over then
    return 0, 0
  end
  clock()
  local longest = 0
  for i = 1, #limits do
    longest = math.max(longest, limits[i].window)
  end
  return longest, redis.call('PTTL', req.over)
end

-- The over-limit key alive: a decision is held off, denied without counting on the algorithm; a peek is
-- limited for what is left of one window W since the last denial, or nil when nothing is (the algorithm's peek).
-- Status, retry and the window its strikes count in.
local function heldOff (req, limits, longest, waits)
  if not peek then
    local retry = wait(longest, redis.call('INCR', req.over), req.policy.doubles)
    redis.call('PEXPIRE', req.over, retry)
    exceeded(limits, retry, 0)
    return 1, retry, longest
  end
  local left = longest - (wait(longest, tonumber(redis.call('GET', req.over)), req.policy.doubles) - waits)
  if left > 0 then
    exceeded(limits, left, 1)
    return 1, left, 0
  end
end

-- A request denied that every limit allows within maxWait: it waits, counted at the end of its wait (not under
-- an over, a peek, or a cost no wait lets through), unless its queue is full: the ms it waits, else nil. Never
-- for a full quota (`fits` false): its period is what it waits for; a quota with room counts it now, in this period.
local function waited (req, counted, quotas, retry, fits)
  local s = req.policy.s
  local most = tonumber(ARGV[s + POLICY_WAIT])
  if most > 0 and not peek and retry > 0 and retry <= most and fits then
    local ms = reserve(req.state, counted, now, req.member, req.cost, retry, tonumber(ARGV[s + POLICY_QUEUE]), entries)
    if ms and #quotas > 0 then
      quotaSteps().count(req.quota, quotas, now, entries, #counted, req.cost)
    end
    return ms
  end
end

-- The count-or-wait step: the quotas and the algorithm decide (held off first by a live over-limit key). The
-- status (0 allowed and counted, 1 denied, WAITS), the retry, and the window a denial's strike counts in.
local function countOrWait (req, limits, counted, quotas)
  local longest, waits = overKey(req, limits)
  if waits > 0 then
    local status, retry, window = heldOff(req, limits, longest, waits)
    if status then
      return status, retry, window
    end
  end
  -- The quotas first: when one is full, the algorithm is only asked (peeked), so nothing is counted.
  local cost = req.cost
  local fits = #quotas == 0 or quotaSteps().fit(req.quota, quotas, clock(), cost, entries, #counted)
  if (#counted == 0 or count(req.state, counted, clock(), req.member, peek or not fits, entries, cost)) and fits then
    if not peek and #quotas > 0 then
      quotaSteps().count(req.quota, quotas, now, entries, #counted, cost)
    end
    return 0, 0, 0
  end
  -- Denied: the wait is until every limit allows; strikes count within the window of the limit that waits longest.
  local retry, window = 0, 0
  for i = 1, #limits do
    if entries[i].retry > retry then
      retry, window = entries[i].retry, limits[i].window
    end
  end
  local ms = waited(req, counted, quotas, retry, fits)
  if ms then
    return WAITS, ms, 0
  end
  -- Over the limit: held off for the longest window, from now.
  if req.over and not peek then
    retry = wait(longest, 1, false)
    redis.call('SET', req.over, '1', 'PX', retry)
    exceeded(limits, retry, 0)
  end
  return 1, retry, window
end

-- The strike step: a denial under a ban policy counts a strike within `window`; the ban it starts, its length
-- and which in a row, or nil.
local function struck (req, window)
  local s = req.policy.s
  if not strike(req.strikes, req.member, window, tonumber(ARGV[s + POLICY_THRESHOLD])) then
    return nil
  end
  local duration, offence = ban(ARGV[s + POLICY_LADDER], tonumber(ARGV[s + POLICY_FORGET]), req.banned, req.offences, req.index, clock())
  redis.call('DEL', req.strikes)
  return duration, offence
end

-- `request` decided: ban, override, count or wait, strike. Its answer (reply's arguments): xpcall passes no
-- arguments, so it reads the record the loop filled in.
local function decide ()
  local req = request
  local banned, override = banOf(req)
  if banned > 0 then
    return 2, banned, 0, nil
  end
  local limits, counted, quotas = limitsOf(req, override)
  if req.cost > 1 and beyond(req, limits, counted, quotas) then
    return 1, 0, 0, limits
  end
  local status, retry, window = countOrWait(req, limits, counted, quotas)
  if status == 1 and req.bans then
    local duration, offence = struck(req, window)
    if duration then
      return 2, duration, offence, limits
    end
  end
  return status, retry, 0, limits
end

-- Request i's settlement, its keys from KEYS[k + 1] and its SETTLE from ARGV[r]: the last key of its.
local function settleOne (k, r, policy, cost)
  local override = redis.call('GET', KEYS[k + KEY_OVERRIDE])
  local _, counted, quotas = policyLimits(policy)
  -- An override that names no limit settles nothing (as a decision, it is an error).
  if override then
    local all, named, changed = overridden(override, counted, quotas)
    counted, quotas = all and named or NONE, all and changed or NONE
  end
  local at, final = tonumber(ARGV[r + SETTLE_AT]), tonumber(ARGV[r + SETTLE_FINAL])
  if #counted > 0 then
    settle(KEYS[k + KEY_STATE], counted, ARGV[r + SETTLE_MEMBER], at, clock(), cost, final)
  end
  if policy.quoted then
    if #quotas > 0 then
      quotaSteps().settle(KEYS[k + KEY_SIZE + 1], quotas, math.max(largest(counted), largest(quotas)), at, clock(), cost, final)
    end
    return k + KEY_SIZE + 1
  end
  return k + KEY_SIZE
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
  local lined = string.find(message, 'user_script:', 1, true) or string.find(message, 'user_function:', 1, true)
  if lined or string.sub(message, 1, #OURS) == OURS then
    return message
  end
  local at = where(4)
  if at == '' then
    at = where(5)
  end
  return message .. ' at ' .. string.sub(at, 1, -3)
end

local r, k = first, 0
local settling = mode == 'settle'
for i = 1, tonumber(ARGV[HEAD_REQUESTS]) do
  local named = ARGV[r + (settling and SETTLE_POLICY or REQUEST_POLICY)]
  local policy, cost = policyOf[named], 1
  if not policy then
    local p, units = string.match(named, '^(%d+)%*(%d+)$')
    policy, cost = policyOf[p], tonumber(units)
  end
  if settling then
    k, r = settleOne(k, r, policy, cost), r + SETTLE_SIZE
  else
    k, r = read(k, i, policy, cost), r + REQUEST_SIZE
    -- One request's error is its own: its answer is written once it is decided.
    local ok, status, retry, offence, limits = xpcall(decide, located)
    if ok then
      reply(status, retry, offence, limits)
    else
      out[o + 1], out[o + 2] = 3, status
      o = o + 2
    end
  end
end
return out
