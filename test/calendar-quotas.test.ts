// Calendar quotas over HTTP (issue 32): `limits: [{ max, per, timeZone }]` counts since the day, week or month
// began in that zone and resets at its end. The reset a client is told is the seconds to that end, worked out
// here with Intl alone (not lib/calendar.ts): the next midnight in Kathmandu (UTC+5:45), the 1st of next
// month in New York. Both stores, every algorithm, a quota beside a per-second limit, costs and settling,
// bans, and every option that cannot take a calendar period refusing it at register.
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

/** The wall clock in `timeZone` at `ms`: its date and time fields. */
function wall (timeZone: string, ms: number): { year: number, month: number, day: number, hour: number, minute: number, second: number } {
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric', hourCycle: 'h23' })
    .formatToParts(ms).filter(({ type }) => type !== 'literal').map(({ type, value }) => [type, Number(value)]))
  return parts as ReturnType<typeof wall>
}

/** The instant of `year`-`month`-`day` 00:00 in `timeZone`, for a zone whose offset is a whole number of quarter hours. */
function midnight (timeZone: string, year: number, month: number, day: number): number {
  const utc = Date.UTC(year, month - 1, day)
  for (let quarters = -14 * 4; quarters <= 14 * 4; quarters++) {
    const at = utc - quarters * 15 * 60_000
    const { year: y, month: m, day: d, hour, minute, second } = wall(timeZone, at)
    if (y === year && m === month && d === day && hour === 0 && minute === 0 && second === 0) return at
  }
  throw new Error(`no midnight found for ${year}-${month}-${day} in ${timeZone}`)
}

type Where = 'redis' | 'memory'

/** An app with `options` and its route `/`: `?cost=N` costs N units, `?free` gives its count back after the response. */
async function app (t: Test, where: Where, options: RateGuardOptions): Promise<FastifyInstance> {
  const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
  const fastify = Fastify()
  t.teardown(async () => await fastify.close())
  const query = (request: { query: unknown }): Record<string, string> => request.query as Record<string, string>
  await fastify.register(rateGuard, {
    ...redis,
    nameSpace: uniquePrefix(),
    standardHeaders: 'draft-10',
    cost: (request) => Number(query(request).cost ?? 1),
    countWhen: (request) => query(request).free === undefined,
    ...options
  })
  fastify.get('/', async () => 'ok')
  await fastify.ready()
  return fastify
}

