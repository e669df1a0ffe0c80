// Reserve, then settle (lib/request/charge.ts), through real requests on Redis and in process: a request allowed holds
// its cost until it settles once at its final amount, from the handler (`request.rateGuard.settle`) or after the
// response (`settle`, `countWhen`, `skipSuccessfulRequests`, `skipFailedRequests`), or when the client aborts
// before the handler starts (`refundAborted`; test/security/refund-aborted.test.ts); on its own budget and the route's shared one. The stores' arithmetic of settling is in
// conformance-algorithm-tables.test.ts.
import { once } from 'node:events'
import { request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { PeekResult, RateGuardOptions } from '../lib/index.js'
import { sharedKeys, scopeOf } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

async function makeApp (t: Test, where: Where, opts: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), ...RELAXED } : {}
  await app.register(rateGuard, { ...store, verifyApiKey: () => true, max: 100, timeWindow: '1 minute', ...opts })
  routes(app)
  await app.ready()
  return app
}

async function get (app: FastifyInstance, url: string, apiKey: string, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return await app.inject({ url, headers: { 'x-api-key': apiKey, ...headers } })
}

const remaining = (res: LightMyRequestResponse): number => Number(res.headers['x-ratelimit-remaining'])

/**
 * Peeks until `count` is what a settlement made after the response should have made it, at most 50 times: the
 * response reaches inject before the route's onResponse hook has settled (on Redis, one more round trip).
 */
async function countAfterResponse (app: FastifyInstance, apiKey: string, route: string | undefined, count: number): Promise<number> {
  const peek = async (): Promise<PeekResult> => await app.rateGuard.peek(`apikey:${apiKey}`, route === undefined ? {} : { route })
  let seen = await peek()
  for (let i = 1; i < 50 && seen.count !== count; i++) {
    await new Promise(resolve => setImmediate(resolve))
    seen = await peek()
  }
  return seen.count
}

