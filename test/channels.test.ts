// What the plugin publishes on node:diagnostics_channel (lib/channels.ts), subscribed to as a metrics adapter
// would: one message per decision with its outcome and fields (the key's hash, never the key), the breaker's
// opening and closing, Redis trouble, and a TracingChannel around each script call. Against real Redis.
import diagnostics from 'node:diagnostics_channel'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { CHANNELS } from '../lib/index.js'
import type { BreakerMessage, DecisionMessage, RateGuardOptions, RedisCallContext, TroubleMessage } from '../lib/index.js'
import { hashIdentity } from '../lib/stores/key-names.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'
import { freePort, startRedisServer } from './helpers/redis-server.js'

/** Sends requests, one after another, until `done()` (what they cause is what is awaited); at most 10 s. */
async function trafficUntil (app: FastifyInstance, done: () => boolean): Promise<void> {
  const started = Date.now()
  while (!done()) {
    if (Date.now() - started > 10_000) throw new Error('the awaited message never came')
    await app.inject('/')
  }
}

/** Messages of `name` while the test runs. */
function listen<T> (t: Test, name: string): T[] {
  const seen: T[] = []
  const onMessage = (message: unknown): void => { seen.push(message as T) }
  diagnostics.subscribe(name, onMessage)
  t.teardown(() => { diagnostics.unsubscribe(name, onMessage) })
  return seen
}

async function makeApp (t: Test, opts: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { verifyApiKey: () => true, ...opts })
  routes(app)
  await app.ready()
  return app
}

t.test('a decision message for each outcome, with the budget, algorithm, limit, cost, key hash and mode', async t => {
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: (await getRedis(t)).url, nameSpace, timeout: 3000, max: 2, timeWindow: '1 minute' }, app => {
    app.get('/', async () => 'ok')
    app.get('/units', { config: { rateLimit: { algorithm: 'token-bucket', limits: [{ max: 5, timeWindow: '1 minute', name: 'per-minute' }], cost: (request) => Number(request.headers['x-units']) } } }, async () => 'ok')
    app.get('/open', { config: { rateLimit: { failMode: 'open', cost: () => { throw new Error('no') } } } }, async () => 'ok')
    app.get('/closed', { config: { rateLimit: { cost: () => { throw new Error('no') } } } }, async () => 'ok')
    app.get('/banning', { config: { rateLimit: { max: 1, ban: { threshold: 1, duration: '1 minute' } } } }, async () => 'ok')
    app.get('/trial', { config: { rateLimit: { max: 1, mode: 'shadow' } } }, async () => 'ok')
    app.get('/shared', { config: { rateLimit: { shared: { max: 1, timeWindow: '1 minute' } } } }, async () => 'ok')
  })
  const seen = listen<DecisionMessage>(t, CHANNELS.decision)
  const call = async (url: string, apiKey: string, units?: string): Promise<number> =>
    (await app.inject({ url, headers: { 'x-api-key': apiKey, ...(units === undefined ? {} : { 'x-units': units }) } })).statusCode

  const hash = hashIdentity('apikey:k1')
  const base = { nameSpace, algorithm: 'sliding-log', cost: 1, keyKind: 'apikey', mode: 'enforce', inFlight: undefined, waitedMs: undefined }
  await call('/', 'k1')
  await call('/', 'k1')
  await call('/', 'k1')
  t.ok(seen.every(m => typeof m.redisMs === 'number' && m.redisMs >= 0 && m.batchSize === 1), 'each decided by Redis: its call\'s time, and its batch of one')
  t.strictSame(seen.splice(0).map(({ redisMs, batchSize, ...rest }) => rest), [
    { ...base, outcome: 'allowed', budget: 'default', limit: 'default', keyHash: hash },
    { ...base, outcome: 'allowed', budget: 'default', limit: 'default', keyHash: hash },
    { ...base, outcome: 'limited', budget: 'default', limit: 'default', keyHash: hash }
  ], 'allowed, then limited')
  t.notOk(JSON.stringify(seen).includes('k1'), 'never the key')

  await call('/units', 'k1', '3')
  await call('/units', 'k1', '6')
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.budget, m.algorithm, m.limit, m.cost]), [
    ['allowed', 'GET /units', 'token-bucket', 'per-minute', 3],
    ['too-costly', 'GET /units', 'token-bucket', 'per-minute', 6]
  ], 'costs, and a request above the capacity')

  t.equal(await call('/open', 'k1'), 200)
  t.equal(await call('/closed', 'k1'), 200)
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.budget, m.cost, m.keyHash]), [['allowed', 'GET /open', 1, hash], ['allowed', 'GET /closed', 1, hash]], 'a cost function that fails: decided by the store at a cost of 1, whatever the failMode')

  await call('/banning', 'k2')
  await call('/banning', 'k2')
  await call('/banning', 'k2')
  t.strictSame(seen.splice(0).map(m => m.outcome), ['allowed', 'ban-started', 'banned'])

  await call('/trial', 'k3')
  await call('/trial', 'k3')
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.mode]), [['allowed', 'shadow'], ['shadow-limited', 'shadow']])

  await call('/shared', 'k4')
  await call('/shared', 'k5')
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.limit, m.keyHash]), [['allowed', 'default', hashIdentity('apikey:k4')], ['limited', 'default-shared', undefined]],
    'a shared budget\'s refusal names no client')

  // failMode deciding: Redis unreachable.
  const down = await makeApp(t, { redis: `redis://127.0.0.1:${await freePort()}`, nameSpace, breaker: false }, app => {
    app.get('/open', { config: { rateLimit: { failMode: 'open' } } }, async () => 'ok')
    app.get('/closed', async () => 'ok')
  })
  const failed = async (url: string): Promise<number> => (await down.inject({ url, headers: { 'x-api-key': 'k1' } })).statusCode
  seen.splice(0)
  t.strictSame([await failed('/open'), await failed('/closed')], [200, 503])
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.limit, m.keyHash, m.redisMs, m.batchSize]), [['unenforced', undefined, hash, undefined, undefined], ['unavailable', undefined, hash, undefined, undefined]], 'failMode deciding: no store decided, no call')
})

