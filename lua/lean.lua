-- The lean path's frame: an algorithm's common shape decided with the fewest commands and the least Lua. The
-- last part of a lean script, after lua/prelude.lua (text, milliseconds), the algorithm's lean file
-- (lua/lean-<algorithm>.lua: its `lean`), lua/ban-index.lua and lua/strikes.lua (strike, ban).
-- lib/stores/scripts.ts sends a request here when it is decided (not peeked or settled) on one limit, at a
-- cost of 1, with no over-limit wait, by an algorithm with a lean file; every other request goes to
-- lua/decide.lua. Both give the same answer to such a request and write the same keys (the state as the
-- algorithm's own file, lua/<algorithm>.lua, keeps it): the conformance and differential suites run each
-- request shape through both.
--
-- KEYS and ARGV: lib/stores/layout.ts's LEAN_LAYOUT names them in the order leanArgs sends them, and the
-- line `-- layout: LEAN` below becomes the locals that say where each sits (KEYS[k + KEY_BANNED]: no table made).
-- KEY      each request's in turn: state, banned, override (as lua/decide.lua's), then its BAN_KEY, strikes,
--          offences and index, when its policy bans.
-- HEAD     base      request i's member is base .. i
--          requests  how many requests follow
--          policies  how many policies follow, each a POLICY: max, window (ms), burst (its capacity), threshold
--                    (0: bans off), ladder, forget (as lua/decide.lua's)
-- then, when there are several policies, each request's (1 to p); with one policy, every request has it.
--
-- The algorithm's lean file provides:
--   lean(state, max, window, burst, now, base, i) -> status, count, reset, retry
--            decides request i (its member base .. text(i), made only by a file that reads or writes it: a Lua
--            string made costs Redis ~1,000 instructions) of cost 1 at `now` (ms, Redis's time) on the one limit
--            (max, window, burst: numbers), and counts it when allowed. status: 0 allowed (counted, or a replay of one
--            counted), 1 denied (nothing written), 4 hand it to lua/decide.lua (nothing written: a state this
--            path does not read, such as a value of another type). count, reset, retry: as lua/decide.lua
--            reports them for one limit.
--
-- Reply: at, Redis's time of the call's decisions (ms; 0 when no request read the clock), then each request's
-- answer in turn, the fewest integers that say it (each one Redis turns into a reply costs it about 800
-- instructions, as many as a tonumber; lib/stores/replies.ts's toLeanDecisions reads them):
--   7 + count + (burst + 1) x reset    allowed (counted, or a replay of a request counted), packed in one
--                                      integer p: whenever count <= burst, reset <= window and (burst + 1) x
--                                      (window + 1) + 6 < 2^53 (so p <= 2^53 - 1: exact as a Lua number, which
--                                      Redis truncates to an integer, and as a JavaScript safe integer), burst
--                                      and window the limit's (the override's after 6). count = (p - 7) mod
--                                      (burst + 1), reset = (p - 7) div (burst + 1); p >= 7, no other code
--   0, count, reset                    allowed, when the packed form would not be exact
--   1, retry, count, reset             limited
--   2, retry, offence, count, reset    banned by this denial: the ban's length, which ban in a row
--   5, retry                           found banned: nothing counted (the budget's own limit, as lua/decide.lua's n = 0)
--   4                                  "decide it with lua/decide.lua": an override of several limits is set for
--                                      it, its state is one `lean` hands back, or a value of another type is at
--                                      its override, strikes or offences. It wrote nothing here but, in the last
--                                      case, its strike.
--   6, burst, window, then one of 0 to 2: decided under an override of one limit, these its capacity and window
-- count, reset and retry are lua/decide.lua's for the one limit (the policy's, sent by the caller, unless 6 says).
--
-- What makes it lean: the banned and override keys of the whole batch are looked up with one EXISTS (almost
-- every identity has neither); the clock is read once, and each policy's numbers once; and the call makes almost
-- nothing that Redis's Lua allocates: no table per policy or per request (the answers go straight into the
-- reply), and no function of its own but `lean` and the one pcall needs, as each local a function uses costs
-- an upvalue. Measured in Redis's instructions (bench/instructions.js), a number read from text (tonumber,
-- strtod) costs about 1,500, an upvalue about 700, a table 1,000 and more: as much as a command's plumbing.

-- layout: LEAN (lib/stores/layout.ts's withLayout makes this line the locals KEY_STATE, ..., POLICY_SIZE)

-- A denial's strike, and the ban it may start (lua/strikes.lua): the ban's length and which in a row, or 0 when
-- it started none. Its keys and policy's arguments are given (no upvalue of the layout's: each costs a call).
local function strikeOrBan (strikes, banned, offences, index, threshold, ladder, forget, member, window, at)
  if not strike(strikes, member, window, tonumber(threshold)) then
    return 0, 0
  end
  local duration, offence = ban(ladder, tonumber(forget), banned, offences, index, at)
  redis.call('DEL', strikes)
  return duration, offence
end

-- Each policy's fields start at ARGV[s], s = HEAD_SIZE + 1 + POLICY_SIZE x (its number - 1). Each request's
-- policy follows them (from ARGV[first]) when there are several. A request sends KEY_SIZE keys, BANNING under
-- a ban policy.
local FIRST_POLICY, BANNING = HEAD_SIZE + 1, KEY_SIZE + BAN_KEY_SIZE
local one = ARGV[HEAD_POLICIES] == '1'
local first = one and 0 or FIRST_POLICY + POLICY_SIZE * tonumber(ARGV[HEAD_POLICIES])
local n = one and #KEYS / (ARGV[FIRST_POLICY + POLICY_THRESHOLD] ~= '0' and BANNING or KEY_SIZE) or tonumber(ARGV[HEAD_REQUESTS])

