// `request.rateGuard` as a handler reads it (issue 42): the decision that let the request in, the same numbers
// its headers carry, on both stores. A handler returns what it reads, and each test holds it to the
// X-RateLimit-* / RateLimit fields of the same response and to the requests it sent: one limit, several with
// a calendar quota, concurrency's slots, every case where nothing limited the request, a refusal as the app's
// error handler sees it, and `peek` on a budget whose max is a function of the request.
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { keyHash } from '../lib/index.js'
import type { RateGuardOptions, RouteRateLimitOptions } from '../lib/index.js'
import { startCluster } from './helpers/cluster.js'
import { getRedis, startRedisServer, uniquePrefix } from './helpers/redis.js'

type Where = 'redis' | 'memory'

/** What the handler read of `request.rateGuard`, as JSON carries it (undefined as null, a Date as its ms). */
interface Read {
  limited: boolean
  reason: string | null
  key: string | number | null
  keyHash: string | null
  limit: number | null
  used: number | null
  remaining: number | null
  resetMs: number | null
  resetTime: number | null
  limits: Array<{ name: string, limit: number, used: number, remaining: number, resetMs: number, resetTime: number, windowMs: number, per: string | null, timeZone: string | null }>
  concurrency: { max: number, inFlight: number, remaining: number } | null
  charged: number
  /** The same object at a second read. */
  same: boolean
}

function read (request: FastifyRequest): Read {
  const q = request.rateGuard
  return {
    limited: q.limited,
    reason: q.reason ?? null,
    key: q.key ?? null,
    keyHash: q.keyHash ?? null,
    limit: q.limit ?? null,
    used: q.used ?? null,
    remaining: q.remaining ?? null,
    resetMs: q.resetMs ?? null,
    resetTime: q.resetTime?.getTime() ?? null,
    limits: q.limits.map(l => ({ ...l, resetTime: l.resetTime.getTime(), per: l.per ?? null, timeZone: l.timeZone ?? null })),
    concurrency: q.concurrency === null ? null : { ...q.concurrency },
    charged: q.charged,
    same: request.rateGuard === q
  }
}

/** An app with `options` whose routes return what they read: `/` (with `route` as its config) and `/off`. */
async function app (t: Test, where: Where, options: RateGuardOptions, route?: RouteRateLimitOptions): Promise<FastifyInstance> {
  const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
  const fastify = Fastify()
  t.teardown(async () => await fastify.close())
  await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), ...options })
  fastify.get('/', route === undefined ? {} : { config: { rateLimit: route } }, async request => read(request))
  fastify.get('/off', { config: { rateLimit: false } }, async request => read(request))
  await fastify.ready()
  return fastify
}

const get = async (fastify: FastifyInstance, url = '/', headers: Record<string, string> = {}): Promise<LightMyRequestResponse & { read: Read }> => {
  const res = await fastify.inject({ url, headers })
  return Object.assign(res, { read: res.json<Read>() })
}

/** The binding limit's numbers against the X-RateLimit-* headers of the same response. */
function matchesHeaders (t: Test, res: LightMyRequestResponse, { limit, remaining, resetMs }: Read, label: string): void {
  t.equal(String(limit), res.headers['x-ratelimit-limit'], `${label}: limit is X-RateLimit-Limit`)
  t.equal(String(remaining), res.headers['x-ratelimit-remaining'], `${label}: remaining is X-RateLimit-Remaining`)
  t.equal(String(Math.ceil(resetMs! / 1000)), res.headers['x-ratelimit-reset'], `${label}: resetMs is X-RateLimit-Reset, in ms`)
}

/** The IETF `RateLimit` field: `"name";r=N;t=S` per limit. */
function ietf (header: unknown): Array<{ name: string, r: number, t: number }> {
  return String(header).split(', ').map(item => {
    const [, name, r, t] = /^"([^"]+)";r=(\d+);t=(\d+)$/.exec(item)!
    return { name: name!, r: Number(r), t: Number(t) }
  })
}

/** Three limits, a calendar quota among them (given first, counted last), and the IETF fields. */
const SEVERAL: RateGuardOptions = {
  standardHeaders: 'draft-10',
  limits: [{ max: 1000, per: 'day', timeZone: 'Asia/Kathmandu' }, { max: 5, timeWindow: '10 seconds', name: 'burst' }, { max: 50, timeWindow: '1 hour' }]
}

