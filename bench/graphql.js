// A GraphQL request's added cost (issue 45): the same Mercurius app without the adapter, with it counting in
// process, and with it counting in Redis, each in its own process, measured by autocannon in alternating rounds
// (A B C, A B C, ...). The adapter's work per request: the walker over the document, a spend on the cost
// bucket, and, the actual cost being lower than the requested, its settlement (on Redis: two round trips).
// Standalone; prints a markdown table (progress to stderr). Nothing here is asserted: the figures depend on the
// machine and whatever runs beside.
//
//   npm run build && node bench/graphql.js
//
// Environment: BENCH_GRAPHQL_DURATION (s per run, default 5), BENCH_GRAPHQL_WARMUP (s before the rounds,
// default 1), BENCH_GRAPHQL_ROUNDS (default 3), BENCH_GRAPHQL_CONNECTIONS (default 20), REDIS_URL (default
// redis://127.0.0.1:6379), BENCH_OUT (its JSON, as `npm run bench` runs it: BENCH_HARNESSES=graphql).
import { fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { Redis } from 'ioredis'
import { writeJson } from './harness.js'
import { loadAverage } from './machine.js'

const QUERY = '{ products(first: 5) { name reviews(first: 4) { body } } }'
const VARIANTS = ['mercurius', 'adapter in process', 'adapter on Redis']
/** The Redis variant's keys: deleted when the run is over. */
const NAME_SPACE = 'bench-graphql-'
const number = (name, fallback) => Number(process.env[name] ?? fallback)
const settings = {
  durationS: number('BENCH_GRAPHQL_DURATION', 5),
  warmupS: number('BENCH_GRAPHQL_WARMUP', 1),
  rounds: Math.max(1, Math.round(number('BENCH_GRAPHQL_ROUNDS', 3))),
  connections: Math.max(1, Math.round(number('BENCH_GRAPHQL_CONNECTIONS', 20))),
  redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
}

/** The server of one variant (in the child process): listens on a free port and says which. */
async function serve (variant) {
  const { default: Fastify } = await import('fastify')
  const { default: mercurius } = await import('mercurius')
  const { default: rateGuard } = await import('fastify-rate-guard')
  const { default: mercuriusRateGuard } = await import('fastify-rate-guard/mercurius')
  const reviews = [{ body: 'good' }, { body: 'fine' }]
  const products = Array.from({ length: 3 }, (_, i) => ({ name: `product ${i}` }))
  const app = Fastify()
  if (variant !== 'mercurius') {
    const redis = variant === 'adapter on Redis' ? settings.redis : undefined
    await app.register(rateGuard, { global: false, redis, nameSpace: `${NAME_SPACE}${process.pid}:` })
  }
  await app.register(mercurius, {
    schema: `type Review { body: String }
      type Product { name: String, reviews(first: Int): [Review!]! }
      type Query { products(first: Int): [Product!]! }`,
    resolvers: {
      Query: { products: (_, { first = 10 }) => products.slice(0, first) },
      Product: { reviews: (_, { first = 10 }) => reviews.slice(0, first) }
    }
  })
  if (variant !== 'mercurius') {
    // Far more than autocannon asks: every request allowed, the decision and the settlement made each time.
    await app.register(mercuriusRateGuard, { cost: { maximumAvailable: 1_000_000_000, restoreRate: 1_000_000_000 } })
  }
  await app.listen({ port: 0, host: '127.0.0.1' })
  process.send({ port: app.server.address().port })
}

/** Starts a variant's server process; its port. */
async function start (variant) {
  // As an app is run in production: graphql-js's development checks (its instanceOf across realms) off, for
  // Mercurius alone and with the adapter alike.
  const env = { ...process.env, NODE_ENV: 'production' }
  const child = fork(fileURLToPath(import.meta.url), ['serve', variant], { env, stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve)
    child.once('exit', code => { reject(new Error(`${variant}: the server exited (${code})`)) })
  })
  return { child, port }
}

/** autocannon's run of the query on `port` for `durationS` seconds. */
async function drive (port, durationS) {
  return await autocannon({
    url: `http://127.0.0.1:${port}/graphql`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: QUERY }),
    connections: settings.connections,
    duration: durationS
  })
}

async function measure (port) {
  const result = await drive(port, settings.durationS)
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 }
}

async function main () {
  const loadBefore = loadAverage()
  const servers = []
  for (const variant of VARIANTS) servers.push(await start(variant))
  const runs = new Map(VARIANTS.map(variant => [variant, []]))
  try {
    if (settings.warmupS > 0) for (const { port } of servers) await drive(port, settings.warmupS)
    for (let round = 1; round <= settings.rounds; round++) {
      for (const [i, variant] of VARIANTS.entries()) {
        const run = await measure(servers[i].port)
        runs.get(variant).push(run)
        process.stderr.write(`round ${round} ${variant}: ${run.rps.toFixed(0)} req/s, p50 ${run.p50} ms, p99 ${run.p99} ms\n`)
      }
    }
  } finally {
    for (const { child } of servers) child.kill()
    await deleteKeys()
  }
  const median = values => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
  const rows = VARIANTS.map(variant => {
    const list = runs.get(variant)
    return { variant, perSecond: Math.round(median(list.map(run => run.rps))), p50Ms: median(list.map(run => run.p50)), p99Ms: median(list.map(run => run.p99)) }
  })
  const base = rows[0].perSecond
  console.log(`### GraphQL requests (bench/graphql.js), ${new Date().toISOString()}\n`)
  console.log(`\`${QUERY}\`, ${settings.connections} connections, ${settings.rounds} rounds of ${settings.durationS} s (medians); ` +
    `load average ${loadBefore} before, ${loadAverage()} after\n`)
  console.log('| variant | req/s | vs Mercurius alone | p50 ms | p99 ms |')
  console.log('|---|---:|---:|---:|---:|')
  for (const row of rows) {
    console.log(`| ${row.variant} | ${row.perSecond} | ${((row.perSecond / base - 1) * 100).toFixed(1)}% | ${row.p50Ms} | ${row.p99Ms} |`)
  }
  writeJson({ date: new Date().toISOString(), settings, rows })
}

/** The Redis variant's keys, deleted (its server is gone: nothing writes them any more). */
async function deleteKeys () {
  const redis = new Redis(settings.redis)
  try {
    const keys = await redis.keys(`${NAME_SPACE}*`)
    if (keys.length > 0) await redis.del(...keys)
  } finally {
    redis.disconnect()
  }
}

if (process.argv[2] === 'serve') await serve(process.argv[3])
else await main()
