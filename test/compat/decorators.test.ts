// @fastify/rate-limit compatibility, decorators: `fastify.rateLimit(options?)` gives a hook to put where the
// app chooses (a not-found handler, a route), and `fastify.createRateLimit(options?)` a check to call by hand.
// Run beside @fastify/rate-limit: the same answers; each limiter made with options keeps its own counters
// here (theirs share one counter per key, recorded below).
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { statuses, theirPlugin, times } from './helpers.js'
import type { Plugin } from './helpers.js'
import { client, getRedis, ready, uniquePrefix } from '../helpers/redis.js'
import { matchList } from '../helpers/match-list.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

async function app (t: Test, plugin: Plugin, options: Record<string, unknown>, routes: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const made = Fastify()
  t.teardown(() => made.close())
  await made.register((plugin === 'theirs' ? theirPlugin : rateGuard) as FastifyPluginAsync, options)
  routes(made)
  await made.ready()
  return made
}

t.test('rateLimit(options) as the not-found handler\'s preHandler: the same answers as @fastify/rate-limit', async t => {
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { max: 10, timeWindow: '1 minute' }, made => {
      made.setNotFoundHandler({ preHandler: made.rateLimit({ max: 2, timeWindow: '1 minute' }) }, async (_request, reply) => await reply.code(404).send({ gone: true }))
      made.get('/', async () => 'ok')
    })
    t.strictSame(await statuses(made, times(3, '/nowhere')), [404, 404, 429], `${plugin}: two misses, then limited`)
    t.strictSame(await statuses(made, times(2, '/')), [200, 200], `${plugin}: the routes keep the plugin's budget`)
  }
})

t.test('rateLimit() on routes of an app with global: false, and on a route the plugin already limits: counted once', async t => {
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { global: false, max: 2, timeWindow: '1 minute' }, made => {
      made.get('/limited', { onRequest: made.rateLimit() }, async () => 'ok')
      made.get('/free', async () => 'ok')
    })
    t.strictSame(await statuses(made, times(3, '/limited')), [200, 200, 429], `${plugin}: the plugin's limit where the hook is`)
    t.strictSame(await statuses(made, times(3, '/free')), [200, 200, 200], `${plugin}: nowhere else`)
  }
  const twice = await app(t, 'ours', { max: 2, timeWindow: '1 minute' }, made => {
    made.get('/', { preHandler: made.rateLimit({ max: 100, timeWindow: '1 minute' }) }, async () => 'ok')
  })
  t.strictSame(await statuses(twice, times(3, '/')), [200, 200, 429], 'the route\'s own hook counted it; the limiter put on it too did not count it again')
})

t.test('createRateLimit(): the fields of @fastify/rate-limit\'s answer; increment: false reads without counting', async t => {
  const answers: Record<Plugin, unknown[]> = { theirs: [], ours: [] }
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { global: false, max: 2, timeWindow: 60_000 }, made => {
      const check = made.createRateLimit()
      made.get('/', async (request: FastifyRequest) => {
        const read = await check(request, { increment: false })
        const counted = await check(request)
        return { read, counted }
      })
    })
    for (let i = 0; i < 3; i++) answers[plugin].push((await made.inject('/')).json())
  }
  const fields = (answer: unknown): unknown => {
    const { read, counted } = answer as { read: Record<string, unknown>, counted: Record<string, unknown> }
    const pick = ({ isAllowed, max, timeWindow, remaining, isExceeded, isBanned }: Record<string, unknown>): unknown => ({ isAllowed, max, timeWindow, remaining, isExceeded, isBanned })
    return { read: pick(read), counted: pick(counted), keys: [Object.keys(read).sort(), Object.keys(counted).sort()] }
  }
  // One difference, on purpose: a read with nothing left is exceeded here (the next counted request would be
  // refused); theirs says so only once a refused request has pushed its counter over max.
  const theirs = answers.theirs.map(fields) as Array<{ read: { isExceeded: boolean } }>
  t.equal(theirs[2]!.read.isExceeded, false, 'theirs: a read with nothing left is not exceeded')
  theirs[2]!.read.isExceeded = true
  t.strictSame(answers.ours.map(fields), theirs, 'the same fields and values (the key and the ttl aside)')
  matchList(t, answers.ours, [
    { read: { remaining: 2, isExceeded: false }, counted: { remaining: 1, isExceeded: false, key: '127.0.0.1', ttlInSeconds: 60 } },
    { read: { remaining: 1 }, counted: { remaining: 0, isExceeded: false } },
    { read: { remaining: 0, isExceeded: true }, counted: { remaining: 0, isExceeded: true, isBanned: false } }
  ])
})

