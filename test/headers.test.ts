// Rate-limit headers and refusal bodies, through fastify.inject against a real Redis.
// Time-dependent expectations are computed from the log's real entries (ZSET scores) and Redis's
// own clock read just before and just after each request, so they hold on a slow machine.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import type { Redis } from 'ioredis'

// The default key of a client known by its address: the bare address, as @fastify/rate-limit writes it.
const LOCAL = '127.0.0.1'

interface Setup {
  app: FastifyInstance
  redis: Redis
  nameSpace: string
}

async function setup (t: Test, opts: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<Setup> {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, ...opts })
  if (routes === undefined) app.get('/', async () => 'ok')
  else routes(app)
  await app.ready()
  return { app, redis: client(t, url), nameSpace }
}

async function redisNow (redis: Redis): Promise<number> {
  const [s, us] = await redis.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}

/** Scores (arrival ms, Redis clock) of the entries in a log, oldest first. */
async function entries (redis: Redis, nameSpace: string, scope = 'all', key = LOCAL): Promise<number[]> {
  const flat = await redis.zrange(identityKeys(nameSpace, scope, key).log, '0', '-1', 'WITHSCORES')
  return flat.filter((_, i) => i % 2 === 1).map(Number)
}

/** A request with Redis's clock read just before and just after it: the decision happened in between. */
async function timed (s: Setup, url = '/', headers: Record<string, string> = {}) {
  const before = await redisNow(s.redis)
  const res = await s.app.inject({ url, headers })
  const after = await redisNow(s.redis)
  return { res, before, after }
}

/** Whole seconds (rounded up) until `at`, as seen from some instant between `before` and `after`. */
function secondsUntil (t: Test, value: string | string[] | number | undefined, at: number, before: number, after: number, what: string): number {
  t.type(value, 'string', `${what} is present`)
  const n = Number(value)
  t.match(String(value), /^\d+$/, `${what} is a whole number`)
  t.ok(n >= Math.ceil((at - after) / 1000) && n <= Math.ceil((at - before) / 1000),
    `${what} = ${n} is the seconds (rounded up) until ${at} seen between ${before} and ${after}`)
  return n
}

async function sleepUntil (redis: Redis, at: number): Promise<void> {
  const wait = at - await redisNow(redis)
  if (wait > 0) await sleep(wait)
}

const X_HEADERS = ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']

t.test('allowed responses: limit, remaining = max - entries, reset = until the oldest entry leaves', async t => {
  const s = await setup(t, { max: 3, timeWindow: 3000 })

  const first = await timed(s)
  t.equal(first.res.statusCode, 200)
  t.equal(first.res.headers['x-ratelimit-limit'], '3')
  t.equal(first.res.headers['x-ratelimit-remaining'], '2')
  const [oldest] = await entries(s.redis, s.nameSpace)
  t.ok(oldest !== undefined && oldest >= first.before && oldest <= first.after, 'the request was logged at its decision time')
  secondsUntil(t, first.res.headers['x-ratelimit-reset'], oldest! + 3000, first.before, first.after, 'reset after one request')
  t.notOk('retry-after' in first.res.headers, 'no Retry-After on an allowed response')

  // Later requests still report the reset of the OLDEST entry, not a full window from now.
  await sleep(1100)
  const second = await timed(s)
  t.equal(second.res.headers['x-ratelimit-remaining'], '1')
  const reset = secondsUntil(t, second.res.headers['x-ratelimit-reset'], oldest! + 3000, second.before, second.after, 'reset after two requests')
  t.ok(reset <= 2, `reset ${reset} counts from the oldest entry (a full window would say 3)`)

  const third = await timed(s)
  t.equal(third.res.statusCode, 200)
  t.equal(third.res.headers['x-ratelimit-remaining'], '0', 'the last request of the budget leaves 0')
  t.same(await entries(s.redis, s.nameSpace).then(e => e.length), 3)
})

t.test('a 429: headers, Retry-After and the exact body', async t => {
  const s = await setup(t, { max: 2, timeWindow: 2000 })
  await s.app.inject('/')
  await s.app.inject('/')
  const [oldest] = await entries(s.redis, s.nameSpace)

  const { res, before, after } = await timed(s)
  t.equal(res.statusCode, 429)
  t.equal(res.headers['x-ratelimit-limit'], '2')
  t.equal(res.headers['x-ratelimit-remaining'], '0')
  const reset = secondsUntil(t, res.headers['x-ratelimit-reset'], oldest! + 2000, before, after, 'reset')
  const retry = secondsUntil(t, res.headers['retry-after'], oldest! + 2000, before, after, 'retry-after')
  t.equal(retry, reset, 'with the log exactly full, the wait is until the oldest entry leaves')
  // @fastify/rate-limit's body, exactly: Fastify's default error handler, without the error's code.
  t.strictSame(res.json(), {
    statusCode: 429,
    error: 'Too Many Requests',
    message: `Rate limit exceeded, retry in ${retry} second${retry === 1 ? '' : 's'}`
  })
  t.equal((await entries(s.redis, s.nameSpace)).length, 2, 'a denied request is not logged')
})

