// What the standalone harnesses (bench/autocannon.js, bench/inject.js) share: their settings from the
// environment, the Redis they measure, the variants they compare, script counters read from INFO commandstats,
// ratios within a round, and where their JSON goes.
import { spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { Redis } from 'ioredis'
import { pinning, startRedis } from './processes.js'
import { commandStat } from './redis-info.js'
import { spread } from './report.js'
import { REFERENCE, allVariants, selectVariants } from './variants.js'

/** A non-negative number from the environment, or `fallback` when unset. */
export function number (name, fallback) {
  const raw = process.env[name]
  const value = raw === undefined || raw === '' ? fallback : Number(raw)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number, got ${raw}`)
  return value
}

/**
 * `/`'s limit from BENCH_LIMIT (`<max>/<seconds>`, e.g. `1000/60`), else `fallback` ({ max, windowMs }): the log's
 * size, and so a request's cost inside Redis, depends on it.
 */
export function limitSetting (fallback) {
  const raw = process.env.BENCH_LIMIT
  if (raw === undefined || raw === '') return fallback
  const match = /^(\d+)\/(\d+(?:\.\d+)?)$/.exec(raw)
  if (match === null) throw new Error(`BENCH_LIMIT: <max>/<seconds>, such as 1000/60, got ${raw}`)
  return Object.freeze({ max: Number(match[1]), windowMs: Math.round(Number(match[2]) * 1000) })
}

/** Requests per decide call counted by a server (BENCH_BATCHES=1) between two snapshots: size → calls. */
export function batchDelta (before, after) {
  const out = {}
  for (const [size, calls] of Object.entries(after)) {
    const n = calls - (before[size] ?? 0)
    if (n > 0) out[size] = n
  }
  return out
}

/** The share of requests that went in full batches of `full`, or null when no batch was counted. */
export function fullShare (batches, full) {
  const requests = Object.entries(batches).reduce((a, [size, calls]) => a + Number(size) * calls, 0)
  return requests === 0 ? null : (batches[full] ?? 0) * full / requests
}

/**
 * The read and write system calls Redis's process has made (`/proc/<pid>/io`, `process_id` of INFO server), or
 * null where that is not readable (another machine, another user): how many commands arrive per read.
 */
export function syscalls (redisInfo) {
  try {
    const io = readFileSync(`/proc/${redisInfo.process_id}/io`, 'utf8')
    return { reads: Number(/^syscr: (\d+)/m.exec(io)[1]), writes: Number(/^syscw: (\d+)/m.exec(io)[1]) }
  } catch {
    return null
  }
}

/** Read system calls per request between two `syscalls()` readings, or null. */
export function readsPerRequest (before, after, requests) {
  return before === null || after === null || requests === 0 ? null : (after.reads - before.reads) / requests
}

/** The script commands a limiter's call can arrive as: EVALSHA (ioredis's defineCommand), EVAL, FCALL. */
const SCRIPT_COMMANDS = ['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro']

/** Script calls and their time inside Redis (µs, INFO commandstats) between two `info()` readings. */
export function scriptDelta (before, after) {
  let calls = 0
  let usec = 0
  for (const name of SCRIPT_COMMANDS) {
    const [b, a] = [commandStat(before, name), commandStat(after, name)]
    calls += a.calls - b.calls
    usec += a.usec - b.usec
  }
  return { calls, usec }
}

/**
 * The variants a harness compares: bare Fastify (when `withBare`), this plugin with each algorithm (from dist/),
 * and @fastify/rate-limit's Redis store, narrowed by BENCH_ONLY.
 */
export async function harnessVariants ({ withBare }) {
  const index = new URL('../dist/algorithms/index.js', import.meta.url)
  if (!existsSync(index)) throw new Error('dist/ is not built: `npm run build` first')
  const { ALGORITHMS } = await import(index)
  const chosen = allVariants(ALGORITHMS).filter(v => (withBare && v.kind === 'bare') || v.id === REFERENCE ||
    (v.kind === 'rate-guard' && !v.autopipelining && !v.subscribed))
  const variants = selectVariants(chosen, process.env.BENCH_ONLY)
  if (variants.length === 0) throw new Error(`BENCH_ONLY=${process.env.BENCH_ONLY} selects no variant`)
  return variants
}

/**
 * The Redis measured: a redis-server of the harness's own with BENCH_REDIS=start (pinned to the load's CPU),
 * else REDIS_URL's. `pinSelf()` moves this process (all its threads) to the load's CPU: after `machine()`
 * has counted the CPUs, which a pinned process sees one of.
 */
export async function setUp () {
  const pin = pinning()
  const own = process.env.BENCH_REDIS === 'start' ? await startRedis(pin) : null
  const url = own?.url ?? (process.env.REDIS_URL || 'redis://127.0.0.1:6379')
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await redis.connect()
  return {
    pin,
    url,
    redis,
    redisNote: own?.note ?? `the Redis at ${url}, not pinned (BENCH_REDIS=start for one of its own)`,
    pinSelf () {
      if (pin.taskset) spawnSync('taskset', ['-a', '-p', '-c', pin.load, String(process.pid)], { stdio: 'ignore' })
    },
    async tearDown () {
      await redis.quit()
      await own?.stop()
    }
  }
}

/**
 * Each run's `metric` divided by the reference's in the same round, then the spread of those ratios: the
 * comparison a shared machine leaves standing.
 */
export function ratioToReference (runs, run, metric) {
  return spread(runs.filter(r => r.variant === run.variant).map(mine => {
    const theirs = runs.find(r => r.variant === REFERENCE && r.round === mine.round)
    return theirs === undefined || !(theirs[metric] > 0) || mine[metric] === null ? null : mine[metric] / theirs[metric]
  }))
}

const fmt = (x, digits) => x === null || x === undefined || Number.isNaN(x) ? '–' : x.toLocaleString('en', { minimumFractionDigits: digits, maximumFractionDigits: digits })

/** `median (min–max)` of a spread, or the one value. */
export function range (s, digits = 1) {
  if (s === null) return '–'
  return s.n === 1 ? fmt(s.median, digits) : `${fmt(s.median, digits)} (${fmt(s.min, digits)}–${fmt(s.max, digits)})`
}

/** A ratio's spread as `0.93× (0.90–0.95)`. */
export function times (s) {
  if (s === null) return '–'
  return s.n === 1 ? `${fmt(s.median, 2)}×` : `${fmt(s.median, 2)}× (${fmt(s.min, 2)}–${fmt(s.max, 2)})`
}

/**
 * A line under a table when some runs answered 503 (Redis missed the plugin's deadline, `failMode: 'closed'`,
 * and its breaker then skipped Redis): such a run's Redis figures count only the requests Redis decided, so its
 * ratios say nothing of the code. An empty string otherwise.
 */
export function unavailableNote (runs) {
  const missed = runs.filter(run => (run.statuses['503'] ?? 0) > 0)
  if (missed.length === 0) return ''
  const worst = Math.max(...missed.map(run => run.statuses['503'] / Object.values(run.statuses).reduce((a, b) => a + b, 0)))
  return `\n⚠ ${missed.length} of ${runs.length} runs answered 503s (up to ${(worst * 100).toFixed(1)}% of a run's requests): Redis missed ` +
    'the plugin\'s 100 ms deadline, so the machine was too busy for those runs\' ratios to mean anything; rerun on a quieter machine.\n'
}

/** Writes `results` as JSON to BENCH_OUT when it is set. */
export function writeJson (results) {
  const out = process.env.BENCH_OUT
  if (out === undefined || out === '') return
  mkdirSync(dirname(out), { recursive: true })
  writeFileSync(out, JSON.stringify(results, null, 2) + '\n')
}

/** The environment settings that were given, as a command line to repeat the run. */
export function command (script, names) {
  return `${names.filter(name => process.env[name] !== undefined && process.env[name] !== '').map(name => `${name}=${process.env[name]} `).join('')}node bench/${script}`
}

/**
 * One row per variant: each of `metrics` as its spread over the variant's runs, each of `ratios` as its ratio
 * to the reference's run of the same round (`vsReference`), and the responses (status → count) summed.
 */
export function rowsOf (runs, variants, metrics, ratios) {
  return variants.map(variant => {
    const mine = runs.filter(run => run.variant === variant.id)
    const statuses = {}
    for (const run of mine) for (const [code, n] of Object.entries(run.statuses)) statuses[code] = (statuses[code] ?? 0) + n
    return {
      variant: variant.id,
      rounds: mine.length,
      ...Object.fromEntries(metrics.map(metric => [metric, spread(mine.map(run => run[metric]))])),
      vsReference: mine.length === 0 ? null : Object.fromEntries(ratios.map(metric => [metric, ratioToReference(runs, mine[0], metric)])),
      statuses
    }
  })
}

/** A markdown table's head row and its separator (the first and last columns text, the others numbers). */
export function tableHead (head) {
  return [`| ${head.join(' | ')} |`, `|${head.map((_, i) => i === 0 || i === head.length - 1 ? '---' : '--:').join('|')}|`]
}

/** A row's responses as `200 99.50%, 503 0.50%` (one status alone: `200 100%`). */
export function responses (statuses) {
  const total = Object.values(statuses).reduce((a, b) => a + b, 0)
  return Object.entries(statuses).map(([code, n]) => `${code} ${(n * 100 / total).toFixed(n === total ? 0 : 2)}%`).join(', ')
}
