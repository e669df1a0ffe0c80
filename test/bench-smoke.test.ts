// The benchmark (bench/run.js), run short, proves each variant it measures of this plugin (every algorithm, the
// sliding log with autopipelining and with every diagnostics channel subscribed) and @fastify/rate-limit's Redis
// store: each starts, serves (every request of the allowed pool answered 200 after asking Redis) and limits (a
// client already over its limit is refused 429, and never let through past its limit). The runner prints a
// table row per variant, writes its JSON and cleans its keys out of Redis. Nothing here is a speed: how fast a
// variant is depends on the machine and whatever else runs on it, and is read from `npm run bench`, never
// asserted by `npm test`.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { client, getRedis, scanKeys } from './helpers/redis.js'
import { distIsBuilt } from './helpers/built.js'
import { FULL } from './helpers/thorough.js'
import { escape, runBench as run } from './helpers/bench-runner.js'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const SCENARIOS = ['allowed', 'hot'] as const

interface Variant { id: string, kind: string, algorithm?: string }
interface Run {
  variant: string
  scenario: string
  requests: number
  statuses: Record<string, number>
  errors: number
  roundTripsPerRequest: number | null
  serverCpuUsPerRequest: number | null
}
interface Results { rows: Array<{ variant: string, scenario: string }>, runs: Run[], machine: { nproc: number, redis: string } }

// bench/ is JavaScript without types: the facts this test needs, typed here. The algorithms are dist/'s, as
// the runner's (checked below to be lib/'s; loading lib/ here would count toward a coverage this file cannot fill).
const { ALGORITHMS } = await import(new URL('../dist/algorithms/index.js', import.meta.url).href) as { ALGORITHMS: readonly string[] }
const { allVariants, REFERENCE } = await import(new URL('../bench/variants.js', import.meta.url).href) as { allVariants: (algorithms: readonly string[] | null) => Variant[], REFERENCE: string }
const { MAX, SCENARIOS: TITLES } = await import(new URL('../bench/plan.js', import.meta.url).href) as { MAX: number, SCENARIOS: Record<string, { title: string }> }

/**
 * This plugin's variants, then the reference: every algorithm's under FULL=1; the default algorithm's (the
 * sliding log, plain, autopipelining and subscribed) in `npm test`, where each other algorithm's scripts are
 * proved by its own suites and the runner's code is the same for every algorithm.
 */
const ALGORITHMS_RUN = FULL ? ALGORITHMS : ['sliding-log']
const VARIANTS = allVariants(ALGORITHMS).filter(v => (v.kind === 'rate-guard' && ALGORITHMS_RUN.includes(v.algorithm!)) || v.id === REFERENCE).map(v => v.id)
const ONLY = `${ALGORITHMS_RUN.map(algorithm => `rate-guard ${algorithm}`).join(',')},${REFERENCE}`

// Four server processes one after another (seven under FULL=1), each measured for a moment, then two more
// (five) under each of two harnesses, and the Cluster's: about 30 s on a quiet machine (60 s under FULL=1).
t.setTimeout(300_000)