t.test('Retry-After is the real wait: obeying it is allowed, waiting clearly less is still denied', async t => {
  const s = await setup(t, { max: 1, timeWindow: 2000 })
  t.equal((await s.app.inject('/')).statusCode, 200)
  const [entry] = await entries(s.redis, s.nameSpace)

  const denied = await timed(s)
  t.equal(denied.res.statusCode, 429)
  const retry = secondsUntil(t, denied.res.headers['retry-after'], entry! + 2000, denied.before, denied.after, 'retry-after')
  t.equal(retry, 2, 'a 2 s window, just spent: retry in 2 s')
  t.equal(denied.res.json().message, 'Rate limit exceeded, retry in 2 seconds')

  // Well before the entry leaves (it leaves at entry + 2000): still denied.
  await sleepUntil(s.redis, entry! + 1300)
  const early = await timed(s)
  t.ok(early.after < entry! + 2000, 'the early request was decided before the entry left')
  t.equal(early.res.statusCode, 429, 'waiting clearly less than Retry-After is still denied')
  t.equal(early.res.headers['retry-after'], '1', 'and is told the remaining wait')

  // Obey the first answer: wait Retry-After seconds from when it arrived.
  await sleepUntil(s.redis, denied.after + retry * 1000)
  const obeyed = await s.app.inject('/')
  t.equal(obeyed.statusCode, 200, 'waiting Retry-After seconds is enough')
  t.equal(obeyed.headers['x-ratelimit-remaining'], '0')
})

t.test('Retry-After waits for as many entries as must leave, not only the oldest', async t => {
  // max is read from a header, so the budget can shrink under a full log: then more than one entry must
  // leave before one more request fits. Retry-After (the real wait) is that, and so is Reset: no unit is free
  // before (the oldest leaving leaves the count at the new max).
  const s = await setup(t, { max: (request) => Number(request.headers['x-max']), timeWindow: 2000 })
  const two = { 'x-max': '2' }
  t.equal((await s.app.inject({ url: '/', headers: two })).statusCode, 200)
  await sleep(1000)
  t.equal((await s.app.inject({ url: '/', headers: two })).statusCode, 200)
  const [first, second] = await entries(s.redis, s.nameSpace)

  const one = { 'x-max': '1' }
  const denied = await timed(s, '/', one)
  t.equal(denied.res.statusCode, 429)
  t.equal(denied.res.headers['x-ratelimit-limit'], '1')
  t.equal(denied.res.headers['x-ratelimit-remaining'], '0')
  const reset = secondsUntil(t, denied.res.headers['x-ratelimit-reset'], second! + 2000, denied.before, denied.after, 'reset (second leaves)')
  const retry = secondsUntil(t, denied.res.headers['retry-after'], second! + 2000, denied.before, denied.after, 'retry-after (second leaves)')
  t.ok(retry > Math.ceil((first! + 2000 - denied.after) / 1000), `Retry-After ${retry} is later than the oldest's leaving`)
  t.equal(reset, retry, 'Reset is the same wait')
  t.equal(denied.res.json().message, `Rate limit exceeded, retry in ${retry} second${retry === 1 ? '' : 's'}`)

  // After the oldest left but before the second does: still one entry, max 1: denied.
  await sleepUntil(s.redis, first! + 2200)
  const between = await timed(s, '/', one)
  t.ok(between.after < second! + 2000, 'decided before the second entry left')
  t.equal(between.res.statusCode, 429, 'the oldest leaving was not enough')

  await sleepUntil(s.redis, denied.after + retry * 1000)
  t.equal((await s.app.inject({ url: '/', headers: one })).statusCode, 200, 'obeying Retry-After is allowed')
})

t.test('a 403 ban: Retry-After and Reset are the ban, body in the long form', async t => {
  const cases: Array<[number | string, number, string]> = [
    ['7s', 7, '7 seconds'],
    [1000, 1, '1 second'],
    ['1 minute', 60, '1 minute'],
    ['10 minutes', 600, '10 minutes']
  ]
  for (const [duration, seconds, words] of cases) {
    const s = await setup(t, { max: 1, timeWindow: 10_000, ban: { threshold: 1, duration } })
    t.equal((await s.app.inject('/')).statusCode, 200)
    const res = await s.app.inject('/')
    t.equal(res.statusCode, 403, `ban of ${duration}`)
    t.equal(res.headers['retry-after'], String(seconds), `Retry-After is the whole ban of ${duration}`)
    t.equal(res.headers['x-ratelimit-reset'], String(seconds), 'Reset is when the ban ends')
    t.equal(res.headers['x-ratelimit-remaining'], '0')
    t.equal(res.headers['x-ratelimit-limit'], '1')
    t.strictSame(res.json(), {
      statusCode: 403,
      error: 'Forbidden',
      message: `Rate limit exceeded, retry in ${words}`
    })
  }
})

