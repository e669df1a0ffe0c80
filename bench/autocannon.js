// Over HTTP with autocannon, the load generator users reach for (issue 43): each server variant of
// bench/server.js in its own process pinned to CPU 0, autocannon in this process and Redis (BENCH_REDIS=start)
// on CPU 1, interleaved rounds (A B C … A B C …), allowed traffic over 10,000 clients told apart by `x-api-key`
// (each variant keys by it), `/` limited to 1,000,000 requests per 60 s. Prints a markdown table to stdout
// (progress to stderr) and writes every round as JSON to BENCH_OUT when set.
//
//   npm run build && BENCH_REDIS=start node bench/autocannon.js
//
// Environment: BENCH_AUTOCANNON_DURATION (s measured per run, default 5), BENCH_AUTOCANNON_WARMUP (s, default 1),
// BENCH_AUTOCANNON_ROUNDS (default 3), BENCH_AUTOCANNON_CONNECTIONS (default 100), BENCH_KEYS (the clients'
// order: `round-robin`, the default, one counter shared by every connection so consecutive requests carry
// consecutive clients, as bench/load.js sends them; `random`; `lockstep`, autocannon's `requests` array of the
// 10,000 clients, which every connection walks from the first), BENCH_CLIENTS (default 10,000), BENCH_LIMIT (`<max>/<seconds>` of `/`, default
// 1000000/60), BENCH_BATCHES=1 (count the requests in each of the plugin's script calls through its
// TracingChannel; a subscriber costs the server a little), BENCH_ONLY, BENCH_REDIS, REDIS_URL, BENCH_OUT.
import autocannon from 'autocannon'
import { randomBytes } from 'node:crypto'
import { coreBusy, coreTimes, loadAverage, machine, version } from './machine.js'
import { POOL } from './plan.js'
import { startServer, stopServer } from './processes.js'
import { deleteKeys, delta, info } from './redis-info.js'
import {
  batchDelta, command, fullShare, harnessVariants, limitSetting, number, range, readsPerRequest, responses, rowsOf as rowsOfRuns, scriptDelta, setUp, syscalls, tableHead,
  times, unavailableNote, writeJson
} from './harness.js'

/** `/`'s limit here: far above what a client sends, so every request is allowed (the issue's setting). */
const LIMIT = limitSetting(Object.freeze({ max: 1_000_000, windowMs: 60_000 }))
const KEY_ORDERS = ['round-robin', 'random', 'lockstep']

const settings = {
  durationS: number('BENCH_AUTOCANNON_DURATION', 5),
  warmupS: number('BENCH_AUTOCANNON_WARMUP', 1),
  rounds: Math.max(1, Math.round(number('BENCH_AUTOCANNON_ROUNDS', 3))),
  connections: Math.max(1, Math.round(number('BENCH_AUTOCANNON_CONNECTIONS', 100))),
  keys: process.env.BENCH_KEYS || 'round-robin',
  batches: process.env.BENCH_BATCHES === '1',
  limit: LIMIT,
  pool: Math.max(1, Math.round(number('BENCH_CLIENTS', POOL)))
}
if (!KEY_ORDERS.includes(settings.keys)) throw new Error(`BENCH_KEYS: one of ${KEY_ORDERS.join(', ')}, got ${settings.keys}`)
const log = (...args) => console.error(...args)

/**
 * autocannon's `requests` for the key order: each request's `x-api-key` one of the clients under `prefix`. In
 * lockstep, a `requests` array of the clients, which every connection walks from the first; each entry sets
 * its key in `setupRequest`, so autocannon builds its buffer when it sends it (a plain array of headers costs it
 * a buffer per client per connection before it starts, seconds counted into its duration).
 */
function requests (prefix) {
  const pool = settings.pool
  const keys = Array.from({ length: pool }, (_, i) => `${prefix}k${i}`)
  const request = (pick) => ({
    method: 'GET',
    path: '/',
    setupRequest (request) {
      request.headers['x-api-key'] = pick()
      return request
    }
  })
  if (settings.keys === 'lockstep') return keys.map(key => request(() => key))
  let n = 0
  return [request(settings.keys === 'random' ? () => keys[Math.floor(Math.random() * pool)] : () => keys[n++ % pool])]
}

