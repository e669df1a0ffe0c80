// Attack: behind a proxy on a Unix socket, request.ip is undefined (trustProxy false, a CIDR list or
// 'loopback'). Were each connection a client of its own, a proxy that opens one upstream connection per
// request (nginx without upstream keepalive) would give every request a fresh budget, and a banned client
// would escape its ban on its next connection. Defence: every request without an address is one client
// (the key `noaddr:`, which no request with an address, API key or user can be given), never more generous
// than one client, with one loud warning that says how to make request.ip the client's (trustProxy:
// (address, hop) => hop === 0) and how to opt in to per-connection keys (addressless: 'connection'), which
// only an app whose every connection is one client should do. Over a real Unix socket, one connection per
// request, on both stores.
import http from 'node:http'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import type { FastifyServerOptions } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

interface Logged { level: number, msg: string, key?: string, addressless?: string }
interface Server {
  /** One request; on a connection of its own unless `agent` keeps one open. */
  get: (agent?: http.Agent, headers?: Record<string, string>, path?: string) => Promise<number>
  keys: string[]
  warnings: Logged[]
  app: Awaited<ReturnType<typeof Fastify>>
}

const STORES = ['redis', 'in-process'] as const

async function listen (t: Test, server: FastifyServerOptions, options: RateGuardOptions & { max?: number } = {}, store: typeof STORES[number] = 'redis', routes?: (app: Server['app']) => void): Promise<Server> {
  const redis = store === 'redis' ? { redis: (await getRedis(t)).url, timeout: 3000 } : {}
  const warnings: Logged[] = []
  const app = Fastify({ ...server, logger: { level: 'warn', stream: { write: (line: string) => { warnings.push(JSON.parse(line) as Logged) } } } })
  t.teardown(() => app.close())
  const keys: string[] = []
  const { max = 2, ...rest } = options
  await app.register(rateGuard, {
    ...redis,
    nameSpace: uniquePrefix(),
    timeWindow: '1 minute',
    ban: { threshold: 1, duration: '1 minute' },
    ...rest,
    max: (_request, key) => { keys.push(key); return max }
  })
  app.get('/', async () => 'ok')
  routes?.(app)
  const dir = await mkdtemp(join(tmpdir(), 'rate-guard-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const socketPath = join(dir, 'app.sock')
  await app.listen({ path: socketPath })
  const get = async (agent: http.Agent | false = false, headers: Record<string, string> = {}, path = '/'): Promise<number> => await new Promise((resolve, reject) => {
    http.get({ socketPath, path, agent, headers }, res => { res.resume(); res.on('end', () => resolve(res.statusCode!)) }).on('error', reject)
  })
  return { get, keys, warnings, app }
}

/** An agent keeping one connection open: the requests of one client. */
function connection (t: Test): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  return agent
}

const noAddressWarnings = (server: Server): Logged[] => server.warnings.filter(w => /no client address/.test(w.msg))

t.test('without an address, one connection per request is one client: at most max of 100 pass, on both stores', async t => {
  for (const store of STORES) {
    for (const trustProxy of [false, 'loopback', ['10.0.0.0/8']] as const) {
      const name = `${store}, trustProxy ${JSON.stringify(trustProxy)}`
      const server = await listen(t, { trustProxy: trustProxy as FastifyServerOptions['trustProxy'] }, { max: 5, ban: false }, store)
      const statuses: number[] = []
      for (let i = 0; i < 100; i++) statuses.push(await server.get())
      t.equal(statuses.filter(status => status === 200).length, 5, `${name}: 5 of 100 through`)
      t.equal(statuses.filter(status => status === 429).length, 95, `${name}: the rest limited`)
      t.same([...new Set(server.keys)], ['noaddr:'], `${name}: one shared key`)
      const warnings = noAddressWarnings(server)
      t.equal(warnings.length, 1, `${name}: one warning, whatever the requests`)
      t.equal(warnings[0]?.level, 40, 'at warn level')
      t.match(warnings[0], { key: 'noaddr:', addressless: 'shared' }, 'with an object saying what was done')
      t.match(warnings[0]?.msg, /trustProxy: \(address, hop\) => hop === 0/, 'naming the trustProxy fix')
      t.match(warnings[0]?.msg, /addressless: 'connection'/, 'and the opt-in')
    }
  }
})

t.test('without an address, a ban holds across connections', async t => {
  for (const store of STORES) {
    const server = await listen(t, {}, {}, store)
    const statuses: number[] = []
    for (let i = 0; i < 6; i++) statuses.push(await server.get())
    t.same(statuses, [200, 200, 403, 403, 403, 403], `${store}: limited, banned, and every new connection still banned`)
    t.same([await server.get(connection(t)), await server.get(connection(t))], [403, 403], `${store}: kept-alive connections too`)
    t.equal((await server.app.rateGuard.peek('noaddr:', { max: 2 })).status, 'banned', `${store}: the operator sees the ban under the shared key`)
    await server.app.rateGuard.unban('noaddr:')
    await server.app.rateGuard.reset('noaddr:')
    t.equal(await server.get(), 200, `${store}: and lifts it there`)
  }
})

t.test('the shared identity is one across the registration\'s budgets, warned of once, and an allow list may name it', async t => {
  const server = await listen(t, {}, {}, 'redis', app => {
    app.get('/wide', { config: { rateLimit: { ipv6Subnet: 48 } } }, async () => 'ok')
  })
  const wide = async (): Promise<number> => await server.get(undefined, {}, '/wide')
  t.same([await wide(), await wide(), await wide(), await server.get()], [200, 200, 403, 403], 'a route with its own ipv6Subnet (and budget) counts the same client, whose ban holds on every route')
  t.same([...new Set(server.keys)], ['noaddr:'])
  t.equal(noAddressWarnings(server).length, 1, 'one warning for the registration')
  const allowed = await listen(t, {}, { allowList: ['noaddr:'] })
  const statuses: number[] = []
  for (let i = 0; i < 10; i++) statuses.push(await allowed.get())
  t.same(statuses, new Array(10).fill(200), 'allowList: [\'noaddr:\'] lets every request without an address through')
})

t.test('no client names a key of its own by what it sends', async t => {
  // Every address trusted (warned of at register): the left-most X-Forwarded-For entry is request.ip, whatever it says.
  const server = await listen(t, { trustProxy: true }, { ban: false })
  for (const forged of ['noaddr:', 'NOADDR:', 'unknown', 'conn:1']) await server.get(undefined, { 'x-forwarded-for': forged })
  // On a Unix socket the connection has no address either: what is no address is the shared key, as the
  // proxy's requests are (lib/forwarded.ts), never a key of its own the client named.
  t.same(server.keys, ['noaddr:', 'noaddr:', 'noaddr:', 'noaddr:'], 'what is not an address is the proxy\'s: the shared key, never one it spells')
  await server.get(undefined, { 'x-forwarded-for': ',' })
  t.equal(server.keys.at(-1), 'noaddr:', 'a header naming no address is a request without one')
})

t.test("addressless: 'connection' keeps one client's flood and ban its own, by its connection", async t => {
  for (const store of STORES) {
    for (const trustProxy of [false, 'loopback', ['10.0.0.0/8']] as const) {
      const name = `${store}, trustProxy ${JSON.stringify(trustProxy)}`
      const server = await listen(t, { trustProxy: trustProxy as FastifyServerOptions['trustProxy'] }, { addressless: 'connection' }, store)
      const abuser = connection(t)
      const statuses: number[] = []
      for (let i = 0; i < 5; i++) statuses.push(await server.get(abuser))
      t.same(statuses, [200, 200, 403, 403, 403], `${name}: the abuser is limited, then banned`)
      const abuserKeys = [...server.keys]
      t.same([await server.get(), await server.get()], [200, 200], `${name}: other connections are not`)
      t.same(server.keys.filter(key => !/^conn:\d+$/.test(key)), [], `${name}: every request counted by connection (${server.keys.length} keys)`)
      t.equal(new Set(abuserKeys).size, 1, `${name}: the abuser's requests, one connection: one key`)
      const others = server.keys.slice(abuserKeys.length)
      t.equal(others.length, 2, `${name}: the two other requests, each counted`)
      t.equal(new Set([...abuserKeys, ...others]).size, 3, `${name}: each of the two other connections a key of its own`)
      const warnings = noAddressWarnings(server)
      t.equal(warnings.length, 1, `${name}: one warning, whatever the requests`)
      t.match(warnings[0], { level: 40, addressless: 'connection' })
      t.match(warnings[0]?.msg, /each connection is counted as a client of its own/)
      t.match(warnings[0]?.msg, /trustProxy: \(address, hop\) => hop === 0/)
    }
  }
})

t.test('with trustProxy trusting the proxy on the socket alone, request.ip is the address it appended', async t => {
  const server = await listen(t, { trustProxy: (_address: string, hop: number) => hop === 0 })
  await server.get(undefined, { 'x-forwarded-for': '203.0.113.66, 198.51.100.7' })
  await server.get(undefined, { 'x-forwarded-for': '192.0.2.1' })
  t.same(server.keys, ['198.51.100.7', '192.0.2.1'], 'the right-most entry, which the client cannot forge')
  t.same(server.warnings, [], 'and no warning')
})

t.test("the app's own key generator is its own: the rule is the default key's", async t => {
  const server = await listen(t, {}, { ban: false, keyGenerator: request => request.headers['x-tenant'] as string })
  t.same([await server.get(undefined, { 'x-tenant': 'a' }), await server.get(undefined, { 'x-tenant': 'a' }), await server.get(undefined, { 'x-tenant': 'b' })], [200, 200, 200])
  t.same(server.keys, ['a', 'a', 'b'])
  t.same(noAddressWarnings(server), [], 'and no warning: the app named its clients')
})

t.test('addressless is checked at register, and is the plugin\'s alone', async t => {
  for (const addressless of ['none', 'refuse', true, null, 1]) {
    const app = Fastify()
    t.teardown(() => app.close())
    await t.rejects(async () => { await app.register(rateGuard, { addressless: addressless as 'shared' }) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /addressless.*'shared', 'connection'/ }, `${String(addressless)} is refused`)
  }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { addressless: 'shared' })
  t.throws(() => app.get('/', { config: { rateLimit: { addressless: 'connection' } as never } }, async () => 'ok'), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /config\.rateLimit\.addressless/ }, 'not on a route')
})
