// Attack: behind a proxy on a Unix socket, request.ip is undefined (trustProxy false, a CIDR list or
// 'loopback'): were every such request one client, one abuser would spend, and ban, the budget of every
// other. Defence: a request without an address is counted by its connection (`conn:<n>`), with one warning
// that says how to make request.ip the client's (trustProxy: (address, hop) => hop === 0). Over a real Unix
// socket, against a real Redis.
import http from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify from 'fastify'
import type { FastifyServerOptions } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

interface Server { get: (agent: http.Agent, headers?: Record<string, string>) => Promise<number>, keys: string[], warnings: string[] }

async function listen (t: Test, server: FastifyServerOptions): Promise<Server> {
  const { url } = await getRedis(t)
  const warnings: string[] = []
  const app = Fastify({ ...server, logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  const keys: string[] = []
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), timeout: 3000, timeWindow: '1 minute', ban: { threshold: 1, duration: '1 minute' }, max: (_request, key) => { keys.push(key); return 2 } })
  app.get('/', async () => 'ok')
  const socketPath = join(tmpdir(), `rate-guard-${process.pid}-${Math.random().toString(36).slice(2)}.sock`)
  await app.listen({ path: socketPath })
  const get = async (agent: http.Agent, headers: Record<string, string> = {}): Promise<number> => await new Promise((resolve, reject) => {
    http.get({ socketPath, path: '/', agent, headers }, res => { res.resume(); res.on('end', () => resolve(res.statusCode!)) }).on('error', reject)
  })
  return { get, keys, warnings }
}

/** An agent keeping one connection open: the requests of one client. */
function connection (t: Test): http.Agent {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  return agent
}

t.test('without an address, one client\'s flood and ban stay its own, and the app is told how to see addresses', async t => {
  for (const trustProxy of [false, 'loopback', ['10.0.0.0/8']] as const) {
    const server = await listen(t, { trustProxy: trustProxy as FastifyServerOptions['trustProxy'] })
    const abuser = connection(t)
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) statuses.push(await server.get(abuser))
    t.same(statuses, [200, 200, 403, 403, 403], `trustProxy ${JSON.stringify(trustProxy)}: the abuser is limited, then banned`)
    t.same([await server.get(connection(t)), await server.get(connection(t))], [200, 200], 'other clients are not')
    t.match(server.keys, [/^conn:\d+$/], 'counted by connection')
    t.equal(server.warnings.filter(w => /no client address/.test(w)).length, 1, 'one warning, whatever the requests')
    t.match(server.warnings.find(w => /no client address/.test(w)), /trustProxy: \(address, hop\) => hop === 0/)
  }
})

t.test('with trustProxy trusting the proxy on the socket alone, request.ip is the address it appended', async t => {
  const server = await listen(t, { trustProxy: (_address: string, hop: number) => hop === 0 })
  const agent = connection(t)
  await server.get(agent, { 'x-forwarded-for': '203.0.113.66, 198.51.100.7' })
  await server.get(agent, { 'x-forwarded-for': '192.0.2.1' })
  t.same(server.keys, ['198.51.100.7', '192.0.2.1'], 'the right-most entry, which the client cannot forge')
  t.same(server.warnings, [], 'and no warning')
})
