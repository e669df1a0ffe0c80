// Per-route configuration, groups, hooks, allow lists, error builders and per-request limits, through
// fastify.inject against a real Redis.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { ErrorResponseContext, RateGuardOptions } from '../lib/index.js'
import { freePort, getRedis, uniquePrefix } from './helpers/redis.js'

const ok = async (): Promise<string> => 'ok'

async function setup (t: Test, opts: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const { url } = await getRedis(t)
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), verifyApiKey: () => true, ...opts })
  if (routes === undefined) app.get('/', ok)
  else routes(app)
  await app.ready()
  return app
}

interface Req { url?: string, method?: 'GET' | 'HEAD' | 'POST', headers?: Record<string, string>, remoteAddress?: string }

async function codes (app: FastifyInstance, n: number, req: Req | string = '/'): Promise<number[]> {
  const options = typeof req === 'string' ? { url: req } : { url: '/', ...req }
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject(options)).statusCode)
  return out
}

const hasRateHeaders = (headers: Record<string, unknown>): boolean => Object.keys(headers).some(h => h.includes('ratelimit') || h === 'retry-after')

t.test('a route config is merged over the plugin options, into a budget of its own', async t => {
  const exceeded: string[] = []
  const app = await setup(t, { max: 5, timeWindow: 10_000, ban: { threshold: 1, duration: '1 minute' } }, app => {
    app.get('/plain', ok)
    app.get('/max', { config: { rateLimit: { max: 2 } } }, ok)
    app.get('/window', { config: { rateLimit: { timeWindow: '3s' } } }, ok)
    app.get('/noban', { config: { rateLimit: { max: 1, ban: false, onExceeded: (_r: FastifyRequest, key: string) => { exceeded.push(key) } } } }, ok)
  })
  const max = await app.inject('/max')
  t.equal(max.headers['x-ratelimit-limit'], '2', 'the route max')
  t.equal(max.headers['x-ratelimit-reset'], '10', 'the plugin window')
  const window = await app.inject('/window')
  t.equal(window.headers['x-ratelimit-limit'], '5', 'the plugin max')
  t.equal(window.headers['x-ratelimit-reset'], '3', 'the route window')

  t.same(await codes(app, 5, '/noban'), [200, 429, 429, 429, 429], 'ban: false on the route: denied, never banned')
  t.same(exceeded, Array(4).fill('127.0.0.1'), 'the route\'s own onExceeded')

  const plain = await app.inject('/plain')
  t.equal(plain.headers['x-ratelimit-remaining'], '4', 'the routes with their own config did not spend the plugin budget')
  t.same(await codes(app, 2, '/max'), [200, 403], 'the route inherits the plugin ban')
  t.equal((await app.inject('/plain')).statusCode, 403, 'and the ban holds everywhere')
})

t.test('config.rateLimit: false: no headers, never limited', async t => {
  const app = await setup(t, { max: 1, timeWindow: 10_000 }, app => {
    app.get('/open', { config: { rateLimit: false } }, ok)
    app.get('/limited', ok)
  })
  for (let i = 0; i < 5; i++) {
    const res = await app.inject('/open')
    t.equal(res.statusCode, 200)
    t.notOk(hasRateHeaders(res.headers), 'no rate-limit header')
  }
  t.same(await codes(app, 2, '/limited'), [200, 429])
  t.same(await codes(app, 2, '/open'), [200, 200], 'still open while the client is limited elsewhere')
})

