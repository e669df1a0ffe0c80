// Bans and the admin decorator, through fastify.inject against a real Redis.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

// The default key of a client known by its address is the bare address, as @fastify/rate-limit writes it.
const LOCAL = '127.0.0.1'

interface Calls {
  exceeded: string[]
  banReach: Array<{ key: string, url: string }>
  /** The code of each error a request ended with, as the app's error handling sees it. */
  errors: string[]
}

async function setup (t: Test, opts: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<{ app: FastifyInstance, calls: Calls }> {
  const { url } = await getRedis(t)
  const calls: Calls = { exceeded: [], banReach: [], errors: [] }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, {
    redis: url,
    nameSpace: uniquePrefix(),
    onExceeded: (_request: FastifyRequest, key: string) => { calls.exceeded.push(key) },
    onBanReach: (request: FastifyRequest, key: string) => { calls.banReach.push({ key, url: request.url }) },
    ...opts
  })
  app.addHook('onError', async (_request, _reply, err) => { calls.errors.push(String((err as { code?: unknown }).code)) })
  if (routes === undefined) app.get('/', async () => 'ok')
  else routes(app)
  await app.ready()
  return { app, calls }
}

async function codes (app: FastifyInstance, url: string, n: number, remoteAddress?: string): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject({ url, remoteAddress })).statusCode)
  return out
}

t.test('threshold denials start a ban: 403, Retry-After = ban, onBanReach once with the tier-named key', async t => {
  const { app, calls } = await setup(t, { max: 2, timeWindow: 10_000, ban: { threshold: 3, duration: '5s' } })

  t.same(await codes(app, '/', 2), [200, 200])
  t.same(calls.exceeded, [], 'onExceeded is not called for allowed requests')
  t.same(await codes(app, '/', 2), [429, 429], 'denials below the threshold are 429')
  t.same(calls.banReach, [], 'no ban yet')

  const started = await app.inject('/')
  t.equal(started.statusCode, 403, 'the threshold-th denial starts the ban')
  t.equal(started.headers['retry-after'], '5', 'Retry-After is the ban duration')
  t.equal(started.headers['x-ratelimit-remaining'], '0')
  // @fastify/rate-limit's body: no code in it; the thrown error keeps its code for the app's error handling.
  t.strictSame(started.json(), { statusCode: 403, error: 'Forbidden', message: 'Rate limit exceeded, retry in 5 seconds' })
  t.same(calls.errors, ['FST_RATE_GUARD_TOO_MANY_REQUESTS', 'FST_RATE_GUARD_TOO_MANY_REQUESTS', 'FST_RATE_GUARD_BANNED'], 'the thrown errors are coded')
  t.same(calls.banReach, [{ key: LOCAL, url: '/' }], 'onBanReach once, with the tier-named key')

  const later = await codes(app, '/', 3)
  t.same(later, [403, 403, 403], 'banned')
  t.same(calls.banReach.length, 1, 'onBanReach is not called again while the ban holds')
  t.same(calls.exceeded, Array(6).fill(LOCAL), 'onExceeded on each denied request, 429 and 403 alike, with the key')

  const other = await app.inject({ url: '/', remoteAddress: '10.0.0.9' })
  t.equal(other.statusCode, 200, 'another client is not banned')
})

t.test('concurrent denials start exactly one ban', async t => {
  const { app, calls } = await setup(t, { max: 5, timeWindow: 10_000, ban: { threshold: 3, duration: '1 minute' } })
  const results = await Promise.all(Array.from({ length: 30 }, () => app.inject('/')))
  const count = (code: number): number => results.filter(r => r.statusCode === code).length
  t.equal(count(200), 5, 'exactly max allowed')
  t.equal(count(429), 2, 'threshold - 1 limited')
  t.equal(count(403), 23, 'the rest banned')
  t.same(calls.banReach.map(c => c.key), [LOCAL], 'onBanReach exactly once')
  t.equal(calls.exceeded.length, 25, 'onExceeded on every denial')
})

