-- The prelude: the first part of every script (lib/stores/scripts.ts joins it in front of the algorithm's
-- file, lua/ban-index.lua and lua/decide.lua; in front of lua/ban-index.lua and lua/ban.lua for the operator's
-- ban). It reads no key and no argument, and provides:
--   text(n)                   n, an integer below 2^53, as Redis reads it ('%d'): a string
--   field(prefix, i)          the hash field of limit i ('c1', 'c2'...): prefix .. text(i), a string
--   largest(limits)           the largest capacity (burst) of a budget's limits: a number
--   moved(n, delta, ceiling)  what a settlement of `delta` moves a count `n` by: a number (see below)
--   milliseconds(time)        Redis's clock as ms, from its reply (seconds, microseconds): a number
--   unpack(t, i, j)           table.unpack where the Lua is 5.4, else 5.1's global
--
-- Numbers as the scripts hand them to Redis. Redis 7.0 formats a number given to redis.call with '%.17g'
-- (glibc's costly floating-point path), and Lua turns a number joined to a string ('c' .. i) into text with
-- '%.14g': together they were about a tenth of Redis's instructions per allowed request (valgrind
-- --tool=callgrind, see lua/README.md). The hot paths give strings instead: an integer formatted once per
-- call with '%d' (string.format itself is no cheap call: the small ones are literals), a field name made
-- once per call.

-- 0 to 32 (ranks, limits, policies, a full batch's members) need no formatting at all.
local texts = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16',
  '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31', '32' }
-- `n`, an integer below 2^53, as Redis reads it.
local function text (n)
  local t = texts[n]
  if not t then
    t = string.format('%d', n)
    texts[n] = t
  end
  return t
end

local names = {}
-- The field `prefix` .. i ('c1', 'c2'...) of limit i.
local function field (prefix, i)
  local byLimit = names[prefix]
  if not byLimit then
    byLimit = {}
    names[prefix] = byLimit
  end
  local name = byLimit[i]
  if not name then
    name = prefix .. text(i)
    byLimit[i] = name
  end
  return name
end

-- Settling: a request may be settled at any whole number of units, but a limit ends a settlement at most at
-- `ceiling` (full, and owing at most the largest capacity of its budget once more, below where the
-- arithmetic is exact), or where it already was. `largest` is that capacity (burst: max but for the token
-- bucket); `moved` is what a settlement moves a count `n` by, for `delta` asked: never below 0 either.
local function largest (limits)
  local most = 0
  for i = 1, #limits do
    most = math.max(most, limits[i].burst)
  end
  return most
end
local function moved (n, delta, ceiling)
  return math.max(-n, math.min(delta, math.max(ceiling - n, 0)))
end

-- One dialect for Lua 5.1 (Redis, Valkey) and 5.4 (Dragonfly): 5.4 has table.unpack and no global unpack.
local unpack = table.unpack or unpack

-- Redis's clock (its reply: seconds, microseconds) as milliseconds, as every decision reads it.
local function milliseconds (time)
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