t.test('invalid route configs fail registration with a coded error naming the option', async t => {
  const { url } = await getRedis(t)

  async function failure (config: unknown, declare?: (app: FastifyInstance) => void): Promise<FastifyError | undefined> {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix() })
    try {
      if (declare !== undefined) declare(app)
      else app.get('/bad', { config: { rateLimit: config as false } }, ok)
      await app.ready()
    } catch (err) {
      return err as FastifyError
    }
    return undefined
  }

  for (const config of [true, 1, 'x', [], [{ max: 1 }], 0, () => ({ max: 1 })]) {
    const err = await failure(config)
    t.equal(err?.code, 'FST_RATE_GUARD_INVALID_ROUTE_CONFIG', `config.rateLimit = ${JSON.stringify(config) ?? String(config)}`)
    // `true` is told what to write instead, after their words (test/option-suggestions.test.ts).
    if (config === true) t.match(err?.message, /^Unknown value for route rate-limit configuration: GET \/bad gives/)
    else t.equal(err?.message, 'Unknown value for route rate-limit configuration', '@fastify/rate-limit\'s message, word for word')
    t.match(err?.stack, /routes\.test\.ts/, 'the stack points at the route declared')
  }

  // A non-string groupId: @fastify/rate-limit's message, word for word.
  const groupId = await failure({ groupId: 7 })
  t.equal(groupId?.code, 'FST_RATE_GUARD_INVALID_OPTION', '{"groupId":7} is refused')
  t.equal(groupId?.message, 'groupId must be a string')

  // The values @fastify/rate-limit replaces by a default are no error (test/options.test.ts has the warnings).
  for (const config of [{ max: -1 }, { max: 1.5 }, { timeWindow: 0 }, { timeWindow: -5 }, { ipv6Subnet: 0 }, { ipv6Subnet: 129 }]) {
    t.equal(await failure(config), undefined, `${JSON.stringify(config)} is accepted`)
  }

  const options: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ foo: 1 }, 'config.rateLimit.foo', /no such option/],
    [{ max: '10' }, 'config.rateLimit.max', /got "10"/],
    [{ failMode: null }, 'config.rateLimit.failMode', /got null/],
    [{ timeWindow: 'soon' }, 'config.rateLimit.timeWindow', /got "soon"/],
    [{ timeWindow: '-5' }, 'config.rateLimit.timeWindow', /got "-5"/],
    [{ continueExceeding: 'yes' }, 'config.rateLimit.continueExceeding', /got "yes"/],
    [{ exponentialBackoff: 1 }, 'config.rateLimit.exponentialBackoff', /got 1/],
    [{ ban: true }, 'config.rateLimit.ban', /got true/],
    [{ ban: { threshold: 0, duration: '1s' } }, 'config.rateLimit.ban.threshold', /got 0/],
    [{ ban: { threshold: 1 } }, 'config.rateLimit.ban.duration', /got undefined/],
    [{ ban: { threshold: 1, duration: '1s', forever: true } }, 'config.rateLimit.ban.forever', /no such option/],
    [{ standardHeaders: 'draft-7' }, 'config.rateLimit.standardHeaders', /got "draft-7"/],
    [{ standardHeaders: true }, 'config.rateLimit.standardHeaders', /got true/],
    [{ legacyHeaders: 'yes' }, 'config.rateLimit.legacyHeaders', /got "yes"/],
    [{ allowList: '127.0.0.1' }, 'config.rateLimit.allowList', /got "127.0.0.1"/],
    [{ allowList: [1] }, 'config.rateLimit.allowList', /got an array/],
    [{ keyGenerator: 'ip' }, 'config.rateLimit.keyGenerator', /got "ip"/],
    [{ onExceeded: {} }, 'config.rateLimit.onExceeded', /got an object/],
    [{ errorResponseBuilder: 1 }, 'config.rateLimit.errorResponseBuilder', /got 1/],
    [{ hook: 'later' }, 'config.rateLimit.hook', /got "later"/],
    [{ failMode: 'maybe' }, 'config.rateLimit.failMode', /got "maybe"/],
    [{ skipOnError: 'yes' }, 'config.rateLimit.skipOnError', /got "yes"/],
    [{ skipOnError: true, failMode: 'open' }, 'config.rateLimit.skipOnError', /not both failMode and skipOnError/],
    // Plugin-only options have no meaning on one route.
    [{ redis: 'redis://x' }, 'config.rateLimit.redis', /at register only .*got "redis:\/\/x"/],
    [{ cache: 100 }, 'config.rateLimit.cache', /at register only .*got 100/],
    [{ enableDraftSpec: true }, 'config.rateLimit.enableDraftSpec', /at register only/]
  ]
  for (const [config, name, got] of options) {
    const err = await failure(config)
    t.equal(err?.code, 'FST_RATE_GUARD_INVALID_OPTION', `${JSON.stringify(config)} is refused`)
    t.ok(err?.message.includes(`"${name}"`), `the message names ${name}: ${err?.message}`)
    t.match(err?.message, got, 'and the bad value')
  }

  // In an encapsulated context the route is declared during boot: ready() rejects.
  const nested = await failure(undefined, app => {
    app.register(async child => { child.get('/nested', { config: { rateLimit: { max: '10' as never } } }, ok) })
  })
  t.equal(nested?.code, 'FST_RATE_GUARD_INVALID_OPTION', 'ready() rejects for a route declared in a child plugin')

  // The same checks at the plugin level: register rejects.
  const app = Fastify()
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(rateGuard, { redis: url, max: '10' as never }) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"max": .*got "10"/ })
})

