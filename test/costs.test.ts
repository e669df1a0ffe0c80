// `cost`: a request charged in units rather than as one, through fastify.inject on Redis and in process: a
// number or a function of the request (checked per request, 1 when it fails), charged on every
// limit and on the route's shared budget, refused outright when it costs more than a limit holds; headers count
// units. The arithmetic of each algorithm with costs is in conformance-algorithm-tables.test.ts, on both stores.
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

interface Setup {
  app: FastifyInstance
  errors: string[]
}

async function makeApp (t: Test, where: Where, opts: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<Setup> {
  const errors: string[] = []
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { errors.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), ...RELAXED } : {}
  await app.register(rateGuard, { ...store, verifyApiKey: () => true, ...opts })
  routes(app)
  await app.ready()
  return { app, errors }
}

async function get (app: FastifyInstance, url: string, apiKey: string, units?: string): Promise<LightMyRequestResponse> {
  return await app.inject({ url, headers: { 'x-api-key': apiKey, ...(units === undefined ? {} : { 'x-units': units }) } })
}

/** Status, X-RateLimit-Remaining and Retry-After. */
const seen = (res: LightMyRequestResponse): Array<number | string | undefined> =>
  [res.statusCode, res.headers['x-ratelimit-remaining']?.toString(), res.headers['retry-after']?.toString()]

for (const where of STORES) {
  t.test(`${where}: a fixed cost is charged on every request, in units`, async t => {
    const { app } = await makeApp(t, where, { max: 10, timeWindow: '1 minute' }, app => {
      app.get('/bulk', { config: { rateLimit: { cost: 4 } } }, async () => 'ok')
      app.get('/one', async () => 'ok')
    })
    t.strictSame(seen(await get(app, '/bulk', 'a')), [200, '6', undefined])
    t.strictSame(seen(await get(app, '/bulk', 'a')), [200, '2', undefined])
    t.strictSame(seen(await get(app, '/bulk', 'a')), [429, '2', '60'], 'two units left: a request of four waits for the window')
    t.strictSame(seen(await get(app, '/one', 'a')), [200, '9', undefined], 'another route\'s budget, one unit a request')
  })

  t.test(`${where}: a cost computed per request, sync or async; a failing one costs 1`, async t => {
    const { app, errors } = await makeApp(t, where, { max: 10, timeWindow: '1 minute' }, app => {
      const units = (request: { headers: Record<string, unknown> }): number => Number(request.headers['x-units'])
      app.get('/sync', { config: { rateLimit: { cost: units } } }, async () => 'ok')
      app.get('/async', { config: { rateLimit: { cost: async (request) => units(request) } } }, async () => 'ok')
    })
    t.strictSame(seen(await get(app, '/sync', 'b', '7')), [200, '3', undefined])
    t.strictSame(seen(await get(app, '/sync', 'b', '3')), [200, '0', undefined])
    t.strictSame(seen(await get(app, '/async', 'b', '10')), [200, '0', undefined])
    t.strictSame(seen(await get(app, '/async', 'b', '1')), [429, '0', '60'])
    let left = 10
    for (const bad of ['0', '-2', '1.5', 'many']) {
      left--
      t.strictSame(seen(await get(app, '/sync', 'c', bad)), [200, String(left), undefined], `a cost of ${bad}: counted at 1, whatever the failMode`)
      t.strictSame(seen(await get(app, '/async', 'c', bad)), [200, String(left), undefined])
    }
    t.ok(errors.some(msg => msg.includes('cost function failed; counted at 1')), 'the app\'s log says the cost function failed, and what was used')
    t.strictSame(seen(await get(app, '/sync', 'c', '7')), [429, '6', '60'], 'four units counted for them')
  })

  t.test(`${where}: a request costing more than a limit holds is refused at once, no Retry-After, nothing counted, no strike`, async t => {
    const codes: string[] = []
    const { app } = await makeApp(t, where, { max: 10, timeWindow: '1 minute', ban: { threshold: 1, duration: '1 hour' } }, app => {
      app.setErrorHandler((err, _request, reply) => { codes.push((err as { code: string }).code); return reply.send(err) })
      app.get('/', { config: { rateLimit: { cost: (request) => Number(request.headers['x-units']) } } }, async () => 'ok')
    })
    const res = await get(app, '/', 'd', '11')
    t.strictSame(seen(res), [429, '10', undefined])
    t.strictSame(res.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded: this request costs more than the limit allows' })
    t.strictSame(codes, ['FST_RATE_GUARD_TOO_COSTLY'], 'the app\'s error handler sees the code')
    t.strictSame(seen(await get(app, '/', 'd', '10')), [200, '0', undefined], 'not banned, nothing counted: the whole budget is there')
  })

  t.test(`${where}: the shared budget is charged the cost too, and given it back with the client's`, async t => {
    const { app } = await makeApp(t, where, { max: 10, timeWindow: '1 minute' }, app => {
      app.get('/', { config: { rateLimit: { cost: 4, shared: { max: 10, timeWindow: '1 minute' } } } }, async () => 'ok')
    })
    t.strictSame(seen(await get(app, '/', 'e')), [200, '6', undefined])
    t.strictSame(seen(await get(app, '/', 'f')), [200, '6', undefined])
    t.strictSame(seen(await get(app, '/', 'g')), [429, '2', '60'], 'the shared budget has 2 units left')
    t.strictSame(seen(await get(app, '/', 'g')), [429, '2', '60'], 'g\'s own 4 units were given back: refused by the shared budget again')
  })

  t.test(`${where}: RateLimit-Policy says qu="requests" only where a request is one unit`, async t => {
    const { app } = await makeApp(t, where, { max: 10, timeWindow: '1 minute', standardHeaders: 'draft-10' }, app => {
      app.get('/one', async () => 'ok')
      app.get('/units', { config: { rateLimit: { cost: 2 } } }, async () => 'ok')
    })
    t.equal((await get(app, '/one', 'h')).headers['ratelimit-policy'], '"default";q=10;qu="requests";w=60')
    const units = await get(app, '/units', 'h')
    t.strictSame([units.headers['ratelimit-policy'], units.headers.ratelimit], ['"default";q=10;w=60', '"default";r=8;t=60'])
  })

  for (const algorithm of ALGORITHMS) {
    t.test(`${where}, ${algorithm}: max counts units`, async t => {
      const { app } = await makeApp(t, where, { max: 6, timeWindow: '1 hour', algorithm }, app => {
        app.get('/', { config: { rateLimit: { cost: 3 } } }, async () => 'ok')
      })
      t.strictSame([(await get(app, '/', 'i')).statusCode, (await get(app, '/', 'i')).statusCode, (await get(app, '/', 'i')).statusCode], [200, 200, 429])
    })
  }
}

t.test('cost at register: a positive integer or a function; not with the app\'s own store', async t => {
  for (const cost of [0, -1, 1.5, '2', null, Number.MAX_SAFE_INTEGER + 1]) {
    const app = Fastify()
    t.teardown(() => app.close())
    await t.rejects(async () => { await app.register(rateGuard, { cost: cost as number }) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /cost/ }, `cost: ${String(cost)}`)
  }
  const app = Fastify()
  t.teardown(() => app.close())
  class Store {
    incr (_key: string, cb: (err: Error | null, result?: { current: number, ttl: number }) => void): void { cb(null, { current: 1, ttl: 1000 }) }
    child (): Store { return this }
  }
  await t.rejects(async () => {
    await app.register(rateGuard, { store: Store, cost: 2 } as unknown as RateGuardOptions)
    await app.ready()
  }, { message: /cost/ }, 'with store, requests are counted by the app\'s store, one each')
})
