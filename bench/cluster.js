// The Cluster scenario: what an allowed request costs a Redis Cluster, ours beside @fastify/rate-limit's, on a
// local cluster of three masters and a replica each (redis-server processes of its own, no persistence) started
// here: the masters replicate every write, as a cluster in production does (REPLICAS=0: masters alone).
// Ours: this plugin's Redis store from dist/ (RedisStore.decideMany on an ioredis Cluster), in batches of 32 as
// its batcher sends them under load (grouped by master: one call per master, Redis 7.0 and later) and in
// batches of 1 (low concurrency); theirs: its Redis script, one call per request, 32 in flight. REQUESTS
// allowed requests over 10,000 identities, limit 1000 per hour. Redis CPU (`INFO cpu`, user + sys) and script
// time (`INFO commandstats`, EVALSHA + EVAL) summed over the masters, per request.
//
//   npm run build && node bench/cluster.js            (REQUESTS, default 100,000; REPLICAS, 3 or 0)
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { Cluster } from 'ioredis'
import { MASTERS, REPLICAS, spent, startCluster } from './cluster-nodes.js'

const REQUESTS = Number(process.env.REQUESTS || 100_000)
const IDENTITIES = 10_000
const BATCH = 32

const { RedisStore } = await import(new URL('../dist/stores/redis.js', import.meta.url))
const { GLOBAL_SCOPE, identityKeys } = await import(new URL('../dist/stores/key-names.js', import.meta.url))

const LIMITS = [{ max: 1000, windowMs: 3_600_000, burst: 1000 }]

/** This plugin's store: REQUESTS decisions in calls of `batch` (32 in flight at a batch of 1). */
function ours (batch) {
  return async (client, run) => {
    const store = new RedisStore(client, false, `rg${run}:`)
    const input = (j) => ({ keys: identityKeys(`rg${run}:`, GLOBAL_SCOPE, `apikey:key-${j % IDENTITIES}`), limits: LIMITS, ban: null, peek: false, algorithm: 'sliding-log' })
    return async (j, n) => {
      const answers = await store.decideMany(Array.from({ length: n }, (_, k) => input(j + k)), 'sliding-log')
      for (const answer of answers) if (answer instanceof Error || answer.status !== 'allowed') throw new Error(`not allowed: ${answer.message ?? answer.status}`)
    }
  }
}

/** @fastify/rate-limit's script: one call per request. */
async function theirs (client, run) {
  const require = createRequire(import.meta.url)
  const PeerStore = require('@fastify/rate-limit/store/RedisStore.js')
  const defined = {}
  // eslint-disable-next-line no-new
  new PeerStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
  client.defineCommand('peerRateLimit', { numberOfKeys: 1, lua: defined.rateLimit })
  return async (j, n) => {
    await Promise.all(Array.from({ length: n }, (_, k) => client.peerRateLimit(`frl${run}:key-${(j + k) % IDENTITIES}`, 3_600_000, 1000, 'false', 'false')))
  }
}

const ROWS = [
  ['rate-guard sliding-log, batches of 32 (one call per master)', ours(BATCH), BATCH],
  ['rate-guard sliding-log, batches of 1', ours(1), 1],
  ['@fastify/rate-limit (Redis), one call per request', theirs, 1]
]

if (spawnSync('redis-server', ['--version']).status !== 0) throw new Error('bench/cluster.js needs redis-server')
const { ports, nodes, stop } = await startCluster()
const masters = nodes.slice(0, MASTERS)
const client = new Cluster(ports.slice(0, MASTERS).map(port => ({ host: '127.0.0.1', port })), { scaleReads: 'master', enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } })
await new Promise((resolve, reject) => { client.once('ready', resolve); client.once('error', reject) })
console.log(`A local Redis Cluster of ${MASTERS} masters${REPLICAS === 0 ? '' : ` and ${REPLICAS} replicas`} (${spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout.trim().split(' ')[2]}), ${REQUESTS.toLocaleString('en')} allowed requests over ${IDENTITIES.toLocaleString('en')} identities per row, ${new Date().toISOString().slice(0, 10)}\n`)
console.log('| path | Redis CPU µs per request (summed over the masters) | script µs per request | requests/s |\n|---|--:|--:|--:|')
try {
  for (const [run, [name, make, batch]] of ROWS.entries()) {
    const send = await make(client, run)
    const before = await spent(masters)
    const started = performance.now()
    // batch 32: BATCH requests per decideMany, 8 batches in flight; batch 1: 32 single requests in flight.
    for (let j = 0; j < REQUESTS; j += BATCH * (batch > 1 ? 8 : 1)) {
      await Promise.all(batch > 1 ? Array.from({ length: 8 }, (_, b) => send(j + b * BATCH, BATCH)) : Array.from({ length: BATCH }, (_, k) => send(j + k, 1)))
    }
    const seconds = (performance.now() - started) / 1000
    const after = await spent(masters)
    const requests = batch > 1 ? Math.ceil(REQUESTS / (BATCH * 8)) * BATCH * 8 : Math.ceil(REQUESTS / BATCH) * BATCH
    console.log(`| ${name} | ${((after.cpu - before.cpu) * 1e6 / requests).toFixed(1)} | ${((after.script - before.script) / requests).toFixed(1)} | ${Math.round(requests / seconds).toLocaleString('en')} |`)
  }
} finally {
  client.disconnect()
  await stop()
}