for (const where of STORES) {
  t.test(`${where}: the handler settles a request at what it used, up or down, once`, async t => {
    const errors: string[] = []
    const app = await makeApp(t, where, {}, app => {
      app.get('/tokens', async (request) => {
        t.equal(request.rateGuard.charged, 1, 'charged its cost until it settles')
        await request.rateGuard.settle(Number(request.headers['x-used']))
        for (const again of [Number(request.headers['x-used']), -1, 1.5, Number.NaN]) {
          await request.rateGuard.settle(again).catch((err: { code: string }) => { errors.push(err.code) })
        }
        return { charged: request.rateGuard.charged, settled: request.rateGuard.settled }
      })
    })
    const first = await get(app, '/tokens', 'a', { 'x-used': '60' })
    t.strictSame(first.json(), { charged: 60, settled: true })
    t.strictSame(errors, ['FST_RATE_GUARD_ALREADY_SETTLED', 'FST_RATE_GUARD_INVALID_SETTLE', 'FST_RATE_GUARD_INVALID_SETTLE', 'FST_RATE_GUARD_INVALID_SETTLE'],
      'a second settle, and amounts that are not whole units, reject with coded errors')
    t.equal(remaining(await get(app, '/tokens', 'a', { 'x-used': '1' })), 39, 'max 100: a request settled at 60, then one of cost 1, leaves 39')
    t.equal(remaining(await get(app, '/tokens', 'a', { 'x-used': '0' })), 38, 'a request settled at 0 is given back (after its headers were written)')
    t.equal(remaining(await get(app, '/tokens', 'a', { 'x-used': '1' })), 38)
  })

  t.test(`${where}: a request nothing counted settles at nothing`, async t => {
    const app = await makeApp(t, where, { allowList: ['apikey:free'] }, app => {
      app.get('/', async (request) => {
        await request.rateGuard.settle(50)
        return { charged: request.rateGuard.charged }
      })
      app.get('/off', { config: { rateLimit: false } }, async (request) => {
        await request.rateGuard.settle(50)
        return { charged: request.rateGuard.charged }
      })
    })
    t.strictSame((await get(app, '/', 'free')).json(), { charged: 0 }, 'allow-listed')
    t.strictSame((await get(app, '/off', 'b')).json(), { charged: 0 }, 'a route without limits')
  })

  t.test(`${where}: settle after the response: the route's settle names the final amount`, async t => {
    const app = await makeApp(t, where, {}, app => {
      app.get('/chat', { config: { rateLimit: { cost: 10, settle: (_request, reply) => Number(reply.getHeader('x-tokens')) } } }, async (_request, reply) => {
        reply.header('x-tokens', '35')
        return 'answer'
      })
    })
    t.equal(remaining(await get(app, '/chat', 'c')), 90, 'reserved 10 while it ran')
    t.equal(await countAfterResponse(app, 'c', 'GET /chat', 35), 35, 'then charged the 35 it used')
    t.equal(remaining(await get(app, '/chat', 'c')), 55)
  })

  t.test(`${where}: failed logins: skipSuccessfulRequests counts only responses of 400 or more`, async t => {
    const app = await makeApp(t, where, { max: 3, timeWindow: '15 minutes' }, app => {
      app.post('/login', { config: { rateLimit: { skipSuccessfulRequests: true } } }, async (request, reply) => {
        return request.headers['x-password'] === 'right' ? 'welcome' : await reply.code(401).send('no')
      })
    })
    const login = async (password: string): Promise<LightMyRequestResponse> => await app.inject({ method: 'POST', url: '/login', headers: { 'x-api-key': 'd', 'x-password': password } })
    for (let i = 0; i < 5; i++) {
      t.equal((await login('right')).statusCode, 200)
      t.equal(await countAfterResponse(app, 'd', 'POST /login', 0), 0, 'a success is given back')
    }
    for (let i = 1; i <= 3; i++) {
      t.equal((await login('wrong')).statusCode, 401)
      t.equal(await countAfterResponse(app, 'd', 'POST /login', i), i, `failure ${i} counts`)
    }
    t.equal((await login('right')).statusCode, 429, 'three failures: even the right password waits')
  })

  t.test(`${where}: skipFailedRequests and countWhen`, async t => {
    const app = await makeApp(t, where, {}, app => {
      app.get('/upload', { config: { rateLimit: { skipFailedRequests: true } } }, async (request, reply) => request.headers['x-ok'] === '1' ? 'stored' : await reply.code(500).send('failed'))
      app.get('/search', { config: { rateLimit: { countWhen: async (request) => request.headers['x-cached'] !== '1' } } }, async () => 'found')
    })
    await get(app, '/upload', 'e', { 'x-ok': '0' })
    t.equal(await countAfterResponse(app, 'e', 'GET /upload', 0), 0, 'a failed upload does not count')
    await get(app, '/upload', 'e', { 'x-ok': '1' })
    t.equal(await countAfterResponse(app, 'e', 'GET /upload', 1), 1, 'a stored one does')
    await get(app, '/search', 'e', { 'x-cached': '1' })
    t.equal(await countAfterResponse(app, 'e', 'GET /search', 0), 0, 'countWhen false: given back')
    await get(app, '/search', 'e', { 'x-cached': '0' })
    t.equal(await countAfterResponse(app, 'e', 'GET /search', 1), 1)
  })

  t.test(`${where}: requests in flight count until they end, then only those that count stay`, async t => {
    let release = (): void => {}
    const held = new Promise<void>(resolve => { release = resolve })
    const app = await makeApp(t, where, { max: 2 }, app => {
      app.get('/slow', { config: { rateLimit: { skipFailedRequests: true } } }, async (_request, reply) => {
        await held
        return await reply.code(503).send('busy')
      })
    })
    const inFlight = [get(app, '/slow', 'f'), get(app, '/slow', 'f')]
    await new Promise(resolve => setImmediate(resolve))
    const third = await get(app, '/slow', 'f')
    t.equal(third.statusCode, 429, 'two in flight hold the budget of 2')
    release()
    await Promise.all(inFlight)
    t.equal(await countAfterResponse(app, 'f', 'GET /slow', 0), 0, 'they failed: given back once they ended')
  })

  t.test(`${where}: the shared budget settles with the client's own`, async t => {
    const app = await makeApp(t, where, {}, app => {
      app.get('/s', { config: { rateLimit: { shared: { max: 10, timeWindow: '1 minute' } } } }, async (request) => {
        await request.rateGuard.settle(4)
        return 'ok'
      })
    })
    await get(app, '/s', 'g')
    await get(app, '/s', 'h')
    t.equal((await get(app, '/s', 'i')).statusCode, 200, 'the shared budget holds 8 of 10 now')
    t.equal((await get(app, '/s', 'j')).statusCode, 429, '12 of 10 after the third settled: the fourth is refused')
    t.equal((await app.rateGuard.peek('apikey:g', { route: 'GET /s' })).count, 4, 'the client\'s own budget counts 4')
  })

  t.test(`${where}: refundAborted: a request its client gives up on before its handler starts counts nothing; one whose handler ran counts`, async t => {
    let entered = (): void => {}
    let inStep = new Promise<void>(resolve => { entered = resolve })
    let release = (): void => {}
    const gate = new Promise<void>(resolve => { release = resolve })
    const app = await makeApp(t, where, {}, app => {
      app.get('/long', { config: { rateLimit: { refundAborted: true } } }, async (request) => {
        entered()
        await new Promise(resolve => request.raw.on('close', resolve))
        return 'too late'
      })
      app.get('/queued', { config: { rateLimit: { refundAborted: true } }, preHandler: async () => { entered(); await gate } }, async () => 'never')
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = app.server.address() as AddressInfo
    const abort = async (path: string, apiKey: string): Promise<void> => {
      const req = httpRequest({ port, host: '127.0.0.1', path, headers: { 'x-api-key': apiKey } })
      req.on('error', () => {})
      req.end()
      await inStep
      inStep = new Promise<void>(resolve => { entered = resolve })
      t.equal((await app.rateGuard.peek(`apikey:${apiKey}`, { route: `GET ${path}` })).count, 1, `${path}: counted while it waits`)
      req.destroy()
    }
    await abort('/queued', 'k')
    t.equal(await countAfterResponse(app, 'k', 'GET /queued', 0), 0, 'given back: the client left before the handler started')
    release()
    await abort('/long', 'k2')
    await new Promise(resolve => setTimeout(resolve, 20))
    t.equal(await countAfterResponse(app, 'k2', 'GET /long', 1), 1, 'the handler ran: the charge stands')
  })
}

t.test('settling options at register: checked, one way of counting at a time, not on a limiter the app places, not with store', async t => {
  const register = async (opts: Record<string, unknown>): Promise<void> => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(rateGuard, opts as RateGuardOptions)
    await app.ready()
  }
  await t.rejects(register({ countWhen: true }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /countWhen/ })
  await t.rejects(register({ settle: 5 }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /settle/ })
  await t.rejects(register({ refundAborted: 'yes' }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /refundAborted/ })
  await t.rejects(register({ skipFailedRequests: 1 }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /skipFailedRequests/ })
  await t.rejects(register({ countWhen: () => true, skipSuccessfulRequests: true }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /not both/ })
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard)
  t.throws(() => app.rateLimit({ skipSuccessfulRequests: true }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /request\.rateGuard\.settle/ })
  class Store {
    incr (_key: string, cb: (err: Error | null, result?: { current: number, ttl: number }) => void): void { cb(null, { current: 1, ttl: 1000 }) }
    child (): Store { return this }
  }
  await t.rejects(register({ store: Store, skipFailedRequests: true }), { message: /countWhen/ })
})