/** Three requests under SEVERAL: each limit as the RateLimit fields say it, the tightest as X-RateLimit-* do. */
async function severalLimits (t: Test, fastify: FastifyInstance): Promise<void> {
  for (let i = 1; i <= 3; i++) {
    const res = await get(fastify)
    const { read: q } = res
    // The quota goes last, as in the fields.
    t.strictSame(q.limits.map(l => [l.name, l.limit, l.used, l.remaining, l.per, l.timeZone]), [
      ['burst', 5, i, 5 - i, null, null],
      ['default-2', 50, i, 50 - i, null, null],
      ['default-3', 1000, i, 1000 - i, 'day', 'Asia/Kathmandu']
    ], `request ${i}: every limit`)
    t.strictSame(ietf(res.headers.ratelimit), q.limits.map(l => ({ name: l.name, r: l.remaining, t: Math.ceil(l.resetMs / 1000) })), `request ${i}: each limit is its RateLimit item`)
    t.match(String(res.headers['ratelimit-policy']), `"default-3";q=1000;qu="requests";w=${Math.ceil(q.limits[2]!.windowMs / 1000)}`)
    // The tightest (fewest left) is the one X-RateLimit-* tells of.
    t.match(q, { limit: 5, used: i, remaining: 5 - i })
    matchesHeaders(t, res, q, `request ${i}`)
    t.ok(q.limits[2]!.windowMs >= 23 * 3_600_000 && q.limits[2]!.windowMs <= 25 * 3_600_000, 'the quota\'s window is its day')
  }
}

