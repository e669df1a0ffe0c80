-- The ban index, loaded in front of lua/decide.lua and lua/ban.lua: a sorted set of the banned keys' names,
-- each scored by its ban's end (ms, Redis's clock), that fastify.rateGuard.bans() reads instead of scanning the
-- key space. One per nameSpace (`<nameSpace>bans`); on a Redis Cluster one per hash slot
-- (`<nameSpace>{<tag>}:bans`, the tag hashing to the slot of the identity's keys), so it is written in the
-- same call as the ban. Its name comes in KEYS, as every key's.

-- `banned` is banned for `duration` ms from `now`: its entry, with the ended ones trimmed first (cheap: from the
-- lowest score), and the index's TTL kept at least as long as its longest ban.
local function indexBan (index, banned, now, duration)
  redis.call('ZREMRANGEBYSCORE', index, '-inf', text(now))
  redis.call('ZADD', index, text(math.min(now + duration, 2 ^ 53)), banned)
  if redis.call('PTTL', index) < duration then
    redis.call('PEXPIRE', index, text(duration))
  end
end
