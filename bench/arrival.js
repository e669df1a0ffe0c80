// What an allowed request costs Redis depending on how requests arrive, the store called directly (no HTTP,
// no Fastify): this plugin's sliding log in calls of 32, 16, 8, 4 and 1 distinct clients, in calls of 32 on
// one client (what connections walking the same list of clients in lockstep send), on logs already holding
// entries; and @fastify/rate-limit's script with 100, 32 or 1 calls in flight (how many arrive per read).
// Each row: REQUESTS allowed requests over 10,000 clients, about 100 in flight, on a redis-server of its own
// pinned to CPU 1 (this process on CPU 0); Redis CPU (`INFO cpu`) and script time (`INFO commandstats`) per
// request. Why the harnesses' ratios differ (bench/README.md, docs/performance.md).
//
//   npm run build && node bench/arrival.js          (REQUESTS, default 40,000; ONLY: substrings of row names)
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { pinning, startRedis } from './processes.js'
import { delta, info } from './redis-info.js'
import { scriptDelta } from './harness.js'
import { Redis } from 'ioredis'

const REQUESTS = Number(process.env.REQUESTS || 40_000)
const CLIENTS = 10_000
const IN_FLIGHT = 100
const LIMITS = [{ max: 1_000_000, windowMs: 3_600_000, burst: 1_000_000 }]

const { RedisStore } = await import(new URL('../dist/stores/redis.js', import.meta.url))
const { GLOBAL_SCOPE, identityKeys } = await import(new URL('../dist/stores/key-names.js', import.meta.url))

/** This plugin's store, calls of `batch` requests; `sameClient`: every request of a call on one client. */
function ours (batch, { sameClient = false, fill = 0 } = {}) {
  return async (client, prefix) => {
    const store = new RedisStore(client, false, prefix)
    const inputs = Array.from({ length: CLIENTS }, (_, j) => ({ keys: identityKeys(prefix, GLOBAL_SCOPE, `apikey:key-${j}`), limits: LIMITS, ban: null, peek: false, algorithm: 'sliding-log' }))
    const call = (j) => store.decideMany(Array.from({ length: batch }, (_, k) => inputs[(sameClient ? j / batch : j + k) % CLIENTS]), 'sliding-log')
    const waves = async (requests) => {
      for (let j = 0; j < requests; j += batch * Math.ceil(IN_FLIGHT / batch)) {
        await Promise.all(Array.from({ length: Math.ceil(IN_FLIGHT / batch) }, (_, b) => call(j + b * batch)))
      }
    }
    // `fill` requests per client first (not measured): logs that hold that many entries.
    if (fill > 0) await waves(fill * CLIENTS)
    return waves
  }
}

/** @fastify/rate-limit's script, `inFlight` calls at a time. */
function theirs (inFlight) {
  return async (client, prefix) => {
    const require = createRequire(import.meta.url)
    const PeerStore = require('@fastify/rate-limit/store/RedisStore.js')
    const defined = {}
    // eslint-disable-next-line no-new
    new PeerStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
    client.defineCommand('peerRateLimit', { numberOfKeys: 1, lua: defined.rateLimit })
    return async (requests) => {
      for (let j = 0; j < requests; j += inFlight) {
        await Promise.all(Array.from({ length: inFlight }, (_, k) => client.peerRateLimit(`${prefix}key-${(j + k) % CLIENTS}`, 3_600_000, 1_000_000, 'false', 'false')))
      }
    }
  }
}

const ROWS = [
  ['rate-guard sliding-log, calls of 32 distinct clients', ours(32)],
  ['rate-guard sliding-log, calls of 16', ours(16)],
  ['rate-guard sliding-log, calls of 8', ours(8)],
  ['rate-guard sliding-log, calls of 4', ours(4)],
  ['rate-guard sliding-log, calls of 1', ours(1)],
  ['rate-guard sliding-log, calls of 32 on one client (lockstep)', ours(32, { sameClient: true })],
  ['rate-guard sliding-log, calls of 32, logs holding 10 entries', ours(32, { fill: 10 })],
  ['rate-guard sliding-log, calls of 32, logs holding 40 entries', ours(32, { fill: 40 })],
  ['@fastify/rate-limit, 100 calls in flight', theirs(100)],
  ['@fastify/rate-limit, 32 in flight', theirs(32)],
  ['@fastify/rate-limit, 1 in flight', theirs(1)]
]
const only = (process.env.ONLY ?? '').split(',').filter(Boolean)

const pin = pinning()
if (pin.taskset) spawnSync('taskset', ['-a', '-p', '-c', pin.server, String(process.pid)], { stdio: 'ignore' })
const own = await startRedis(pin)
const client = new Redis(own.url, { enableOfflineQueue: true, maxRetriesPerRequest: 1 })
const probe = new Redis(own.url)
console.log(`Arrival: ${REQUESTS.toLocaleString('en')} allowed requests per row over ${CLIENTS.toLocaleString('en')} clients, ${new Date().toISOString()}; ${own.note}; ` +
  `this process ${pin.taskset ? `on CPU ${pin.server}` : 'not pinned'}\n`)
console.log('| how requests arrive | Redis CPU µs/req (INFO cpu) | script µs/req (INFO commandstats) | script µs/call | Redis commands/req | req/s |\n|---|--:|--:|--:|--:|--:|')
try {
  for (const [i, [name, make]] of ROWS.entries()) {
    if (only.length > 0 && !only.some(o => name.includes(o))) continue
    const send = await make(client, `arr${i}:`)
    const before = await info(probe)
    const started = performance.now()
    await send(REQUESTS)
    const seconds = (performance.now() - started) / 1000
    const after = await info(probe)
    const { cpuUs, commands } = delta(before, after)
    const scripts = scriptDelta(before, after)
    console.log(`| ${name} | ${(cpuUs / REQUESTS).toFixed(1)} | ${(scripts.usec / REQUESTS).toFixed(1)} | ${(scripts.usec / scripts.calls).toFixed(1)} | ${(commands / REQUESTS).toFixed(2)} | ${Math.round(REQUESTS / seconds).toLocaleString('en')} |`)
    await probe.flushall()
  }
} finally {
  client.disconnect()
  probe.disconnect()
  await own.stop()
}
