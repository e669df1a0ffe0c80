-- Leases: at most `max` units of one client's requests in flight on a budget, across every instance. The last
-- part of the lease script, after lua/prelude.lua (text, milliseconds), lua/ban-index.lua and lua/strikes.lua
-- (strike, ban). A slot is a lease that ends unless it is renewed: a process that dies holding slots frees
-- them `lease` ms after it last renewed them, on Redis's clock (lib/leases.ts renews those it holds).
--
-- KEYS[1]  leases    ZSET a client's leases on a budget: member = one unit of a request ('<id>' for its first,
--                    '<id>#2' ... for the others of a request of several units), score = when it ends (ms,
--                    Redis's time). It lives at least as long as its last lease.
-- KEYS[2]  banned    STRING present while the identity is banned (lua/decide.lua's)
--          under a ban policy, to acquire: KEYS[3] strikes, KEYS[4] offences, KEYS[5] index (lua/decide.lua's)
-- ARGV[1]  mode      'acquire', 'release', 'renew' or 'count'
--   acquire  ARGV[2] id, ARGV[3] units (its cost), ARGV[4] max, ARGV[5] lease (ms); under a ban policy
--            ARGV[6] threshold, ARGV[7] ladder, ARGV[8] forget, ARGV[9] the strikes' window (ms), as
--            lua/decide.lua's
--   release  ARGV[2] id, ARGV[3] units
--   renew    ARGV[2] lease (ms), ARGV[3] n, then n requests' id and units each: their leases end `lease` ms
--            from now, written back if they are gone (their requests are still running)
--
--   count    nothing more
-- Reply, to acquire: { status, inUse, retry, offence, at }
--   status   0 taken (its units are held), 1 refused: its units do not fit beside those in flight (it wrote
--            nothing but, under a ban policy, its strike), 2 refused, and banned by this refusal, 5 found
--            banned (nothing read but the ban), 6 refused: it costs more units than `max` (it never fits; no
--            strike)
--   inUse    units in flight after the decision (0 when found banned)
--   retry    the ban's remaining ms (2, 5), else 0
--   offence  which ban in a row this refusal started (2), else 0
--   at       Redis's time (ms)
-- To release: the units given back. To renew: the units it wrote back (found gone). To count: the units held
-- (leases that have not ended), writing nothing.

local mode, leases = ARGV[1], KEYS[1]

-- The members of request `id`'s `units` leases.
local function unitsOf (id, units)
  local members = { id }
  for u = 2, units do
    members[u] = id .. '#' .. text(u)
  end
  return members
end

-- ZADD's arguments: each of request `id`'s `units` leases, ending at `ends` (text).
local function ending (id, units, ends)
  local args = {}
  for u, member in ipairs(unitsOf(id, units)) do
    args[2 * u - 1], args[2 * u] = ends, member
  end
  return args
end

-- The lease key outlives its last lease: `lease` ms from now at least.
local function outlive (lease)
  if redis.call('PTTL', leases) < lease then
    redis.call('PEXPIRE', leases, text(lease))
  end
end

if mode == 'release' then
  return redis.call('ZREM', leases, unpack(unitsOf(ARGV[2], tonumber(ARGV[3]))))
end

local now = milliseconds(redis.call('TIME'))

if mode == 'count' then
  return redis.call('ZCOUNT', leases, '(' .. text(now), '+inf')
end

if mode == 'renew' then
  local lease = tonumber(ARGV[2])
  local ends, restored = text(now + lease), 0
  -- Leases that ended are over (their holders stopped renewing). One of these requests' leases found gone
  -- (Redis restarted or failed over without it, or it ended while its holder could not reach Redis) is written
  -- back: its request is still running, so it counts against max again, past max if it must (then every
  -- acquire is refused until the count is under max).
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', text(now))
  for i = 4, 2 + 2 * tonumber(ARGV[3]), 2 do
    restored = restored + redis.call('ZADD', leases, unpack(ending(ARGV[i], tonumber(ARGV[i + 1]), ends)))
  end
  outlive(lease)
  return restored
end

-- acquire
local left = redis.call('PTTL', KEYS[2])
if left > 0 then
  return { 5, 0, left, 0, now }
end
local id, units, max, lease = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- Leases that have ended are over: their holder died, or stopped renewing.
redis.call('ZREMRANGEBYSCORE', leases, '-inf', text(now))
local inUse = redis.call('ZCARD', leases)
if units > max then
  return { 6, inUse, 0, 0, now }
end
if inUse + units <= max then
  redis.call('ZADD', leases, unpack(ending(id, units, text(now + lease))))
  outlive(lease)
  return { 0, inUse + units, 0, 0, now }
end
if KEYS[3] and strike(KEYS[3], id, tonumber(ARGV[9]), tonumber(ARGV[6])) then
  local duration, offence = ban(ARGV[7], tonumber(ARGV[8]), KEYS[2], KEYS[4], KEYS[5], now)
  redis.call('DEL', KEYS[3])
  return { 2, inUse, duration, offence, now }
end
return { 1, inUse, 0, 0, now }
