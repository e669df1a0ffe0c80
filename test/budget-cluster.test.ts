// fastify.rateGuard.budget(options) across servers: one Redis under two app instances (their slots and counts
// shared), and a real Redis Cluster (a client's keys, odd ones too, each spend's in one slot: no CROSSSLOT; and
// the GraphQL and WebSocket adapters, which spend budgets so, on it).
// The budget on one store at a time, and under a Redis that does not answer, is in test/budget.test.ts.
import diagnostics from 'node:diagnostics_channel'
import Fastify from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { CHANNELS } from '../lib/index.js'
import type { TroubleMessage } from '../lib/index.js'
import { getRedis, scanKeys, uniquePrefix, until } from './helpers/redis.js'
import { startCluster } from './helpers/cluster.js'
import { budgetApp, fields } from './helpers/budget-app.js'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import websocket from '@fastify/websocket'
import mercurius from 'mercurius'
import WebSocket from 'ws'
import mercuriusRateGuard from '../lib/adapters/mercurius.js'
import websocketRateGuard from '../lib/adapters/websocket.js'

// A Cluster of six redis-servers takes a few seconds to form on a loaded machine.
t.setTimeout(120_000)

t.test('two app instances on one Redis share a budget\'s slots and counts', async t => {
  const { url } = await getRedis(t)
  const opts = { redis: url, nameSpace: uniquePrefix(), timeout: 3000, failMode: 'closed' } as const
  const limits = { max: 10, timeWindow: '1 minute', concurrency: { max: 2 } }
  const one = await budgetApp(t, opts, limits)
  const two = await budgetApp(t, opts, limits)
  const held = await one.budget.hold(await one.of('alice'), { key: 'ws' })
  t.match(held, { ok: true, inFlight: 1 })
  t.match(await two.budget.hold(await two.of('alice'), { key: 'ws' }), { ok: true, inFlight: 2 }, 'the other instance sees the first slot')
  t.match(await two.budget.hold(await two.of('alice'), { key: 'ws' }), { ok: false, outcome: 'in-flight' })
  held.release()
  const peek = async (): Promise<number | undefined> => (await two.app.rateGuard.peek('alice|ws', { route: 'limiter 1' })).inFlight?.count
  await until(async () => await peek() === 1, 'the release on the other instance')
  t.match(await two.budget.hold(await two.of('alice'), { key: 'ws' }), { ok: true, inFlight: 2 }, 'released on one, free on the other')
  t.match(fields(await one.budget.spend(await one.of('alice'), { cost: 6 })), { ok: true, remaining: 4 })
  t.match(fields(await two.budget.spend(await two.of('alice'), { cost: 5 })), { ok: false, outcome: 'limited', remaining: 4 }, 'counts shared too')
})

t.test('a Redis Cluster: each spend\'s keys in one slot, odd keys too; no CROSSSLOT', async t => {
  const cluster = await startCluster(t)
  const nameSpace = uniquePrefix()
  const troubles: TroubleMessage[] = []
  const listen = (message: unknown): void => { troubles.push(message as TroubleMessage) }
  diagnostics.subscribe(CHANNELS.trouble, listen)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.trouble, listen) })
  const { budget, of } = await budgetApp(t, { redis: cluster.urls, nameSpace, timeout: 3000, failMode: 'closed' },
    { max: 3, timeWindow: '1 minute', concurrency: { max: 1 } })
  const subKeys = [undefined, 'conn-1', '{conn-1}', '}{', '🙂\n{x}y', 'z'.repeat(512)]
  const clients = ['alice', '{alice}', 'b{}c', '{', 'éé|{1}']
  for (const who of clients) {
    const request = await of(who)
    for (const key of subKeys) {
      const what = `${who} under ${JSON.stringify(key?.slice(0, 12))}`
      t.match(fields(await budget.spend(request, { key, cost: 2 })), { ok: true, outcome: 'allowed', remaining: 1 }, what)
      t.match(fields(await budget.spend(request, { key, cost: 2 })), { ok: false, outcome: 'limited', remaining: 1 }, `${what}: counted`)
      const slots = await budget.hold(request, { key })
      t.match(slots, { ok: true, outcome: 'allowed', inFlight: 1 }, `${what}: held`)
      slots.release()
    }
  }
  t.same(troubles.map(m => m.error.message), [], 'Redis refused nothing (no CROSSSLOT)')
  const keys = (await Promise.all((await cluster.masters()).map(async m => await scanKeys(m.redis, nameSpace)))).flat()
  const tags = new Map<string, string[]>()
  for (const key of keys) {
    const tag = /\{([^}]*)\}/.exec(key)![1]!
    tags.set(tag, [...tags.get(tag) ?? [], key])
  }
  t.ok(tags.size >= clients.length * subKeys.length, `one hash tag a client's key (${tags.size} tags, ${keys.length} keys)`)
  for (const [tag, under] of tags) {
    const slots = new Set(await Promise.all(under.map(async key => await cluster.keySlot(key))))
    t.equal(slots.size, 1, `{${tag}}: ${under.length} keys in one slot`)
  }
  await graphqlOn(t, cluster.urls)
  await websocketOn(t, cluster.urls)
  t.same(troubles.map(m => m.error.message), [], 'the adapters too: Redis refused nothing')
})