-- Whether any request's identity is banned or has an override: one EXISTS for the batch.
local special, policies
if n == 1 then
  special = redis.call('EXISTS', KEYS[KEY_BANNED], KEYS[KEY_OVERRIDE]) > 0
else
  local checks, k = {}, 0
  if one then
    -- Every request's keys as many: no policy to look up.
    local step = ARGV[FIRST_POLICY + POLICY_THRESHOLD] ~= '0' and BANNING or KEY_SIZE
    for i = 2, 2 * n, 2 do
      checks[i - 1], checks[i] = KEYS[k + KEY_BANNED], KEYS[k + KEY_OVERRIDE]
      k = k + step
    end
  else
    policies = {}
    for i = 1, n do
      local s = FIRST_POLICY + POLICY_SIZE * (tonumber(ARGV[first + i - 1]) - 1)
      policies[i] = s
      checks[2 * i - 1], checks[2 * i] = KEYS[k + KEY_BANNED], KEYS[k + KEY_OVERRIDE]
      k = k + (ARGV[s + POLICY_THRESHOLD] ~= '0' and BANNING or KEY_SIZE)
    end
  end
  -- A call across slots (lua/cross-slot.lua) is refused one EXISTS over them all: each request looks for itself.
  special = redis.pcall('EXISTS', unpack(checks))
  special = type(special) ~= 'number' or special > 0
end

-- Read once, and only when a request needs it (not for a client found banned).
local now
local base = ARGV[HEAD_BASE]
local out, o, k = { 0 }, 1, 0
-- The policy in use, read when a request's differs from the last one's (or an override replaced its limit).
-- span: burst + 1 when an allowed answer of this limit packs into one exact integer (the header), else 0.
local s, max, window, burst, bans, overridden, span
local exact = 2 ^ 53 - 6
for i = 1, n do
  local q = policies and policies[i] or FIRST_POLICY
  if q ~= s or overridden then
    s, max, window, burst = q, tonumber(ARGV[q + POLICY_MAX]), tonumber(ARGV[q + POLICY_WINDOW]), tonumber(ARGV[q + POLICY_BURST])
    bans, overridden = ARGV[q + POLICY_THRESHOLD] ~= '0', false
    span = (burst + 1) * (window + 1) < exact and burst + 1 or 0
  end
  local status, retry, offence, count, reset = 0, 0, 0, 0, 0
  repeat
    if special and (n == 1 or redis.call('EXISTS', KEYS[k + KEY_BANNED], KEYS[k + KEY_OVERRIDE]) > 0) then
      retry = redis.call('PTTL', KEYS[k + KEY_BANNED])
      if retry > 0 then
        status = 2
        break
      end
      -- An override of one limit replaces the policy's for this request; one of several limits, or one that
      -- is not text, is lua/decide.lua's.
      local override = redis.pcall('GET', KEYS[k + KEY_OVERRIDE])
      if override then
        local m, w, b = string.match(type(override) == 'string' and override or '', '^(%d+) (%d+) (%d+)$')
        if not m then
          status = 4
          break
        end
        max, window, burst, overridden = tonumber(m), tonumber(w), tonumber(b), true
        span = (burst + 1) * (window + 1) < exact and burst + 1 or 0
      end
    end
    now = now or milliseconds(redis.call('TIME'))
    status, count, reset, retry = lean(KEYS[k + KEY_STATE], max, window, burst, now, base, i)
    if status == 1 and bans then
      local ok, duration, started = pcall(strikeOrBan, KEYS[k + BAN_KEY_STRIKES], KEYS[k + KEY_BANNED], KEYS[k + BAN_KEY_OFFENCES],
        KEYS[k + BAN_KEY_INDEX], ARGV[s + POLICY_THRESHOLD], ARGV[s + POLICY_LADDER], ARGV[s + POLICY_FORGET], base .. text(i), window, now)
      if not ok then
        status = 4
      elseif duration > 0 then
        status, retry, offence = 2, duration, started
        -- Its identity's later requests in this call find the ban.
        special = true
      end
    end
  until true
  if status == 4 then
    out[o + 1] = 4
    o = o + 1
  elseif status == 2 and offence == 0 then
    out[o + 1], out[o + 2] = 5, retry
    o = o + 2
  else
    if overridden then
      out[o + 1], out[o + 2], out[o + 3] = 6, burst, window
      o = o + 3
    end
    if status == 0 then
      -- One integer when it is exact (at most 2^53 - 1: a Lua number, which Redis truncates, and a JavaScript
      -- safe integer), else three.
      if count < span and reset <= window then
        out[o + 1] = 7 + count + span * reset
        o = o + 1
      else
        out[o + 1], out[o + 2], out[o + 3] = 0, count, reset
        o = o + 3
      end
    elseif status == 1 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 1, retry, count, reset
      o = o + 4
    else
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 2, retry, offence, count, reset
      o = o + 5
    end
  end
  k = k + (bans and BANNING or KEY_SIZE)
end
out[1] = now or 0
return out