t.test('a countWhen or settle that fails leaves the charge as it was, and is logged', async t => {
  const logged: string[] = []
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { logged.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { verifyApiKey: () => true, max: 10 })
  app.get('/a', { config: { rateLimit: { countWhen: () => { throw new Error('bug') } } } }, async () => 'ok')
  app.get('/b', { config: { rateLimit: { settle: async () => -3 } } }, async () => 'ok')
  app.get('/c', { config: { rateLimit: { countWhen: () => 'no' as unknown as boolean } } }, async () => 'ok')
  await app.ready()
  for (const url of ['/a', '/b', '/c']) {
    await get(app, url, 'l')
    t.equal(await countAfterResponse(app, 'l', `GET ${url}`, 1), 1, `${url}: still charged its cost`)
  }
  t.ok(logged.some(msg => msg.includes('countWhen failed')) && logged.some(msg => msg.includes('settle failed')), 'both logged')
})

t.test('redis: a handler that gives units back lifts a denial held in process (banCache)', async t => {
  let entered = (): void => {}
  const inHandler = new Promise<void>(resolve => { entered = resolve })
  let release = (): void => {}
  const gate = new Promise<void>(resolve => { release = resolve })
  const app = await makeApp(t, 'redis', { max: 1 }, app => {
    app.get('/', async (request) => {
      if (request.headers['x-wait'] === '1') {
        entered()
        await gate
      }
      await request.rateGuard.settle(0)
      return 'ok'
    })
  })
  const first = get(app, '/', 'm', { 'x-wait': '1' })
  await inHandler
  t.equal((await get(app, '/', 'm')).statusCode, 429, 'the first holds the budget of 1: denied, and the denial held')
  release()
  t.equal((await first).statusCode, 200)
  t.equal((await get(app, '/', 'm')).statusCode, 200, 'given back: the held denial is forgotten, Redis allows')
})