t.test('the long form of the wait in 429 messages', async t => {
  // One request spends the budget; the next is told how long the window still holds it.
  const cases: Array<[number | string, string]> = [
    [500, '1 second'],
    ['7s', '7 seconds'],
    ['1 minute', '1 minute'],
    ['2 minutes', '2 minutes']
  ]
  for (const [timeWindow, words] of cases) {
    const s = await setup(t, { max: 1, timeWindow })
    await s.app.inject('/')
    const res = await s.app.inject('/')
    t.equal(res.statusCode, 429)
    t.equal(res.json().message, `Rate limit exceeded, retry in ${words}`, `window ${timeWindow}`)
  }
})

t.test("standardHeaders: 'draft-10' sends the IETF fields, exact strings", async t => {
  const s = await setup(t, { max: 5, timeWindow: 60_000, standardHeaders: 'draft-10' }, app => {
    app.get('/', async () => 'ok')
    app.get('/search', { config: { rateLimit: { groupId: 'search', max: 2, timeWindow: '1500ms' } } }, async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 3 } } }, async () => 'ok')
  })

  const res = await s.app.inject('/')
  t.equal(res.headers['ratelimit-policy'], '"default";q=5;qu="requests";w=60')
  t.equal(res.headers.ratelimit, '"default";r=4;t=60')
  t.equal(res.headers['x-ratelimit-limit'], '5', 'legacy headers stay on by default')

  const own = await s.app.inject('/own')
  t.equal(own.headers['ratelimit-policy'], '"default";q=3;qu="requests";w=60', 'a route without groupId is policy "default"')
  t.equal(own.headers.ratelimit, '"default";r=2;t=60')

  const search = await s.app.inject('/search')
  t.equal(search.headers['ratelimit-policy'], '"search";q=2;qu="requests";w=2', 'the policy is named after the groupId; w is whole seconds, rounded up')
  t.equal(search.headers.ratelimit, '"search";r=1;t=2')
  await s.app.inject('/search')
  const denied = await s.app.inject('/search')
  t.equal(denied.statusCode, 429)
  t.equal(denied.headers['ratelimit-policy'], '"search";q=2;qu="requests";w=2')
  t.match(denied.headers.ratelimit, /^"search";r=0;t=[12]$/)
  t.match(denied.headers['retry-after'], /^[12]$/)
})

t.test('legacyHeaders: false removes the X-RateLimit fields, not Retry-After', async t => {
  const s = await setup(t, { max: 1, timeWindow: 5000, legacyHeaders: false, standardHeaders: 'draft-10' })
  const res = await s.app.inject('/')
  for (const name of X_HEADERS) t.notOk(name in res.headers, `no ${name}`)
  t.equal(res.headers['ratelimit-policy'], '"default";q=1;qu="requests";w=5')
  t.equal(res.headers.ratelimit, '"default";r=0;t=5')
  const denied = await s.app.inject('/')
  t.equal(denied.statusCode, 429)
  for (const name of X_HEADERS) t.notOk(name in denied.headers, `no ${name} on the 429`)
  t.equal(denied.headers['retry-after'], '5')

  const bare = await setup(t, { max: 1, timeWindow: 5000, legacyHeaders: false })
  const quiet = await bare.app.inject('/')
  t.equal(quiet.statusCode, 200)
  t.notOk(Object.keys(quiet.headers).some(h => h.includes('ratelimit')), 'no rate-limit header at all')
  const refused = await bare.app.inject('/')
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['retry-after'], '5', 'a refusal still says when to come back')
})

t.test('per-route header switches merge over the plugin', async t => {
  const s = await setup(t, { max: 3, timeWindow: 5000 }, app => {
    app.get('/std', { config: { rateLimit: { standardHeaders: 'draft-10', legacyHeaders: false } } }, async () => 'ok')
    app.get('/plain', async () => 'ok')
  })
  const std = await s.app.inject('/std')
  t.equal(std.headers.ratelimit, '"default";r=2;t=5')
  t.notOk('x-ratelimit-limit' in std.headers)
  const plain = await s.app.inject('/plain')
  t.notOk('ratelimit' in plain.headers)
  t.equal(plain.headers['x-ratelimit-limit'], '3')
})

t.test('header values are whole numbers, also with windows and waits that are not whole seconds', async t => {
  const s = await setup(t, { max: 2, timeWindow: 1777, standardHeaders: 'draft-10' })
  const seen: LightMyRequestResponse[] = []
  for (let i = 0; i < 3; i++) {
    seen.push(await s.app.inject('/'))
    await sleep(137)
  }
  t.same(seen.map(r => r.statusCode), [200, 200, 429])
  for (const res of seen) {
    for (const name of [...X_HEADERS, ...(res.statusCode === 429 ? ['retry-after'] : [])]) {
      t.match(res.headers[name], /^\d+$/, `${name}: ${String(res.headers[name])}`)
    }
    t.match(res.headers['ratelimit-policy'], /^"default";q=2;qu="requests";w=2$/)
    t.match(res.headers.ratelimit, /^"default";r=\d+;t=\d+$/)
  }
  t.equal(seen[2]!.headers['retry-after'], '2', 'a wait of 1777 ms less a few hundred rounds up to 2 s')
})