t.test('groupId: routes of one group share a budget; other groups and the plugin budget are apart', async t => {
  const app = await setup(t, { max: 3, timeWindow: 10_000, standardHeaders: 'draft-10' }, app => {
    app.get('/a1', { config: { rateLimit: { groupId: 'a', max: 2 } } }, ok)
    app.post('/a2', { config: { rateLimit: { groupId: 'a', max: 2 } } }, ok)
    app.get('/b', { config: { rateLimit: { groupId: 'b', max: 2 } } }, ok)
    app.get('/p1', ok)
    app.get('/p2', ok)
    app.get('/own1', { config: { rateLimit: { max: 2 } } }, ok)
    app.get('/own2', { config: { rateLimit: { max: 2 } } }, ok)
  })
  const a1 = await app.inject('/a1')
  t.equal(a1.headers['x-ratelimit-remaining'], '1')
  t.equal(a1.headers.ratelimit, '"a";r=1;t=10')
  const a2 = await app.inject({ method: 'POST', url: '/a2' })
  t.equal(a2.headers['x-ratelimit-remaining'], '0', 'the second route of the group spends the same budget')
  t.same(await codes(app, 1, '/a1'), [429], 'the group budget is spent for both routes')
  t.same(await codes(app, 1, { method: 'POST', url: '/a2' }), [429])
  t.same(await codes(app, 3, '/b'), [200, 200, 429], 'another group has its own budget')

  // Routes without their own config share the plugin-level budget.
  t.same(await codes(app, 2, '/p1'), [200, 200])
  const p2 = await app.inject('/p2')
  t.equal(p2.statusCode, 200)
  t.equal(p2.headers['x-ratelimit-remaining'], '0', 'p1 and p2 share one plugin budget of 3')
  t.same(await codes(app, 1, '/p1'), [429])

  // Routes with their own config (no group) each have a budget.
  t.same(await codes(app, 3, '/own1'), [200, 200, 429])
  t.same(await codes(app, 3, '/own2'), [200, 200, 429], 'own budgets are apart')
})

t.test('global: false limits only the routes with config.rateLimit', async t => {
  const app = await setup(t, { max: 2, timeWindow: 10_000, global: false }, app => {
    app.get('/plain', ok)
    app.get('/opted', { config: { rateLimit: {} } }, ok)
    app.get('/own', { config: { rateLimit: { max: 1 } } }, ok)
  })
  for (let i = 0; i < 4; i++) {
    const res = await app.inject('/plain')
    t.equal(res.statusCode, 200)
    t.notOk(hasRateHeaders(res.headers), 'a route without config is not limited')
  }
  const opted = await app.inject('/opted')
  t.equal(opted.headers['x-ratelimit-limit'], '2', 'an empty config opts in with the plugin options')
  t.same(await codes(app, 2, '/opted'), [200, 429])
  t.same(await codes(app, 2, '/own'), [200, 429])
})

t.test('HEAD shares the GET budget, and counts once', async t => {
  const app = await setup(t, { max: 4, timeWindow: 10_000 }, app => {
    app.get('/', ok)
    app.get('/own', { config: { rateLimit: { max: 3 } } }, ok)
  })
  const head = await app.inject({ method: 'HEAD', url: '/own' })
  t.equal(head.statusCode, 200)
  t.equal(head.headers['x-ratelimit-remaining'], '2', 'one HEAD is one request')
  const get = await app.inject('/own')
  t.equal(get.headers['x-ratelimit-remaining'], '1', 'GET continues the HEAD budget')
  t.same(await codes(app, 2, { method: 'HEAD', url: '/own' }), [200, 429])
  t.same(await codes(app, 1, '/own'), [429])

  const plain = await app.inject({ method: 'HEAD', url: '/' })
  t.equal(plain.headers['x-ratelimit-remaining'], '3', 'the plugin budget: HEAD counts once too')
  t.equal((await app.inject('/')).headers['x-ratelimit-remaining'], '2')
})