function cannon (port, prefix, seconds) {
  return autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: settings.connections,
    duration: seconds,
    requests: requests(prefix)
  })
}

async function runOne (ctx, server, variant, round) {
  const prefix = `r${round}-`
  if (settings.warmupS > 0) await cannon(server.port, `warm-${prefix}`, settings.warmupS)
  const before = await Promise.all([server.ask({ type: 'snapshot' }, 'snapshot'), info(ctx.redis)])
  const cores = coreTimes()
  const ioBefore = syscalls(before[1])
  const result = await cannon(server.port, prefix, settings.durationS)
  const ioAfter = syscalls(before[1])
  const after = await Promise.all([server.ask({ type: 'snapshot' }, 'snapshot'), info(ctx.redis)])
  const busy = coreBusy(cores, coreTimes())
  const requests = result.requests.total
  const per = (x) => requests === 0 ? null : x / requests
  const redis = delta(before[1], after[1])
  const scripts = scriptDelta(before[1], after[1])
  const statuses = Object.fromEntries(Object.entries(result.statusCodeStats).map(([code, { count }]) => [code, Number(count)]))
  return {
    round,
    variant: variant.id,
    requests,
    rps: requests / result.duration,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    statuses,
    errors: result.errors + result.timeouts,
    serverCpuUsPerRequest: per(after[0].cpuUs - before[0].cpuUs),
    redisCpuUsPerRequest: variant.redis ? per(redis.cpuUs) : null,
    redisCommandsPerRequest: variant.redis ? per(redis.commands) : null,
    // Redis's read system calls per request: below 1, several requests' commands arrived in one read.
    redisReadsPerRequest: variant.redis ? readsPerRequest(ioBefore, ioAfter, requests) : null,
    scriptCallsPerRequest: variant.redis ? per(scripts.calls) : null,
    scriptUsPerRequest: variant.redis ? per(scripts.usec) : null,
    scriptUsPerCall: variant.redis && scripts.calls > 0 ? scripts.usec / scripts.calls : null,
    batches: batchDelta(before[0].batchSizes, after[0].batchSizes),
    fullBatchShare: fullShare(batchDelta(before[0].batchSizes, after[0].batchSizes), 32),
    serverCpuShare: (after[0].cpuUs - before[0].cpuUs) / (result.duration * 1e6),
    coreBusy: busy
  }
}

const METRICS = ['rps', 'serverCpuUsPerRequest', 'redisCpuUsPerRequest', 'scriptUsPerRequest', 'scriptCallsPerRequest', 'fullBatchShare']

function rowsOf (runs, variants) {
  return rowsOfRuns(runs, variants, METRICS, ['rps', 'serverCpuUsPerRequest', 'redisCpuUsPerRequest']).map(row => ({
    ...row,
    errors: runs.filter(run => run.variant === row.variant).reduce((a, run) => a + run.errors, 0)
  }))
}

