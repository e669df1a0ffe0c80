// Regressions found reviewing several limits per budget (issue 4): a peek that stood in for one limit
// trimmed the log of the others; a route given half a limit over a plugin with several fell back to the
// defaults; under failMode 'local' a shared refusal gave the count back to Redis instead of the fallback
// that had counted it.
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'
import { freePort, getRedis, uniquePrefix } from '../helpers/redis.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

for (const where of ['redis', 'memory'] as const) {
  t.test(`${where}: peek with max stands in for the function only, counts every limit, and removes nothing`, async t => {
    const app = Fastify()
    t.teardown(() => app.close())
    const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000 } : {}
    await app.register(rateGuard, { ...store, limits: [{ max: () => 5, timeWindow: 50 }, { max: 3, timeWindow: '1 minute' }] })
    app.get('/', async () => 'ok')
    for (let i = 0; i < 2; i++) t.equal((await app.inject('/')).statusCode, 200)
    // Past the short window: a peek that trimmed by it would forget both requests on the minute.
    const start = Date.now()
    while (Date.now() - start < 60) await new Promise(resolve => setImmediate(resolve))
    const seen = await app.rateGuard.peek('127.0.0.1', { max: 5 })
    t.strictSame(seen.limits.map(l => [l.max, l.windowMs, l.count]), [[5, 50, 0], [3, 60_000, 2]], 'both limits, the function replaced by max')
    t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429], 'one left on the minute, not three')
  })
}

t.test('a route giving max or timeWindow alone over a plugin with several limits is a coded error', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { limits: [{ max: 5, timeWindow: '1s' }, { max: 100, timeWindow: '1 hour' }] })
  await t.rejects(async () => {
    app.get('/a', { config: { rateLimit: { timeWindow: '10s' } } }, async () => 'ok')
    await app.ready()
  }, { code: INVALID, message: /"config\.rateLimit\.timeWindow": expected both max and timeWindow/ })

  const alone = Fastify()
  t.teardown(() => alone.close())
  await alone.register(rateGuard, { limits: [{ max: 5, timeWindow: '1s' }, { max: 100, timeWindow: '1 hour' }] })
  await t.rejects(async () => {
    alone.get('/c', { config: { rateLimit: { max: 3 } } }, async () => 'ok')
    await alone.ready()
  }, { code: INVALID, message: /"config\.rateLimit\.max": expected both max and timeWindow/ })

  const other = Fastify()
  t.teardown(() => other.close())
  await other.register(rateGuard, { limits: [{ max: 5, timeWindow: '1s' }, { max: 100, timeWindow: '1 hour' }] })
  other.get('/b', { config: { rateLimit: { max: 2, timeWindow: '10s' } } }, async () => 'ok')
  await other.ready()
  t.equal((await other.inject('/b')).headers['x-ratelimit-limit'], '2', 'both given: one limit of its own')
})

t.test("failMode 'local': a shared refusal gives the count back to the fallback that counted it", async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: `redis://127.0.0.1:${await freePort()}`, failMode: 'local', timeout: 50, breaker: false })
  app.get('/', { config: { rateLimit: { max: 2, timeWindow: '1 minute', shared: { max: 1, timeWindow: '1 minute' } } } }, async () => 'ok')
  const replies = []
  for (let i = 0; i < 3; i++) {
    const reply = await app.inject('/')
    replies.push([reply.statusCode, reply.headers['x-ratelimit-limit'], reply.headers['x-ratelimit-remaining']])
  }
  t.strictSame(replies, [[200, '2', '1'], [429, '1', '0'], [429, '1', '0']], 'the client keeps one of two: the refused requests were given back')
})

t.test('setOverride refuses names: an override keeps the budget\'s policy names', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, {})
  await t.rejects(app.rateGuard.setOverride('1.2.3.4', { limits: [{ max: 1, timeWindow: 1000, name: 'x' } as never], ttl: 1000 }), { code: INVALID, message: /setOverride\.name/ })
})

t.test('without a breaker, a shared refusal on Redis still gives the client its count back', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000, breaker: false })
  app.get('/', { config: { rateLimit: { max: 2, timeWindow: '1 minute', shared: { max: 1, timeWindow: '1 minute' } } } }, async () => 'ok')
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.1' })).statusCode, 200)
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.2' })).statusCode, 429, 'the shared budget is spent')
  // The give-back is sent without being awaited: read until it has landed, a bounded number of times.
  let seen = await app.rateGuard.peek('10.0.0.2', { route: 'GET /' })
  for (let i = 0; i < 50 && seen.count !== 0; i++) seen = await app.rateGuard.peek('10.0.0.2', { route: 'GET /' })
  t.equal(seen.count, 0, 'the refused client\'s own count was given back')
})