t.test("hook: 'preHandler' keys on the user an earlier hook authenticated", async t => {
  const auth = async (request: FastifyRequest): Promise<void> => {
    const user = request.headers['x-user']
    if (typeof user === 'string') Object.assign(request, { user: { id: user } })
  }
  for (const hook of ['preHandler', 'onRequest'] as const) {
    const exceeded: string[] = []
    const app = await setup(t, { max: 2, timeWindow: 10_000, hook, onExceeded: (_r, key) => { exceeded.push(key) } }, app => {
      app.addHook('preValidation', auth)
      app.post('/', ok)
    })
    const alice = { method: 'POST' as const, headers: { 'x-user': 'alice' } }
    const bob = { method: 'POST' as const, headers: { 'x-user': 'bob' } }
    t.same(await codes(app, 3, alice), [200, 200, 429], `${hook}: alice spends her budget`)
    if (hook === 'preHandler') {
      t.same(await codes(app, 3, bob), [200, 200, 429], 'preHandler: bob, from the same IP, has his own')
      t.same(exceeded, ['user:alice', 'user:bob'])
    } else {
      t.same(await codes(app, 1, bob), [429], 'onRequest runs before the auth hook: both count as the IP')
      t.same(exceeded, ['127.0.0.1', '127.0.0.1'])
    }
  }
})

t.test('errorResponseBuilder: its result is thrown to the app\'s error handler', async t => {
  const contexts: ErrorResponseContext[] = []
  const handled: Array<{ statusCode: unknown, tag: unknown }> = []
  const app = await setup(t, {
    max: 2,
    timeWindow: 5000,
    ban: { threshold: 2, duration: '1 minute' },
    errorResponseBuilder: (_request, context) => {
      contexts.push(context)
      return { tag: 'built', message: `slow down, retry in ${context.after}` }
    }
  }, app => {
    app.setErrorHandler((err: FastifyError & { tag?: string }, _request, reply) => {
      handled.push({ statusCode: err.statusCode, tag: err.tag })
      return reply.code(err.statusCode ?? 500).send({ shapedBy: 'handler', said: err.message })
    })
    app.get('/', ok)
    app.get('/teapot', { config: { rateLimit: { max: 1, errorResponseBuilder: () => ({ statusCode: 418, message: 'tea' }) } } }, ok)
  })
  await codes(app, 2)
  const limited = await app.inject('/')
  t.equal(limited.statusCode, 429)
  t.strictSame(limited.json(), { shapedBy: 'handler', said: 'slow down, retry in 5 seconds' })
  t.equal(limited.headers['retry-after'], '5', 'the headers are still sent')
  t.strictSame(handled[0], { statusCode: 429, tag: 'built' }, 'the handler saw the built object, with statusCode filled in')
  const [ctx] = contexts
  t.strictSame(Object.keys(ctx!).sort(), ['after', 'ban', 'max', 'statusCode', 'ttl'])
  t.equal(ctx!.statusCode, 429)
  t.equal(ctx!.ban, false)
  t.equal(ctx!.max, 2)
  t.ok(ctx!.ttl > 4000 && ctx!.ttl <= 5000, `ttl ${ctx!.ttl} is the wait in ms`)
  t.equal(ctx!.after, '5 seconds')

  const banned = await app.inject('/')
  t.equal(banned.statusCode, 403)
  t.strictSame(contexts[1], { statusCode: 403, ban: true, max: 2, ttl: 60_000, after: '1 minute' })
  t.strictSame(handled[1], { statusCode: 403, tag: 'built' })

  const other = { url: '/teapot', remoteAddress: '10.0.0.7' }
  await codes(app, 1, other)
  const teapot = await app.inject(other)
  t.equal(teapot.statusCode, 418, 'a statusCode the builder sets is kept')
  t.strictSame(teapot.json(), { shapedBy: 'handler', said: 'tea' })
})

