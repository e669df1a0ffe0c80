// The cost of each script inside Redis: `redis-benchmark` calls EVALSHA of the script (its text from dist's
// SCRIPTS, loaded with SCRIPT LOAD) on three paths, and Redis's own INFO commandstats tells the time it spent
// per call (`usec` / `calls` of evalsha, read before and after, so nothing is reset on a shared Redis).
// `@fastify/rate-limit`'s INCR script is measured the same way, for reference.
//
// Runs as a section of bench/run.js, or alone: `node bench/scripts.js` (BENCH_SCRIPT_CALLS, REDIS_URL).
import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { commandStat, deleteKeys, info } from './redis-info.js'

const RAND = '__rand_int__'
/** redis-benchmark's -r: the allowed path spreads over this many clients (so each log stays short). */
const KEYSPACE = 10_000

/** Runs redis-benchmark; resolves its requests/s (from --csv). */
function redisBenchmark (redisUrl, calls, command) {
  const url = new URL(redisUrl)
  const args = ['-h', url.hostname, '-p', url.port || '6379', '-n', String(calls), '-c', '50', '-r', String(KEYSPACE), '--csv']
  if (url.password !== '') args.push('-a', decodeURIComponent(url.password))
  if (url.username !== '') args.push('--user', decodeURIComponent(url.username))
  if (url.pathname.length > 1) args.push('--dbnum', url.pathname.slice(1))
  return new Promise((resolve, reject) => {
    const child = spawn('redis-benchmark', [...args, ...command], { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => { out += d })
    child.stderr.on('data', (d) => { err += d })
    child.on('error', reject)
    child.on('exit', (code) => {
      const line = out.trim().split('\n').find(l => l.startsWith('"EVALSHA'))
      if (code !== 0 || line === undefined) reject(new Error(`redis-benchmark failed (${code}): ${err || out}`))
      else resolve(Number(JSON.parse(`[${line}]`)[1]))
    })
  })
}

/**
 * µs per call of `sha` inside Redis while redis-benchmark runs `argv` (evalsha's commandstats delta), and the
 * commands the script ran per call, each with its µs (the other commandstats deltas).
 */
async function measure (redis, redisUrl, calls, sha, keys, argv) {
  const before = await info(redis)
  const rps = await redisBenchmark(redisUrl, calls, ['EVALSHA', sha, String(keys.length), ...keys, ...argv.map(String)])
  const after = await info(redis)
  const evalsha = [commandStat(before, 'evalsha'), commandStat(after, 'evalsha')]
  const n = evalsha[1].calls - evalsha[0].calls
  const inside = {}
  for (const name of Object.keys(after)) {
    if (!name.startsWith('cmdstat_') || name === 'cmdstat_evalsha' || name === 'cmdstat_info') continue
    const command = name.slice('cmdstat_'.length)
    const [b, a] = [commandStat(before, command), commandStat(after, command)]
    // Below one call in a hundred: another client of the same Redis, not the script.
    if (n > 0 && (a.calls - b.calls) / n >= 0.01) inside[command] = { perCall: (a.calls - b.calls) / n, usPerCall: (a.usec - b.usec) / n }
  }
  return { calls: n, usPerCall: n > 0 ? (evalsha[1].usec - evalsha[0].usec) / n : null, rps, inside }
}

/**
 * This plugin's scripts, one limit of 1000 per hour: each call's keys and arguments made by dist's own
 * `scriptArgs` (the plugin's encoder, so the bench cannot drift from lua/decide.lua's header), with
 * redis-benchmark's random placeholder in the keys and members.
 */
function ourPaths (prefix, algorithm, args) {
  const names = (tag) => {
    const [log, banned, override, strikes, offences] = ['state', 'banned', 'override', 'strikes', 'offences'].map(name => `${prefix}${algorithm}:{${tag}}:${name}`)
    return { log, banned, override, strikes, offences, backoff: `${prefix}${algorithm}:{${tag}}:backoff` }
  }
  // A ban policy is set on the allowed and banned paths, so each request's six keys are sent (strikes,
  // offences and the ban index too); the denied path has none, so three.
  // One limits array per budget, as a route has: a call's requests then share one policy in the arguments.
  const policy = { threshold: 5, ladder: [600_000], forgetMs: 0 }
  const hour = [{ max: 1000, windowMs: 3_600_000, burst: 1000 }]
  const one = [{ max: 1, windowMs: 600_000, burst: 1 }]
  const input = (tag, limits, ban = policy) => ({ keys: names(tag), limits, ban, peek: false, algorithm })
  const call = (inputs) => {
    const [count, ...rest] = args(inputs, `m${RAND}.`)
    return { keys: rest.slice(0, count), argv: rest.slice(count) }
  }
  return [
    // A fresh client each call (one of KEYSPACE): counted and allowed; a ban policy set, so the ban is checked.
    { path: 'allowed', ...call([input(RAND, hour)]) },
    // Over a limit of 1 (primed by one call); no ban policy, so each call is a plain denial.
    { path: 'denied', ...call([input(`denied-${algorithm}`, one, null)]), prime: 1 },
    // A banned client: the banned key is set first, so the script returns after its ban check.
    { path: 'banned', ...call([input(`banned-${algorithm}`, hour)]), ban: true },
    // What the plugin sends under load: up to BATCH_MAX requests in one call, here BATCH fresh clients allowed.
    { path: `allowed, ${BATCH} per call`, requests: BATCH, ...call(Array.from({ length: BATCH }, () => input(RAND, hour))) }
  ]
}

/** Reference scripts: the least a call can cost this Redis, for reading the banned path's figure. */
const FLOORS = [
  ['floor: an empty script', 'return {}'],
  ['floor: the ban\'s PTTL and an answer', "local banned = redis.call('PTTL', KEYS[2]) return { 2, banned, 0, 0, 0 }"]
]

/** Requests per call on the batched path: a full batch (lib/batcher.ts's BATCH_MAX). */
const BATCH = 32

/** `@fastify/rate-limit`'s Redis script, taken from its store (which defines it on the client it is given). */
function peerScript () {
  const require = createRequire(import.meta.url)
  const RedisStore = require('@fastify/rate-limit/store/RedisStore.js')
  const defined = {}
  // eslint-disable-next-line no-new
  new RedisStore(false, false, { defineCommand: (name, { lua }) => { defined[name] = lua } })
  return defined.rateLimit
}

/**
 * Every script's cost per call inside Redis, on each path. `prefix`: the keys' namespace, deleted afterwards.
 * Returns { calls, rows: [{ script, path, usPerCall, rps }] } or { skipped } when it cannot run here.
 */
export async function scriptCosts (redis, redisUrl, prefix, log = () => {}) {
  const distScripts = new URL('../dist/stores/scripts.js', import.meta.url)
  if (!existsSync(distScripts)) return { skipped: 'dist/ is not built (npm run build)' }
  if (spawnSync('redis-benchmark', ['--version']).status !== 0) return { skipped: 'redis-benchmark is not on PATH' }
  const { LEAN_SCRIPTS, SCRIPTS, leanArgs, scriptArgs } = await import(distScripts)
  const general = (inputs, base) => scriptArgs(inputs, 'decide', base)
  // Each lean path (what the plugin sends for one limit at a cost of 1), then every algorithm's script.
  const scripts = [...Object.entries(LEAN_SCRIPTS).map(([algorithm, { lua }]) => [`${algorithm}, lean path`, algorithm, lua, leanArgs]), ...Object.entries(SCRIPTS).map(([algorithm, { lua }]) => [algorithm, algorithm, lua, general])]
  const calls = Number(process.env.BENCH_SCRIPT_CALLS || 100_000)
  const rows = []
  try {
    for (const [name, algorithm, lua, args] of scripts) {
      const sha = await redis.script('LOAD', lua)
      for (const { path, keys, argv, prime, ban, requests = 1 } of ourPaths(`${prefix}${name === algorithm ? '' : 'lean:'}`, algorithm, args)) {
        if (ban) await redis.set(keys[1], '1', 'PX', 600_000)
        for (let i = 0; i < (prime ?? 0); i++) await redis.evalsha(sha, keys.length, ...keys, ...argv.map(a => String(a).replace(RAND, 'prime')))
        const row = { script: `rate-guard ${name}`, path, requests, ...await measure(redis, redisUrl, Math.ceil(calls / requests), sha, keys, argv) }
        rows.push(row)
        log(`scripts: ${row.script.padEnd(28)} ${path.padEnd(8)} ${row.usPerCall?.toFixed(2)} µs/call inside Redis (${requests} per call), ${Math.round(row.rps)} calls/s`)
      }
    }
    // What any script costs on the banned path's keys and arguments: nothing at all, and only the ban's PTTL.
    const banned = ourPaths(prefix, 'floor', general).find(path => path.path === 'banned')
    await redis.set(banned.keys[1], '1', 'PX', 600_000)
    for (const [script, lua] of FLOORS) {
      const sha = await redis.script('LOAD', lua)
      const row = { script, path: 'banned', requests: 1, ...await measure(redis, redisUrl, calls, sha, banned.keys, banned.argv) }
      rows.push(row)
      log(`scripts: ${row.script.padEnd(28)} banned   ${row.usPerCall?.toFixed(2)} µs/call inside Redis`)
    }
    const peer = peerScript()
    if (peer !== undefined) {
      const sha = await redis.script('LOAD', peer)
      for (const [path, key, max] of [['allowed', `${prefix}frl:${RAND}`, 1000], ['denied', `${prefix}frl:denied`, 1]]) {
        const argv = [3_600_000, max, 'false', 'false']
        if (path === 'denied') await redis.evalsha(sha, 1, key, ...argv.map(String))
        const row = { script: '@fastify/rate-limit (INCR)', path, requests: 1, ...await measure(redis, redisUrl, calls, sha, [key], argv) }
        rows.push(row)
        log(`scripts: ${row.script.padEnd(28)} ${path.padEnd(8)} ${row.usPerCall?.toFixed(2)} µs/call inside Redis, ${Math.round(row.rps)} calls/s`)
      }
    }
  } finally {
    await deleteKeys(redis, prefix)
  }
  return { calls, clients: 50, keyspace: KEYSPACE, rows }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379'
  const redis = new Redis(redisUrl)
  try {
    const result = await scriptCosts(redis, redisUrl, `bench:scripts:${process.pid}:`, console.error)
    console.log(JSON.stringify(result, null, 2))
  } finally {
    await redis.quit()
  }
}
