// What Redis holds per identity: a redis-server of its own (no persistence), IDENTITIES identities each sending
// REQUESTS allowed requests, through this plugin's default path (the sliding log's lean script, one limit of
// 1000 per hour, keys and arguments made by dist's own encoder, batches of 32) and through
// `@fastify/rate-limit`'s Redis script (one INCR counter per identity, its key `<prefix><ip>` as its store
// names it). `used_memory` grown over the run, divided by the identities.
//
//   npm run build && node bench/memory.js                          (1,000,000 identities, 1 request each)
//   IDENTITIES=100000 REQUESTS=10 node bench/memory.js
//
// An exact log keeps one entry per request in its window, so ours grows with REQUESTS where a counter does not.
// `npm run measure:memory` (scripts/memory.js) gives the other view: one budget's keys filled to their max,
// per algorithm, by MEMORY USAGE; this one counts what the server grows by, dictionaries and all.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createRequire } from 'node:module'
import { connectWhenUp } from './processes.js'

const IDENTITIES = Number(process.env.IDENTITIES || 1_000_000)
const REQUESTS = Number(process.env.REQUESTS || 1)
const BATCH = 32

const { LEAN_SCRIPTS, leanArgs } = await import(new URL('../dist/stores/scripts.js', import.meta.url))
const { memberBases } = await import(new URL('../dist/stores/member-ids.js', import.meta.url))
const { GLOBAL_SCOPE, identityKeys } = await import(new URL('../dist/stores/key-names.js', import.meta.url))

/** A redis-server of its own on `port`, and a client; resolves once it answers. */
async function start (port) {
  const server = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  return { server, client: await connectWhenUp(port) }
}

async function usedMemory (client) {
  return Number(/^used_memory:(\d+)$/m.exec(await client.info('memory'))[1])
}

/** Runs `call(i)` for i in [0, n) with at most 64 in flight. */
async function each (n, call) {
  for (let i = 0; i < n; i += 64) await Promise.all(Array.from({ length: Math.min(64, n - i) }, (_, j) => call(i + j)))
}

const LIMITS = [{ max: 1000, windowMs: 3_600_000, burst: 1000 }]
const ours = async (client) => {
  const sha = await client.script('LOAD', LEAN_SCRIPTS['sliding-log'].lua)
  // Members as RedisStore makes them (memberBases: an integer per call, the request's number after it).
  const nextBase = memberBases()
  const input = (i) => ({ keys: identityKeys('rate-guard:', GLOBAL_SCOPE, `apikey:key-${i}`), limits: LIMITS, ban: null, peek: false })
  for (let r = 0; r < REQUESTS; r++) {
    await each(Math.ceil(IDENTITIES / BATCH), (b) => {
      const inputs = Array.from({ length: Math.min(BATCH, IDENTITIES - b * BATCH) }, (_, i) => input(b * BATCH + i))
      return client.evalsha(sha, ...leanArgs(inputs, nextBase()))
    })
  }
}
const theirs = async (client) => {
  const require = createRequire(import.meta.url)
  const RedisStore = require('@fastify/rate-limit/store/RedisStore.js')
  const defined = {}
  // eslint-disable-next-line no-new
  new RedisStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
  const sha = await client.script('LOAD', defined.rateLimit)
  for (let r = 0; r < REQUESTS; r++) {
    await each(IDENTITIES, (i) => client.evalsha(sha, 1, `fastify-rate-limit-key-${i}`, '3600000', '1000', 'false', 'false'))
  }
}

console.log(`Redis memory per identity: ${IDENTITIES.toLocaleString('en')} identities, ${REQUESTS} allowed request(s) each; a redis-server of its own, ${new Date().toISOString().slice(0, 10)}\n`)
console.log('| store | bytes per identity | keys |\n|---|--:|--:|')
for (const [name, work] of [['rate-guard sliding-log (lean path)', ours], ['@fastify/rate-limit (Redis)', theirs]]) {
  const port = 43_000 + (process.pid % 1000)
  const { server, client } = await start(port)
  const before = await usedMemory(client)
  await work(client)
  const after = await usedMemory(client)
  console.log(`| ${name} | ${Math.round((after - before) / IDENTITIES)} | ${(await client.dbsize()).toLocaleString('en')} |`)
  await client.shutdown('NOSAVE').catch(() => {})
  client.disconnect()
  await once(server, 'exit')
}