t.test("their README's login check (read, then count only failed logins) refuses after max failures; theirs after max + 1", async t => {
  const failures: Record<Plugin, number> = { theirs: 0, ours: 0 }
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { global: false }, made => {
      // As their README's "Manual Rate Limit" example, every login failing.
      const checkRateLimit = made.createRateLimit({ max: 5, timeWindow: '1 minute' })
      made.post('/login', async (request, reply) => {
        const status = await checkRateLimit(request, { increment: false })
        if (!status.isAllowed && status.isExceeded) return await reply.code(429).send({ error: 'Too many attempts' })
        await checkRateLimit(request)
        return await reply.code(401).send({ error: 'Invalid credentials' })
      })
    })
    const codes = await statuses(made, times(10, { method: 'POST', url: '/login' }))
    failures[plugin] = codes.indexOf(429)
    t.strictSame(codes.slice(failures[plugin]), times(10 - failures[plugin], 429), `${plugin}: refused from then on`)
  }
  t.equal(failures.ours, 5, 'ours: five failed logins, then refused (a read said exceeded only past max before, so never here)')
  t.equal(failures.theirs, 6, 'theirs: six')
})

t.test('createRateLimit(options): each limiter keeps its own counters (theirs share one per key in Redis: recorded)', async t => {
  const { url } = await getRedis(t)
  const seen: Record<Plugin, number> = { theirs: 0, ours: 0 }
  for (const plugin of ['theirs', 'ours'] as const) {
    const redis = await ready(client(t, url, { enableOfflineQueue: false }))
    const made = await app(t, plugin, { global: false, redis, nameSpace: uniquePrefix() }, made => {
      const a = made.createRateLimit({ max: 3, timeWindow: '1 minute' })
      const b = made.createRateLimit({ max: 3, timeWindow: '1 minute' })
      made.get('/', async (request: FastifyRequest) => {
        await a(request)
        await a(request)
        const answer = await b(request)
        return answer.isAllowed ? -1 : answer.remaining
      })
    })
    const res = await made.inject('/')
    t.equal(res.statusCode, 200, `${plugin}: ${res.body}`)
    seen[plugin] = Number(res.body)
  }
  t.equal(seen.ours, 2, 'ours: b counted one request of its own')
  t.equal(seen.theirs, 0, 'theirs: b saw a\'s two requests as its own')
})

t.test('createRateLimit: an allow-listed client is { isAllowed: true, key }; a ban shows as isBanned', async t => {
  const made = await app(t, 'ours', { global: false }, made => {
    const check = made.createRateLimit({ max: 1, timeWindow: '1 minute', allowList: ['10.0.0.1'], ban: 0 })
    made.get('/', async (request: FastifyRequest) => await check(request))
  })
  t.strictSame((await made.inject({ url: '/', remoteAddress: '10.0.0.1' })).json(), { isAllowed: true, key: '10.0.0.1' })
  await made.inject('/')
  t.match((await made.inject('/')).json(), { isAllowed: false, isExceeded: true, isBanned: true, remaining: 0, ttlInSeconds: 60 })
})

t.test('the decorators check their options like a route\'s, naming the call', async t => {
  const made = await app(t, 'ours', {}, () => {})
  t.throws(() => made.rateLimit({ max: 'many' as never }), { code: INVALID, message: /"rateLimit\.max": expected an integer, 0 \(every request refused\) or more, got "many"/ })
  t.throws(() => made.createRateLimit({ maximum: 3 } as never), { code: INVALID, message: /^Invalid rate-guard option "createRateLimit\.maximum": no such option\. / })
  t.throws(() => made.createRateLimit(3 as never), { code: INVALID, message: /"createRateLimit": expected an object of options/ })
  t.throws(() => made.createRateLimit({ cache: 10 } as never), { code: INVALID, message: /"createRateLimit\.cache": expected it at register only/ })
})