t.test('errorResponseBuilder must return an object: otherwise a 500 naming it', async t => {
  for (const value of ['too many', 429, null, undefined]) {
    const app = await setup(t, { max: 1, timeWindow: 5000, errorResponseBuilder: () => value as unknown as object })
    await app.inject('/')
    const res = await app.inject('/')
    t.equal(res.statusCode, 500, `a builder returning ${String(value)}`)
    t.equal(res.json().code, 'FST_RATE_GUARD_INVALID_OPTION')
    t.match(res.json().message, /"errorResponseBuilder"/)
  }
})

t.test('allowList: addresses (as @fastify/rate-limit takes them) and tier keys; never limited, no headers', async t => {
  const app = await setup(t, { max: 1, timeWindow: 10_000, allowList: ['127.0.0.1', 'apikey:trusted'] }, app => {
    app.get('/', ok)
    app.get('/prefixed', { config: { rateLimit: { allowList: ['ip:127.0.0.1'] } } }, ok)
  })
  for (let i = 0; i < 4; i++) {
    const res = await app.inject('/')
    t.equal(res.statusCode, 200)
    t.notOk(hasRateHeaders(res.headers), 'an allowed key gets no headers')
  }
  t.same(await codes(app, 2, { remoteAddress: '10.0.0.3' }), [200, 429], 'other clients are limited')
  t.same(await codes(app, 3, { headers: { 'x-api-key': 'trusted' }, remoteAddress: '10.0.0.5' }), [200, 200, 200], 'a tier key is allowed')
  t.same(await codes(app, 2, '/prefixed'), [200, 429], 'an ip: prefix is no spelling of an address: the client is limited')
  const spoof = { headers: { 'x-api-key': '127.0.0.1' }, remoteAddress: '10.0.0.4' }
  const first = await app.inject({ url: '/', ...spoof })
  t.equal(first.headers['x-ratelimit-limit'], '1', 'an API key equal to an allowed address is not allow-listed')
  t.same(await codes(app, 1, spoof), [429])
})

t.test('allowList as a function, sync and async', async t => {
  for (const variant of ['sync', 'async'] as const) {
    const asked: string[] = []
    const decide = (request: FastifyRequest, key: string): boolean => {
      asked.push(key)
      return key === 'apikey:internal' || request.headers['x-internal'] === 'yes'
    }
    const allowList = variant === 'sync' ? decide : async (request: FastifyRequest, key: string) => decide(request, key)
    const app = await setup(t, { max: 1, timeWindow: 10_000, allowList })
    for (let i = 0; i < 3; i++) {
      const res = await app.inject({ url: '/', headers: { 'x-api-key': 'internal' } })
      t.equal(res.statusCode, 200, `${variant}: allowed`)
      t.notOk(hasRateHeaders(res.headers), 'no headers')
    }
    t.same(await codes(app, 2, { headers: { 'x-internal': 'yes' } }), [200, 200], `${variant}: the request is passed in`)
    t.same(await codes(app, 2), [200, 429], `${variant}: a key not allowed is limited`)
    t.same(asked.slice(0, 4), ['apikey:internal', 'apikey:internal', 'apikey:internal', '127.0.0.1'], 'called with the key')
  }
})

t.test('tiered max: a function of the request and the key, sync and async', async t => {
  const tier = (_request: FastifyRequest, key: string): number => key.startsWith('apikey:') ? 5 : 2
  for (const max of [tier, async (request: FastifyRequest, key: string) => tier(request, key)]) {
    const app = await setup(t, { max, timeWindow: 10_000 })
    const key = { headers: { 'x-api-key': 'k1' } }
    const res = await app.inject({ url: '/', ...key })
    t.equal(res.headers['x-ratelimit-limit'], '5', 'the apikey tier')
    t.same(await codes(app, 5, key), [200, 200, 200, 200, 429])
    const ip = await app.inject('/')
    t.equal(ip.headers['x-ratelimit-limit'], '2', 'the ip tier')
    t.same(await codes(app, 2), [200, 429])
  }
})

