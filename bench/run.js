// `npm run bench`: the harnesses of BENCH_HARNESSES (default all, in this order):
// - load: every server variant under every scenario, in interleaved rounds (A B C … A B C …), each server in its
//   own process and bench/load.js's generator in another; then the scripts' cost inside Redis (bench/scripts.js);
// - autocannon, inject, cluster: bench/autocannon.js, bench/inject.js and bench/cluster-plugin.js, each run as a
//   child with its own settings (bench/README.md), their markdown printed after the load harness's;
// - websocket (and graphql): a WebSocket message's (a GraphQL request's) added cost beside the bare server's;
// - shed: issue 46's load shedder under an open-loop overload, and its adaptive in-flight limit (bench/shed.js).
// Prints markdown to stdout and writes bench/results/latest.json (each child harness's JSON under `harnesses`).
//
// BENCH_HARNESSES: comma-separated, of load, autocannon, inject, cluster, websocket, graphql, shed. For the load
// harness: BENCH_DURATION (s measured per run, default 2), BENCH_WARMUP (s, default 0.75), BENCH_ROUNDS
// (default 3), BENCH_CONNECTIONS (default 100), BENCH_SINGLE (s measured at one connection, default 0.5),
// BENCH_ONLY (comma-separated substrings of variant ids), BENCH_SCENARIOS (comma-separated: allowed, hot,
// banned, mixed, realistic), BENCH_SCRIPTS (0 to skip the redis-benchmark section), BENCH_OUT (the JSON file),
// REDIS_URL (default redis://127.0.0.1:6379), BENCH_REDIS=start (a redis-server of its own, pinned with the load),
// BENCH_BATCHES=1 (count the plugin's batch sizes through its TracingChannel).
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { coreBusy, coreTimes, loadAverage, machine } from './machine.js'
import { MAX, POOL, SCENARIOS, bannedKeys, key } from './plan.js'
import { pinning, startLoad, startRedis, startServer, stopServer } from './processes.js'
import { deleteKeys, delta, info } from './redis-info.js'
import { batchDelta, fullShare, readsPerRequest, scriptDelta, syscalls } from './harness.js'
import { aggregate, markdown, spread } from './report.js'
import { scriptCosts } from './scripts.js'
import { allVariants, selectVariants } from './variants.js'

