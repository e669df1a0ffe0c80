// fastify.rateLimit() / createRateLimit() beyond what @fastify/rate-limit has (test/compat/decorators.test.ts
// compares the two): on Redis, reading without counting; under a Redis that does not answer, the deadline and
// failMode; a limiter of a group shares the group's budget.
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import type { Redis } from 'ioredis'
import { client, getRedis, ready, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { matchList } from './helpers/match-list.js'
import { allowing } from './helpers/lag.js'

/**
 * An app whose GET /check answers `createRateLimit(limiterOptions)`'s check, counting unless ?read; a check
 * that throws is answered `{ threw: { name, code, statusCode, message } }`.
 */
async function checking (t: Test, options: RateGuardOptions, limiterOptions?: object): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, ...options })
  const check = app.createRateLimit(limiterOptions)
  app.get('/check', async (request: FastifyRequest<{ Querystring: { read?: string, plain?: string } }>) => {
    try {
      return request.query.plain !== undefined ? await check(request, {}) : await check(request, { increment: request.query.read === undefined })
    } catch (err) {
      const { name, code, statusCode, message } = err as Error & { code?: string, statusCode?: number }
      return { threw: { name, code, statusCode, message } }
    }
  })
  await app.ready()
  return app
}

t.test('on Redis: a read counts nothing; the count is the budget\'s', async t => {
  const { url } = await getRedis(t)
  const app = await checking(t, { redis: await ready(client(t, url, { enableOfflineQueue: false })), nameSpace: uniquePrefix(), timeout: 3000 }, { max: 2, timeWindow: '1 minute' })
  const answers = []
  for (const query of ['?read', '', '?read', '?plain', '', '?read']) answers.push((await app.inject(`/check${query}`)).json())
  matchList(t, answers, [
    { remaining: 2, isExceeded: false },
    { remaining: 1, isExceeded: false },
    { remaining: 1, isExceeded: false },
    { remaining: 0, isExceeded: false },
    { remaining: 0, isExceeded: true, ttlInSeconds: 60 },
    // Nothing left: the next counted request would be refused.
    { remaining: 0, isExceeded: true }
  ])
})

/** A client lent to the plugin, with the 'error' listener its owner attaches (the server is stopped while it is frozen). */
async function lent (t: Test, url: string): Promise<Redis> {
  const redis = client(t, url, { enableOfflineQueue: false })
  redis.on('error', () => {})
  return await ready(redis)
}

t.test('a Redis that does not answer: within the deadline, failMode answers the check', async t => {
  const server = await startRedisServer(t)
  // open: the check answers, knowing no count; closed: the check throws (as theirs throws the store's error),
  // a read as well as a count, for the app to answer.
  // The error thrown is what kept Redis from deciding: here, the deadline.
  const unavailableError = { threw: { code: 'FST_RATE_GUARD_DEADLINE', message: 'Redis did not answer the rate limit decision within 200 ms' } }
  const cases: Array<[RateGuardOptions['failMode'], object, object]> = [
    ['open', { isAllowed: false, max: 5, remaining: 5, ttl: 0, isExceeded: false, isBanned: false }, { isAllowed: false, max: 5, remaining: 5, ttl: 0, isExceeded: false, isBanned: false }],
    ['closed', unavailableError, unavailableError]
  ]
  const apps = []
  for (const [failMode] of cases) apps.push(await checking(t, { redis: await lent(t, server.url), failMode, timeout: 200, breaker: false }, { max: 5, timeWindow: '1 minute' }))
  const hooked = Fastify()
  t.teardown(() => hooked.close())
  await hooked.register(rateGuard, { global: false, redis: await lent(t, server.url), failMode: 'closed', timeout: 200, breaker: false })
  hooked.get('/', { onRequest: hooked.rateLimit({ max: 5, timeWindow: '1 minute' }) }, async () => 'ok')
  server.freeze()
  const unavailable = await hooked.inject('/')
  t.equal(unavailable.statusCode, 503, 'rateLimit() as a hook: failMode closed answers 503 itself')
  t.equal(unavailable.headers['retry-after'], '1')
  t.teardown(() => server.stop())
  for (const [i, [failMode, counting, reading]] of cases.entries()) {
    for (const [query, expected] of [['', counting], ['?read', reading]] as const) {
      const started = performance.now()
      const answer = (await apps[i]!.inject(`/check${query}`)).json()
      const ms = performance.now() - started
      t.match(answer, expected, `${failMode}${query}`)
      if (failMode === 'open') t.notOk('threw' in answer, `${failMode}${query}: the check answers`)
      const bound = allowing(200, started, started + ms)
      t.ok(ms <= bound, `${failMode}${query}: answered in ${Math.round(ms)} ms (deadline 200; bound ${Math.round(bound)}, with the lag meanwhile)`)
    }
  }
})

t.test('the breaker open and failMode closed: the check throws the 503 at once, with no error of Redis\'s to give', async t => {
  const server = await startRedisServer(t)
  const app = await checking(t, { redis: await lent(t, server.url), failMode: 'closed', timeout: 200, breaker: { threshold: 1, coolDown: 60_000 } }, { max: 5, timeWindow: '1 minute' })
  server.freeze()
  t.teardown(() => server.stop())
  t.match((await app.inject('/check')).json(), { threw: { code: 'FST_RATE_GUARD_DEADLINE' } }, 'the deadline, which opens the breaker')
  t.match((await app.inject('/check')).json(), { threw: { code: 'FST_RATE_GUARD_UNAVAILABLE', statusCode: 503, message: 'Rate limiter unavailable, retry in 1 second' } }, 'then the breaker: unavailable')
})

t.test('a limiter with a groupId counts on the group\'s budget, with the routes of the group', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false })
  const check = app.createRateLimit({ groupId: 'reports', max: 3, timeWindow: '1 minute' })
  app.get('/report', { config: { rateLimit: { groupId: 'reports', max: 3, timeWindow: '1 minute' } } }, async () => 'ok')
  app.get('/check', async (request: FastifyRequest) => await check(request))
  t.equal((await app.inject('/report')).statusCode, 200)
  t.equal((await app.inject('/report')).statusCode, 200)
  t.match((await app.inject('/check')).json(), { remaining: 0, isExceeded: false }, 'the third request of the group')
  t.equal((await app.inject('/report')).statusCode, 429)
})