t.test('timeWindow as a function, sync and async', async t => {
  const tier = (_request: FastifyRequest, key: string): number | string => key.startsWith('apikey:') ? '1s' : 10_000
  for (const timeWindow of [tier, async (request: FastifyRequest, key: string) => tier(request, key)]) {
    const app = await setup(t, { max: 1, timeWindow, standardHeaders: 'draft-10' })
    const key = { headers: { 'x-api-key': 'k1' } }
    const res = await app.inject({ url: '/', ...key })
    t.equal(res.headers['ratelimit-policy'], '"default";q=1;qu="requests";w=1')
    t.equal(res.headers['x-ratelimit-reset'], '1')
    t.equal((await app.inject('/')).headers['ratelimit-policy'], '"default";q=1;qu="requests";w=10')
    t.same(await codes(app, 1, key), [429])
    t.same(await codes(app, 1), [429])
    await sleep(1100)
    t.same(await codes(app, 1, key), [200], 'the 1 s window passed for the API key')
    t.same(await codes(app, 1), [429], 'not the 10 s window of the IP')
  }
})

t.test('a max or timeWindow function returning an invalid value: a static limit decides, whatever the failMode (see test/security/callbacks.test.ts)', async t => {
  // A numeric string or a fraction is read as theirs reads it (test/compat/limits.test.ts); these are no number.
  const badMax: unknown[] = [-1, Number.NaN, Infinity, '5 requests', '', undefined, null]
  for (const value of badMax) {
    for (const wrap of [(v: unknown) => v, async (v: unknown) => v]) {
      const app = await setup(t, { max: () => wrap(value) as number, failMode: 'open' })
      const res = await app.inject('/')
      t.strictSame([res.statusCode, res.headers['x-ratelimit-limit'], res.headers['x-ratelimit-enforced']], [200, '1000', undefined], `max returning ${String(value)}: limited at @fastify/rate-limit's default, 1000`)
    }
  }
  for (const value of ['soon', 0, -1000, null]) {
    const app = await setup(t, { max: 2, timeWindow: () => value as number, failMode: 'closed' })
    t.same(await codes(app, 3), [200, 200, 429], `timeWindow returning ${String(value)}: the plugin's max in a minute`)
  }
})

