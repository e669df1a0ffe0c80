-- Leases: at most `max` units of one client's requests in flight on a budget, across every instance. The last
-- part of the lease script, after lua/prelude.lua (text, milliseconds), lua/ban-index.lua and lua/strikes.lua
-- (strike, ban). A slot is a lease that ends unless it is renewed: a process that dies holding slots frees
-- them `lease` ms after it last renewed them, on Redis's clock (lib/leases.ts renews those it holds).
--
-- KEYS and ARGV: lib/stores/layout.ts's LEASE_LAYOUT names them in the order they are sent, and the line
-- `-- layout: LEASE` below becomes the locals that say where each sits (KEYS[KEY_BANNED], ARGV[ACQUIRE_MAX]).
-- KEY      leases    ZSET a client's leases on a budget: member = one unit of a request ('<id>' for its first,
--                    '<id>#2' ... for the others of a request of several units), score = when it ends (ms,
--                    Redis's time). It lives at least as long as its last lease.
--          banned    STRING present while the identity is banned (lua/decide.lua's)
-- BAN_KEY  under a ban policy, to acquire: strikes, offences, index (lua/decide.lua's)
-- HEAD     mode      'acquire', 'release', 'renew' or 'count'; then the mode's own:
-- ACQUIRE  id, units (its cost), max, lease (ms); under a ban policy, then its BAN: threshold, ladder, forget
--          (as lua/decide.lua's) and window, the strikes' window (ms)
-- RELEASE  id, units
-- RENEW    lease (ms), requests: n, then n requests' HELD, id and units each: their leases end `lease` ms from
--          now, written back if they are gone (their requests are still running)
-- count    nothing more
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

-- layout: LEASE (lib/stores/layout.ts's withLayout makes this line the locals KEY_LEASES, ..., HELD_SIZE)

local mode, leases = ARGV[HEAD_MODE], KEYS[KEY_LEASES]

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
  return redis.call('ZREM', leases, unpack(unitsOf(ARGV[RELEASE_ID], tonumber(ARGV[RELEASE_UNITS]))))
end

local now = milliseconds(redis.call('TIME'))

if mode == 'count' then
  return redis.call('ZCOUNT', leases, '(' .. text(now), '+inf')
end

if mode == 'renew' then
  local lease = tonumber(ARGV[RENEW_LEASE])
  local ends, restored = text(now + lease), 0
  -- Leases that ended are over (their holders stopped renewing). One of these requests' leases found gone
  -- (Redis restarted or failed over without it, or it ended while its holder could not reach Redis) is written
  -- back: its request is still running, so it counts against max again, past max if it must (then every
  -- acquire is refused until the count is under max).
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', text(now))
  local first = RENEW_SIZE + HEAD_SIZE + 1
  for i = first, first + HELD_SIZE * (tonumber(ARGV[RENEW_REQUESTS]) - 1), HELD_SIZE do
    restored = restored + redis.call('ZADD', leases, unpack(ending(ARGV[i + HELD_ID], tonumber(ARGV[i + HELD_UNITS]), ends)))
  end
  outlive(lease)
  return restored
end

-- acquire
local left = redis.call('PTTL', KEYS[KEY_BANNED])
if left > 0 then
  return { 5, 0, left, 0, now }
end
local id, units, max, lease = ARGV[ACQUIRE_ID], tonumber(ARGV[ACQUIRE_UNITS]), tonumber(ARGV[ACQUIRE_MAX]), tonumber(ARGV[ACQUIRE_LEASE])
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
local strikes = KEYS[BAN_KEY_STRIKES]
if strikes and strike(strikes, id, tonumber(ARGV[BAN_WINDOW]), tonumber(ARGV[BAN_THRESHOLD])) then
  local duration, offence = ban(ARGV[BAN_LADDER], tonumber(ARGV[BAN_FORGET]), KEYS[KEY_BANNED], KEYS[BAN_KEY_OFFENCES],
    KEYS[BAN_KEY_INDEX], now)
  redis.call('DEL', strikes)
  return { 2, inUse, duration, offence, now }
end
return { 1, inUse, 0, 0, now }