t.test('a TracingChannel around each script call: the batch, its mode and algorithm', async t => {
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: (await getRedis(t)).url, nameSpace, timeout: 3000 }, app => {
    app.get('/', async (request) => {
      await request.rateGuard.settle(0)
      return 'ok'
    })
  })
  const starts: RedisCallContext[] = []
  const ends: RedisCallContext[] = []
  const handlers = {
    start: (context: unknown) => { starts.push({ ...(context as RedisCallContext) }) },
    end: () => {},
    asyncStart: () => {},
    asyncEnd: (context: unknown) => { ends.push(context as RedisCallContext) },
    error: () => {}
  }
  const tracing = diagnostics.tracingChannel(CHANNELS.redis)
  tracing.subscribe(handlers)
  t.teardown(() => { tracing.unsubscribe(handlers) })
  await Promise.all(Array.from({ length: 5 }, async (_, i) => await app.inject({ url: '/', headers: { 'x-api-key': `t${i}` } })))
  const decides = starts.filter(c => c.mode === 'decide')
  t.strictSame(decides.map(c => [c.nameSpace, c.algorithm]), [[nameSpace, 'sliding-log']], 'the five decided in one call')
  t.equal(decides[0]!.batchSize, 5)
  t.equal(starts.filter(c => c.mode === 'settle').length, 5, 'each settlement a call of its own')
  t.equal(ends.length, starts.length, 'every call ended')
})

t.test('Redis trouble and the breaker, as they happen', async t => {
  const server = await startRedisServer(t)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: server.url, nameSpace, timeout: 200, failMode: 'open', breaker: { threshold: 2, coolDown: 100 } }, app => {
    app.get('/', async () => 'ok')
  })
  const breaker = listen<BreakerMessage>(t, CHANNELS.breaker)
  const trouble = listen<TroubleMessage>(t, CHANNELS.trouble)
  t.equal((await app.inject('/')).statusCode, 200)
  await server.kill()
  await trafficUntil(app, () => breaker.length === 1)
  t.strictSame(breaker, [{ nameSpace, state: 'open' }])
  t.ok(trouble.length >= 2 && trouble.every(m => m.nameSpace === nameSpace && m.error instanceof Error && m.failMode === 'open'), `${trouble.length} trouble messages, each with its error and what decided`)
  await server.restart()
  await trafficUntil(app, () => breaker.length === 2)
  t.strictSame(breaker[1], { nameSpace, state: 'closed' }, 'closed once a probe reached Redis again')
})

