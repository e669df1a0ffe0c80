// Several limits in one budget (`limits`), through fastify.inject, on Redis and in process, with each of the
// four algorithms: a request passes only when every limit allows it; a denied request counts on none; the
// X-RateLimit-* headers report the binding limit (fewest remaining; on a tie, the later reset); the IETF
// fields list every limit; Retry-After is the wait until every limit allows. Also the token bucket's `burst`
// and `max` as a function of the request.
//
// Fixed and sliding windows are aligned to the epoch, so what they answer depends on where in its second a
// request falls. The four-algorithm case therefore starts its flows early in a window of Redis's clock (the
// in-process store reads the same system clock): the 500 ms ones early in a half-second, the 1 s ones early
// in a second; expected resets are computed from that second, or bracketed by Redis's clock read around the
// request, and the case checks the 1 s flows ended within their second.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { Algorithm, LimitOptions, PeekOptions, RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

const LOCAL = '127.0.0.1'
/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

const LIMITS: LimitOptions[] = [{ max: 2, timeWindow: '1s', name: 'burst' }, { max: 5, timeWindow: '1 minute', name: 'minute' }]
const POLICY = '"burst";q=2;qu="requests";w=1, "minute";q=5;qu="requests";w=60'
/** Both limits refuse the second request: the wait is the longer one's. */
const BOTH: LimitOptions[] = [{ max: 1, timeWindow: '1 minute', name: 'minute' }, { max: 1, timeWindow: '1 hour', name: 'hour' }]
/**
 * A short limit that passes within the case, and a long one. 500 ms windows start with each half-second.
 * The token bucket's burst window is 1 s: with 500 ms it would give a token back every 250 ms, about as
 * soon as a loaded machine answers three requests.
 */
function later (algorithm: Algorithm): LimitOptions[] {
  return [{ max: 2, timeWindow: algorithm === 'token-bucket' ? 1000 : 500, name: 'burst' }, { max: 3, timeWindow: '1 day', name: 'day' }]
}

async function makeApp (t: Test, where: Where, opts: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), ...RELAXED } : {}
  await app.register(rateGuard, { ...store, ...opts })
  if (routes === undefined) app.get('/', async () => 'ok')
  else routes(app)
  await app.ready()
  return app
}

interface Seen {
  status: number
  limit?: string
  remaining?: string
  reset?: string
  policy?: string
  ratelimit?: string
  retryAfter?: string
}

/** The status and every rate-limit header of a reply (absent ones left out). */
function seen (res: LightMyRequestResponse): Seen {
  const out: Seen = { status: res.statusCode }
  const pick: Array<[keyof Seen, string]> = [
    ['limit', 'x-ratelimit-limit'], ['remaining', 'x-ratelimit-remaining'], ['reset', 'x-ratelimit-reset'],
    ['policy', 'ratelimit-policy'], ['ratelimit', 'ratelimit'], ['retryAfter', 'retry-after']
  ]
  for (const [name, header] of pick) {
    const value = res.headers[header]
    if (value !== undefined) (out as unknown as Record<string, string>)[name] = String(value)
  }
  return out
}

async function redisNow (redis: Redis): Promise<number> {
  const [s, us] = await redis.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}

/** Redis's clock once it is in the first `within` ms of a window of `period` ms: waits for the next window when it is not. */
async function earlyIn (redis: Redis, period: number, within: number): Promise<number> {
  for (let tries = 0; tries < 3; tries++) {
    const now = await redisNow(redis)
    if (now % period < within) return now
    await sleep(period - now % period + 1)
  }
  throw new Error(`Redis's clock never read within ${within} ms of the start of a ${period} ms window`)
}

/**
 * What each algorithm answers to the requests of the aligned case, made within one second whose unix time
 * is `sec`, in its first half or its second (`late`: only the sliding window's wait tells them apart).
 * Resets and waits are in whole seconds, rounded up.
 */