for (const where of ['memory', 'redis'] as const) {
  t.test(`${where}: one limit: the key as the app's generator gave it, and the headers' numbers`, async t => {
    const fastify = await app(t, where, { max: 3, timeWindow: '1 minute', keyGenerator: () => 7 })
    for (let i = 1; i <= 3; i++) {
      const before = Date.now()
      const res = await get(fastify)
      const { read: q } = res
      t.equal(res.statusCode, 200)
      t.match(q, { limited: true, reason: null, key: 7, keyHash: keyHash(7), limit: 3, used: i, remaining: 3 - i, charged: 1, same: true, concurrency: null }, `request ${i}`)
      matchesHeaders(t, res, q, `request ${i}`)
      t.ok(q.resetMs! > 0 && q.resetMs! <= 60_000, `request ${i}: resets within the window (${q.resetMs} ms)`)
      // On the clock that decided (Redis's TIME or this process's): the same clock here, within a second.
      t.ok(Math.abs(q.resetTime! - (before + q.resetMs!)) < 1000, `request ${i}: resetTime is when resetMs ends`)
      t.equal(q.limits.length, 1)
      t.match(q.limits[0], { name: 'default', limit: 3, used: i, remaining: 3 - i, resetMs: q.resetMs, resetTime: q.resetTime, windowMs: 60_000, per: null, timeZone: null })
    }
    const refused = await fastify.inject('/')
    t.equal(refused.statusCode, 429, 'the fourth is refused: the counts were the real ones')
  })

  t.test(`${where}: JSON.stringify (a log line, a reply) shows the fields, not the methods`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 4, timeWindow: '1 minute', concurrency: { max: 2 } })
    fastify.get('/', async request => JSON.stringify(request.rateGuard))
    fastify.get('/off', { config: { rateLimit: false } }, async request => JSON.stringify(request.rateGuard))
    await fastify.ready()
    const res = await fastify.inject('/')
    const shown = JSON.parse(res.body) as Record<string, unknown>
    t.strictSame(Object.keys(shown).sort(), ['charged', 'concurrency', 'key', 'keyHash', 'limit', 'limited', 'limits', 'remaining', 'resetMs', 'resetTime', 'settled', 'used'])
    t.match(shown, { limited: true, key: '127.0.0.1', limit: 4, used: 1, remaining: 3, charged: 1, settled: false, concurrency: { max: 2, inFlight: 1 } })
    t.equal(shown.remaining, Number(res.headers['x-ratelimit-remaining']))
    t.match(JSON.parse((await fastify.inject('/off')).body), { limited: false, reason: 'off', limits: [], charged: 0 }, 'a route off too')
  })

  t.test(`${where}: several limits and a calendar quota, each named as the RateLimit fields name it`, async t => {
    await severalLimits(t, await app(t, where, SEVERAL))
  })

  t.test(`${where}: concurrency: the slots in flight, this request's among them`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 100, timeWindow: '1 minute', concurrency: { max: 3 }, cost: request => Number((request.query as { cost?: string }).cost ?? 1) })
    let release!: () => void
    const released = new Promise<void>(resolve => { release = resolve })
    let started!: () => void
    const holding = new Promise<void>(resolve => { started = resolve })
    fastify.get('/slow', async request => { started(); await released; return read(request) })
    fastify.get('/', async request => read(request))
    await fastify.ready()
    t.match((await get(fastify)).read.concurrency, { max: 3, inFlight: 1, remaining: 2 }, 'alone: its own slot')
    const slow = get(fastify, '/slow')
    await holding
    const beside = await get(fastify, '/?cost=2')
    t.match(beside.read, { concurrency: { max: 3, inFlight: 3, remaining: 0 }, charged: 2 }, 'beside one in flight, costing 2 units: 3 in flight, none left')
    release()
    t.match((await slow).read.concurrency, { max: 3, inFlight: 1, remaining: 2 }, 'the one that waited read what it took')
  })

  t.test(`${where}: nothing limited it: said plainly, with no numbers`, async t => {
    const fastify = await app(t, where, { max: 2, allowList: ['10.0.0.1'] })
    const off = await get(fastify, '/off')
    t.strictSame(off.read, {
      limited: false, reason: 'off', key: null, keyHash: null, limit: null, used: null, remaining: null, resetMs: null, resetTime: null, limits: [], concurrency: null, charged: 0, same: true
    }, 'a route off: no key, no numbers')
    t.notOk('x-ratelimit-limit' in off.headers)
    const listed = await fastify.inject({ url: '/', remoteAddress: '10.0.0.1' })
    t.match(listed.json(), { limited: false, reason: 'allow-listed', key: '10.0.0.1', keyHash: keyHash('10.0.0.1'), limit: null, remaining: null, limits: [], charged: 0 }, 'allow-listed: the key, no numbers')
    t.notOk('x-ratelimit-limit' in listed.headers)
  })

  t.test(`${where}: shadow mode: what enforce would have said, not limited`, async t => {
    const fastify = await app(t, where, { max: 1, mode: 'shadow' })
    const first = await get(fastify)
    t.match(first.read, { limited: false, reason: 'shadow', limit: 1, used: 1, remaining: 0 })
    const second = await get(fastify)
    t.equal(second.statusCode, 200, 'let through')
    t.match(second.read, { limited: false, reason: 'shadow', limit: 1, remaining: 0 }, 'over its limit, as enforce would say')
    matchesHeaders(t, second, second.read, 'shadow')
  })

  t.test(`${where}: the default key hierarchy: a user as operator calls take it, a verified API key never in clear`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    fastify.addHook('onRequest', async request => {
      const user = request.headers['x-user']
      if (user !== undefined) (request as unknown as { user: { id: string } }).user = { id: String(user) }
    })
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 5, hook: 'preHandler', verifyApiKey: key => key === 'sk-secret' })
    fastify.get('/', async request => read(request))
    await fastify.ready()
    const byKey = await get(fastify, '/', { 'x-api-key': 'sk-secret' })
    t.match(byKey.read, { limited: true, key: 'apikey:*', keyHash: keyHash('apikey:sk-secret'), used: 1 })
    t.notOk(byKey.body.includes('sk-secret'), 'the API key is nowhere in what the handler read')
    t.match((await get(fastify, '/', { 'x-user': '42' })).read, { key: 'user:42', keyHash: keyHash('user:42'), used: 1 })
    t.match((await get(fastify)).read, { key: '127.0.0.1', used: 1 })
  })

  t.test(`${where}: a refusal, as the app's error handler reads it`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 1, timeWindow: '1 minute' })
    fastify.setErrorHandler(async (error: { statusCode?: number }, request, reply) => await reply.code(error.statusCode ?? 500).send(read(request)))
    fastify.get('/', async request => read(request))
    await fastify.ready()
    await get(fastify)
    const refused = await get(fastify)
    t.equal(refused.statusCode, 429)
    t.match(refused.read, { limited: true, limit: 1, used: 1, remaining: 0, charged: 0 }, 'limited, nothing left, nothing charged')
    matchesHeaders(t, refused, refused.read, 'refused')
  })

  t.test(`${where}: a ban: nothing left, reset when it ends; shadow mode's reads as its headers, an allowed request's`, async t => {
    const ban = { threshold: 1, duration: '10 minutes' }
    const shadow = await app(t, where, { max: 1, timeWindow: '1 minute', mode: 'shadow', shadow: { ban: true }, ban })
    for (let i = 0; i < 3; i++) {
      const res = await get(shadow)
      t.equal(res.statusCode, 200, 'let through')
      t.match(res.read, { limited: false, reason: 'shadow', limit: 1 })
      matchesHeaders(t, res, res.read, `shadow, request ${i + 1}`)
    }
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 1, timeWindow: '1 minute', ban })
    fastify.setErrorHandler(async (error: { statusCode?: number }, request, reply) => await reply.code(error.statusCode ?? 500).send(read(request)))
    fastify.get('/', async request => read(request))
    await fastify.ready()
    await get(fastify)
    await get(fastify)
    const banned = await get(fastify)
    t.equal(banned.statusCode, 403)
    t.match(banned.read, { limited: true, limit: 1, remaining: 0, limits: [{ remaining: 0 }] })
    t.ok(banned.read.resetMs! > 9 * 60_000 && banned.read.resetMs! <= 10 * 60_000, `resets when the ban ends (${banned.read.resetMs} ms)`)
    t.equal(banned.read.limits[0]!.resetMs, banned.read.resetMs, 'each limit too')
    t.ok(Math.abs(banned.read.resetTime! - (Date.now() + banned.read.resetMs!)) < 2000, 'resetTime: when the ban ends')
    matchesHeaders(t, banned, banned.read, 'banned')
  })

  t.test(`${where}: settle and hold through the same object; a refusal for slots names them`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix(), max: 10, timeWindow: '1 minute', concurrency: { max: 1 } })
    let release!: () => void
    const released = new Promise<void>(resolve => { release = resolve })
    let started!: () => void
    const holding = new Promise<void>(resolve => { started = resolve })
    fastify.setErrorHandler(async (error: { statusCode?: number }, request, reply) => await reply.code(error.statusCode ?? 500).send(read(request)))
    fastify.get('/slow', async request => {
      const guard = request.rateGuard
      await guard.settle(3)
      const done = guard.hold()
      started()
      await released
      done()
      return { charged: guard.charged, settled: guard.settled, read: read(request) }
    })
    await fastify.ready()
    const slow = fastify.inject('/slow')
    await holding
    const refused = await get(fastify, '/slow')
    t.equal(refused.statusCode, 429)
    t.match(refused.read, { limited: true, limit: 1, used: 1, remaining: 0, limits: [{ name: 'concurrency', limit: 1, used: 1, remaining: 0, per: null }] }, 'the slots\' refusal: its limit is the slots')
    matchesHeaders(t, refused, refused.read, 'refused for slots')
    release()
    t.match((await slow).json(), { charged: 3, settled: true, read: { used: 1, limit: 10 } }, 'settled at 3 through request.rateGuard')
  })

  t.test(`${where}: peek on a budget whose max is a function of the request`, async t => {
    const fastify = Fastify()
    t.teardown(async () => await fastify.close())
    const redis = where === 'redis' ? { redis: (await getRedis(t)).url } : {}
    await fastify.register(rateGuard, { ...redis, nameSpace: uniquePrefix() })
    const plan = (request: FastifyRequest): number => request.headers['x-plan'] === 'pro' ? 10 : 2
    fastify.get('/fn', { config: { rateLimit: { max: plan, timeWindow: '1 minute' } } }, async request => {
      const peeked = await fastify.rateGuard.peek(String(request.rateGuard.key), { route: 'GET /fn', request })
      return { read: read(request), peeked }
    })
    await fastify.ready()
    const res = await fastify.inject({ url: '/fn', headers: { 'x-plan': 'pro' } })
    const { read: q, peeked } = res.json<{ read: Read, peeked: { max: number, count: number, remaining: number } }>()
    t.match(q, { limit: 10, used: 1, remaining: 9 })
    t.match(peeked, { max: 10, count: 1, remaining: 9 }, 'the function called with the request: the client\'s own max, and its count')
    await t.rejects(fastify.rateGuard.peek('127.0.0.1', { route: 'GET /fn' }), {
      code: 'FST_RATE_GUARD_INVALID_OPTION',
      message: 'Invalid rate-guard option "peek": budget "GET /fn" computes max per request (a function of it): give peek max (the client\'s own, standing in for the function), ' +
        'e.g. peek(key, { route: "GET /fn", max: 100 }), or request (a request of the client, which the functions are called with), e.g. peek(key, { route: "GET /fn", request })'
    }, 'without either: says what it needs, with examples')
    t.match(await fastify.rateGuard.peek('127.0.0.1', { route: 'GET /fn', max: 10 }), { max: 10, count: 1 }, 'with max: as before')
  })
}