function markdown (results) {
  const { settings: s, machine: m } = results
  const head = ['server', 'req/s', '× frl-redis', 'server µs/req', '× frl-redis', 'Redis µs/req', '× frl-redis', 'script µs/req', 'req per script call',
    ...s.batches ? ['requests in full batches'] : [], 'responses']
  const lines = [
    `## Over HTTP with autocannon: ${s.pool.toLocaleString('en')} clients (${s.keys}), ${s.limit.max.toLocaleString('en')} requests per ${s.limit.windowMs / 1000} s each`,
    '',
    `Command: \`${results.command}\` (${results.elapsedS} s, ${results.date}). Machine: ${m.nproc} CPUs (${m.cpu}), Node ${m.node}, Redis ${m.redis}; ` +
      `autocannon ${m.autocannon}. Processes: ${m.pinning}; this process (autocannon) moved to the load generator's CPU; Redis: ${m.redisServer}. ` +
      `Load average ${m.loadAverageBefore} before, ${m.loadAverageAfter} after.`,
    `${s.connections} keep-alive connections, ${s.durationS} s measured after ${s.warmupS} s of warm-up, ${s.rounds} interleaved rounds; ` +
      `\`/\` limited to ${s.limit.max.toLocaleString('en')} per ${s.limit.windowMs / 1000} s. Median (min–max); each ratio is taken within its round, then ` +
      'the median (min–max). Server CPU: `process.cpuUsage` of the server per answered request; Redis: `INFO cpu`; script: `INFO commandstats` ' +
      '(EVALSHA, EVAL, FCALL).',
    '',
    ...tableHead(head)
  ]
  for (const row of results.rows) {
    lines.push(`| ${[row.variant, range(row.rps, 0), times(row.vsReference?.rps ?? null), range(row.serverCpuUsPerRequest), times(row.vsReference?.serverCpuUsPerRequest ?? null),
      range(row.redisCpuUsPerRequest), times(row.vsReference?.redisCpuUsPerRequest ?? null), range(row.scriptUsPerRequest),
      row.scriptCallsPerRequest === null ? '–' : range({ ...row.scriptCallsPerRequest, median: 1 / row.scriptCallsPerRequest.median, min: 1 / row.scriptCallsPerRequest.max, max: 1 / row.scriptCallsPerRequest.min }),
      ...s.batches ? [row.fullBatchShare === null ? '–' : `${(row.fullBatchShare.median * 100).toFixed(0)}%`] : [],
      responses(row.statuses) + (row.errors > 0 ? `; ${row.errors} errors` : '')].join(' | ')} |`)
  }
  return lines.join('\n') + '\n' + unavailableNote(results.runs)
}

const started = Date.now()
const variants = await harnessVariants({ withBare: true })
const ctx = await setUp()
const tag = `bench-ac:${Date.now().toString(36)}${randomBytes(3).toString('hex')}`
const runs = []
const meta = {
  harness: 'autocannon',
  command: command('autocannon.js', ['BENCH_AUTOCANNON_DURATION', 'BENCH_AUTOCANNON_WARMUP', 'BENCH_AUTOCANNON_ROUNDS', 'BENCH_AUTOCANNON_CONNECTIONS', 'BENCH_KEYS', 'BENCH_CLIENTS', 'BENCH_LIMIT', 'BENCH_BATCHES', 'BENCH_ONLY', 'BENCH_REDIS', 'REDIS_URL']),
  date: new Date().toISOString(),
  settings,
  machine: { ...await machine(ctx.redis, ctx.pin), autocannon: version('autocannon'), redisServer: ctx.redisNote },
  variants
}
ctx.pinSelf()
log(`autocannon: ${variants.length} variants × ${settings.rounds} rounds, ${settings.durationS} s each, keys ${settings.keys} (${ctx.pin.note})`)
try {
  for (let round = 1; round <= settings.rounds; round++) {
    for (const [i, variant] of variants.entries()) {
      const nameSpace = `${tag}:${round}:${i}:`
      const server = await startServer({ variant, redisUrl: ctx.url, nameSpace, limit: LIMIT, batches: settings.batches && variant.kind === 'rate-guard' }, ctx.pin)
      try {
        const run = await runOne(ctx, server, variant, round)
        runs.push(run)
        log(`autocannon round ${round}/${settings.rounds} ${variant.id.padEnd(28)} ${Math.round(run.rps).toString().padStart(6)} req/s  ` +
          `server ${run.serverCpuUsPerRequest?.toFixed(1)} µs/req  Redis ${run.redisCpuUsPerRequest?.toFixed(1) ?? '–'} µs/req  ${JSON.stringify(run.statuses)}`)
      } finally {
        await stopServer(server)
        await deleteKeys(ctx.redis, nameSpace)
      }
    }
  }
} finally {
  await ctx.tearDown()
}
meta.machine.loadAverageAfter = loadAverage()
meta.elapsedS = Math.round((Date.now() - started) / 1000)
const results = { ...meta, rows: rowsOf(runs, variants), runs }
writeJson(results)
process.stdout.write(markdown(results))
