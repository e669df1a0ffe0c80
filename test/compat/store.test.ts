// @fastify/rate-limit compatibility: `store`, a store class of the app's own with their interface. The app's
// store counts; the plugin answers over its count as theirs does (their `ban: N` too), under the decision's
// deadline and failMode.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

type Callback = (err: Error | null, result?: { current: number, ttl: number }) => void

/** A fixed-window store with a fake clock, keeping what it was made with and asked. */
function storeClass (behaviour: 'count' | 'fail' | 'hang' = 'count'): { Store: new (options: Record<string, unknown>) => object, made: object[], keys: unknown[] } {
  const made: object[] = []
  const keys: unknown[] = []
  class Store {
    readonly counts = new Map<unknown, number>()
    constructor (readonly options: Record<string, unknown>) { made.push(options) }
    incr (key: unknown, callback: Callback, timeWindow: number, max: number): void {
      keys.push(key)
      if (behaviour === 'hang') return
      if (behaviour === 'fail') return callback(new Error('store down'))
      const current = (this.counts.get(key) ?? 0) + 1
      this.counts.set(key, current)
      callback(null, { current, ttl: timeWindow - 100 * current + (max - max) })
    }

    read (key: unknown, callback: Callback): void {
      callback(null, { current: this.counts.get(key) ?? 0, ttl: 500 })
    }

    child (routeOptions: Record<string, unknown>): Store { return new Store(routeOptions) }
  }
  return { Store, made, keys }
}

async function app (t: Test, options: Record<string, unknown>, more?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register(rateGuard, options)
  fastify.get('/', async () => 'ok')
  more?.(fastify)
  await fastify.ready()
  return fastify
}

t.test('the app\'s store counts: their headers, 429 over max, 403 more than ban over it, onBanReach on each', async t => {
  const { Store, made, keys } = storeClass()
  const bans: unknown[] = []
  const fastify = await app(t, { store: Store, max: 2, timeWindow: 10_000, ban: 1, onBanReach: (_request: unknown, key: unknown) => bans.push(key) })
  const seen = []
  for (let i = 0; i < 5; i++) {
    const res = await fastify.inject('/')
    seen.push([res.statusCode, res.headers['x-ratelimit-remaining'], res.headers['x-ratelimit-reset'], res.headers['retry-after']])
  }
  t.same(seen, [
    [200, '1', '10', undefined],
    [200, '0', '10', undefined],
    [429, '0', '10', '10'],
    [403, '0', '10', '10'],
    [403, '0', '10', '10']
  ])
  t.same(bans, ['127.0.0.1', '127.0.0.1'], 'on every 403, as theirs')
  t.same(keys, Array(5).fill('127.0.0.1'), 'the key as theirs: the address')
  t.match(made[0], { max: 2, timeWindow: 10_000, ban: 1 }, 'made with the plugin\'s options, by their names')
})

t.test('a store that says no time is left on a refusal: Retry-After 1, as any refusal', async t => {
  const { Store } = storeClass()
  // The store's ttl is timeWindow - 100 x current: 0 for the third request.
  const fastify = await app(t, { store: Store, max: 2, timeWindow: 300 })
  await fastify.inject('/')
  await fastify.inject('/')
  const res = await fastify.inject('/')
  t.same([res.statusCode, res.headers['retry-after'], res.json().message], [429, '1', 'Rate limit exceeded, retry in 1 second'])
})

t.test('a route\'s budget is a child of the store, given the route and its options; a group\'s key carries the group id', async t => {
  const { Store, made, keys } = storeClass()
  const fastify = await app(t, { store: Store, global: false, keyGenerator: () => 42 }, app => {
    app.get('/g', { config: { rateLimit: { max: 1, timeWindow: '10 seconds', groupId: 'g1' } } }, async () => 'ok')
  })
  t.equal((await fastify.inject('/g')).statusCode, 200)
  t.equal((await fastify.inject('/g')).statusCode, 429)
  t.match(made[1], { max: 1, timeWindow: 10_000, groupId: 'g1', routeInfo: { url: '/g' } })
  t.same(keys, ['42g1', '42g1'], 'their key: the key, then the group id')
})