t.test('each of our bench variants, and @fastify/rate-limit\'s, starts, serves and limits', async (t) => {
  // The runner loads the plugin from dist/: it must be the plugin of lib/ (npm test builds it first).
  distIsBuilt(t, ROOT)

  const { url } = await getRedis(t)
  const out = join(t.testdir(), 'latest.json')
  const { code, stdout, stderr } = await run({
    REDIS_URL: url,
    BENCH_ONLY: ONLY,
    BENCH_SCENARIOS: SCENARIOS.join(','),
    BENCH_ROUNDS: '1',
    BENCH_DURATION: '0.3',
    BENCH_WARMUP: '0.2',
    BENCH_SINGLE: '0.1',
    BENCH_CONNECTIONS: '10',
    BENCH_SCRIPTS: '0',
    BENCH_HARNESSES: 'load',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  t.ok(VARIANTS.length >= ALGORITHMS_RUN.length + 1, `our variants and the reference: ${VARIANTS.join(', ')}`)

  const results = JSON.parse(readFileSync(out, 'utf8')) as Results
  t.same(results.rows.map(row => `${row.scenario} ${row.variant}`).sort(), SCENARIOS.flatMap(s => VARIANTS.map(v => `${s} ${v}`)).sort(), 'a row in the JSON for each variant in each scenario, and no other')
  for (const scenario of SCENARIOS) {
    t.match(stdout, new RegExp(`^## ${escape(TITLES[scenario]!.title)}$`, 'm'), `prints the heading of ${scenario}`)
  }

  for (const id of VARIANTS) {
    t.equal(stdout.match(new RegExp(`^\\| ${escape(id)} \\| [\\d,]+ \\|`, 'mg'))?.length, SCENARIOS.length, `${id}: a table row with its requests/s in each scenario`)
    const of = (scenario: string): Run | undefined => results.runs.find(r => r.variant === id && r.scenario === scenario)
    const allowed = of('allowed')
    const hot = of('hot')

    // Serves: every request of the pool (clients far below their limit) answered 200, after asking Redis.
    t.ok((allowed?.requests ?? 0) > 0, `${id}: it started and served (${allowed?.requests} requests)`)
    t.same(Object.keys(allowed?.statuses ?? {}), ['200'], `${id}: every request of the allowed pool answered 200 (${JSON.stringify(allowed?.statuses)})`)
    t.ok((allowed?.roundTripsPerRequest ?? 0) > 0, `${id}: decided by Redis (round trips sent)`)
    t.ok((allowed?.serverCpuUsPerRequest ?? 0) > 0, `${id}: the server reported its CPU`)
    t.equal(allowed?.errors, 0, `${id}: no connection error`)

    // Limits: the hot client was sent MAX + 1 requests before the load, so it is over its limit of MAX an
    // hour. It is refused 429; the only 200s it may get are a window's turn (the fixed window's hour ending
    // mid-run) or a token refilled, never more than its limit.
    const statuses = hot?.statuses ?? {}
    t.same(Object.keys(statuses).filter(s => s !== '200' && s !== '429'), [], `${id}: the hot client gets 429s (and 200s) only (${JSON.stringify(statuses)})`)
    t.ok((statuses['429'] ?? 0) > 0, `${id}: it limits: the client over its limit is refused 429`)
    t.ok((statuses['200'] ?? 0) <= MAX, `${id}: and is never let through past its limit of ${MAX}`)
    t.equal(hot?.errors, 0, `${id}: no connection error`)
  }
  t.ok(results.machine.nproc >= 1 && results.machine.redis !== '', 'the machine is noted')

  const redis = client(t, url)
  t.same(await scanKeys(redis, 'bench:'), [], 'the run\'s keys were deleted')
})

/** The harnesses compare each algorithm's plain variant (not autopipelining, not subscribed) and the reference. */
const HARNESS_VARIANTS = VARIANTS.filter(id => !id.endsWith(' autopipelining') && !id.endsWith(' subscribed'))

interface HarnessRun { variant: string, requests: number, statuses: Record<string, number>, redisCpuUsPerRequest: number | null, requestsPerScriptCall?: number | null }
interface HarnessResults { harness: string, rows: Array<{ variant: string }>, runs: HarnessRun[], settings: { pool: number, limit: { max: number } } }

// The harnesses beside the load generator's (bench/autocannon.js over HTTP, bench/inject.js in process), run
// through the runner's selector, short, with 20 clients over a limit of 5 a minute: each variant starts,
// serves (200s) and limits (429s, and never more 200s than a window's turn allows), and prints a row.
t.test('the autocannon and inject harnesses run through `npm run bench`: each variant starts, serves, limits and prints a row', async (t) => {
  const { url } = await getRedis(t)
  const out = join(t.testdir(), 'latest.json')
  const clients = 20
  const max = 5
  const { code, stdout, stderr } = await run({
    REDIS_URL: url,
    BENCH_HARNESSES: 'autocannon,inject',
    BENCH_ONLY: ONLY,
    BENCH_CLIENTS: String(clients),
    BENCH_LIMIT: `${max}/60`,
    BENCH_KEYS: 'lockstep',
    BENCH_AUTOCANNON_DURATION: '0.5',
    BENCH_AUTOCANNON_WARMUP: '0',
    BENCH_AUTOCANNON_ROUNDS: '1',
    BENCH_AUTOCANNON_CONNECTIONS: '10',
    BENCH_INJECT_REQUESTS: '300',
    BENCH_INJECT_WARMUP: '0',
    BENCH_INJECT_ROUNDS: '1',
    BENCH_INJECT_IN_FLIGHT: '10',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  const all = JSON.parse(readFileSync(out, 'utf8')) as { harnesses: Record<string, HarnessResults> }
  t.same(Object.keys(all.harnesses), ['autocannon', 'inject'], 'the JSON holds each harness selected, and no other')
  for (const [name, heading] of [['autocannon', '## Over HTTP with autocannon'], ['inject', '## In process (`app.inject`)']] as const) {
    const results = all.harnesses[name]!
    t.match(stdout, new RegExp(`^${escape(heading)}`, 'm'), `${name}: prints its heading`)
    t.same(results.rows.map(row => row.variant).sort(), [...HARNESS_VARIANTS].sort(), `${name}: a row in its JSON for each variant`)
    t.equal(results.settings.pool, clients, `${name}: BENCH_CLIENTS is heard`)
    t.equal(results.settings.limit.max, max, `${name}: BENCH_LIMIT is heard`)
    for (const id of HARNESS_VARIANTS) {
      const mine = results.runs.find(r => r.variant === id)
      const statuses = mine?.statuses ?? {}
      t.same(Object.keys(statuses).filter(s => s !== '200' && s !== '429'), [], `${name}, ${id}: 200s and 429s only (${JSON.stringify(statuses)})`)
      t.ok((statuses['200'] ?? 0) > 0, `${name}, ${id}: it served`)
      t.ok((statuses['429'] ?? 0) > 0, `${name}, ${id}: it limits`)
      // A window's turn (the fixed window's minute ending mid-run, a token refilled) may let a client through
      // once more: never beyond two windows' worth.
      t.ok((statuses['200'] ?? 0) <= 2 * max * clients, `${name}, ${id}: never past its limit (${statuses['200']} 200s)`)
      t.ok((mine?.redisCpuUsPerRequest ?? 0) > 0, `${name}, ${id}: Redis's CPU was read`)
    }
  }
  for (const id of HARNESS_VARIANTS) {
    t.equal(stdout.match(new RegExp(`^\\| ${escape(id)} \\| [\\d,]+ \\|`, 'mg'))?.length, 2, `${id}: a table row with its requests/s under each harness`)
  }
  const redis = client(t, url)
  t.same([...await scanKeys(redis, 'bench-ac:'), ...await scanKeys(redis, 'bench-inject:')], [], 'the runs\' keys were deleted')
})

// The Cluster through the plugin (bench/cluster-plugin.js): a cluster of three masters of its own, short, 20
// clients over a limit of 5 a minute, after a warm-up of other clients (a fresh cluster's first calls load the
// scripts on each master): each limiter serves, limits and prints a row, and this plugin's
// requests reach each master in batches (more than one request a script call).
t.test('the cluster harness runs through `npm run bench`: each limiter serves and limits on a Cluster of its own, and prints a row', async (t) => {
  const out = join(t.testdir(), 'latest.json')
  const clients = 20
  const max = 5
  const { code, stdout, stderr } = await run({
    BENCH_HARNESSES: 'cluster',
    BENCH_CLIENTS: String(clients),
    BENCH_LIMIT: `${max}/60`,
    BENCH_CLUSTER_REQUESTS: '400',
    BENCH_CLUSTER_WARMUP: '200',
    BENCH_CLUSTER_ROUNDS: '1',
    BENCH_CLUSTER_IN_FLIGHT: '40',
    REPLICAS: '0',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  const results = (JSON.parse(readFileSync(out, 'utf8')) as { harnesses: Record<string, HarnessResults> }).harnesses['cluster']!
  t.match(stdout, /^## A Redis Cluster through the plugin/m, 'prints its heading')
  t.same(results.rows.map(row => row.variant), ['rate-guard sliding-log', REFERENCE], 'a row for this plugin and for the reference')
  t.equal(results.settings.limit.max, max, 'BENCH_LIMIT is heard')
  for (const mine of results.runs) {
    t.same(Object.keys(mine.statuses).filter(s => s !== '200' && s !== '429'), [], `${mine.variant}: 200s and 429s only (${JSON.stringify(mine.statuses)})`)
    t.equal(mine.statuses['200'], clients * max, `${mine.variant}: exactly max allowed per client`)
    t.ok((mine.redisCpuUsPerRequest ?? 0) > 0, `${mine.variant}: the nodes' CPU was read`)
  }
  t.ok(results.runs.find(r => r.variant !== REFERENCE)!.requestsPerScriptCall! > 1, 'this plugin\'s requests went to the masters in batches')
  t.match(stdout, new RegExp(`^\\| ${escape(REFERENCE)} \\| [\\d,]+ \\|`, 'm'), 'a table row for the reference')
})
