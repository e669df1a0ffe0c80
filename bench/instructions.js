// What a decision costs inside Redis, counted in instructions rather than timed: a redis-server of its own
// runs under `valgrind --tool=callgrind`, which counts the instructions it executes whatever else the machine
// is doing (the same count twice for the same binary and inputs). For each of this plugin's scripts, CALLS
// script calls of BATCH allowed requests (a full batch, as the plugin sends under load: 1,000 clients, one
// policy of 1000 per hour, no ban policy); for `@fastify/rate-limit`'s script, as many requests, one call
// each, pipelined BATCH at a time. Each run's count less an idle run's (start and stop), per request.
//
//   node bench/instructions.js            (after npm run build; CALLS, default 200; needs valgrind)
//
// Instructions are not time: a system call (theirs makes one read and one write per request, ours one per
// batch) costs the kernel far more than its instructions here. bench/run.js's `Redis µs/req` is that time.
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'

const CALLS = Number(process.env.CALLS || 200)
const BATCH = 32
const CLIENTS = 1000

/** Starts redis-server under callgrind on `port`, runs `work(client)`, stops it; resolves the instructions counted. */
async function counted (port, work) {
  const out = `/tmp/rate-guard-callgrind.${process.pid}.${port}.out`
  const server = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, 'redis-server', '--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const client = new Redis({ port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  // Refused while valgrind starts redis-server: each attempt's error is the connect() below's.
  client.on('error', () => {})
  for (let i = 0; ; i++) {
    try {
      await client.connect()
      break
    } catch (err) {
      if (i === 100) throw new Error(`redis-server under valgrind did not start on ${port}: ${err.message}`)
      await sleep(300)
    }
  }
  await work(client)
  await client.shutdown('NOSAVE').catch(() => {})
  client.disconnect()
  await once(server, 'exit')
  return Number(/^summary: (\d+)$/m.exec(readFileSync(out, 'utf8'))[1])
}

const { SCRIPTS, scriptArgs } = await import(new URL('../dist/stores/scripts.js', import.meta.url))

/** CALLS calls of BATCH allowed requests of one script, as the plugin makes them. */
function ours (algorithm) {
  const limits = [{ max: 1000, windowMs: 3_600_000, burst: 1000 }]
  const keys = (tag) => Object.fromEntries(['log', 'banned', 'override', 'strikes', 'offences', 'backoff'].map(name => [name, `ig:{${tag}}:${name}`]))
  return async (client) => {
    const sha = await client.script('LOAD', SCRIPTS[algorithm].lua)
    for (let c = 0; c < CALLS; c++) {
      const inputs = Array.from({ length: BATCH }, (_, i) => ({ keys: keys(`k${(c * BATCH + i) % CLIENTS}`), limits, ban: null, peek: false, algorithm }))
      await client.evalsha(sha, ...scriptArgs(inputs, 'decide', `m${c}.`))
    }
  }
}

/** As many requests through `@fastify/rate-limit`'s Redis script, one call each, BATCH in flight. */
function theirs (client) {
  const require = createRequire(import.meta.url)
  const RedisStore = require('@fastify/rate-limit/store/RedisStore.js')
  const defined = {}
  // eslint-disable-next-line no-new
  new RedisStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
  return (async () => {
    const sha = await client.script('LOAD', defined.rateLimit)
    for (let c = 0; c < CALLS; c++) {
      await Promise.all(Array.from({ length: BATCH }, (_, i) => client.evalsha(sha, 1, `ig:frl:k${(c * BATCH + i) % CLIENTS}`, '3600000', '1000', 'false', 'false')))
    }
  })()
}

if (spawnSync('valgrind', ['--version']).status !== 0) throw new Error('bench/instructions.js needs valgrind (apt-get install valgrind)')
const port = 42_000 + (process.pid % 1000)
const idle = await counted(port, async () => {})
const requests = CALLS * BATCH
console.log(`Redis instructions per allowed request (valgrind --tool=callgrind, ${requests.toLocaleString('en')} requests over ${CLIENTS.toLocaleString('en')} clients; ours ${BATCH} per call)\n`)
console.log('| script | instructions per request |\n|---|--:|')
for (const [name, work] of [...Object.keys(SCRIPTS).map(algorithm => [`rate-guard ${algorithm}`, ours(algorithm)]), ['@fastify/rate-limit (INCR)', theirs]]) {
  const total = await counted(port, work)
  console.log(`| ${name} | ${Math.round((total - idle) / requests).toLocaleString('en')} |`)
}