function expected (algorithm: Algorithm, sec: number, late = false) {
  const inMinute = sec % 60
  const inHour = sec % 3600
  const inDay = sec % 86_400
  return {
    // LIMITS: the burst limit's reset, the minute limit's after one and after two requests, the 429's wait;
    // BOTH: the minute's reset and the hour's (which is also the wait); later(): the day's reset and wait. A
    // reset is when one more unit is free.
    'sliding-log': { burst: 1, minute: [60, 60], retry: 1, oneMinute: 60, both: 3600, dayReset: 86_400, dayRetry: 86_400 },
    // The window ends with the second (burst), the minute, the hour, the day.
    'fixed-window': { burst: 1, minute: [60 - inMinute, 60 - inMinute], retry: 1, oneMinute: 60 - inMinute, both: 3600 - inHour, dayReset: 86_400 - inDay, dayRetry: 86_400 - inDay },
    // A request counts until the end of the window after its own: the estimate of one request falls only
    // then; of n, once n x (window - elapsed) / window <= n - 1 in the next window, at window / n. A full
    // window with max 2 lets one more in halfway through the next (1.5 s after the second's start: 2 s away
    // in the second's first half, 1 s in its second half); with max 1, only once that window ends; with max
    // 3 a day, two thirds of the way through the next day (4/3 days after this one's start). The minute with
    // two counted is one lower 30 s into the next minute.
    'sliding-window': { burst: 2, minute: [120 - inMinute, 90 - inMinute], retry: late ? 1 : 2, oneMinute: 120 - inMinute, both: 7200 - inHour, dayReset: 115_200 - inDay, dayRetry: 115_200 - inDay },
    // One token back every window / max: 0.5 s for the burst, 12 s of the minute, an hour for BOTH's hour,
    // 8 hours of the day's 3.
    'token-bucket': { burst: 1, minute: [12, 12], retry: 1, oneMinute: 60, both: 3600, dayReset: 28_800, dayRetry: 28_800 }
  }[algorithm]
}

