-- Calendar quotas: limits counted since their calendar period began (a day, a week or a month in a time zone,
-- `per` and `timeZone`), for every algorithm. Redis has no time zones, so the app works out the periods
-- (lib/calendar.ts) around its own clock and sends, as such a limit's window, the period before's start, the
-- current period's start and end, and the next one's end: 'c<previous>:<start>:<end>:<next>' (ms). The decision
-- takes the one of those three periods that holds Redis's clock, so every instance names the same period
-- whichever side of a boundary its clock is, as long as it is off by less than the periods around it (a day's is
-- 23 hours at the shortest, across a daylight saving change). And a count is never reset by a period that began
-- before the one the hash counts: a request that finds a later period counted (an instance off by more than that,
-- or a clock set back) counts in it. Loaded after lua/prelude.lua, in front of lua/decide.lua, which reads the
-- keys and arguments, builds the reply, and asks the budget's algorithm about its other limits.
--
-- Provides, for lua/decide.lua, as the fields of quotaSteps(), made on a call's first use (a call of budgets
-- without quotas makes none of them: each function made costs Redis about a thousand instructions):
--   period(window, now) -> start, finish
--            the period a calendar quota's window text names at `now`; nil for any other window (a number)
--   fit(quota, quotas, now, cost, entries, from) -> fits
--            reads the quotas (quotas[j] = { max, burst, window, start, finish }) for a request of `cost` units
--            at `now`, fills entries[from + j] (count, reset, retry as the algorithms do; since, the start of the
--            period it counts in) and says whether each has room; writes nothing
--   count(quota, quotas, now, entries, from, cost)
--            counts `cost` on each quota, after fit said they fit and the algorithm allowed the request
--   overridden(override, quotas) -> quotas
--            the quotas under an override's text (lua/decide.lua's override key): '<max> q<j>' gives quota j
--            that max (and capacity); `quotas` itself when it names none
--   settle(quota, quotas, most, at, now, cost, final)
--            the request counted at `at` for `cost` units counts `final` instead (0: given back), in the period
--            it was counted in; once that period is over, nothing changes. `most`: the largest capacity of the
--            budget's limits (lua/prelude.lua's settling bound)
-- Uses lua/prelude.lua's text, field and moved.
--
-- state  quota  HASH, per quota j (in the order of the policy's quotas): s<j> = start of the period counted
--               (ms), c<j> = units counted in it. s<j> only moves forward. It lives until the last of those
--               periods ends.

-- The steps that read what the app sends: a quota's period, an override's maxes. Made into `steps`.
local function textSteps (steps)
  function steps.period (window, now)
    if type(window) ~= 'string' then
      return nil
    end
    local previous, start, finish, following = string.match(window, '^c(%d+):(%d+):(%d+):(%d+)$')
    start, finish = tonumber(start), tonumber(finish)
    -- Redis still before the app's period (the app's clock ahead), or past it already (the app's behind).
    if now < start then
      return tonumber(previous), start
    elseif now >= finish then
      return finish, tonumber(following)
    end
    return start, finish
  end

  function steps.overridden (override, quotas)
    local changed
    for max, j in string.gmatch(override, '(%d+) q(%d+)') do
      local limit = quotas[tonumber(j)]
      if limit then
        changed = changed or { unpack(quotas) }
        max = tonumber(max)
        changed[tonumber(j)] = { max = max, burst = max, window = limit.window, start = limit.start, finish = limit.finish }
      end
    end
    return changed or quotas
  end
end

-- The steps that read and write the quota hash: fit, count, settle. Made into `steps`.
local function hashSteps (steps)
  function steps.fit (quota, quotas, now, cost, entries, from)
    local fits = true
    for j = 1, #quotas do
      local limit, entry = quotas[j], entries[from + j]
      local stored = redis.call('HMGET', quota, field('s', j), field('c', j))
      local s = tonumber(stored[1])
      -- This period's count, or a later one's (never reset by an earlier period); else none yet.
      local n = s and s >= limit.start and tonumber(stored[2]) or 0
      entry.count, entry.reset, entry.retry = n, n > 0 and limit.finish - now or 0, 0
      entry.since = s and s > limit.start and s or limit.start
      if n + cost > limit.max then
        entry.retry = limit.finish - now
        fits = false
      end
    end
    return fits
  end

  function steps.count (quota, quotas, now, entries, from, cost)
    local ttl = 0
    for j = 1, #quotas do
      local limit, entry = quotas[j], entries[from + j]
      entry.count, entry.reset = entry.count + cost, limit.finish - now
      redis.call('HSET', quota, field('s', j), text(entry.since), field('c', j), text(entry.count))
      ttl = math.max(ttl, entry.reset)
    end
    -- Never shortened: a quota of a longer period (an override's, a configuration's before) keeps its count.
    if redis.call('PTTL', quota) < ttl then
      redis.call('PEXPIRE', quota, text(ttl + math.min(ttl, 1000)))
    end
  end

  function steps.settle (quota, quotas, most, at, now, cost, final)
    for j = 1, #quotas do
      local limit = quotas[j]
      local stored = redis.call('HMGET', quota, field('s', j), field('c', j))
      local n = tonumber(stored[2])
      if tonumber(stored[1]) == limit.start and at >= limit.start and n and n > 0 then
        local ceiling = math.min(limit.max + most, math.max(limit.max, 2 ^ 52))
        redis.call('HINCRBY', quota, field('c', j), text(moved(n, final - cost, ceiling)))
      end
    end
  end
end

local steps
local function quotaSteps ()
  if not steps then
    steps = {}
    textSteps(steps)
    hashSteps(steps)
  end
  return steps
end
