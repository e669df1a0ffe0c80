// Per-client overrides (`fastify.rateGuard.setOverride` / `clearOverride`), through fastify.inject on Redis
// and in process: new limits for one key on one budget (the plugin's, a route's, a group's), held for a ttl
// or permanently, read by every instance on its next request; refused with a coded error when malformed.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { OverrideOptions, RateGuardOptions } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys, scopeOf } from '../lib/stores/key-names.js'
import { client, getRedis, scanKeys, uniquePrefix } from './helpers/redis.js'

const LOCAL = '127.0.0.1'
const OTHER = '10.0.0.2'
const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'
/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

/** The plugin's budget is 2 a minute; `/x` has 3 of its own, the group `g` 4, `/tb` a token bucket of 5, `/fn` a max function. */
const BASE: RateGuardOptions = { max: 2, timeWindow: '1 minute', standardHeaders: 'draft-10' }

function routes (app: FastifyInstance): void {
  app.get('/', async () => 'ok')
  app.get('/x', { config: { rateLimit: { max: 3 } } }, async () => 'ok')
  app.get('/g1', { config: { rateLimit: { groupId: 'g', max: 4 } } }, async () => 'ok')
  app.get('/g2', { config: { rateLimit: { groupId: 'g', max: 4 } } }, async () => 'ok')
  app.get('/tb', { config: { rateLimit: { algorithm: 'token-bucket', max: 5 } } }, async () => 'ok')
  app.get('/fn', { config: { rateLimit: { max: () => 1 } } }, async () => 'ok')
}

async function makeApp (t: Test, where: Where, nameSpace = uniquePrefix()): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace, ...RELAXED } : {}
  await app.register(rateGuard, { ...BASE, ...store })
  routes(app)
  await app.ready()
  return app
}

async function redisOf (t: Test): Promise<Redis> {
  return client(t, (await getRedis(t)).url)
}

async function get (app: FastifyInstance, url = '/', remoteAddress = '127.0.0.1', method: 'GET' | 'HEAD' = 'GET'): Promise<LightMyRequestResponse> {
  return await app.inject({ method, url, remoteAddress })
}

/** [status, X-RateLimit-Limit, X-RateLimit-Remaining] */
function legacy (res: LightMyRequestResponse): Array<number | string | undefined> {
  return [res.statusCode, res.headers['x-ratelimit-limit']?.toString(), res.headers['x-ratelimit-remaining']?.toString()]
}

t.test('an override raises one client\'s limit on the plugin budget; others and other budgets are unaffected', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where)
    t.strictSame(legacy(await get(app)), [200, '2', '1'], `${where}: the budget's own limit first`)
    await app.rateGuard.setOverride(LOCAL, { max: 10, timeWindow: '1 minute', ttl: '1 minute' })
    const res = await get(app)
    t.strictSame(legacy(res), [200, '10', '8'], `${where}: the next request meets the override (the request before still counts)`)
    t.strictSame([res.headers['ratelimit-policy'], res.headers.ratelimit], ['"default";q=10;qu="requests";w=60', '"default";r=8;t=60'], `${where}: the IETF fields too`)
    t.strictSame(legacy(await get(app, '/', OTHER)), [200, '2', '1'], `${where}: another client keeps the budget's limit`)
    t.strictSame(legacy(await get(app, '/x')), [200, '3', '2'], `${where}: the same client on a route's own budget keeps that budget's limit`)
    const peek = await app.rateGuard.peek(LOCAL)
    t.strictSame([peek.max, peek.count, peek.remaining, peek.limits.map(l => [l.max, l.windowMs, l.count])], [10, 2, 8, [[10, 60_000, 2]]], `${where}: peek reports the override`)

    await app.rateGuard.clearOverride(LOCAL)
    t.strictSame(legacy(await get(app)), [429, '2', '0'], `${where}: cleared: the budget's 2 again, and the 2 counted fill it`)
    t.strictSame((await app.rateGuard.peek(LOCAL)).limits.map(l => [l.max, l.count]), [[2, 2]], `${where}: peek too`)
  }
})

t.test('an override with several limits', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where)
    await app.rateGuard.setOverride(LOCAL, { limits: [{ max: 4, timeWindow: '1 minute' }, { max: 6, timeWindow: '1 hour' }], ttl: 60_000 })
    const res = await get(app)
    t.strictSame(legacy(res), [200, '4', '3'], `${where}: the binding limit of the override`)
    t.strictSame([res.headers['ratelimit-policy'], res.headers.ratelimit], ['"default";q=4;qu="requests";w=60, "default-2";q=6;qu="requests";w=3600', '"default";r=3;t=60, "default-2";r=5;t=3600'],
      `${where}: a budget of one limit overridden with two: the second is named <first>-2`)
    const codes = []
    for (let i = 0; i < 4; i++) codes.push((await get(app)).statusCode)
    t.strictSame(codes, [200, 200, 200, 429], `${where}: 4 a minute`)
  }
})