t.test('two limits with each algorithm, on Redis and in process, at plugin and route level', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const apps = await Promise.all(ALGORITHMS.flatMap(algorithm => STORES.map(async where => {
    const app = await makeApp(t, where, { algorithm, limits: LIMITS, standardHeaders: 'draft-10' }, app => {
      app.get('/', async () => 'ok')
      // A route's own budget, with its own limits (the plugin's are the same, and counted apart).
      app.get('/route', { config: { rateLimit: { limits: LIMITS } } }, async () => 'ok')
      app.get('/both', { config: { rateLimit: { limits: BOTH } } }, async () => 'ok')
      app.get('/later', { config: { rateLimit: { limits: later(algorithm) } } }, async () => 'ok')
    })
    return { algorithm, where, app }
  })))

  // The day's reset and wait, and the sliding window's wait, from Redis's clock read just before and just
  // after the request: whole seconds, so the answer is one of two values (the same unless a window began).
  const oneOf = (value: string | undefined, candidates: number[], what: string): void => {
    t.ok(candidates.map(String).includes(value ?? ''), `${what} (${value} of ${[...new Set(candidates)].join(' or ')})`)
  }

  // First the flows of 500 ms windows, early in a half-second, up to the refusal of the burst.
  await earlyIn(redis, 500, 100)
  const laterFlows = await Promise.all(apps.map(async ({ algorithm, where, app }) => {
    const what = `${algorithm}, ${where}, a burst of 2 per ${algorithm === 'token-bucket' ? 1000 : 500} ms and 3 a day`
    const first = seen(await app.inject('/later'))
    const second = seen(await app.inject('/later'))
    t.strictSame([first.limit, first.remaining, second.limit, second.remaining], ['2', '1', '2', '0'], `${what}: the burst binds while the day has more left`)
    t.equal((await app.inject('/later')).statusCode, 429, `${what}: the burst refuses the third`)
    const peek = await app.rateGuard.peek(LOCAL, { route: 'GET /later' })
    t.equal(peek.limits[1]!.count, 2, `${what}: the refusal is not counted on the day`)
    return { algorithm, app, what, retryMs: peek.retryMs }
  }))
  // Then, while the burst's window passes (the behaviour under test: waited for exactly until it lets one
  // more in, never for the day should the burst have let the third request through), the day binds.
  const laterEnds = Promise.all(laterFlows.map(async ({ algorithm, app, what, retryMs }) => {
    if (!t.ok(retryMs > 0 && retryMs <= 1000, `${what}: the burst gives a request back within a second (${retryMs} ms)`)) return
    await sleep(retryMs + 5)
    const before = Math.floor(await redisNow(redis) / 1000)
    const allowed = seen(await app.inject('/later'))
    const refused = seen(await app.inject('/later'))
    const after = Math.floor(await redisNow(redis) / 1000)
    const e = [expected(algorithm, before), expected(algorithm, after)]
    t.strictSame([allowed.status, allowed.limit, allowed.remaining, allowed.policy], [200, '3', '0', '"burst";q=2;qu="requests";w=1, "day";q=3;qu="requests";w=86400'],
      `${what}: once the burst allows again, the day binds: its last request, fewest remaining`)
    oneOf(allowed.reset, e.map(x => x.dayReset), `${what}: X-RateLimit-Reset is the day's`)
    t.strictSame([refused.status, refused.limit, refused.remaining], [429, '3', '0'], `${what}: refused by the day`)
    oneOf(refused.retryAfter, e.map(x => x.dayRetry), `${what}: Retry-After is the day's wait`)
  }))

  // The flows of 1 s windows, early in a second.
  const start = await earlyIn(redis, 1000, 200)
  const sec = Math.floor(start / 1000)
  await Promise.all(apps.flatMap(({ algorithm, where, app }) => {
    const e = expected(algorithm, sec)
    const name = `${algorithm}, ${where}`

    const twoLimits = async (url: string, peekOptions: PeekOptions, level: string): Promise<void> => {
      const what = `${name}, ${level}`
      const [m1, m2] = e.minute
      t.strictSame(seen(await app.inject(url)), {
        status: 200, limit: '2', remaining: '1', reset: String(e.burst), policy: POLICY, ratelimit: `"burst";r=1;t=${e.burst}, "minute";r=4;t=${m1}`
      }, `${what}: the first request, the burst limit binds (1 left against 4)`)
      t.strictSame(seen(await app.inject(url)), {
        status: 200, limit: '2', remaining: '0', reset: String(e.burst), policy: POLICY, ratelimit: `"burst";r=0;t=${e.burst}, "minute";r=3;t=${m2}`
      }, `${what}: the second request spends the burst`)
      const before = await redisNow(redis)
      const { retryAfter, ...third } = seen(await app.inject(url))
      const after = await redisNow(redis)
      t.strictSame(third, {
        status: 429, limit: '2', remaining: '0', reset: String(e.burst), policy: POLICY, ratelimit: `"burst";r=0;t=${e.burst}, "minute";r=3;t=${m2}`
      }, `${what}: the third is refused by the burst alone (the minute has 3 left), and counted on neither`)
      oneOf(retryAfter, [before, after].map(ms => expected(algorithm, sec, ms % 1000 >= 500).retry), `${what}: Retry-After is the burst's wait`)
      const peek = await app.rateGuard.peek(LOCAL, peekOptions)
      t.equal(peek.status, 'limited', `${what}: peek says the next request would be limited`)
      t.strictSame(peek.limits.map(l => [l.max, l.windowMs, l.count, l.remaining]), [[2, 1000, 2, 0], [5, 60_000, 2, 3]],
        `${what}: peek: the refused request is not on the minute limit (count 2, not 3)`)
      t.strictSame([peek.max, peek.count, peek.remaining], [2, 2, 0], `${what}: peek's binding limit is the burst`)
    }

    const bothRefuse = async (): Promise<void> => {
      t.equal((await app.inject('/both')).statusCode, 200)
      t.strictSame(seen(await app.inject('/both')), {
        status: 429,
        limit: '1',
        remaining: '0',
        reset: String(e.both),
        policy: '"minute";q=1;qu="requests";w=60, "hour";q=1;qu="requests";w=3600',
        ratelimit: `"minute";r=0;t=${e.oneMinute}, "hour";r=0;t=${e.both}`,
        retryAfter: String(e.both)
      }, `${name}: both limits refuse: Retry-After is the hour's wait; on a tie of remaining the later reset (the hour) binds`)
    }

    return [twoLimits('/', {}, 'plugin level'), twoLimits('/route', { route: 'GET /route' }, 'route level'), bothRefuse()]
  }))
  const end = await redisNow(redis)
  t.equal(Math.floor(end / 1000), sec, `the flows of 1 s windows ran within one second of Redis's clock (from +${start % 1000} ms to +${end - sec * 1000} ms), as their expected resets assume`)
  await laterEnds
})