t.test('denials on different budgets add up to one ban (strikes are per identity)', async t => {
  const { app, calls } = await setup(t, { max: 1, timeWindow: 10_000, ban: { threshold: 2, duration: '1 minute' } }, app => {
    app.get('/', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
  })
  t.same(await codes(app, '/', 2), [200, 429])
  t.same(await codes(app, '/own', 2), [200, 403], 'the second denial, on another budget, bans')
  t.same(calls.banReach, [{ key: LOCAL, url: '/own' }])
})

t.test('a ban holds on every route of the registration', async t => {
  const { app, calls } = await setup(t, { max: 1, timeWindow: 10_000, ban: { threshold: 1, duration: '10s' } }, app => {
    app.get('/', async () => 'ok')
    app.get('/other', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 100 } } }, async () => 'ok')
    app.get('/unbannable', { config: { rateLimit: { max: 100, ban: false } } }, async () => 'ok')
    app.post('/group', { config: { rateLimit: { groupId: 'g', max: 100 } } }, async () => 'ok')
    app.get('/open', { config: { rateLimit: false } }, async () => 'ok')
  })
  t.same(await codes(app, '/own', 1), [200], 'a route with its own budget is allowed before the ban')

  t.same(await codes(app, '/', 2), [200, 403], 'banned on the first denial')
  t.same(calls.banReach, [{ key: LOCAL, url: '/' }])

  for (const url of ['/', '/other', '/own', '/unbannable']) {
    const res = await app.inject(url)
    t.equal(res.statusCode, 403, `403 on ${url}`)
    t.match(res.headers['retry-after'], /^(9|10)$/, `with the remaining ban on ${url}`)
  }
  const group = await app.inject({ method: 'POST', url: '/group' })
  t.equal(group.statusCode, 403, '403 on a grouped route')
  const head = await app.inject({ method: 'HEAD', url: '/own' })
  t.equal(head.statusCode, 403, '403 on the HEAD route Fastify added')
  t.equal((await app.inject('/open')).statusCode, 200, 'a route that opted out is not limited, so not banned')
  t.equal(calls.banReach.length, 1, 'the ban started once')
})

t.test('a ban ends: allowed again after Retry-After', async t => {
  // The window is shorter than the ban, so the log is empty when the ban ends.
  const { app, calls } = await setup(t, { max: 2, timeWindow: 800, ban: { threshold: 1, duration: 1500 } })
  t.same(await codes(app, '/', 3), [200, 200, 403])
  const banned = await app.inject('/')
  const retry = Number(banned.headers['retry-after'])
  t.equal(retry, 2, 'the remaining ban, rounded up')
  await sleep(retry * 1000)
  const res = await app.inject('/')
  t.equal(res.statusCode, 200, 'allowed once the ban ended')
  t.equal(res.headers['x-ratelimit-remaining'], '1', 'with a full budget')
  t.same(await codes(app, '/', 2), [200, 403], 'and a new ban can start (the strikes were reset)')
  t.equal(calls.banReach.length, 2, 'onBanReach for each ban')
})

t.test('a ban shorter than the window ends into the log: limited as the log says, and strikes start over', async t => {
  const { app, calls } = await setup(t, { max: 1, timeWindow: 10_000, ban: { threshold: 2, duration: 1000 } })
  t.same(await codes(app, '/', 3), [200, 429, 403])
  await sleep(1100)
  t.same(await codes(app, '/', 1), [429], 'the ban ended but the window still holds the entry')
  t.same(await codes(app, '/', 1), [403], 'the threshold counts again from zero')
  t.equal(calls.banReach.length, 2)
})

t.test('strikes count within one window only', async t => {
  const { app, calls } = await setup(t, { max: 1, timeWindow: 700, ban: { threshold: 2, duration: '10s' } })
  t.same(await codes(app, '/', 2), [200, 429], 'one strike')
  await sleep(800)
  t.same(await codes(app, '/', 2), [200, 429], 'the strike expired with its window: still 429, not 403')
  t.same(calls.banReach, [])
  t.same(await codes(app, '/', 1), [403], 'two strikes in one window: banned')
})

