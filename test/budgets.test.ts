// The budget registry (lib/budgets.ts): which budget a route, its HEAD, a group or a limiter counts on, and
// the routes it refuses to let share a budget they would count differently on. Against a real Redis.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const ok = async (): Promise<string> => 'ok'
const CONFLICT = 'FST_RATE_GUARD_BUDGET_CONFLICT'

async function app (t: Test, opts: RateGuardOptions = {}): Promise<FastifyInstance> {
  const { url } = await getRedis(t)
  const server = Fastify()
  t.teardown(() => server.close())
  await server.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), timeout: 3000, ...opts })
  return server
}

type Request = { method: 'GET' | 'HEAD' | 'POST', url: string, headers?: Record<string, string> }

async function statuses (server: FastifyInstance, requests: Request[]): Promise<number[]> {
  const out: number[] = []
  for (const request of requests) out.push((await server.inject(request)).statusCode)
  return out
}

t.test('HEAD shares the budget of its route whatever the route\'s other methods: alternating GET and HEAD cannot double it', async t => {
  const server = await app(t)
  server.route({ method: ['GET', 'POST'], url: '/m', config: { rateLimit: { max: 2, timeWindow: '1 minute' } }, handler: ok })
  server.route({ method: ['GET', 'PUT', 'DELETE'], url: '/n', config: { rateLimit: { max: 3, timeWindow: '1 minute' } }, handler: ok })
  await server.ready()
  t.same(await statuses(server, [{ method: 'GET', url: '/m' }, { method: 'HEAD', url: '/m' }, { method: 'GET', url: '/m' }, { method: 'HEAD', url: '/m' }]), [200, 200, 429, 429], 'GET, HEAD, GET, HEAD at max 2')
  t.same(await statuses(server, [{ method: 'HEAD', url: '/n' }, { method: 'POST', url: '/m' }, { method: 'GET', url: '/n' }, { method: 'HEAD', url: '/n' }, { method: 'GET', url: '/n' }]), [200, 429, 200, 200, 429], 'and POST on /m shares it too; /n has its own')
  const peek = await server.rateGuard.peek('127.0.0.1', { route: 'GET,POST /m' })
  t.match(peek, { status: 'limited', count: 2, max: 2 }, 'the operator names it by its methods')
})

t.test('a group whose routes count differently is refused when the second is declared, naming both', async t => {
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown>, RegExp]> = [
    ['max', { max: 5, timeWindow: '1 minute' }, { max: 2, timeWindow: '1 minute' }, /limits 5\/60000 ms and 2\/60000 ms/],
    ['window', { timeWindow: '1 minute' }, { timeWindow: '1 hour' }, /limits 1000\/60000 ms and 1000\/3600000 ms/],
    ['algorithm', { algorithm: 'sliding-log' }, { algorithm: 'fixed-window' }, /algorithm 'sliding-log' and 'fixed-window'/],
    ['several limits', { limits: [{ max: 5, timeWindow: '1 minute' }, { max: 50, timeWindow: '1 hour' }] }, { limits: [{ max: 5, timeWindow: '1 minute' }] }, /limits 5\/60000 ms, 50\/3600000 ms and 5\/60000 ms/],
    ['shared budget', { shared: { max: 100, timeWindow: '1 minute' } }, {}, /shared 100\/60000 ms and none/],
    ['burst', { algorithm: 'token-bucket', burst: 10 }, { algorithm: 'token-bucket' }, /limits 1000\/60000 ms burst 10 and 1000\/60000 ms/],
    ['limits computed per request', { max: () => 5, timeWindow: () => 60_000 }, { max: 5, timeWindow: '1 minute' }, /limits f\(\)\/f\(\) and 5\/60000 ms/]
  ]
  for (const [what, a, b, difference] of cases) {
    const server = await app(t)
    server.get('/a', { config: { rateLimit: { groupId: 'otp', ...a } } }, ok)
    t.throws(() => server.get('/b', { config: { rateLimit: { groupId: 'otp', ...b } } }, ok), {
      code: CONFLICT,
      message: new RegExp(`^GET /b would share budget "group:otp" with GET /a, but they count differently \\(${difference.source.replace(/^\//, '')}`)
    }, `${what}: refused`)
  }
})