t.test('the binding limit is the one with fewest remaining, not the first listed; on a tie, the later reset', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where, { limits: [{ max: 5, timeWindow: '1s' }, { max: 2, timeWindow: '1 minute' }] }, app => {
      app.get('/', async () => 'ok')
      app.get('/tie', { config: { rateLimit: { limits: [{ max: 2, timeWindow: '1s' }, { max: 2, timeWindow: '1 minute' }] } } }, async () => 'ok')
    })
    t.strictSame(seen(await app.inject('/')), { status: 200, limit: '2', remaining: '1', reset: '60' }, `${where}: the second limit binds (1 left against 4)`)
    t.strictSame(seen(await app.inject('/tie')), { status: 200, limit: '2', remaining: '1', reset: '60' }, `${where}: 1 left on each: the minute binds (later reset)`)
  }
})

t.test('IETF policy names: given, or the budget\'s with -2, -3... after the first', async t => {
  const app = await makeApp(t, 'redis', { limits: [{ max: 3, timeWindow: '1s' }, { max: 4, timeWindow: '1 minute' }, { max: 5, timeWindow: '1 hour' }], standardHeaders: 'draft-10' }, app => {
    app.get('/', async () => 'ok')
    app.get('/group', { config: { rateLimit: { groupId: 'search', limits: [{ max: 3, timeWindow: '1s' }, { max: 4, timeWindow: '1 minute' }] } } }, async () => 'ok')
    app.get('/mixed', { config: { rateLimit: { limits: [{ max: 3, timeWindow: '1s', name: 'fast' }, { max: 4, timeWindow: '1 minute' }, { max: 5, timeWindow: '1 hour', name: 'slow' }] } } }, async () => 'ok')
    app.get('/one', { config: { rateLimit: { max: 6, timeWindow: '10s' } } }, async () => 'ok')
  })
  const policies: Array<[string, string, string]> = [
    ['/', '"default";q=3;qu="requests";w=1, "default-2";q=4;qu="requests";w=60, "default-3";q=5;qu="requests";w=3600', '"default";r=2;t=1, "default-2";r=3;t=60, "default-3";r=4;t=3600'],
    ['/group', '"search";q=3;qu="requests";w=1, "search-2";q=4;qu="requests";w=60', '"search";r=2;t=1, "search-2";r=3;t=60'],
    ['/mixed', '"fast";q=3;qu="requests";w=1, "default-2";q=4;qu="requests";w=60, "slow";q=5;qu="requests";w=3600', '"fast";r=2;t=1, "default-2";r=3;t=60, "slow";r=4;t=3600'],
    ['/one', '"default";q=6;qu="requests";w=10', '"default";r=5;t=10']
  ]
  for (const [url, policy, ratelimit] of policies) {
    const res = await app.inject(url)
    t.strictSame([res.headers['ratelimit-policy'], res.headers.ratelimit], [policy, ratelimit], url)
  }
})

