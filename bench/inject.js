// In process through the plugin (issue 43): each variant of bench/server.js in its own process pinned to CPU 0
// sends BENCH_INJECT_REQUESTS requests to itself with `app.inject`, 100 in flight, round-robin over 10,000
// clients (`x-api-key`), `/` limited to 1,000 per 60 s; no socket, so what is left is the plugin's cost and
// Redis's. Redis (BENCH_REDIS=start) on CPU 1. Interleaved rounds; Redis CPU (`INFO cpu`) and script time
// (`INFO commandstats`) per request and per call, beside @fastify/rate-limit's Redis store in the same run.
// Prints a markdown table to stdout (progress to stderr); JSON to BENCH_OUT when set.
//
//   npm run build && BENCH_REDIS=start node bench/inject.js
//
// Environment: BENCH_INJECT_REQUESTS (per run, default 50,000), BENCH_INJECT_WARMUP (requests before each run,
// default 5,000), BENCH_INJECT_ROUNDS (default 3), BENCH_INJECT_IN_FLIGHT (default 100), BENCH_BATCHES=1 (count
// the requests in each of the plugin's script calls through its TracingChannel: a subscriber costs the server a
// little), BENCH_CLIENTS (default 10,000), BENCH_LIMIT (`<max>/<seconds>` of `/`, default 1000/60), BENCH_ONLY, BENCH_REDIS, REDIS_URL, BENCH_OUT.
import { randomBytes } from 'node:crypto'
import { loadAverage, machine } from './machine.js'
import { POOL } from './plan.js'
import { startServer, stopServer } from './processes.js'
import { deleteKeys, delta, info } from './redis-info.js'
import {
  batchDelta, command, fullShare, harnessVariants, limitSetting, number, range, readsPerRequest, responses, rowsOf, scriptDelta, setUp, syscalls, tableHead,
  times, unavailableNote, writeJson
} from './harness.js'

const LIMIT = limitSetting(Object.freeze({ max: 1_000, windowMs: 60_000 }))
const settings = {
  requests: Math.max(1, Math.round(number('BENCH_INJECT_REQUESTS', 50_000))),
  warmup: Math.round(number('BENCH_INJECT_WARMUP', 5_000)),
  rounds: Math.max(1, Math.round(number('BENCH_INJECT_ROUNDS', 3))),
  inFlight: Math.max(1, Math.round(number('BENCH_INJECT_IN_FLIGHT', 100))),
  batches: process.env.BENCH_BATCHES === '1',
  limit: LIMIT,
  pool: Math.max(1, Math.round(number('BENCH_CLIENTS', POOL)))
}
const log = (...args) => console.error(...args)

async function runOne (ctx, server, variant, round) {
  const drive = (prefix, requests) => server.ask({ type: 'drive', url: '/', prefix, pool: settings.pool, requests, inFlight: settings.inFlight }, 'driven')
  if (settings.warmup > 0) await drive(`warm${round}-`, settings.warmup)
  const before = await Promise.all([server.ask({ type: 'snapshot' }, 'snapshot'), info(ctx.redis)])
  const ioBefore = syscalls(before[1])
  const driven = await drive(`r${round}-`, settings.requests)
  const ioAfter = syscalls(before[1])
  const after = await Promise.all([server.ask({ type: 'snapshot' }, 'snapshot'), info(ctx.redis)])
  const n = settings.requests
  const redis = delta(before[1], after[1])
  const scripts = scriptDelta(before[1], after[1])
  const batches = batchDelta(before[0].batchSizes, after[0].batchSizes)
  return {
    round,
    variant: variant.id,
    requests: n,
    rps: n / (driven.elapsedMs / 1000),
    statuses: driven.statuses,
    serverCpuUsPerRequest: (after[0].cpuUs - before[0].cpuUs) / n,
    redisCpuUsPerRequest: redis.cpuUs / n,
    redisCommandsPerRequest: redis.commands / n,
    // Redis's read system calls per request: below 1, several requests' commands arrived in one read.
    redisReadsPerRequest: readsPerRequest(ioBefore, ioAfter, n),
    scriptUsPerRequest: scripts.usec / n,
    scriptUsPerCall: scripts.calls > 0 ? scripts.usec / scripts.calls : null,
    requestsPerScriptCall: scripts.calls > 0 ? n / scripts.calls : null,
    // BENCH_BATCHES=1: the plugin's decide calls by size, and the share of requests that went in full batches.
    batches,
    fullBatchShare: fullShare(batches, 32)
  }
}