t.test('overrides on a route\'s budget, a group\'s, a token bucket\'s, and one whose max is a function', async t => {
  for (const where of STORES) {
    const app = await makeApp(t, where)
    await app.rateGuard.setOverride(LOCAL, { route: 'GET /x', max: 7, timeWindow: '1 minute', ttl: '1 minute' })
    t.strictSame(legacy(await get(app, '/x')), [200, '7', '6'], `${where}: GET /x`)
    t.strictSame(legacy(await get(app, '/x', '127.0.0.1', 'HEAD')), [200, '7', '5'], `${where}: HEAD /x shares GET's budget, and its override`)
    t.strictSame(legacy(await get(app)), [200, '2', '1'], `${where}: the plugin budget is not overridden`)

    await app.rateGuard.setOverride(LOCAL, { groupId: 'g', max: 8, timeWindow: '1 minute', ttl: '1 minute' })
    t.strictSame([legacy(await get(app, '/g1')), legacy(await get(app, '/g2'))], [[200, '8', '7'], [200, '8', '6']], `${where}: every route of the group`)

    await app.rateGuard.setOverride(LOCAL, { route: 'GET /tb', max: 10, timeWindow: '1 minute', burst: 4, ttl: '1 minute' })
    t.strictSame(legacy(await get(app, '/tb')), [200, '4', '3'], `${where}: a token bucket's override with its own burst`)

    await app.rateGuard.setOverride(LOCAL, { route: 'GET /fn', max: 5, timeWindow: '1 minute', permanent: true })
    t.strictSame(legacy(await get(app, '/fn')), [200, '5', '4'], `${where}: the override wins over the budget's max function`)
    t.strictSame((await app.rateGuard.peek(LOCAL, { route: 'GET /fn', max: 1 })).max, 5, `${where}: peek reports it too`)

    await app.rateGuard.clearOverride(LOCAL, { groupId: 'g' })
    t.strictSame(legacy(await get(app, '/g1')), [200, '4', '1'], `${where}: the group cleared: 4 again, 3 counted`)
    t.strictSame(legacy(await get(app, '/x')), [200, '7', '4'], `${where}: the route's override stays`)
  }
})

t.test('ttl or permanent: the override key\'s PTTL, and an override that expires', async t => {
  const redis = await redisOf(t)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, 'redis', nameSpace)
  const key = (scope: string): string => identityKeys(nameSpace, scope, LOCAL).override

  await app.rateGuard.setOverride(LOCAL, { max: 10, timeWindow: '1 minute', ttl: '1 minute' })
  const pttl = await redis.pttl(key(GLOBAL_SCOPE))
  t.ok(pttl > 59_000 && pttl <= 60_000, `ttl '1 minute': PTTL ${pttl}`)
  t.equal(await redis.get(key(GLOBAL_SCOPE)), '10 60000 10', 'stored as the scripts read it: max window burst')

  await app.rateGuard.setOverride(LOCAL, { route: 'GET /x', limits: [{ max: 4, timeWindow: 1000 }, { max: 9, timeWindow: '1 hour' }], permanent: true })
  const routeScope = scopeOf('route', 'GET /x')
  t.equal(await redis.pttl(key(routeScope)), -1, 'permanent: no TTL')
  t.equal(await redis.get(key(routeScope)), '4 1000 4;9 3600000 9')

  await app.rateGuard.setOverride(LOCAL, { route: 'GET /x', max: 5, timeWindow: 1000, ttl: 300 })
  const short = await redis.pttl(key(routeScope))
  t.ok(short > 0 && short <= 300, `a ttl replaces a permanent override, TTL included: PTTL ${short}`)
  t.strictSame(legacy(await get(app, '/x')), [200, '5', '4'])
  // The override ending is the behaviour under test: wait for its TTL.
  await sleep(short + 10)
  t.strictSame(legacy(await get(app, '/x')), [200, '3', '1'], 'expired: the route\'s own 3, the requests counted meanwhile kept')
  t.equal(await redis.exists(key(routeScope)), 0)

  await app.rateGuard.clearOverride(LOCAL)
  t.equal(await redis.exists(key(GLOBAL_SCOPE)), 0, 'clearOverride deletes the key')
  await app.rateGuard.clearOverride(LOCAL)
  t.pass('clearing what is not there is no error')
})

t.test('two instances on one Redis and nameSpace: an override set on one holds on the other\'s next request', async t => {
  const nameSpace = uniquePrefix()
  const [one, two] = [await makeApp(t, 'redis', nameSpace), await makeApp(t, 'redis', nameSpace)] as const
  t.strictSame(legacy(await get(two)), [200, '2', '1'])
  await one.rateGuard.setOverride(LOCAL, { max: 10, timeWindow: '1 minute', ttl: '1 minute' })
  t.strictSame(legacy(await get(two)), [200, '10', '8'], 'set on one, read by two: no restart')
  t.strictSame(legacy(await get(one)), [200, '10', '7'], 'and by one, on the same count')
  await two.rateGuard.clearOverride(LOCAL)
  t.strictSame(legacy(await get(one)), [429, '2', '0'], 'cleared on two, gone on one')
})

