// A Cluster of each Redis-compatible server (test/helpers/servers.ts): 3 masters and 3 replicas of that binary,
// every node checked to be it. A batch over the three masters runs the cross-slot scripts, one call per
// master, exact; a slot moved by hand sends a stale batch a MOVED, which falls back to one call per request,
// nothing counted twice; a master SIGKILLed: while its replica takes over, every request is answered within
// the deadline as failMode says, then decided exactly on the promoted replica. The full Cluster suite stays on
// the redis-server on PATH (test/cluster.test.ts).
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../../lib/stores/key-names.js'
import { RedisStore } from '../../lib/stores/redis.js'
import { clusterReady, pollUntil, startCluster } from '../helpers/cluster.js'
import type { TestCluster } from '../helpers/cluster.js'
import { allowedBy, callsOf, identityOn, inputOf } from '../helpers/cluster-batches.js'
import { watchEscapes } from '../helpers/faults.js'
import { overdue } from '../helpers/lag.js'
import { scriptCalls, uniquePrefix } from '../helpers/redis.js'
import { eachServer, isServer } from '../helpers/servers.js'

// Six server processes and a failover per server: about 12 s a server on a quiet machine.
t.setTimeout(150_000)

const escaped = watchEscapes()
/** The decision deadline while a master is down: each answer held to it plus the lag measured meanwhile. */
const TIMEOUT = 150
const MAX = 3

/** A store on its own cluster client, ready: its batches grouped by master. */
async function storeOn (cluster: TestCluster, nameSpace: string): Promise<RedisStore> {
  const client = cluster.client()
  await clusterReady(client)
  return new RedisStore(client, false, nameSpace)
}

/** An app on the cluster's URLs (its own client), the identity taken from `x-id`. */
async function appOn (t: Test, cluster: TestCluster, nameSpace: string, timeout: number): Promise<FastifyInstance> {
  // A logger that keeps nothing: the failover's trouble goes there, not to process warnings.
  const app = Fastify({ logger: { level: 'warn', stream: { write () {} } } })
  t.teardown(async () => { await app.close() })
  await app.register(rateGuard, { redis: cluster.urls, nameSpace, max: MAX, timeWindow: '1 minute', timeout, failMode: 'closed', keyGenerator: request => String(request.headers['x-id']) })
  app.get('/', async () => 'ok')
  await app.ready()
  return app
}

/** max + 1 requests of `identity`, one after another: their status codes. */
async function statuses (app: FastifyInstance, identity: string): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i <= MAX; i++) codes.push((await app.inject({ url: '/', headers: { 'x-id': identity } })).statusCode)
  return codes
}
const EXACT = [...Array<number>(MAX).fill(200), 429]

