-- Numbers as the scripts hand them to Redis, loaded in front of the algorithm's file and lua/decide.lua.
-- Redis 7.0 formats a number given to redis.call with '%.17g' (glibc's costly floating-point path), and Lua
-- turns a number joined to a string ('c' .. i) into text with '%.14g': together they were about a tenth of
-- Redis's instructions per allowed request (valgrind --tool=callgrind, see lua/README.md). The hot paths
-- give strings instead: an integer formatted once per call with '%d' (string.format itself is no cheap call:
-- the small ones are literals), a field name made once per call.

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