t.test('redis: a shared budget Redis could not decide (failMode open): the client\'s own budget alone settles', async t => {
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  const redis = await getRedis(t)
  await app.register(rateGuard, { redis: redis.url, nameSpace, timeout: 3000, failMode: 'open', verifyApiKey: () => true, max: 100 })
  app.get('/s', { config: { rateLimit: { shared: { max: 10, timeWindow: '1 minute' } } } }, async (request) => {
    await request.rateGuard.settle(5)
    return { charged: request.rateGuard.charged }
  })
  await app.ready()
  // A foreign value at the shared budget's key: Redis cannot decide it, and failMode 'open' lets the request by.
  const observer = await client(t, redis.url)
  await observer.set(sharedKeys(nameSpace, scopeOf('route', 'GET /s'), 'sliding-log').log, 'not a log')
  const res = await get(app, '/s', 'n')
  t.equal(res.statusCode, 200)
  t.strictSame(res.json(), { charged: 5 })
  t.equal((await app.rateGuard.peek('apikey:n', { route: 'GET /s' })).count, 5, 'its own budget counts the 5')
})

t.test('memory: turning the plugin\'s skip options off on a route counts every response there', async t => {
  const app = await makeApp(t, 'memory', { skipFailedRequests: true }, app => {
    app.get('/all', { config: { rateLimit: { skipFailedRequests: false, skipSuccessfulRequests: false } } }, async (_request, reply) => await reply.code(500).send('no'))
    app.get('/some', async (_request, reply) => await reply.code(500).send('no'))
  })
  await get(app, '/all', 'o')
  await get(app, '/some', 'o')
  t.equal(await countAfterResponse(app, 'o', 'GET /all', 1), 1, 'the route counts its failures')
  t.equal(await countAfterResponse(app, 'o', undefined, 0), 0, 'the plugin\'s routes do not')
})

t.test('memory: an abort after the handler settled, or of a request nothing counted, changes nothing', async t => {
  let entered = (): void => {}
  const app = await makeApp(t, 'memory', { allowList: ['apikey:free'], refundAborted: true }, app => {
    app.get('/long', async (request) => {
      if (request.headers['x-api-key'] !== 'free') await request.rateGuard.settle(2)
      entered()
      await once(request.raw, 'close')
      return 'too late'
    })
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  for (const apiKey of ['p', 'free']) {
    const req = httpRequest({ port, host: '127.0.0.1', path: '/long', headers: { 'x-api-key': apiKey } })
    req.on('error', () => {})
    // once() would reject on the request's 'error' (socket hang up): only its close is awaited.
    const closed = new Promise(resolve => req.on('close', resolve))
    const inHandler = new Promise<void>(resolve => { entered = resolve })
    req.end()
    await inHandler
    req.destroy()
    await closed
  }
  t.equal(await countAfterResponse(app, 'p', undefined, 2), 2, 'settled at 2 before the abort: it stays 2')
})