const get = async (fastify: FastifyInstance, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> => await fastify.inject({ url: '/', headers })

for (const where of ['memory', 'redis'] as const) {
  t.test(`${where}: 3 a day in Kathmandu: the 4th refused until the next midnight there`, async t => {
    const fastify = await app(t, where, { limits: [{ max: 3, per: 'day', timeZone: 'Asia/Kathmandu' }] })
    for (let i = 0; i < 3; i++) t.equal((await get(fastify)).statusCode, 200)
    const refused = await get(fastify)
    const now = Date.now()
    const { year, month, day } = wall('Asia/Kathmandu', now)
    // Kathmandu keeps no daylight saving: the next midnight is a day after this one.
    const next = midnight('Asia/Kathmandu', year, month, day) + 86_400_000
    const expected = (next - now) / 1000
    t.equal(refused.statusCode, 429)
    t.ok(Math.abs(Number(refused.headers['x-ratelimit-reset']) - expected) <= 2, `X-RateLimit-Reset ${String(refused.headers['x-ratelimit-reset'])} s, the next midnight in Kathmandu in ${expected.toFixed(1)} s`)
    t.ok(Math.abs(Number(refused.headers['retry-after']) - expected) <= 2, `Retry-After ${String(refused.headers['retry-after'])} s`)
    t.equal(refused.headers['x-ratelimit-remaining'], '0')
    t.match(refused.headers['ratelimit-policy'], /;q=3;(qu="requests";)?w=86400$/, 'the policy: 3 per day of 86,400 s (Kathmandu keeps no daylight saving)')
  })

  t.test(`${where}: 2 a month in New York: refused until the 1st of next month there`, async t => {
    const fastify = await app(t, where, { limits: [{ max: 2, per: 'month', timeZone: 'America/New_York' }] })
    for (let i = 0; i < 2; i++) t.equal((await get(fastify)).statusCode, 200)
    const refused = await get(fastify)
    const now = Date.now()
    const { year, month } = wall('America/New_York', now)
    const first = month === 12 ? midnight('America/New_York', year + 1, 1, 1) : midnight('America/New_York', year, month + 1, 1)
    const start = midnight('America/New_York', year, month, 1)
    t.equal(refused.statusCode, 429)
    t.ok(Math.abs(Number(refused.headers['x-ratelimit-reset']) - (first - now) / 1000) <= 2, `X-RateLimit-Reset ${String(refused.headers['x-ratelimit-reset'])} s, to ${new Date(first).toISOString()}`)
    t.match(refused.headers['ratelimit-policy'], new RegExp(`;q=2;(qu="requests";)?w=${(first - start) / 1000}$`), 'w: this month\'s length there, in seconds')
  })
}

t.test('redis, every algorithm: a quota beside a per-minute limit, costs, a response given back, strikes toward a ban', async t => {
  for (const algorithm of ALGORITHMS) {
    const fastify = await app(t, 'redis', { algorithm, limits: [{ max: 100, timeWindow: '1 minute' }, { max: 5, per: 'week', timeZone: 'Europe/Berlin' }], ban: { threshold: 2, duration: '1 minute' } })
    const status = async (url: string): Promise<number> => (await fastify.inject({ url })).statusCode
    t.equal(await status('/?cost=2'), 200, `${algorithm}: 2 units`)
    for (let i = 0; i < 4; i++) t.equal(await status('/?free'), 200, `${algorithm}: given back each time`)
    t.equal(await status('/?cost=2'), 200, `${algorithm}: 4 units`)
    t.equal(await status('/'), 200, `${algorithm}: 5`)
    t.equal(await status('/'), 429, `${algorithm}: the week's quota spent`)
    t.equal(await status('/'), 403, `${algorithm}: two denials in a row: banned`)
  }
})

t.test('a plan tier: a month\'s quota by tier beside a per-second limit, on the default algorithm', async t => {
  const fastify = await app(t, 'memory', {
    keyGenerator: (request) => String(request.headers['x-customer']),
    limits: [
      { max: 2, timeWindow: '1 second' },
      { max: (request) => request.headers['x-plan'] === 'pro' ? 4 : 1, per: 'month', timeZone: 'America/New_York' }
    ]
  })
  const codes = async (customer: string, plan: string, n: number): Promise<number[]> => {
    const got: number[] = []
    for (let i = 0; i < n; i++) got.push((await get(fastify, { 'x-customer': customer, 'x-plan': plan })).statusCode)
    return got
  }
  t.strictSame(await codes('a', 'free', 2), [200, 429], 'free: one a month')
  t.strictSame(await codes('b', 'pro', 3), [200, 200, 429], 'pro: the second limit refuses the third within the second')
})

t.test('shadow mode: a spent quota is reported, never refused', async t => {
  const fastify = await app(t, 'redis', { mode: 'shadow', limits: [{ max: 1, per: 'day' }] })
  t.strictSame([(await get(fastify)).statusCode, (await get(fastify)).statusCode], [200, 200])
})

t.test('where a calendar period cannot go, registration says so', async t => {
  const cases: Array<[string, RateGuardOptions, RegExp]> = [
    ['per and timeWindow', { limits: [{ max: 1, per: 'day', timeWindow: 1000 } as never] }, /limits\[0\]\.per.*not both/],
    ['a period that is none', { limits: [{ max: 1, per: 'fortnight' as 'day' }] }, /limits\[0\]\.per/],
    ['a zone Node does not know', { limits: [{ max: 1, per: 'day', timeZone: 'Mars/Olympus_Mons' }] }, /limits\[0\]\.timeZone.*IANA/],
    ['a zone without a period', { limits: [{ max: 1, timeWindow: 1000, timeZone: 'UTC' } as never] }, /limits\[0\]\.timeZone.*with per/],
    ['a burst', { algorithm: 'token-bucket', limits: [{ max: 1, per: 'day', burst: 2 } as never] }, /limits\[0\]\.burst.*calendar/],
    ['neither timeWindow nor per', { limits: [{ max: 1 } as never] }, /limits\[0\].*timeWindow or per/],
    ['a shared budget\'s', { limits: [{ max: 1, timeWindow: 1000 }], shared: { limits: [{ max: 1, per: 'day' } as never] } }, /shared\.limits\[0\]\.per.*not a shared budget/],
    ['a watched limit', { limits: [{ max: 1, timeWindow: 1000 }, { max: 1, per: 'day', mode: 'shadow' as 'enforce' }] }, /calendar periods/],
    ['an app\'s store', { store: class { incr (): void {} child (): this { return this } } as never, limits: [{ max: 1, per: 'day' }] }, /calendar quotas are counted in Redis or in process/]
  ]
  for (const [name, options, message] of cases) {
    const fastify = Fastify()
    fastify.register(rateGuard, options)
    await t.rejects(async () => { await fastify.ready() }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message }, name)
    await fastify.close()
  }
})