t.test('peek: a group\'s budget computing both, named in the error as peek takes it', async t => {
  const fastify = await app(t, 'memory', {}, { groupId: 'reports', max: () => 3, timeWindow: () => 1000 })
  await t.rejects(fastify.rateGuard.peek('127.0.0.1', { groupId: 'reports' }), {
    message: /computes max and timeWindow per request.*e\.g\. peek\(key, \{ groupId: "reports", max: 100, timeWindow: '1 minute' \}\)/
  })
  const plugin = await app(t, 'memory', { max: () => 3 })
  await t.rejects(plugin.rateGuard.peek('127.0.0.1'), { message: /e\.g\. peek\(key, \{ max: 100 \}\)/ }, 'the plugin-wide budget: no budget option')
  const windowed = await app(t, 'memory', { max: 3, timeWindow: () => '1 second' })
  await t.rejects(windowed.rateGuard.peek('127.0.0.1'), { message: /computes timeWindow per request.*e\.g\. peek\(key, \{ timeWindow: '1 minute' \}\)/ }, 'a window alone')
})

t.test('Redis down: failMode open says unenforced, failMode local says so with its own counts', async t => {
  const server = await startRedisServer(t)
  const open = await app(t, 'memory', { redis: server.url, failMode: 'open', max: 3, timeout: 2000 })
  const local = await app(t, 'memory', { redis: server.url, failMode: 'local', max: 3, timeout: 2000 })
  t.match((await get(open)).read, { limited: true, reason: null, used: 1 }, 'Redis up: it decides')
  t.match((await get(local)).read, { limited: true, reason: null, used: 1 }, 'Redis up: it decides')
  await server.kill()
  const unenforced = await get(open)
  t.equal(unenforced.headers['x-ratelimit-enforced'], 'false')
  t.match(unenforced.read, { limited: false, reason: 'unenforced', key: '127.0.0.1', limit: null, remaining: null, limits: [], charged: 0 }, 'open: the key, no numbers')
  const decided = await get(local)
  t.match(decided.read, { limited: true, reason: 'local', key: '127.0.0.1', limit: 3, used: 1, remaining: 2 }, 'local: the in-process twin\'s counts, from nothing')
  matchesHeaders(t, decided, decided.read, 'local')
})