/** fastify-rate-guard/mercurius on `redis` (the Cluster): a query's cost refused before execution, refunded after; a field's own budget. */
async function graphqlOn (t: Test, redis: readonly string[]): Promise<void> {
  const app = Fastify()
  t.teardown(() => app.close())
  let ran = 0
  await app.register(rateGuard, { global: false, redis, nameSpace: uniquePrefix(), timeout: 3000, failMode: 'closed' })
  await app.register(mercurius, {
    schema: 'type Query { items(first: Int): [Item!]! } type Item { name: String } type Mutation { signIn: Boolean }',
    resolvers: { Query: { items: () => { ran++; return [{ name: 'a' }] } }, Mutation: { signIn: () => true } }
  })
  await app.register(mercuriusRateGuard, { cost: { maximumAvailable: 50, restoreRate: 1 }, operations: { signIn: { max: 1, timeWindow: '1 minute' } } })
  const ask = async (query: string): Promise<{ data?: unknown, errors?: unknown, extensions: { cost: Record<string, unknown> } }> =>
    (await app.inject({ method: 'POST', url: '/graphql', payload: { query } })).json()
  t.match(await ask('{ items(first: 40) { name } }'), { extensions: { cost: { requestedQueryCost: 40, actualQueryCost: 1 } } },
    'GraphQL on the Cluster: 40 asked, 1 returned, 39 given back')
  t.match(await ask('{ items(first: 45) { name } }'), { data: { items: [{ name: 'a' }] } }, 'the refund let the next query fit')
  t.match(await ask('{ items(first: 49) { name } }'), { errors: [{ extensions: { code: 'THROTTLED' } }] }, 'past the bucket: refused')
  t.equal(ran, 2, 'the refused query never ran')
  t.match(await ask('mutation { signIn }'), { data: { signIn: true } })
  t.match(await ask('mutation { signIn }'), { errors: [{ extensions: { code: 'THROTTLED', budget: 'operation:signIn' } }] })
}

/** fastify-rate-guard/websocket on `redis` (the Cluster): a client's messages past its limit dropped and notified. */
async function websocketOn (t: Test, redis: readonly string[]): Promise<void> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, redis, nameSpace: uniquePrefix(), timeout: 3000, failMode: 'closed' })
  await app.register(websocket)
  await app.register(websocketRateGuard, { messages: { max: 3, timeWindow: '1 minute' }, connections: { max: 1 } })
  const received: string[] = []
  app.get('/ws', { websocket: true }, socket => { socket.on('message', (data: Buffer) => { received.push(data.toString()) }) })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const socket = new WebSocket(`ws://127.0.0.1:${(app.server.address() as AddressInfo).port}/ws`)
  t.teardown(() => { socket.terminate() })
  await once(socket, 'open')
  for (let i = 0; i < 5; i++) socket.send(`m${i}`)
  const [notice] = await once(socket, 'message') as [Buffer]
  t.match(JSON.parse(notice.toString()), { error: 'rate_limited' }, 'WebSocket on the Cluster: the fourth message refused, notified')
  t.strictSame(received, ['m0', 'm1', 'm2'], 'three messages reached the app, in order')
}