t.test('every hook option limits, and a request body still reaches the handler', async t => {
  for (const hook of ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const) {
    const app = await setup(t, { max: 2, timeWindow: 10_000, hook }, app => {
      app.post('/echo', async (request) => request.body)
    })
    const post = { method: 'POST' as const, url: '/echo', payload: { hello: hook } }
    const res = await app.inject(post)
    t.equal(res.statusCode, 200, hook)
    t.strictSame(res.json(), { hello: hook }, `${hook}: the body is parsed`)
    t.equal(res.headers['x-ratelimit-remaining'], '1')
    t.equal((await app.inject(post)).statusCode, 200)
    const denied = await app.inject(post)
    t.equal(denied.statusCode, 429, `${hook}: limited`)
    t.strictSame(denied.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 10 seconds' }, `${hook}: @fastify/rate-limit's body, no code`)
  }
})

t.test('a key generator returning a number is a key; anything else falls back to the default key', async t => {
  const given: unknown[] = []
  const app = await setup(t, { max: 1 }, app => {
    app.get('/number', { config: { rateLimit: { keyGenerator: () => 42 as unknown as string, onExceeding: (_r, key) => { given.push(key) }, onExceeded: (_r, key) => { given.push(key) } } } }, ok)
    app.get('/object', { config: { rateLimit: { keyGenerator: () => ({}) as unknown as string } } }, ok)
  })
  t.same(await codes(app, 2, '/number'), [200, 429])
  t.strictSame(given, [42, 42], 'the callbacks get the number itself, not its string')
  t.same(await codes(app, 2, '/object'), [200, 429], 'counted under the client\'s address')
})

t.test("the limiter runs after the route's own hooks, as a function or a list", async t => {
  const seen: string[] = []
  const app = await setup(t, { max: 1 }, app => {
    app.get('/fn', { onRequest: async () => { seen.push('fn') } }, ok)
    app.get('/list', { onRequest: [async () => { seen.push('list') }] }, ok)
  })
  t.same(await codes(app, 2, '/fn'), [200, 429])
  t.same(await codes(app, 1, '/list'), [429], 'both routes share the plugin budget')
  t.same(seen, ['fn', 'fn', 'list'], "the route's own hooks ran first, every time")
})

t.test('an empty allowList allows nobody in particular', async t => {
  const app = await setup(t, { max: 1, allowList: [] })
  t.same(await codes(app, 2), [200, 429])
})

t.test("failMode 'closed' answers 503 from every hook, without an error log per request", async t => {
  const closedPort = await freePort()
  for (const hook of ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const) {
    const lines: Array<{ level: number }> = []
    const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line) as { level: number }) } } } })
    t.teardown(() => app.close())
    // A port nothing listens on: every decision fails, the breaker off so each one tries Redis.
    await app.register(rateGuard, { redis: `redis://127.0.0.1:${closedPort}`, hook, failMode: 'closed', breaker: false })
    let handled = 0
    app.post('/', async () => { handled++; return 'ok' })
    await app.ready()
    for (let i = 0; i < 5; i++) {
      const res = await app.inject({ method: 'POST', url: '/', payload: { a: 1 } })
      t.equal(res.statusCode, 503, `${hook}: 503`)
      t.equal(res.headers['retry-after'], '1')
      t.same(res.json(), { statusCode: 503, code: 'FST_RATE_GUARD_UNAVAILABLE', error: 'Service Unavailable', message: 'Rate limiter unavailable, retry in 1 second' })
    }
    t.equal(handled, 0, `${hook}: the handler never ran`)
    t.equal(lines.filter(line => line.level >= 50).length, 0, `${hook}: no error-level line per refused request`)
  }
})

t.test("a route's failMode over the plugin's: each route's own answer while Redis is down", async t => {
  const closedPort = await freePort()
  const app = Fastify()
  t.teardown(() => app.close())
  // The plugin's failMode is the default: 'closed', as @fastify/rate-limit's.
  await app.register(rateGuard, { redis: `redis://127.0.0.1:${closedPort}`, max: 2, timeWindow: 10_000, breaker: false })
  app.get('/default', ok)
  app.get('/open', { config: { rateLimit: { failMode: 'open' } } }, ok)
  app.get('/local', { config: { rateLimit: { failMode: 'local' } } }, ok)
  await app.ready()
  const closed = await app.inject('/default')
  t.equal(closed.statusCode, 503, 'the plugin\'s failMode (closed by default): refused')
  t.equal(closed.headers['retry-after'], '1', 'with Retry-After')
  const open = await app.inject('/open')
  t.equal(open.statusCode, 200, 'open on the route: let through')
  t.equal(open.headers['x-ratelimit-enforced'], 'false', 'and marked unenforced')
  t.same(await codes(app, 3, '/local'), [200, 200, 429], 'local: counted in process (the twin made on first need)')
})

t.test("a route's ipv6Subnet writes the allow list's addresses for its own subnet", async t => {
  const app = await setup(t, { max: 1, timeWindow: 10_000, allowList: ['2001:db8::1'] }, app => {
    app.get('/', ok)
    app.get('/fine', { config: { rateLimit: { ipv6Subnet: 128 } } }, ok)
    app.get('/own', { config: { rateLimit: { ipv6Subnet: 128, keyGenerator: request => request.headers['x-client'] as string } } }, ok)
  })
  const neighbour = { remoteAddress: '2001:db8::2' }
  t.same(await codes(app, 2, neighbour), [200, 200], 'by the plugin\'s /64, the neighbour is the allow-listed client')
  t.same(await codes(app, 2, { url: '/fine', ...neighbour }), [200, 429], 'by /128 on the route, it is not')
  t.same(await codes(app, 2, { url: '/fine', remoteAddress: '2001:db8::1' }), [200, 200], 'the listed address still is')
  const own = { url: '/own', headers: { 'x-client': 'c1' }, ...neighbour }
  t.same(await codes(app, 2, own), [200, 429], 'a key generator of the route\'s own is kept (the subnet shapes only the default key)')
})
