// What a decision costs inside Redis, counted in instructions rather than timed: a redis-server of its own
// runs under `valgrind --tool=callgrind`, which counts the instructions it executes whatever else the machine
// is doing (the same count twice for the same binary and inputs, within about 0.5%). Every script path, at a
// batch of 32 (a full batch, as the plugin sends under load) and at a batch of 1 (a Redis Cluster, where each
// request is its own call, and low concurrency): for each algorithm, allowed requests without a ban policy
// (three keys each) and with one (six keys each: `decide` with strikes, offences and the ban index), 1,000
// clients, one policy of 1000 per hour; `@fastify/rate-limit`'s script for comparison (always one call per
// request); and a script that does nothing with the sliding log's keys and arguments (the floor of a call).
// Each run makes REQUESTS = CALLS x 32 requests: at a batch of 32, CALLS calls one after the other; at a batch
// of 1, one call per request, 32 in flight (pipelined, as ioredis sends concurrent calls), so both columns pay
// the same round trips. Its count less an idle run's (start and stop; for FCALL, start, the library's load and
// stop), per request.
//
//   npm run build && node bench/instructions.js      (CALLS, default 200; needs valgrind)
//   ONLY=sliding-log,floor node bench/instructions.js (rows whose name contains one of these)
//
// Instructions are not time: a system call (theirs makes one read and one write per request, ours one per
// batch) costs the kernel far more than its instructions here. bench/run.js's `Redis µs/req` is that time.
import { spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { connectWhenUp } from './processes.js'

const CALLS = Number(process.env.CALLS || 200)
const BATCH = 32
const CLIENTS = 1000
const REQUESTS = CALLS * BATCH
const ONLY = (process.env.ONLY || '').split(',').filter(Boolean)

/** Starts redis-server under callgrind on `port`, runs `work(client)`, stops it; resolves the instructions counted. */
async function counted (port, work) {
  const out = `/tmp/rate-guard-callgrind.${process.pid}.${port}.out`
  const server = spawn('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, 'redis-server', '--port', String(port), '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  const client = await connectWhenUp(port, { waitMs: 300 }).catch((err) => {
    throw new Error(`redis-server under valgrind did not start on ${port}: ${err.message}`)
  })
  await work(client)
  await client.shutdown('NOSAVE').catch(() => {})
  client.disconnect()
  await once(server, 'exit')
  const summary = Number(/^summary: (\d+)$/m.exec(readFileSync(out, 'utf8'))[1])
  rmSync(out, { force: true })
  return summary
}

const { LEAN_SCRIPTS, LIBRARY, SCRIPTS, leanArgs, scriptArgs } = await import(new URL('../dist/stores/scripts.js', import.meta.url))
const { memberBases } = await import(new URL('../dist/stores/member-ids.js', import.meta.url))
// Members as RedisStore makes them: a base per call, the request's number after it.
const nextBase = memberBases()

const LIMITS = [{ max: 1000, windowMs: 3_600_000, burst: 1000 }]
const BAN = { threshold: 5, ladder: [600_000], forgetMs: 0 }
const keys = (tag) => Object.fromEntries(['log', 'banned', 'override', 'strikes', 'offences', 'backoff'].map(name => [name, `ig:{${tag}}:${name}`]))
/** Request j of a run: client j % CLIENTS, the same in both columns. */
const input = (algorithm, ban, j) => ({ keys: keys(`k${j % CLIENTS}`), limits: LIMITS, ban, peek: false, algorithm })

/** Runs `call(j, n)` for the run's requests `batch` at a time: a call of `batch` requests from j, or `BATCH` calls of one in flight. */
async function requests (batch, call) {
  for (let j = 0; j < REQUESTS; j += BATCH) {
    if (batch === BATCH) await call(j, BATCH)
    else await Promise.all(Array.from({ length: BATCH }, (_, i) => call(j + i, 1)))
  }
}

/** Allowed requests through this plugin's script `lua`, with the arguments `algorithm`'s calls send (`args`: the lean script's). */
function ours (lua, algorithm, ban, args = (inputs, base) => scriptArgs(inputs, 'decide', base)) {
  return (batch) => async (client) => {
    const sha = await client.script('LOAD', lua)
    await requests(batch, (j, n) => client.evalsha(sha, ...args(Array.from({ length: n }, (_, i) => input(algorithm, ban, j + i)), nextBase())))
  }
}

/** Loads the FUNCTION library: what the plugin does once at registration, not per request. */
const loadLibrary = async (client) => { await client.call('FUNCTION', 'LOAD', LIBRARY.code) }

/**
 * The same as `ours`, but called as the FUNCTION library's function (FCALL), as the plugin calls it where the
 * server takes it. Its baseline is a run that loads the library and calls nothing: compiling the whole library
 * costs Redis about 38 million instructions, which would otherwise add 12,000 to each of 3,200 requests.
 */
function oursByFunction ({ command }, algorithm, ban, args) {
  const work = (batch) => async (client) => {
    await loadLibrary(client)
    const name = LIBRARY.functions.get(command)
    await requests(batch, (j, n) => client.call('FCALL', name, ...args(Array.from({ length: n }, (_, i) => input(algorithm, ban, j + i)), nextBase())))
  }
  work.baseline = loadLibrary
  return work
}

/** As many requests through `@fastify/rate-limit`'s Redis script, one call each. */
function theirs () {
  const require = createRequire(import.meta.url)
  const RedisStore = require('@fastify/rate-limit/store/RedisStore.js')
  const defined = {}
  // eslint-disable-next-line no-new
  new RedisStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
  return () => async (client) => {
    const sha = await client.script('LOAD', defined.rateLimit)
    await requests(1, (j) => client.evalsha(sha, 1, `ig:frl:k${j % CLIENTS}`, '3600000', '1000', 'false', 'false'))
  }
}

const ROWS = [
  // Each lean path (lua/lean.lua around lua/lean-<algorithm>.lua): what the plugin sends for one limit at a cost of 1.
  // By FCALL (the default where the server takes FUNCTION LOAD) and by EVALSHA (where it refuses functions).
  ...Object.entries(LEAN_SCRIPTS).flatMap(([algorithm, script]) => [
    [`rate-guard ${algorithm}, lean path, FCALL`, 'no', oursByFunction(script, algorithm, null, leanArgs)],
    [`rate-guard ${algorithm}, lean path, FCALL`, 'yes', oursByFunction(script, algorithm, BAN, leanArgs)],
    [`rate-guard ${algorithm}, lean path, EVALSHA`, 'no', ours(script.lua, algorithm, null, leanArgs)],
    [`rate-guard ${algorithm}, lean path, EVALSHA`, 'yes', ours(script.lua, algorithm, BAN, leanArgs)]
  ]),
  ...Object.keys(SCRIPTS).flatMap(algorithm => [
    [`rate-guard ${algorithm}`, 'no', ours(SCRIPTS[algorithm].lua, algorithm, null)],
    [`rate-guard ${algorithm}`, 'yes', ours(SCRIPTS[algorithm].lua, algorithm, BAN)]
  ]),
  ['floor: `return {}`, the sliding log\'s arguments', 'no', ours('return {}', 'sliding-log', null)],
  ['@fastify/rate-limit (INCR)', '–', theirs()]
].filter(([name]) => ONLY.length === 0 || ONLY.some(only => name.includes(only)))

if (spawnSync('valgrind', ['--version']).status !== 0) throw new Error('bench/instructions.js needs valgrind (apt-get install valgrind)')
const version = (command, args) => spawnSync(command, args, { encoding: 'utf8' }).stdout.trim()
const commit = version('git', ['rev-parse', '--short', 'HEAD'])
const dirty = version('git', ['status', '--porcelain', '--', 'lua', 'lib', 'bench']) === '' ? '' : ' with uncommitted changes'
const port = 42_000 + (process.pid % 1000)
const idle = await counted(port, async () => {})
/** What a row's run costs before its first request: nothing, or its `baseline` (the library's load), counted once. */
const baselines = new Map()
async function baselineOf (work) {
  if (work.baseline === undefined) return idle
  if (!baselines.has(work.baseline)) baselines.set(work.baseline, await counted(port, work.baseline))
  return baselines.get(work.baseline)
}
console.log(`Redis instructions per allowed request (valgrind --tool=callgrind; ${REQUESTS.toLocaleString('en')} requests over ${CLIENTS.toLocaleString('en')} clients per run; batch of 32: ${CALLS} calls one after the other; batch of 1: a call per request, ${BATCH} in flight)`)
console.log(`${version('redis-server', ['--version'])}; ${version('valgrind', ['--version'])}; commit ${commit}${dirty}, ${new Date().toISOString().slice(0, 10)}`)
console.log(`Reproduce: npm run build && CALLS=${CALLS} node bench/instructions.js\n`)
console.log('| script | ban policy | batch of 32 | batch of 1 |\n|---|---|--:|--:|')
for (const [name, ban, work] of ROWS) {
  const cells = []
  for (const batch of [BATCH, 1]) {
    const total = await counted(port, work(batch))
    cells.push(Math.round((total - await baselineOf(work)) / REQUESTS).toLocaleString('en'))
  }
  console.log(`| ${name} | ${ban} | ${cells.join(' | ')} |`)
}