t.test('the operator\'s peek and reset see the quota', async t => {
  for (const where of ['memory', 'redis'] as const) {
    const fastify = await app(t, where, { limits: [{ max: 10, timeWindow: '1 minute' }, { max: 3, per: 'day', name: 'daily' }] })
    for (let i = 0; i < 3; i++) await get(fastify)
    const peeked = await fastify.rateGuard.peek('127.0.0.1')
    const untilMidnight = 86_400_000 - Date.now() % 86_400_000
    t.match(peeked.limits[1], { max: 3, count: 3, remaining: 0, windowMs: 86_400_000 }, `${where}: the day's quota, spent`)
    t.ok(Math.abs(peeked.limits[1]!.resetMs - untilMidnight) <= 2000, `${where}: until midnight UTC (${peeked.limits[1]!.resetMs} ms)`)
    t.equal(peeked.status, 'limited')
    t.equal((await get(fastify)).statusCode, 429)
    await fastify.rateGuard.reset('127.0.0.1')
    t.equal((await get(fastify)).statusCode, 200, `${where}: reset, the quota counts anew`)
  }
})

t.test('an operator\'s override changes a client\'s quota, or its other limits, or both', async t => {
  for (const where of ['memory', 'redis'] as const) {
    const fastify = await app(t, where, { limits: [{ max: 2, timeWindow: '1 minute' }, { max: 3, per: 'month', timeZone: 'Asia/Tokyo' }] })
    const codes = async (n: number): Promise<number[]> => { const got: number[] = []; for (let i = 0; i < n; i++) got.push((await get(fastify)).statusCode); return got }
    await fastify.rateGuard.setOverride('127.0.0.1', { limits: [{ max: 4, per: 'month', timeZone: 'Asia/Tokyo' }], ttl: '1 hour' })
    t.strictSame(await codes(3), [200, 200, 429], `${where}: the quota raised, the minute's 2 still hold`)
    await fastify.rateGuard.setOverride('127.0.0.1', { limits: [{ max: 10, timeWindow: '1 minute' }, { max: 4, per: 'month', timeZone: 'Asia/Tokyo' }], ttl: '1 hour' })
    t.strictSame(await codes(3), [200, 200, 429], `${where}: both raised: the month's 4 spent`)
    const peeked = await fastify.rateGuard.peek('127.0.0.1')
    t.match(peeked.limits, [{ max: 10, count: 4 }, { max: 4, count: 4, remaining: 0 }], `${where}: peek sees the override`)
    await fastify.rateGuard.clearOverride('127.0.0.1')
    t.equal((await get(fastify)).statusCode, 429, `${where}: back on the budget's quota of 3, spent`)
    await fastify.rateGuard.setOverride('127.0.0.1', { max: 5, per: 'month', timeZone: 'Asia/Tokyo', ttl: '1 hour' })
    t.match((await fastify.rateGuard.peek('127.0.0.1')).limits, [{ max: 2 }, { max: 5, count: 4 }], `${where}: one limit, its single form: the quota's max made 5, the minute's limit the budget's`)
    await t.rejects(fastify.rateGuard.setOverride('127.0.0.1', { limits: [{ max: 9, per: 'day', timeZone: 'Asia/Tokyo' }], ttl: '1 hour' }),
      { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /none per day in Asia\/Tokyo/ }, `${where}: a quota the budget does not have`)
  }
})

t.test('a route that gives only max takes the plugin\'s calendar quota with it', async t => {
  const fastify = Fastify()
  t.teardown(async () => await fastify.close())
  await fastify.register(rateGuard, { nameSpace: uniquePrefix(), limits: [{ max: 3, per: 'day', timeZone: 'Asia/Kathmandu' }] })
  fastify.get('/one', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
  const codes = [(await fastify.inject('/one')).statusCode, (await fastify.inject('/one')).statusCode]
  t.strictSame(codes, [200, 429])
  const refused = await fastify.inject('/one')
  t.ok(Number(refused.headers['retry-after']) > 60, `a day's quota of 1: ${String(refused.headers['retry-after'])} s to wait`)
})

t.test('a group\'s routes count alike: a calendar day is not a day\'s window, nor another zone\'s day', async t => {
  for (const other of [{ max: 3, timeWindow: '1 day' }, { max: 3, per: 'day' as const, timeZone: 'Asia/Tokyo' }]) {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    await fastify.register(rateGuard, { nameSpace: uniquePrefix() })
    fastify.get('/a', { config: { rateLimit: { groupId: 'g', limits: [{ max: 3, per: 'day', timeZone: 'Asia/Kathmandu' }] } } }, async () => 'ok')
    t.throws(() => fastify.get('/b', { config: { rateLimit: { groupId: 'g', limits: [other] } } }, async () => 'ok'), /3\/day in Asia\/Kathmandu/, `refused beside ${JSON.stringify(other)}`)
  }
})