eachServer(t, 'a Cluster of 3 masters and 3 replicas: cross-slot batches, a MOVED, a failover', async (t, server) => {
  const cluster = await startCluster(t, { bin: server.bin })
  for (const node of cluster.nodes) await isServer(t, node.redis, server)
  const masters = await cluster.masters()

  await t.test('a batch over the three masters: one cross-slot call per master, exact', async t => {
    const nameSpace = uniquePrefix()
    const store = await storeOn(cluster, nameSpace)
    const calls = callsOf(t, nameSpace)
    // A first batch loads the scripts on every master (EVALSHA, then EVAL after NOSCRIPT).
    await store.decideMany(Array.from({ length: 30 }, (_, i) => inputOf(nameSpace, `load-${i}`, MAX)), 'sliding-log')
    await Promise.all(masters.map(async master => await master.redis.config('RESETSTAT')))
    calls.length = 0
    const identities = Array.from({ length: 30 }, (_, i) => `spread-${i}`)
    const inputs = [0, 1, 2, 3].flatMap(() => identities.map(id => inputOf(nameSpace, id, MAX)))
    const decisions = await store.decideMany(inputs, 'sliding-log')
    t.same(decisions.filter(d => d instanceof Error).map(String), [], 'no request failed')
    t.same([...allowedBy(inputs, decisions).values()], identities.map(() => MAX), 'exactly max allowed per identity')
    t.equal(calls.length, masters.length, 'one call per master')
    const evals = await Promise.all(masters.map(async master => await scriptCalls(master.redis)))
    t.same(evals, masters.map(() => 1), 'each master ran one script call')
    // The general script across slots too: requests the lean script does not take (a cost of 2 of 3).
    calls.length = 0
    const costly = identities.map(id => inputOf(nameSpace, `costly-${id}`, MAX, 'sliding-log', 2))
    const answers = await store.decideMany([...costly, ...costly], 'sliding-log')
    t.same([...allowedBy([...costly, ...costly], answers).values()], identities.map(() => 1), 'a cost of 2 of 3: one of two allowed per identity')
    t.equal(calls.length, masters.length, 'the general script: one call per master')
  })

  await t.test('a slot moved by hand: the stale batch meets MOVED, falls back to one call per request, nothing counted twice', async t => {
    const nameSpace = uniquePrefix()
    const store = await storeOn(cluster, nameSpace)
    const [source, target, third] = masters
    // An identity on the source whose slot holds no key yet, so the slot can move without MIGRATE.
    let moving = ''
    for (let i = 0; moving === ''; i++) {
      const candidate = await identityOn(cluster, source!, nameSpace, `moving-${i}`)
      const slot = await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, candidate).log)
      if (Number(await source!.redis.call('CLUSTER', 'COUNTKEYSINSLOT', slot)) === 0) moving = candidate
    }
    const slot = await cluster.keySlot(identityKeys(nameSpace, GLOBAL_SCOPE, moving).log)
    const others = [await identityOn(cluster, source!, nameSpace, 'neighbour'), await identityOn(cluster, target!, nameSpace, 'there'), await identityOn(cluster, third!, nameSpace, 'third')]
    const everyone = [moving, ...others]
    const inputs = [...everyone, ...everyone].map(id => inputOf(nameSpace, id, 1))
    // The store's client reads the slot table and loads the scripts now; the slot moves after.
    await store.decideMany(Array.from({ length: 12 }, (_, i) => inputOf(nameSpace, `warm-${i}`, 1)), 'sliding-log')
    const admin = async (node: typeof source, ...args: Array<string | number>): Promise<unknown> => await node!.redis.call('CLUSTER', ...args)
    await admin(target, 'SETSLOT', slot, 'IMPORTING', source!.id)
    await admin(source, 'SETSLOT', slot, 'MIGRATING', target!.id)
    for (const node of [target, source, third]) await admin(node, 'SETSLOT', slot, 'NODE', target!.id)
    t.equal(await cluster.ownerOf(slot), target, 'the slot is the target\'s')

    const calls = callsOf(t, nameSpace)
    const decisions = await store.decideMany(inputs, 'sliding-log')
    t.same(decisions.filter(d => d instanceof Error).map(String), [], 'no request failed')
    t.same(everyone.map(id => allowedBy(inputs, decisions).get(identityKeys(nameSpace, GLOBAL_SCOPE, id).log)), everyone.map(() => 1), 'each identity: one allowed, one limited')
    t.ok(calls.includes(1), `the source's call fell back to one call per request (${calls.join(', ')} requests a call)`)
    t.equal(await target!.redis.zcard(identityKeys(nameSpace, GLOBAL_SCOPE, moving).log), 1, 'the moved identity counted once, on the target')
  })

  await t.test('a master SIGKILLed: failMode answers within the deadline, then exact on the promoted replica', async t => {
    const nameSpace = uniquePrefix()
    const app = await appOn(t, cluster, nameSpace, TIMEOUT)
    const victim = masters[0]!
    const replica = await cluster.replicaOf(victim)
    const onVictim = await identityOn(cluster, victim, nameSpace, 'victim')
    await victim.kill()
    const samples: Array<{ at: number, ms: number, status: number }> = []
    await pollUntil('the replica promoted', 20_000, async () => {
      const at = performance.now()
      const res = await app.inject({ url: '/', headers: { 'x-id': onVictim } })
      samples.push({ at, ms: performance.now() - at, status: res.statusCode })
      return await replica.roleNow() === 'master'
    })
    t.same(overdue(TIMEOUT, samples), [], `all ${samples.length} requests during the failover answered within the deadline`)
    t.same(samples.filter(s => s.status !== 503 && s.status !== 200 && s.status !== 429).map(s => s.status), [], 'each a decision or failMode\'s 503')
    t.ok(samples.some(s => s.status === 503), 'the kill was felt: failMode closed refused')
    const exact = await appOn(t, cluster, nameSpace, 3000)
    const fresh = await identityOn(cluster, replica, nameSpace, 'promoted')
    await pollUntil('the plugin decides on the promoted replica', 20_000, async () => (await exact.inject({ url: '/', headers: { 'x-id': 'probe' } })).statusCode !== 503)
    t.same(await statuses(exact, fresh), EXACT, 'max + 1 requests on the promoted replica: exactly one 429')
  })
})

t.test('nothing escaped: no unhandled rejection, no unlistened error event', async t => {
  t.same(escaped.unhandled.map(String), [])
  t.same(escaped.unlistened, [])
})