t.test('an override for an IPv6 address holds for its whole /64, however it is written', async t => {
  const app = await makeApp(t, 'redis')
  await app.rateGuard.setOverride('2001:DB8:0:0::1', { max: 10, timeWindow: '1 minute', ttl: '1 minute' })
  t.strictSame(legacy(await get(app, '/', '2001:db8::abcd:1')), [200, '10', '9'])
  // An 'ip:' prefix is no longer the address's spelling: it names a key of its own, which no client has.
  await app.rateGuard.setOverride('ip:2001:db8:1::1', { max: 10, timeWindow: '1 minute', ttl: '1 minute' })
  t.strictSame(legacy(await get(app, '/', '2001:db8:1::1')), [200, '2', '1'], 'an override for \'ip:<address>\' is not the address\'s')
})

t.test('malformed overrides are refused with the coded error, and write nothing', async t => {
  for (const where of STORES) {
    const nameSpace = uniquePrefix()
    const app = await makeApp(t, where, nameSpace)
    const refused: Array<[unknown, string, RegExp]> = [
      [{ max: 10, timeWindow: '1 minute' }, 'neither ttl nor permanent', /"setOverride": expected either ttl .* or permanent: true/],
      [{ max: 10, timeWindow: '1 minute', ttl: '1 minute', permanent: true }, 'both ttl and permanent', /"setOverride": expected either ttl .* or permanent: true/],
      [{ max: 0, timeWindow: '1 minute', ttl: '1 minute' }, 'a bad max', /"setOverride\.max": .*got 0$/],
      [{ max: 1.5, timeWindow: '1 minute', ttl: '1 minute' }, 'a fractional max', /"setOverride\.max": .*got 1\.5$/],
      [{ max: 10, timeWindow: 'soon', ttl: '1 minute' }, 'a bad window', /"setOverride\.timeWindow": .*got "soon"$/],
      [{ max: 10, ttl: '1 minute' }, 'no window', /"setOverride": expected both max and timeWindow, or limits/],
      [{ max: 10, timeWindow: '1 minute', ttl: 'forever' }, 'a bad ttl', /"setOverride\.ttl": .*got "forever"$/],
      [{ max: 10, timeWindow: '1 minute', tll: '1 minute' }, 'an unknown option', /"setOverride\.tll"/],
      [{ max: 10, timeWindow: '1 minute', burst: 20, ttl: '1 minute' }, 'burst on a sliding-log budget', /"setOverride\.burst": expected no burst but on a budget with algorithm: 'token-bucket'/],
      [{ limits: [{ max: 10, timeWindow: '1 minute', burst: 20 }], ttl: '1 minute' }, 'burst inside limits on a sliding-log budget', /"setOverride\.burst"/],
      [{ limits: [], ttl: '1 minute' }, 'no limits', /"setOverride\.limits": .*got an array$/],
      [{ limits: [{ max: 10, timeWindow: '1 minute' }], max: 3, ttl: '1 minute' }, 'limits and max', /"setOverride\.max"/],
      [{ route: 'GET /tb', max: 2 ** 40, timeWindow: '1 day', ttl: '1 minute' }, 'a product above 2^50 on a token-bucket budget', /"setOverride\.max": .*up to 2\^50 with algorithm: 'token-bucket'/],
      [{ route: 'GET /nope', max: 10, timeWindow: '1 minute', ttl: '1 minute' }, 'an unknown route', /"setOverride": no budget named "GET \/nope"/],
      [{ route: '/x', max: 10, timeWindow: '1 minute', ttl: '1 minute' }, 'a route without its method', /no budget named "\/x"/],
      [{ groupId: 'nope', max: 10, timeWindow: '1 minute', ttl: '1 minute' }, 'an unknown group', /no budget named "group:nope"/],
      [null, 'no options', /"setOverride": expected options/]
    ]
    for (const [options, what, message] of refused) {
      await t.rejects(app.rateGuard.setOverride(LOCAL, options as OverrideOptions), { code: INVALID, statusCode: 500, message }, `${where}: ${what}`)
    }
    await t.rejects(app.rateGuard.setOverride(42 as unknown as string, { max: 1, timeWindow: 1, ttl: 1 }), { code: INVALID, message: /"key"/ }, `${where}: a key that is not a string`)
    await t.rejects(app.rateGuard.clearOverride(LOCAL, { route: 'GET /nope' }), { code: INVALID, message: /"clearOverride": no budget named "GET \/nope"/ }, `${where}: clearOverride of an unknown route`)
    t.strictSame(legacy(await get(app)), [200, '2', '1'], `${where}: nothing was set`)
    if (where === 'redis') t.strictSame((await scanKeys(await redisOf(t), nameSpace)).filter(key => key.includes(':override:')), [], 'no override key written')
  }
})