t.test('admin: ban(key, duration) bans on the next request; unban lifts it', async t => {
  const { app } = await setup(t, { max: 3, timeWindow: 10_000 }, app => {
    app.get('/', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 5 } } }, async () => 'ok')
  })
  t.same(await codes(app, '/', 1), [200])
  await app.rateGuard.ban(LOCAL, '2s')
  const res = await app.inject('/')
  t.equal(res.statusCode, 403)
  t.equal(res.headers['retry-after'], '2')
  t.equal(res.json().message, 'Rate limit exceeded, retry in 2 seconds')
  t.equal((await app.inject('/own')).statusCode, 403, 'on every route')
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.1' })).statusCode, 200, 'only that key')

  await app.rateGuard.unban(LOCAL)
  const back = await app.inject('/')
  t.equal(back.statusCode, 200, 'unban: allowed, the log had room')
  t.equal(back.headers['x-ratelimit-remaining'], '1', 'the requests before the ban still count (403s never did)')

  // A ban given in milliseconds, ending by itself.
  await app.rateGuard.ban('10.0.0.2', 600)
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.2' })).statusCode, 403)
  await sleep(700)
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.2' })).statusCode, 200, 'an admin ban expires')

  await t.rejects(app.rateGuard.ban(LOCAL, -1), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'a bad duration is refused')
  await t.rejects(app.rateGuard.ban(42 as unknown as string, '1s'), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'a key must be a string')
})

t.test('admin: unban when the log is full gives 429, as the log says; it forgets the strikes', async t => {
  const { app, calls } = await setup(t, { max: 2, timeWindow: 10_000, ban: { threshold: 2, duration: '1 minute' } })
  t.same(await codes(app, '/', 4), [200, 200, 429, 403])
  t.equal(calls.banReach.length, 1)
  await app.rateGuard.unban(LOCAL)
  t.same(await codes(app, '/', 1), [429], 'unbanned, but the log is still full: 429, not 403')
  t.same(await codes(app, '/', 1), [403], 'the strikes restarted from zero at the unban: two denials ban again')

  // unban also forgets strikes counted toward a ban that has not started.
  await app.rateGuard.unban(LOCAL)
  t.same(await codes(app, '/', 1), [429])
  await app.rateGuard.unban(LOCAL)
  t.same(await codes(app, '/', 1), [429], 'the strike before the unban was forgotten')
  t.equal(calls.banReach.length, 2)
})

t.test('admin: reset(key) gives a full budget on every budget again; a ban stays', async t => {
  const { app } = await setup(t, { max: 2, timeWindow: 10_000, ban: { threshold: 2, duration: '1 minute' } }, app => {
    app.get('/', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
    app.get('/g', { config: { rateLimit: { groupId: 'g', max: 1 } } }, async () => 'ok')
  })
  t.same(await codes(app, '/', 3), [200, 200, 429], 'plugin budget spent, one strike')
  t.same(await codes(app, '/own', 1), [200])
  t.same(await codes(app, '/g', 1), [200])

  await app.rateGuard.reset(LOCAL)
  const res = await app.inject('/')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['x-ratelimit-remaining'], '1', 'a full plugin budget')
  t.same(await codes(app, '/own', 1), [200], 'the route budget is full again')
  t.same(await codes(app, '/g', 1), [200], 'the group budget is full again')
  t.same(await codes(app, '/', 2), [200, 429], 'the strike before the reset was forgotten: 429, not 403')

  await app.rateGuard.ban(LOCAL, '1 minute')
  await app.rateGuard.reset(LOCAL)
  t.same(await codes(app, '/', 1), [403], 'reset leaves a ban in place')
  await app.rateGuard.unban(LOCAL)
  t.same(await codes(app, '/', 3), [200, 200, 429], 'unban after reset: the full budget')
})