t.test('the app\'s own store (@fastify/rate-limit\'s interface): its count, limited', async t => {
  const counts = new Map<string, number>()
  class CountingStore {
    incr (key: string, callback: (err: Error | null, result?: { current: number, ttl: number }) => void): void {
      counts.set(key, (counts.get(key) ?? 0) + 1)
      callback(null, { current: counts.get(key)!, ttl: 30_000 })
    }

    child (): CountingStore { return new CountingStore() }
  }
  const fastify = await app(t, 'memory', { store: CountingStore, max: 2, timeWindow: '1 minute' })
  for (let i = 1; i <= 2; i++) {
    const before = Date.now()
    const res = await get(fastify)
    t.match(res.read, { limited: true, reason: null, key: '127.0.0.1', limit: 2, used: i, remaining: 2 - i, resetMs: 30_000, charged: 0 }, `request ${i}`)
    t.ok(res.read.resetTime! >= before + 30_000 && res.read.resetTime! <= Date.now() + 30_000, 'resetTime: its ttl from now')
    matchesHeaders(t, res, res.read, `request ${i}`)
  }
})

t.test('a Redis Cluster: the same fields, from the same decisions', async t => {
  const cluster = await startCluster(t)
  const fastify = await app(t, 'memory', { ...SEVERAL, redis: cluster.urls, timeout: 2000, concurrency: { max: 2 }, keyGenerator: () => 'tenant-9' })
  await severalLimits(t, fastify)
  t.match((await get(fastify)).read, { limited: true, reason: null, key: 'tenant-9', keyHash: keyHash('tenant-9'), concurrency: { max: 2, inFlight: 1, remaining: 1 } })
})
