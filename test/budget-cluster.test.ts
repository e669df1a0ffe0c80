// fastify.rateGuard.budget(options) across servers: one Redis under two app instances (their slots and counts
// shared), and a real Redis Cluster (a client's keys, odd ones too, each spend's in one slot: no CROSSSLOT).
// The budget on one store at a time, and under a Redis that does not answer, is in test/budget.test.ts.
import diagnostics from 'node:diagnostics_channel'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { CHANNELS } from '../lib/index.js'
import type { RateGuardBudget, RateGuardOptions, RouteRateLimitOptions, TroubleMessage } from '../lib/index.js'
import { getRedis, scanKeys, uniquePrefix, until } from './helpers/redis.js'
import { startCluster } from './helpers/cluster.js'

// A Cluster of six redis-servers takes a few seconds to form on a loaded machine.
t.setTimeout(120_000)

interface App {
  app: FastifyInstance
  budget: RateGuardBudget
  of: (client: string) => Promise<FastifyRequest>
}

async function appOn (t: Test, opts: RateGuardOptions, budgetOptions: RouteRateLimitOptions): Promise<App> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, keyGenerator: request => String(request.headers['x-client']), ...opts })
  const budget = app.rateGuard.budget(budgetOptions)
  let last: FastifyRequest | undefined
  app.get('/request', async request => { last = request; return 'ok' })
  await app.ready()
  const of = async (client: string): Promise<FastifyRequest> => {
    await app.inject({ url: '/request', headers: { 'x-client': client } })
    return last!
  }
  return { app, budget, of }
}

function fields (spent: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(spent).filter(([, v]) => typeof v !== 'function'))
}

t.test('two app instances on one Redis share a budget\'s slots and counts', async t => {
  const { url } = await getRedis(t)
  const opts = { redis: url, nameSpace: uniquePrefix(), timeout: 3000, failMode: 'closed' } as const
  const limits = { max: 10, timeWindow: '1 minute', concurrency: { max: 2 } }
  const one = await appOn(t, opts, limits)
  const two = await appOn(t, opts, limits)
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
  const { budget, of } = await appOn(t, { redis: cluster.urls, nameSpace, timeout: 3000, failMode: 'closed' },
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
})
