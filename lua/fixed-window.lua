-- Fixed window: a counter per window of `window` ms aligned to the epoch (every client's window ends at the
-- same moment), so a client can pass up to 2 x max within a short span across a window boundary: max at the
-- end of one window, max at the start of the next. Loaded in front of lua/decide.lua, which reads the keys
-- and arguments and builds the reply (see its header); this file counts.
--
-- KEYS[1]  counters  HASH, per limit i: s<i> = start of the window counted (ms), c<i> = requests counted in it.
--                    It lives until the last of those windows ends.
-- ARGV     per limit: max (requests), window (ms); burst is not used.
-- Reply    per limit: count = requests counted in the current window; reset = ms until it ends (0: none counted).
--
-- A replayed denial is one strike (strikes are a set of members); a replayed allowed request counts again:
-- a counter keeps no members.

local function count (counters, limits, now, member, peek)
  local stored = redis.call('HGETALL', counters)
  local fields = {}
  for i = 1, #stored, 2 do
    fields[stored[i]] = tonumber(stored[i + 1])
  end

  local entries, starts, allowed = {}, {}, true
  for i, limit in ipairs(limits) do
    local start = now - now % limit.window
    local n = 0
    if fields['s' .. i] == start then
      n = fields['c' .. i]
    end
    local entry = { count = n, reset = 0, retry = 0 }
    if n > 0 then
      entry.reset = start + limit.window - now
    end
    if n >= limit.max then
      entry.retry = start + limit.window - now
      allowed = false
    end
    entries[i], starts[i] = entry, start
  end
  if not allowed or peek then
    return allowed, entries
  end

  local ttl = 0
  for i, entry in ipairs(entries) do
    entry.count = entry.count + 1
    entry.reset = starts[i] + limits[i].window - now
    ttl = math.max(ttl, entry.reset)
    redis.call('HSET', counters, 's' .. i, starts[i], 'c' .. i, entry.count)
  end
  redis.call('PEXPIRE', counters, ttl)
  return true, entries
end

local function undo (counters, limits, member, at, now)
  for i, limit in ipairs(limits) do
    local stored = redis.call('HMGET', counters, 's' .. i, 'c' .. i)
    if tonumber(stored[1]) == at - at % limit.window and tonumber(stored[2]) > 0 then
      redis.call('HINCRBY', counters, 'c' .. i, -1)
    end
  end
end