t.test('token bucket: burst is the capacity (X-RateLimit-Limit), max per timeWindow the refill', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where, { algorithm: 'token-bucket', max: 10, timeWindow: '1 minute', burst: 3, standardHeaders: 'draft-10' }, app => {
      app.get('/', async () => 'ok')
      app.get('/limits', { config: { rateLimit: { limits: [{ max: 10, timeWindow: '1 minute', burst: 4 }, { max: 100, timeWindow: '1 hour' }] } } }, async () => 'ok')
      app.get('/wide', { config: { rateLimit: { max: 1, timeWindow: '1 hour', burst: 3 } } }, async () => 'ok')
    })
    // One token back every 6 s: each request takes 6 s of the bucket, and one more is free 6 s later (the
    // reset, not the 6 × i until the bucket is full).
    for (let i = 1; i <= 3; i++) {
      t.strictSame(seen(await app.inject('/')), { status: 200, limit: '3', remaining: String(3 - i), reset: '6', policy: '"default";q=3;qu="requests";w=60', ratelimit: `"default";r=${3 - i};t=6` },
        `${where}: request ${i} of a bucket of 3`)
    }
    t.strictSame(seen(await app.inject('/')), { status: 429, limit: '3', remaining: '0', reset: '6', policy: '"default";q=3;qu="requests";w=60', ratelimit: '"default";r=0;t=6', retryAfter: '6' },
      `${where}: the fourth waits for one token (6 s), not for a window; t is that wait`)

    const limits = await app.inject('/limits')
    t.strictSame([limits.headers['x-ratelimit-limit'], limits.headers['x-ratelimit-remaining'], limits.headers['ratelimit-policy']], ['4', '3', '"default";q=4;qu="requests";w=60, "default-2";q=100;qu="requests";w=3600'],
      `${where}: burst inside limits: that limit's capacity is its burst`)

    const wide = []
    for (let i = 0; i < 4; i++) wide.push(seen(await app.inject('/wide')))
    t.strictSame(wide.map(r => [r.status, r.remaining]), [[200, '2'], [200, '1'], [200, '0'], [429, '0']], `${where}: a burst above max: 3 at once with 1 an hour`)
    t.equal(wide[3]!.retryAfter, '3600', `${where}: then one an hour`)
  }
})

t.test('max as a function of the request, in the one-limit spelling and inside limits', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where, { max: (request) => Number(request.headers['x-max']), timeWindow: '1 minute' }, app => {
      app.get('/', async () => 'ok')
      app.get('/limits', {
        config: { rateLimit: { standardHeaders: 'draft-10', limits: [{ max: (request) => Number(request.headers['x-max']), timeWindow: '1 minute', name: 'asked' }, { max: 3, timeWindow: '1 hour', name: 'hour' }] } }
      }, async () => 'ok')
    })
    const get = async (url: string, max: number): Promise<Seen> => seen(await app.inject({ url, headers: { 'x-max': String(max) } }))
    t.strictSame([await get('/', 2), await get('/', 2), await get('/', 2)].map(r => [r.status, r.limit, r.remaining]), [[200, '2', '1'], [200, '2', '0'], [429, '2', '0']],
      `${where}: max from the request: 2`)
    t.strictSame(await get('/', 4), { status: 200, limit: '4', remaining: '1', reset: '60' }, `${where}: the same log against a max of 4: 2 counted, the third allowed`)

    t.strictSame(await get('/limits', 1), { status: 200, limit: '1', remaining: '0', reset: '60', policy: '"asked";q=1;qu="requests";w=60, "hour";q=3;qu="requests";w=3600', ratelimit: '"asked";r=0;t=60, "hour";r=2;t=3600' },
      `${where}: a function inside limits is asked per request`)
    t.strictSame(await get('/limits', 10), { status: 200, limit: '3', remaining: '1', reset: '3600', policy: '"asked";q=10;qu="requests";w=60, "hour";q=3;qu="requests";w=3600', ratelimit: '"asked";r=8;t=60, "hour";r=1;t=3600' },
      `${where}: asked for 10, the hour binds`)
    const refused = await get('/limits', 1)
    t.strictSame([refused.status, refused.retryAfter], [429, '60'], `${where}: asked for 1 again: refused until the minute passes`)
    await t.rejects(app.rateGuard.peek(LOCAL, { route: 'GET /limits' }), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, `${where}: peek needs max for such a budget`)
    t.strictSame(await get('/limits', 0), { status: 429, limit: '0', remaining: '0', reset: '60', policy: '"asked";q=0;qu="requests";w=60, "hour";q=3;qu="requests";w=3600', ratelimit: '"asked";r=0;t=60, "hour";r=3;t=0', retryAfter: '60' },
      `${where}: asked for 0: refused for a window without counting, the other limit not asked`)
  }
})
