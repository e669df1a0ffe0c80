// `npm run measure:memory`: the Redis memory one tracked client costs, per algorithm and limit, with the
// client's budget filled to its max (for the sliding log: max entries). Reads `MEMORY USAGE <key> SAMPLES 0`
// (the key's name and value, every element sampled) of the budget's state key, and of the per-identity keys
// a ban writes: strikes (after 2 denials), banned and offences (after the 3rd denial starts a ban).
//
// Needs `npm run build` (imports dist/) and a Redis: REDIS_URL, or 127.0.0.1:6379. Every key is written under
// a fresh name space and deleted at the end.
//
// The shipped scripts are used as they are, but for their clock: the one `local now = ...redis.call('TIME')`
// line takes "now" from the last argument instead (as the tests do), so a budget such as 1,000 per hour
// beside 10 per second can be filled without waiting 100 s. Scores, members, keys and TTLs are what the
// plugin writes: members as RedisStore makes them, keys from identityKeys under a name space as long as the
// default 'rate-guard:'.

import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { ALGORITHMS } from '../dist/algorithms/index.js'
import { identityKeys, scopeOf } from '../dist/stores/key-names.js'
import { SCRIPTS, scriptArgs } from '../dist/stores/scripts.js'
import { memberBases } from '../dist/stores/member-ids.js'

const url = process.env.REDIS_URL || 'redis://127.0.0.1:6379'
const redis = new Redis(url, { maxRetriesPerRequest: 1 })
const nameSpace = `rg-${randomBytes(3).toString('hex')}:`
const scope = scopeOf('route', 'GET /api/items')
// Members as RedisStore makes them.
const nextBase = memberBases()

const HOUR = 3_600_000
const L = (max, windowMs) => ({ max, windowMs, burst: max })
const SETTINGS = [
  { name: '10 / 1 s', limits: [L(10, 1000)] },
  { name: '100 / 1 min', limits: [L(100, 60_000)] },
  { name: '1,000 / 1 h', limits: [L(1000, HOUR)] },
  { name: '10,000 / 1 h', limits: [L(10_000, HOUR)] },
  { name: '100,000 / 1 h', limits: [L(100_000, HOUR)] },
  { name: '10 / 1 s + 1,000 / 1 h', limits: [L(10, 1000), L(1000, HOUR)] }
]
const BAN = { threshold: 3, ladder: [60_000, 600_000], forgetMs: HOUR }

const NOW_LINE = /^([ \t]*)(local )?now = [^\r\n]*redis\.call\(\s*(['"])TIME\3\s*\)[^\r\n]*$/m
for (const algorithm of ALGORITHMS) {
  const { lua } = SCRIPTS[algorithm]
  if (!NOW_LINE.test(lua)) throw new Error(`${algorithm}: no clock line to replace`)
  redis.defineCommand(`measure_${algorithm.replace(/-/g, '_')}`, { lua: lua.replace(NOW_LINE, '$1$2now = tonumber(ARGV[#ARGV])') })
}

/** One decision at `now`: the reply's status (0 allowed, 1 limited, 2 banned). */
async function decide (input, now) {
  const base = nextBase()
  const reply = await redis[`measure_${input.algorithm.replace(/-/g, '_')}`](...scriptArgs([input], 'decide', base), now)
  return Number(reply[0])
}

const bytes = async key => (await redis.exists(key)) === 1 ? Number(await redis.memory('USAGE', key, 'SAMPLES', 0)) : null

async function measure (algorithm, { name, limits }, index) {
  const keys = identityKeys(nameSpace, scope, `198.51.100.${index}`, algorithm)
  const input = { keys, limits, ban: BAN, peek: false, algorithm }
  const target = Math.max(...limits.map(l => l.max))
  // One limit: spread over 90% of its window, distinct arrival times as real traffic has (the token bucket all at
  // once: spread out, it would refill). Several: spaced so the tightest never refuses.
  const spacing = limits.length === 1
    ? (algorithm === 'token-bucket' ? 0 : Math.floor(0.9 * limits[0].windowMs / limits[0].max))
    : Math.max(...limits.map(l => Math.ceil(l.windowMs / l.max))) + 1
  // From the start of an hour (and of a second), so the fixed and sliding windows count every request in one window.
  const start = Math.floor(Date.now() / HOUR) * HOUR + 1000
  let allowed = 0
  const CHUNK = 1000
  for (let i = 0; i < target; i += CHUNK) {
    const statuses = await Promise.all(Array.from({ length: Math.min(CHUNK, target - i) }, (_, j) => decide(input, start + (i + j) * spacing)))
    allowed += statuses.filter(status => status === 0).length
  }
  const now = start + (target - 1) * spacing
  const type = await redis.type(keys.log)
  const encoding = await redis.object('ENCODING', keys.log)
  const elements = type === 'zset' ? await redis.zcard(keys.log) : await redis.hlen(keys.log)
  const state = await bytes(keys.log)

  // Denials at the same instant until one starts the ban (a token bucket with a refilled short limit allows a few first).
  let denials = 0
  let strikes = null
  for (let i = 0; denials < BAN.threshold && i < 1000; i++) {
    if (await decide(input, now) === 0) continue
    if (++denials === BAN.threshold - 1) strikes = await bytes(keys.strikes)
  }
  const banned = await bytes(keys.banned)
  const offences = await bytes(keys.offences)
  await redis.del(keys.log, keys.strikes, keys.banned, keys.offences, keys.override)
  return { algorithm, name, allowed, target, type, encoding, elements, state, strikes, banned, offences }
}

const show = n => n === null ? '-' : n.toLocaleString('en-US')

try {
  const info = await redis.info('server')
  const version = /redis_version:(\S+)/.exec(info)?.[1]
  console.log(`Redis ${version} at ${url}: MEMORY USAGE <key> SAMPLES 0 of one client's keys, its budget filled to max\n`)
  console.log('| algorithm | limit | requests allowed | state key (type, encoding, elements) | bytes per tracked client (state key) | bytes per entry | strikes key (2 denials) | banned key | offences key |')
  console.log('|---|---|---:|---|---:|---:|---:|---:|---:|')
  let index = 0
  for (const algorithm of ALGORITHMS) {
    for (const setting of SETTINGS) {
      const r = await measure(algorithm, setting, index++)
      console.log(`| ${r.algorithm} | ${r.name} | ${show(r.allowed)} of ${show(r.target)} | ${r.type}, ${r.encoding}, ${show(r.elements)} | ` +
        `${show(r.state)} | ${r.type === 'zset' ? Math.round(r.state / r.elements) : '-'} | ${show(r.strikes)} | ${show(r.banned)} | ${show(r.offences)} |`)
    }
  }
  console.log('\nstrikes, banned and offences are per identity (shared by all its routes) and exist only around a ban;')
  console.log(`key names are about ${identityKeys(nameSpace, scope, 'x', 'sliding-log').log.length} bytes (name space of ${nameSpace.length}, as 'rate-guard:' is 11).`)
} finally {
  await redis.quit()
}