const env = process.env
/** The plugin's batch size (lib/batcher.ts's BATCH_MAX): a batch of this many went without waiting for the turn's end. */
const BATCH_FULL = 32
const number = (name, fallback) => {
  const value = env[name] === undefined || env[name] === '' ? fallback : Number(env[name])
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number, got ${env[name]}`)
  return value
}
const settings = {
  durationS: number('BENCH_DURATION', 2),
  warmupS: number('BENCH_WARMUP', 0.75),
  rounds: Math.max(1, Math.round(number('BENCH_ROUNDS', 3))),
  connections: Math.max(1, Math.round(number('BENCH_CONNECTIONS', 100))),
  singleS: number('BENCH_SINGLE', 0.5),
  redisUrl: env.REDIS_URL || 'redis://127.0.0.1:6379',
  scripts: env.BENCH_SCRIPTS !== '0',
  batches: env.BENCH_BATCHES === '1',
  out: env.BENCH_OUT || fileURLToPath(new URL('./results/latest.json', import.meta.url))
}
/** The harnesses, in the order they run: `load` here, the others as child processes writing their own JSON. */
const HARNESSES = {
  load: null, autocannon: 'autocannon.js', inject: 'inject.js', cluster: 'cluster-plugin.js', websocket: 'websocket.js', graphql: 'graphql.js', shed: 'shed.js'
}
const harnesses = (env.BENCH_HARNESSES || Object.keys(HARNESSES).join(',')).split(',').map(s => s.trim()).filter(Boolean)
for (const h of harnesses) if (!(h in HARNESSES)) throw new Error(`BENCH_HARNESSES: unknown harness ${h} (known: ${Object.keys(HARNESSES).join(', ')})`)
const scenarios = (env.BENCH_SCENARIOS || Object.keys(SCENARIOS).join(',')).split(',').map(s => s.trim()).filter(Boolean)
for (const s of scenarios) if (!(s in SCENARIOS)) throw new Error(`BENCH_SCENARIOS: unknown scenario ${s} (known: ${Object.keys(SCENARIOS).join(', ')})`)

const dist = new URL('../dist/', import.meta.url)
const algorithms = existsSync(new URL('algorithms/index.js', dist))
  ? (await import(new URL('algorithms/index.js', dist))).ALGORITHMS
  : null
const variants = selectVariants(allVariants(algorithms), env.BENCH_ONLY)
if (variants.length === 0) {
  throw new Error(`BENCH_ONLY=${env.BENCH_ONLY} selects no variant${algorithms === null ? ' (dist/ is not built: `npm run build` for this plugin\'s variants)' : ''}`)
}
if (algorithms === null) console.error('bench: dist/ is not built, so this plugin\'s variants are left out (`npm run bench` builds it)')

/**
 * One measured run: warm-up (`BENCH_WARMUP`, or longer where the scenario needs it), then `seconds` measured,
 * with the server's and Redis's counters read around it.
 */
async function measure ({ redis }, load, server, plan, connections, seconds, withCounters) {
  await load.ask({ type: 'start', port: server.port, plan, connections }, 'started')
  const warmupS = Math.max(settings.warmupS, SCENARIOS[plan.scenario].warmupS ?? 0)
  await sleep(warmupS * 1000 * (connections === 1 ? 0.3 : 1))
  const before = withCounters ? await Promise.all([server.ask({ type: 'snapshot' }, 'snapshot'), info(redis)]) : null
  const cores = coreTimes()
  const ioBefore = withCounters ? syscalls(before[1]) : null
  await load.ask({ type: 'mark' }, 'marked')
  await sleep(seconds * 1000)
  const [result, ...after] = await Promise.all([
    load.ask({ type: 'stop' }, 'result'),
    ...withCounters ? [server.ask({ type: 'snapshot' }, 'snapshot'), info(redis)] : []
  ])
  const busy = coreBusy(cores, coreTimes())
  if (!withCounters) return { result }
  return { result, server: [before[0], after[0]], redis: [before[1], after[1]], busy, io: [ioBefore, syscalls(after[1])] }
}

async function runScenario (ctx, load, server, variant, scenario, round) {
  const prefix = `r${round}-${scenario}-`
  const plan = { scenario, prefix }
  const { kind } = SCENARIOS[scenario]
  if (kind === 'banned') await server.ask({ type: 'ban', keys: bannedKeys(prefix) }, 'banned')
  // The denied key goes over its limit before the load starts, whatever the throughput.
  if (kind === 'hot' || kind === 'mixed') await server.ask({ type: 'inject', url: '/', key: key.hot(prefix), count: MAX + 1 }, 'injected')
  const { redis, pin } = ctx
  const memoryBefore = (await info(redis)).used_memory
  const main = await measure(ctx, load, server, plan, settings.connections, settings.durationS, true)
  const { result } = main
  const requests = result.requests
  const redisDelta = delta(main.redis[0], main.redis[1])
  const perRequest = (x) => requests === 0 ? null : x / requests
  const single = settings.singleS > 0 ? (await measure(ctx, load, server, plan, 1, settings.singleS, false)).result : null
  return {
    round,
    variant: variant.id,
    scenario,
    requests,
    rps: result.rps,
    p50Ms: result.p50Ms,
    p99Ms: result.p99Ms,
    maxMs: result.maxMs,
    p50SingleMs: single?.p50Ms ?? null,
    singleRps: single?.rps ?? null,
    statuses: result.statuses,
    errors: result.errors,
    serverCpuUsPerRequest: perRequest(main.server[1].cpuUs - main.server[0].cpuUs),
    commandsSentPerRequest: perRequest(main.server[1].commands - main.server[0].commands),
    roundTripsPerRequest: perRequest(main.server[1].roundTrips - main.server[0].roundTrips),
    redisCpuUsPerRequest: perRequest(redisDelta.cpuUs),
    redisCommandsPerRequest: perRequest(redisDelta.commands),
    // Script calls and their time inside Redis (INFO commandstats), and with BENCH_BATCHES=1 the share of
    // requests the plugin sent in full batches (its TracingChannel, counted in the server).
    // Redis's read system calls per request: below 1, several requests' commands arrived in one read.
    redisReadsPerRequest: readsPerRequest(main.io[0], main.io[1], requests),
    scriptCallsPerRequest: perRequest(scriptDelta(main.redis[0], main.redis[1]).calls),
    scriptUsPerRequest: perRequest(scriptDelta(main.redis[0], main.redis[1]).usec),
    fullBatchShare: fullShare(batchDelta(main.server[0].batchSizes, main.server[1].batchSizes), BATCH_FULL),
    // Redis memory grown from before the warm-up to the end of the measured run, per client of the pool.
    redisBytesPerClient: kind === 'pool' && variant.redis ? (main.redis[1].used_memory - memoryBefore) / POOL : null,
    requestsPerClient: kind === 'pool' && variant.redis ? result.sentSinceStart / POOL : null,
    serverRss: main.server[1].rss,
    // Shares of one core over the measured window: whichever is near 1 is what limits req/s.
    serverCpuShare: (main.server[1].cpuUs - main.server[0].cpuUs) / (result.elapsedMs * 1000),
    loadCpuShare: result.cpuShare,
    // How busy each CPU was over the window, everything on it included (other processes of the machine too).
    coreBusy: main.busy,
    // The server's core, busy with anything but the server: the noise a shared machine adds.
    otherOnServerCore: pin.taskset && main.busy !== null ? Math.max(0, main.busy[Number(pin.server)] - (main.server[1].cpuUs - main.server[0].cpuUs) / (result.elapsedMs * 1000)) : null
  }
}

/** The load harness (bench/load.js's generator): its results, every round included. */
async function loadHarness () {
  const pin = pinning()
  const ownRedis = env.BENCH_REDIS === 'start' ? await startRedis(pin) : null
  if (ownRedis !== null) settings.redisUrl = ownRedis.url
  const redis = new Redis(settings.redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect()
  const tag = `bench:${Date.now().toString(36)}${randomBytes(3).toString('hex')}`
  const ctx = { redis, pin }

  const started = Date.now()
  const meta = {
    command: `${['BENCH_DURATION', 'BENCH_WARMUP', 'BENCH_ROUNDS', 'BENCH_CONNECTIONS', 'BENCH_SINGLE', 'BENCH_ONLY', 'BENCH_SCENARIOS', 'BENCH_SCRIPTS', 'BENCH_BATCHES', 'BENCH_HARNESSES', 'BENCH_REDIS', 'REDIS_URL']
      .filter(name => env[name] !== undefined && env[name] !== '').map(name => `${name}=${env[name]} `).join('')}npm run bench`,
    settings: { ...settings, scenarios, pool: POOL },
    machine: { ...await machine(redis, pin), redisServer: ownRedis?.note ?? `the Redis at ${settings.redisUrl}, not pinned` },
    variants
  }
  log(`bench: ${variants.length} variants × ${scenarios.length} scenarios × ${settings.rounds} rounds, ${settings.durationS} s each (${pin.note})`)

  const runs = []
  const load = startLoad(pin)
  try {
    for (let round = 1; round <= settings.rounds; round++) {
      for (const [i, variant] of variants.entries()) {
        const nameSpace = `${tag}:${round}:${i}:`
        const server = await startServer({ variant, redisUrl: settings.redisUrl, nameSpace, batches: settings.batches && variant.kind === 'rate-guard' }, pin)
        try {
          // A fresh process: its first warm-up is the JIT's, not the first scenario's.
          await measure(ctx, load, server, { scenario: 'allowed', prefix: 'warm-' }, settings.connections, 0, false)
          for (const scenario of scenarios) {
            if (variant.scenarios !== undefined && !variant.scenarios.includes(scenario)) continue
            const run = await runScenario(ctx, load, server, variant, scenario, round)
            runs.push(run)
            log(`round ${round}/${settings.rounds} ${variant.id.padEnd(36)} ${scenario.padEnd(8)} ${Math.round(run.rps).toString().padStart(6)} req/s  ` +
              `p50 ${run.p50Ms?.toFixed(2)} ms  server ${run.serverCpuUsPerRequest?.toFixed(1)} µs/req  ${JSON.stringify(run.statuses)}${run.errors > 0 ? ` errors ${run.errors}` : ''}`)
          }
        } finally {
          await stopServer(server)
          await deleteKeys(redis, nameSpace)
        }
      }
    }
  } finally {
    load.child.send({ type: 'exit' })
    await load.exited
  }

  const scripts = settings.scripts ? await scriptCosts(redis, settings.redisUrl, `${tag}:scripts:`, log) : null
  await redis.quit()
  await ownRedis?.stop()

  meta.machine.loadAverageAfter = loadAverage()
  meta.elapsedS = Math.round((Date.now() - started) / 1000)
  const rows = aggregate(runs, variants, scenarios)
  const results = { ...meta, noise: spread(runs.map(run => run.otherOnServerCore)), rows, scripts, runs }
  return results
}

const log = (...args) => console.error(...args)

/**
 * A child harness (bench/<script>): its markdown to this stdout as it comes, its JSON (BENCH_OUT, a file of
 * its own beside ours) returned; null when the script is not there.
 */
async function childHarness (name, script) {
  const path = fileURLToPath(new URL(script, import.meta.url))
  if (!existsSync(path)) {
    log(`bench: bench/${script} is not there: the ${name} harness is skipped`)
    return null
  }
  const out = `${settings.out}.${name}.json`
  const child = spawn(process.execPath, [path], { env: { ...env, BENCH_OUT: out }, stdio: ['ignore', 'inherit', 'inherit'] })
  const code = await new Promise((resolve, reject) => { child.on('error', reject); child.on('exit', resolve) })
  if (code !== 0) throw new Error(`bench/${script} exited with ${code}`)
  if (!existsSync(out)) {
    log(`bench: bench/${script} wrote no JSON to BENCH_OUT`)
    return null
  }
  const results = JSON.parse(readFileSync(out, 'utf8'))
  rmSync(out)
  return results
}

const began = Date.now()
mkdirSync(dirname(settings.out), { recursive: true })
let results = { harnesses: {} }
if (harnesses.includes('load')) {
  results = { ...await loadHarness(), harnesses: {} }
  process.stdout.write(markdown(results))
}
for (const name of harnesses) {
  if (name === 'load') continue
  process.stdout.write('\n')
  try {
    results.harnesses[name] = await childHarness(name, HARNESSES[name])
  } catch (err) {
    // The other harnesses still run, and the JSON keeps what they measured; the run exits 1.
    log(`bench: the ${name} harness failed: ${err.message}`)
    results.harnesses[name] = { error: err.message }
    process.exitCode = 1
  }
}
writeFileSync(settings.out, JSON.stringify(results, null, 2) + '\n')
log(`bench: ${harnesses.join(', ')}: ${Math.round((Date.now() - began) / 1000)} s; JSON in ${settings.out}`)