const METRICS = ['rps', 'serverCpuUsPerRequest', 'redisCpuUsPerRequest', 'scriptUsPerRequest', 'scriptUsPerCall', 'requestsPerScriptCall', 'fullBatchShare']

function markdown (results) {
  const { settings: s, machine: m } = results
  const head = ['limiter', 'req/s (in process)', 'server µs/req', '× frl-redis', 'Redis µs/req', '× frl-redis', 'script µs/req', '× frl-redis', 'script µs/call',
    'req per script call', ...s.batches ? ['requests in full batches'] : [], 'responses']
  const lines = [
    `## In process (\`app.inject\`): ${s.inFlight} in flight over ${s.pool.toLocaleString('en')} clients`,
    '',
    `Command: \`${results.command}\` (${results.elapsedS} s, ${results.date}). Machine: ${m.nproc} CPUs (${m.cpu}), Node ${m.node}, Redis ${m.redis}. ` +
      `Processes: ${m.pinning}; Redis: ${m.redisServer}. Load average ${m.loadAverageBefore} before, ${m.loadAverageAfter} after.`,
    `${s.requests.toLocaleString('en')} requests per run after ${s.warmup.toLocaleString('en')} of warm-up, ${s.rounds} interleaved rounds; \`/\` limited to ` +
      `${s.limit.max.toLocaleString('en')} per ${s.limit.windowMs / 1000} s. Median (min–max); ratios within each round, then the median (min–max). ` +
      'Redis: `INFO cpu`; script: `INFO commandstats` (EVALSHA, EVAL, FCALL), the time Redis spent running the calls.',
    '',
    ...tableHead(head)
  ]
  for (const row of results.rows) {
    const ref = row.vsReference ?? {}
    lines.push(`| ${[row.variant, range(row.rps, 0), range(row.serverCpuUsPerRequest), times(ref.serverCpuUsPerRequest ?? null), range(row.redisCpuUsPerRequest),
      times(ref.redisCpuUsPerRequest ?? null), range(row.scriptUsPerRequest), times(ref.scriptUsPerRequest ?? null), range(row.scriptUsPerCall), range(row.requestsPerScriptCall),
      ...s.batches ? [row.fullBatchShare === null ? '–' : `${(row.fullBatchShare.median * 100).toFixed(0)}%`] : [], responses(row.statuses)].join(' | ')} |`)
  }
  return lines.join('\n') + '\n' + unavailableNote(results.runs)
}

const started = Date.now()
const variants = await harnessVariants({ withBare: false })
const ctx = await setUp()
const tag = `bench-inject:${Date.now().toString(36)}${randomBytes(3).toString('hex')}`
const runs = []
const meta = {
  harness: 'inject',
  command: command('inject.js', ['BENCH_INJECT_REQUESTS', 'BENCH_INJECT_WARMUP', 'BENCH_INJECT_ROUNDS', 'BENCH_INJECT_IN_FLIGHT', 'BENCH_BATCHES', 'BENCH_CLIENTS', 'BENCH_LIMIT', 'BENCH_ONLY', 'BENCH_REDIS', 'REDIS_URL']),
  date: new Date().toISOString(),
  settings,
  machine: { ...await machine(ctx.redis, ctx.pin), redisServer: ctx.redisNote },
  variants
}
log(`inject: ${variants.length} variants × ${settings.rounds} rounds, ${settings.requests} requests each (${ctx.pin.note})`)
try {
  for (let round = 1; round <= settings.rounds; round++) {
    for (const [i, variant] of variants.entries()) {
      const nameSpace = `${tag}:${round}:${i}:`
      const server = await startServer({ variant, redisUrl: ctx.url, nameSpace, limit: LIMIT, batches: settings.batches && variant.kind === 'rate-guard' }, ctx.pin)
      try {
        const run = await runOne(ctx, server, variant, round)
        runs.push(run)
        log(`inject round ${round}/${settings.rounds} ${variant.id.padEnd(28)} ${Math.round(run.rps).toString().padStart(6)} req/s  Redis ${run.redisCpuUsPerRequest.toFixed(1)} µs/req  ` +
          `script ${run.scriptUsPerRequest.toFixed(1)} µs/req, ${run.requestsPerScriptCall?.toFixed(1)} req/call  ${JSON.stringify(run.statuses)}`)
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
const results = { ...meta, rows: rowsOf(runs, variants, METRICS, ['serverCpuUsPerRequest', 'redisCpuUsPerRequest', 'scriptUsPerRequest']), runs }
writeJson(results)
process.stdout.write(markdown(results))