t.test('options of the app\'s own on a route or a limiter reach the store\'s child, as theirs; without a store they are refused', async t => {
  const { Store, made } = storeClass()
  const fastify = await app(t, { store: Store, global: false }, app => {
    app.get('/t', { config: { rateLimit: { max: 1, table: 'logins' } as never } }, async () => 'ok')
    app.createRateLimit({ max: 2, table: 'api' } as never)
  })
  t.equal((await fastify.inject('/t')).statusCode, 200)
  t.match(made.find(options => (options as { table?: string }).table === 'logins'), { max: 1, routeInfo: { url: '/t' } }, "the route's")
  t.match(made.find(options => (options as { table?: string }).table === 'api'), { max: 2 }, "the limiter's")
  await t.rejects(app(t, { store: Store }, app => { app.get('/c', { config: { rateLimit: { cache: 5 } } }, async () => 'ok') }), { code: INVALID, message: /"config\.rateLimit\.cache": expected it at register only/ }, 'plugin options are still refused')
  await t.rejects(app(t, {}, app => { app.get('/t', { config: { rateLimit: { table: 'logins' } as never } }, async () => 'ok') }), { code: INVALID, message: /^GET \/t: Invalid rate-guard option "config\.rateLimit\.table": no such option/ })
})

t.test('increment: false reads with the store\'s read; a store without read is their error', async t => {
  const { Store } = storeClass()
  const fastify = await app(t, { store: Store, global: false, max: 2, timeWindow: 1000 }, app => {
    const check = app.createRateLimit()
    app.get('/check', async request => await check(request))
    app.get('/peek', async request => await check(request, { increment: false }))
  })
  await fastify.inject('/check')
  t.match((await fastify.inject('/peek')).json(), { isAllowed: false, key: '127.0.0.1', remaining: 1, ttl: 500, isExceeded: false })

  class NoRead { incr (_key: unknown, callback: Callback): void { callback(null, { current: 1, ttl: 1 }) } child (): NoRead { return this } }
  const other = await app(t, { store: NoRead, global: false }, app => {
    const check = app.createRateLimit()
    app.get('/peek', async request => await check(request, { increment: false }))
  })
  const res = await other.inject('/peek')
  t.equal(res.statusCode, 500)
  t.match(res.json().message, /does not implement a `read` method/)
})

t.test('a store that fails or never answers: failMode decides within the deadline', async t => {
  for (const behaviour of ['fail', 'hang'] as const) {
    const { Store } = storeClass(behaviour)
    const closed = await app(t, { store: Store, callbackTimeout: 50 })
    const refused = await closed.inject('/')
    t.equal(refused.statusCode, 503, `${behaviour}: closed, the default`)
    t.equal(refused.headers['retry-after'], '1')
    const open = await app(t, { store: Store, callbackTimeout: 50, skipOnError: true })
    const passed = await open.inject('/')
    t.equal(passed.statusCode, 200, `${behaviour}: open`)
    t.equal(passed.headers['x-ratelimit-enforced'], 'false')
  }
})

t.test('a store and redis: the store counts, as theirs, and redis is never connected to', async t => {
  const { Store, keys } = storeClass()
  const fastify = await app(t, { store: Store, redis: 'redis://127.0.0.1:1', max: 1, timeWindow: 10_000 })
  t.strictSame([(await fastify.inject('/')).statusCode, (await fastify.inject('/')).statusCode], [200, 429])
  t.same(keys, ['127.0.0.1', '127.0.0.1'], 'counted by the store')
})

t.test('what the app\'s store cannot count is refused at register', async t => {
  const { Store } = storeClass()
  await t.rejects(app(t, { store: class {} }), { code: INVALID, message: /"store": expected a class whose instances have incr/ })
  await t.rejects(app(t, { store: Store, limits: [{ max: 1, timeWindow: 1000 }, { max: 5, timeWindow: 60_000 }] }), { code: INVALID, message: /"limits": one limit/ })
  await t.rejects(app(t, { store: Store, shared: { max: 10, timeWindow: 1000 } }), { code: INVALID, message: /"shared": false with store/ })
  await t.rejects(app(t, { store: Store, ban: { threshold: 2, duration: 1000 } }), { code: INVALID, message: /"ban": a number of denials/ })
})
