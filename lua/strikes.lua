-- Strikes and bans, after lua/prelude.lua and lua/ban-index.lua, in front of lua/decide.lua and
-- lua/lean-sliding-log.lua, which call them for a denial under a ban policy. Provides:
--   strike(strikes, member, window, threshold) -> reached
--            counts the denial `member` in the identity's strikes (a SET of members, so a replayed denial is
--            one strike), which live `window` ms from the first; true when they number `threshold` or more
--   ban(ladder, forget, banned, offences, index, now) -> duration, offence
--            bans the identity from `now` (ms, Redis's time): for the ladder's nth length ('d1 d2 ...', ms) on
--            its nth ban before the last is forgotten (`forget` ms after it ends), the last length repeating;
--            enters the ban in the ban index. Returns its length and n (1 on a ladder of one).
-- The caller deletes the strikes once a ban starts.

local function strike (strikes, member, window, threshold)
  -- Redis keeps a key through its expiry millisecond (PTTL 0): that is the next window already, so such
  -- strikes start over too.
  if redis.call('PTTL', strikes) <= 0 then
    redis.call('DEL', strikes)
    redis.call('SADD', strikes, member)
    redis.call('PEXPIRE', strikes, window)
  else
    redis.call('SADD', strikes, member)
  end
  return redis.call('SCARD', strikes) >= threshold
end

local function ban (ladder, forget, banned, offences, index, now)
  local lengths = {}
  for ms in string.gmatch(ladder, '%d+') do
    lengths[#lengths + 1] = tonumber(ms)
  end
  local offence = 1
  if #lengths > 1 then
    offence = redis.call('INCR', offences)
  end
  local duration = lengths[math.min(offence, #lengths)]
  if #lengths > 1 then
    redis.call('PEXPIRE', offences, duration + forget)
  end
  redis.call('SET', banned, '1', 'PX', duration)
  indexBan(index, banned, now, duration)
  return duration, offence
end
