#!lua flags=allow-cross-slot-keys
-- A call across slots: on a Redis Cluster (7.0 and later), one call decides a batch of requests whose
-- identities' slots one master serves. lib/stores/scripts.ts joins this file in front of a script (the lean
-- one, or an algorithm's) to make its cross-slot variant; the shebang above must be the script's first line,
-- and Redis keeps its line in the numbering.
--
-- Redis refuses a call whose declared keys span slots (CROSSSLOT), so the keys come in ARGV, and the script
-- after this file reads them as KEYS, as it would in a call of its own (the locals KEYS and ARGV below hide
-- Redis's):
-- KEYS[1]  the first request's first key: where ioredis sends the call (its slot's master), and the one key
--          Redis checks before the script runs
-- ARGV[1]  n         how many keys follow: what the script after this file takes as its KEYS
-- then     m         how many runs of keys follow, then each run's length: KEYS in order, cut where the slot
--                    changes (a request's keys are all of one slot)
-- then     the script's own ARGV.
--
-- Before anything is written, one EXISTS per run of keys (one slot, one or more requests'): Redis refuses a command on a key
-- this node does not serve (a stale slot table; a slot migrating away, unless all of the request's keys are
-- still here), and the call fails as a whole, having written nothing ('Script attempted to access a non local
-- key'); the store then decides each of its requests in a call of its own, which Redis redirects.

local KEYS, ARGV = (function (given)
  local keys, argv = {}, {}
  local n = tonumber(given[1])
  for i = 1, n do
    keys[i] = given[i + 1]
  end
  local m = tonumber(given[n + 2])
  local k = 0
  for r = 1, m do
    local c = tonumber(given[n + 2 + r])
    -- Lua 5.4 (Dragonfly) has table.unpack and no global unpack; Redis's Lua 5.1 the other way round.
    redis.call('EXISTS', (table.unpack or unpack)(keys, k + 1, k + c))
    k = k + c
  end
  for i = n + m + 3, #given do
    argv[i - n - m - 2] = given[i]
  end
  return keys, argv
end)(ARGV)