t.test('a group whose routes count alike shares one budget, whatever else differs (headers, callbacks, hook)', async t => {
  const server = await app(t)
  const exceeded: string[] = []
  server.get('/a', { config: { rateLimit: { max: 3, timeWindow: '1 minute', groupId: 'login' } } }, ok)
  server.post('/b', { config: { rateLimit: { max: 3, timeWindow: '1 minute', groupId: 'login', hook: 'preHandler', onExceeded: (_request, key) => { exceeded.push(key) } } } }, ok)
  await server.ready()
  t.same(await statuses(server, [{ method: 'GET', url: '/a' }, { method: 'POST', url: '/b' }, { method: 'GET', url: '/a' }, { method: 'POST', url: '/b' }, { method: 'GET', url: '/a' }]), [200, 200, 200, 429, 429])
  t.equal(exceeded.length, 1, 'each route keeps its own callbacks: /b\'s ran once, for its own refusal')
  t.match(await server.rateGuard.peek('127.0.0.1', { groupId: 'login' }), { status: 'limited', count: 3, max: 3 })
})

t.test('a limiter made with options joins a group only when it counts alike', async t => {
  const server = await app(t)
  server.get('/a', { config: { rateLimit: { max: 3, timeWindow: '1 minute', groupId: 'g' } } }, ok)
  t.throws(() => server.rateLimit({ max: 4, timeWindow: '1 minute', groupId: 'g' }), { code: CONFLICT, message: /^limiter 1 would share budget "group:g" with GET \/a/ })
  const same = server.createRateLimit({ max: 3, timeWindow: '1 minute', groupId: 'g' })
  await server.ready()
  await server.inject('/a')
  t.match(await same({ ip: '127.0.0.1', headers: {} } as never), { isExceeded: false, remaining: 1 }, 'the group\'s count, one request on')
  const own = server.createRateLimit({ max: 3, timeWindow: '1 minute' })
  t.match(await own({ ip: '127.0.0.1', headers: {} } as never), { isExceeded: false, remaining: 2 }, 'one without a group counts on its own')
})

