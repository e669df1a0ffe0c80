// `errorFormat: 'problem'`: refusals as RFC 9457 problem details, with the problem types of
// draft-ietf-httpapi-ratelimit-headers-10 and the names of the limits that refused (lib/request/problem.ts).
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { freePort, getRedis, uniquePrefix } from './helpers/redis.js'

const TYPES = 'https://iana.org/assignments/http-problem-types#'

async function makeApp (t: Test, options: RateGuardOptions, routes: (app: FastifyInstance) => void = () => {}): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { errorFormat: 'problem', ...options })
  app.get('/', async () => 'ok')
  routes(app)
  await app.ready()
  return app
}

interface Problem { type: string, title: string, status: number, detail: string, 'violated-policies'?: string[], 'retry-after'?: number }

for (const store of ['in process', 'redis'] as const) {
  t.test(`${store}: a 429 is problem+json, quota-exceeded, naming the violated limit; a ban's 403 is abnormal-usage-detected`, async t => {
    const redis = store === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix() } : {}
    const app = await makeApp(t, { ...redis, max: 1, timeWindow: '1 minute', ban: { threshold: 2, duration: '10 minutes' } }, app => {
      app.get('/named', { config: { rateLimit: { limits: [{ max: 1, timeWindow: '1 minute', name: 'per-minute' }, { max: 100, timeWindow: '1 hour', name: 'hourly' }], ban: false } } }, async () => 'ok')
    })
    t.equal((await app.inject('/')).statusCode, 200)
    const limited = await app.inject('/')
    t.equal(limited.statusCode, 429)
    t.equal(limited.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.strictSame(limited.json(), {
      type: `${TYPES}quota-exceeded`,
      title: 'Request cannot be satisfied as assigned quota has been exceeded',
      status: 429,
      detail: 'Rate limit exceeded, retry in 1 minute',
      'violated-policies': ['default'],
      'retry-after': Number(limited.headers['retry-after'])
    })
    const banned = await app.inject('/')
    t.equal(banned.statusCode, 403)
    t.match(banned.json<Problem>(), { type: `${TYPES}abnormal-usage-detected`, status: 403, 'violated-policies': ['default'], 'retry-after': 600 }, 'the ban started by a refusal on the limit')
    t.notOk('violated-policies' in (await app.inject('/')).json<Problem>(), 'a client found banned violated no limit this time')
    const named = await app.inject({ url: '/named', remoteAddress: '192.0.2.8' })
    t.equal(named.statusCode, 200)
    t.match((await app.inject({ url: '/named', remoteAddress: '192.0.2.8' })).json<Problem>(), { 'violated-policies': ['per-minute'] }, 'only the limit it did not fit')
  })
}

t.test('a request that never fits says no retry-after; an in-flight refusal names concurrency', async t => {
  let open = (): void => {}
  const held = new Promise<void>(resolve => { open = resolve })
  let running = (): void => {}
  const started = new Promise<void>(resolve => { running = resolve })
  const app = await makeApp(t, {}, app => {
    app.get('/costly', { config: { rateLimit: { max: 5, cost: 6 } } }, async () => 'ok')
    app.get('/slow', { config: { rateLimit: { concurrency: { max: 1 } } } }, async () => {
      running()
      await held
      return 'ok'
    })
  })
  const costly = await app.inject('/costly')
  t.equal(costly.statusCode, 429)
  t.match(costly.json<Problem>(), { type: `${TYPES}quota-exceeded`, 'violated-policies': ['default'] })
  t.notOk('retry-after' in costly.json<Problem>(), 'it never passes: no time to retry after')
  const first = app.inject('/slow')
  await started
  const second = await app.inject('/slow')
  t.equal(second.statusCode, 429)
  t.match(second.json<Problem>(), { type: `${TYPES}quota-exceeded`, 'violated-policies': ['concurrency'], 'retry-after': 1 })
  open()
  t.equal((await first).statusCode, 200)
})

t.test('failMode closed\'s 503 is temporary-reduced-capacity', async t => {
  const app = await makeApp(t, { redis: `redis://127.0.0.1:${await freePort()}`, failMode: 'closed', breaker: false })
  const res = await app.inject('/')
  t.equal(res.statusCode, 503)
  t.equal(res.headers['content-type'], 'application/problem+json; charset=utf-8')
  t.match(res.json<Problem>(), { type: `${TYPES}temporary-reduced-capacity`, status: 503, 'retry-after': Number(res.headers['retry-after']) })
})

t.test('the app\'s own bodies stay its own: an error handler\'s, an errorResponseBuilder\'s; the default format is @fastify/rate-limit\'s', async t => {
  const app = await makeApp(t, { max: 1, timeWindow: '1 minute' }, app => {
    app.get('/built', { config: { rateLimit: { max: 1, errorResponseBuilder: () => ({ statusCode: 429, mine: true }) } } }, async () => 'ok')
    app.get('/plain', { config: { rateLimit: { max: 1, errorFormat: 'default' } } }, async () => 'ok')
    app.setErrorHandler(async (err: Error & { code?: string }, request, reply) => {
      if (request.url === '/') return await reply.code(429).send({ handled: err.code })
      throw err
    })
  })
  await app.inject('/')
  t.strictSame((await app.inject('/')).json(), { handled: 'FST_RATE_GUARD_TOO_MANY_REQUESTS' }, 'the error handler\'s')
  await app.inject('/built')
  t.match((await app.inject('/built')).json(), { mine: true }, 'the builder\'s')
  await app.inject('/plain')
  const plain = await app.inject('/plain')
  t.equal(plain.headers['content-type'], 'application/json; charset=utf-8')
  t.strictSame(plain.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 minute' }, 'a route may keep the default')
})

t.test('errorFormat must be one of the two', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.register(rateGuard, { errorFormat: 'xml' as 'problem' })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /errorFormat/ })
})