t.test('admin: peek reports without counting', async t => {
  const { app, calls } = await setup(t, { max: 3, timeWindow: 10_000, ban: { threshold: 1, duration: '30s' } }, app => {
    app.get('/', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 2, timeWindow: 5000 } } }, async () => 'ok')
    app.post('/post', { config: { rateLimit: { max: 4 } } }, async () => 'ok')
    app.get('/g1', { config: { rateLimit: { groupId: 'reports', max: 5 } } }, async () => 'ok')
    app.get('/g2', { config: { rateLimit: { groupId: 'reports', max: 5 } } }, async () => 'ok')
    app.get('/fn', { config: { rateLimit: { max: () => 7 } } }, async () => 'ok')
    app.get('/wfn', { config: { rateLimit: { timeWindow: () => 1000 } } }, async () => 'ok')
  })

  const empty = await app.rateGuard.peek(LOCAL)
  t.strictSame(empty, { key: LOCAL, status: 'allowed', max: 3, count: 0, remaining: 3, resetMs: 0, retryMs: 0, limits: [{ max: 3, windowMs: 10_000, count: 0, remaining: 3, resetMs: 0 }], shadow: false, shadowBanMs: 0, inFlight: null })
  for (let i = 0; i < 3; i++) await app.rateGuard.peek(LOCAL)
  const first = await app.inject('/')
  t.equal(first.headers['x-ratelimit-remaining'], '2', 'peeks did not count')

  const one = await app.rateGuard.peek(LOCAL)
  t.equal(one.count, 1)
  t.equal(one.remaining, 2)
  t.equal(one.status, 'allowed')
  t.ok(one.resetMs > 9000 && one.resetMs <= 10_000, `resetMs ${one.resetMs} is until the entry leaves`)
  t.equal(one.retryMs, 0)

  await codes(app, '/', 2)
  const full = await app.rateGuard.peek(LOCAL)
  t.equal(full.status, 'limited', 'a full log: the next request would be limited')
  t.equal(full.remaining, 0)
  t.ok(full.retryMs > 9000 && full.retryMs <= 10_000)
  t.equal(calls.exceeded.length, 0, 'peeking a full log is no denial')
  t.equal((await app.inject('/')).statusCode, 403, 'peeking a full log struck nothing: the first real denial bans (threshold 1)')

  const banned = await app.rateGuard.peek(LOCAL)
  t.equal(banned.status, 'banned')
  t.equal(banned.remaining, 0)
  t.ok(banned.retryMs > 25_000 && banned.retryMs <= 30_000, `retryMs ${banned.retryMs} is the remaining ban`)
  await app.rateGuard.unban(LOCAL)

  // Selecting a budget: a route by 'METHOD /url', a group by id.
  const other = '10.9.9.9'
  await codes(app, '/own', 1, '10.9.9.9')
  await app.inject({ method: 'HEAD', url: '/own', remoteAddress: '10.9.9.9' })
  const own = await app.rateGuard.peek(other, { route: 'GET /own' })
  t.equal(own.max, 2)
  t.equal(own.count, 2, 'GET and HEAD counted in the GET /own budget')
  t.equal(own.status, 'limited')
  t.ok(own.resetMs <= 5000, 'with the route\'s own window')
  t.equal((await app.rateGuard.peek(other)).count, 0, 'not in the plugin budget')

  await app.inject({ method: 'POST', url: '/post', remoteAddress: '10.9.9.9' })
  t.equal((await app.rateGuard.peek(other, { route: 'POST /post' })).count, 1)

  await codes(app, '/g1', 1, '10.9.9.9')
  await codes(app, '/g2', 2, '10.9.9.9')
  const group = await app.rateGuard.peek(other, { groupId: 'reports' })
  t.equal(group.count, 3, 'the group counts both routes')
  t.equal(group.max, 5)

  await t.rejects(app.rateGuard.peek(other, { route: 'GET /nope' }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /GET \/nope/ }, 'unknown route')
  await t.rejects(app.rateGuard.peek(other, { groupId: 'nope' }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /group:nope/ }, 'unknown group')
  await t.rejects(app.rateGuard.peek(other, { route: '/own' }), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'a route is named with its method')

  // A budget whose max or window is a function needs them passed.
  await codes(app, '/fn', 1, '10.9.9.9')
  await t.rejects(app.rateGuard.peek(other, { route: 'GET /fn' }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /give peek max .* or request/ })
  const fn = await app.rateGuard.peek(other, { route: 'GET /fn', max: 7 })
  t.equal(fn.count, 1)
  t.equal(fn.max, 7)
  t.equal(fn.remaining, 6)
  await t.rejects(app.rateGuard.peek(other, { route: 'GET /wfn' }), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'a window function needs timeWindow')
  t.equal((await app.rateGuard.peek(other, { route: 'GET /wfn', timeWindow: '1s' })).max, 3, 'given the window, max is the route\'s')
  await t.rejects(app.rateGuard.peek(other, { route: 'GET /fn', max: 0 }), { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'an invalid max')
})