t.test('a HEAD the app declares with other limits than its GET is refused; with the same, it shares', async t => {
  const other = await app(t)
  other.head('/x', { config: { rateLimit: { max: 9, timeWindow: '1 minute' } } }, ok)
  t.throws(() => other.get('/x', { exposeHeadRoute: false, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok), { code: CONFLICT, message: /^GET \/x would share budget "GET \/x" with HEAD \/x/ })
  const alike = await app(t)
  alike.head('/x', { config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok)
  alike.get('/x', { exposeHeadRoute: false, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok)
  await alike.ready()
  t.same(await statuses(alike, [{ method: 'HEAD', url: '/x' }, { method: 'GET', url: '/x' }, { method: 'HEAD', url: '/x' }]), [200, 200, 429])
})

// Fastify tells routes of one method and URL apart by their `constraints` (version, host, the app's own):
// each is a route of its own, so each counts on a budget of its own, as with @fastify/rate-limit.
const v = (version: string, method: 'GET' | 'HEAD' = 'GET'): Request => ({ method, url: '/x', headers: { 'accept-version': version } })

t.test('routes told apart by constraints count apart, each on a budget named with its constraints', async t => {
  const server = await app(t)
  server.get('/x', { constraints: { version: '1.0.0' }, config: { rateLimit: { max: 1, timeWindow: '1 minute' } } }, ok)
  server.get('/x', { constraints: { version: '2.0.0' }, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok)
  server.get('/x', { constraints: { version: '3.0.0', host: /^api\./i }, config: { rateLimit: { max: 3, timeWindow: '1 minute' } } }, ok)
  server.get('/x', { config: { rateLimit: { max: 4, timeWindow: '1 minute' } } }, ok)
  await server.ready()
  const api: Request = { method: 'GET', url: '/x', headers: { 'accept-version': '3.0.0', host: 'api.example.com' } }
  t.same(await statuses(server, [v('1.0.0'), v('2.0.0'), v('1.0.0'), v('2.0.0'), v('2.0.0'), api, { method: 'GET', url: '/x' }]), [200, 200, 429, 200, 429, 200, 200])
  for (const [route, count, max] of [['GET /x {version=1.0.0}', 1, 1], ['GET /x {version=2.0.0}', 2, 2], ['GET /x {host=/^api\\./i, version=3.0.0}', 1, 3], ['GET /x', 1, 4]] as const) {
    t.match(await server.rateGuard.peek('127.0.0.1', { route }), { count, max }, `the operator names ${route}`)
  }
  t.notOk(server.rateGuard.has('GET /x {version=4.0.0}'), 'no route, no budget')
  await server.rateGuard.reset('127.0.0.1')
  t.same(await statuses(server, [v('1.0.0'), v('2.0.0')]), [200, 200], 'reset forgets the client on each of them')
})

t.test('a constrained GET and the HEAD Fastify adds for it (with its constraints) share one budget', async t => {
  const server = await app(t)
  server.route({ method: ['GET', 'POST'], url: '/x', constraints: { version: '1.0.0' }, config: { rateLimit: { max: 2, timeWindow: '1 minute' } }, handler: ok })
  server.get('/x', { constraints: { version: '2.0.0' }, config: { rateLimit: { max: 1, timeWindow: '1 minute' } } }, ok)
  await server.ready()
  t.same(await statuses(server, [v('1.0.0'), v('1.0.0', 'HEAD'), v('1.0.0', 'HEAD'), v('2.0.0', 'HEAD'), v('2.0.0')]), [200, 200, 429, 200, 429])
  t.match(await server.rateGuard.peek('127.0.0.1', { route: 'GET,POST /x {version=1.0.0}' }), { status: 'limited', count: 2 })
})

t.test('a HEAD the app declares with its GET\'s constraints (in any order) shares its budget, and is refused with other limits', async t => {
  const get = { exposeHeadRoute: false, constraints: { version: '1.0.0', host: 'example.com' } }
  const request = (method: 'GET' | 'HEAD'): Request => ({ method, url: '/x', headers: { 'accept-version': '1.0.0', host: 'example.com' } })
  const alike = await app(t)
  alike.head('/x', { constraints: { host: 'example.com', version: '1.0.0' }, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok)
  alike.get('/x', { ...get, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok)
  await alike.ready()
  t.same(await statuses(alike, [request('HEAD'), request('GET'), request('HEAD')]), [200, 200, 429])
  const other = await app(t)
  other.head('/x', { constraints: { host: 'example.com', version: '1.0.0' }, config: { rateLimit: { max: 9, timeWindow: '1 minute' } } }, ok)
  t.throws(() => other.get('/x', { ...get, config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, ok), {
    code: CONFLICT,
    message: /^GET \/x \{host=example\.com, version=1\.0\.0\} would share budget "GET \/x \{host=example\.com, version=1\.0\.0\}" with HEAD \/x \{host=example\.com, version=1\.0\.0\}/
  })
})

t.test('a constraint of the app\'s own whose values are not strings is named by their JSON', async t => {
  const server = await app(t)
  server.addConstraintStrategy({
    name: 'beta',
    storage: () => {
      const routes = new Map<unknown, unknown>()
      return { get: (value: unknown) => routes.get(value) ?? null, set: (value: unknown, store: unknown) => { routes.set(value, store) } } as never
    },
    deriveConstraint: (request: { headers: Record<string, unknown> }) => request.headers['x-beta'] === 'yes'
  })
  server.get('/t', { constraints: { beta: true }, config: { rateLimit: { max: 1, timeWindow: '1 minute' } } }, ok)
  await server.ready()
  const beta: Request = { method: 'GET', url: '/t', headers: { 'x-beta': 'yes' } }
  t.same(await statuses(server, [beta, beta, { method: 'GET', url: '/t' }]), [200, 429, 404])
  t.ok(server.rateGuard.has('GET /t {beta=true}'))
})
