-- The operator's ban (fastify.rateGuard.ban), after lua/prelude.lua and lua/ban-index.lua: the ban and its entry
-- in the ban index in one call, on Redis's clock.
--
-- KEYS[1]  banned  STRING '1' while the identity is banned (per identity)
-- KEYS[2]  index   ZSET the ban index of the identity's slot (see lua/ban-index.lua)
-- ARGV[1]  ms      how long the ban lasts (an integer, 1 to 2^53 - 1024)
-- Reply: 1.

local banned, index, ms = KEYS[1], KEYS[2], ARGV[1]
local now = milliseconds(redis.call('TIME'))
redis.call('SET', banned, '1', 'PX', ms)
indexBan(index, banned, now, tonumber(ms))
return 1