t.test('fastify.rateGuard.stats(): this instance\'s decisions by outcome, the same whether anyone subscribes or not', async t => {
  const before = new Date().toISOString()
  const app = await makeApp(t, { max: 1 }, app => {
    app.get('/', async () => 'ok')
    app.get('/trial', { config: { rateLimit: { mode: 'shadow' } } }, async () => 'ok')
  })
  for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers: { 'x-api-key': 's' } })
  for (let i = 0; i < 2; i++) await app.inject({ url: '/trial', headers: { 'x-api-key': 's' } })
  const { since, decisions } = app.rateGuard.stats()
  t.ok(since >= before.slice(0, 19), `since ${since}`)
  t.strictSame(decisions, {
    allowed: 2,
    limited: 2,
    banned: 0,
    'ban-started': 0,
    'too-costly': 0,
    'in-flight': 0,
    'waiting-full': 0,
    unenforced: 0,
    unavailable: 0,
    'shadow-limited': 1,
    'shadow-banned': 0,
    'shadow-ban-started': 0,
    shed: 0,
    'shadow-shed': 0
  })
})

for (const where of ['redis', 'memory'] as const) {
  t.test(`${where}: fastify.rateGuard.bans() lists the active bans by hash, longest first; unban({ keyHash }) lifts one`, async t => {
    const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000 } : {}
    const app = await makeApp(t, { ...store, max: 1, ban: { threshold: 1, duration: '1 minute' } }, app => {
      app.get('/', async () => 'ok')
    })
    await app.rateGuard.ban('apikey:long', '1 hour')
    await app.rateGuard.ban('203.0.113.9', '10 minutes')
    for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers: { 'x-api-key': 'earned' } })
    const bans = await app.rateGuard.bans()
    t.strictSame(bans.map(b => b.keyHash), [hashIdentity('apikey:long'), hashIdentity('203.0.113.9'), hashIdentity('apikey:earned')])
    t.ok(bans[0]!.retryMs > 59 * 60_000 && bans[2]!.retryMs <= 60_000, 'each with its time left')
    t.notOk(JSON.stringify(bans).includes('long'), 'hashes, never keys')
    t.equal((await app.rateGuard.bans({ limit: 2 })).length, 2, 'bounded by limit')
    await app.rateGuard.unban({ keyHash: hashIdentity('apikey:earned') })
    t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash), [hashIdentity('apikey:long'), hashIdentity('203.0.113.9')], 'lifted by its hash')
    t.equal((await app.rateGuard.peek('apikey:earned')).status, 'limited', 'over its limit still, no longer banned')
    await t.rejects(app.rateGuard.unban({ keyHash: 'not a hash' }), { code: 'FST_RATE_GUARD_INVALID_OPTION' })
    await t.rejects(app.rateGuard.bans({ limit: 0 }), { code: 'FST_RATE_GUARD_INVALID_OPTION' })
  })
}

t.test('the kind of key each decision was made for, and a limit an override adds named as the IETF fields name it', async t => {
  const app = await makeApp(t, { max: 1, userId: (request) => request.headers['x-user'] as string | undefined }, app => {
    app.get('/', async () => 'ok')
    app.get('/number', { config: { rateLimit: { keyGenerator: () => 42 } } }, async () => 'ok')
    app.get('/tenant', { config: { rateLimit: { keyGenerator: () => 'tenant-7' } } }, async () => 'ok')
  })
  const seen = listen<DecisionMessage>(t, CHANNELS.decision)
  await app.inject({ url: '/', headers: { 'x-api-key': 'k' } })
  await app.inject({ url: '/', headers: { 'x-user': '9' } })
  await app.inject({ url: '/' })
  await app.inject('/number')
  await app.inject('/tenant')
  t.strictSame(seen.splice(0).map(m => m.keyKind), ['apikey', 'user', 'ip', 'custom', 'custom'])

  await app.rateGuard.setOverride('apikey:wide', { limits: [{ max: 5, timeWindow: '1 minute' }, { max: 1, timeWindow: '1 hour' }], ttl: '1 hour' })
  await app.inject({ url: '/', headers: { 'x-api-key': 'wide' } })
  await app.inject({ url: '/', headers: { 'x-api-key': 'wide' } })
  t.strictSame(seen.splice(0).map(m => [m.outcome, m.limit]), [['allowed', 'default-2'], ['limited', 'default-2']], 'the override\'s second limit binds: default-2')
})