t.test('rateLimit({ hook }): theirs take it and never use it; here it is not used either, and one warning says so', async t => {
  const lines: string[] = []
  const made = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(line) } } } })
  t.teardown(() => made.close())
  await made.register(rateGuard, { global: false })
  made.get('/', { preHandler: made.rateLimit({ max: 1, timeWindow: '1 minute', hook: 'onRequest' }) }, async () => 'ok')
  await made.ready()
  t.strictSame(await statuses(made, times(2, '/')), [200, 429], 'limited where the app placed it')
  matchList(t, lines.map(line => (JSON.parse(line) as { msg: string }).msg).filter(msg => msg.includes('hook')), [/rateLimit\.hook is not used: the limiter runs where the app places it/])
})

t.test('a max theirs replaces by its default (-1: 1000) is replaced here too, with one warning naming the call', async t => {
  const lines: string[] = []
  const made = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(line) } } } })
  t.teardown(() => made.close())
  await made.register(rateGuard, { global: false })
  const check = made.createRateLimit({ max: -1, timeWindow: '1 minute' })
  made.get('/', async (request: FastifyRequest) => await check(request))
  await made.ready()
  const warned = lines.map(line => (JSON.parse(line) as { msg: string }).msg).filter(msg => msg.includes('createRateLimit.max'))
  t.equal(warned.length, 1, 'one warning')
  t.match(warned[0], /createRateLimit\.max -1 is not valid; using 1000/)
  t.match((await made.inject('/')).json(), { isAllowed: false, isExceeded: false, max: 1000, remaining: 999 }, 'the limiter counts to 1000')
})

t.test('createRateLimit({ ipv6Subnet, skipOnError }): the options theirs takes for one limiter, with the same answers', async t => {
  const answers: Record<Plugin, unknown[]> = { theirs: [], ours: [] }
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { global: false }, made => {
      const check = made.createRateLimit({ max: 1, timeWindow: '1 minute', ipv6Subnet: 128, skipOnError: true })
      made.get('/', async (request: FastifyRequest) => await check(request))
    })
    for (const remoteAddress of ['2001:db8::1', '2001:db8::2', '2001:db8::1']) {
      const { isExceeded } = (await made.inject({ url: '/', remoteAddress })).json() as { isExceeded: boolean }
      answers[plugin].push(isExceeded)
    }
  }
  t.strictSame(answers.ours, answers.theirs)
  t.strictSame(answers.ours, [false, false, true], 'each address of the /64 is a client of its own')
})

t.test("a plugin of the app's that depends on '@fastify/rate-limit' loads after either plugin, and limits with fastify.rateLimit()", async t => {
  // As an app's own plugin declares it: it uses the decorator, so it says it needs the plugin that makes it.
  const routes = fp(async (app: FastifyInstance) => {
    app.get('/limited', { onRequest: app.rateLimit({ max: 1, timeWindow: '1 minute' }) }, async () => 'ok')
  }, { name: 'app-routes', dependencies: ['@fastify/rate-limit'] })
  for (const plugin of ['theirs', 'ours'] as const) {
    const made = await app(t, plugin, { global: false }, made => { made.register(routes) })
    t.ok(made.hasPlugin('@fastify/rate-limit'), `${plugin}: hasPlugin('@fastify/rate-limit')`)
    t.strictSame(await statuses(made, times(2, '/limited')), [200, 429], `${plugin}: the dependent plugin's route is limited`)
  }
  const nested = Fastify()
  t.teardown(() => nested.close())
  await nested.register(rateGuard)
  await nested.register(rateGuard, { nameSpace: 'inner:' })
  await nested.register(routes)
  await nested.ready()
  t.ok(nested.hasPlugin('fastify-rate-guard'), 'and its own name')
})
