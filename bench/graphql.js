// A GraphQL request's added cost (issue 45): the same Mercurius app without the adapter, with it counting in
// process, and with it counting in Redis, each in its own process, measured by autocannon in alternating rounds
// (A B C, A B C, ...). The adapter's work per request: the walker over the document, a spend on the cost
// bucket, and, the actual cost being lower than the requested, its settlement (on Redis: two round trips).
// Standalone; prints a markdown table (progress to stderr). Nothing here is asserted: the figures depend on the
// machine and whatever runs beside.
//
//   npm run build && node bench/graphql.js
//
// Environment: BENCH_GRAPHQL_DURATION (s per run, default 5), BENCH_GRAPHQL_ROUNDS (default 3),
// BENCH_GRAPHQL_CONNECTIONS (default 20), REDIS_URL (default redis://127.0.0.1:6379).
import { fork } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

const QUERY = '{ products(first: 5) { name reviews(first: 4) { body } } }'
const VARIANTS = ['mercurius', 'adapter in process', 'adapter on Redis']
const number = (name, fallback) => Number(process.env[name] ?? fallback)
const settings = {
  durationS: number('BENCH_GRAPHQL_DURATION', 5),
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
    await app.register(rateGuard, { global: false, redis, nameSpace: `bench-graphql-${process.pid}:` })
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
  const child = fork(fileURLToPath(import.meta.url), ['serve', variant], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve)
    child.once('exit', code => { reject(new Error(`${variant}: the server exited (${code})`)) })
  })
  return { child, port }
}

async function measure (port) {
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/graphql`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query: QUERY }),
    connections: settings.connections,
    duration: settings.durationS
  })
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} non-2xx answers, ${result.errors} errors`)
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99 }
}

async function main () {
  const servers = []
  for (const variant of VARIANTS) servers.push(await start(variant))
  const runs = new Map(VARIANTS.map(variant => [variant, []]))
  try {
    for (const { port } of servers) await autocannon({ url: `http://127.0.0.1:${port}/graphql`, method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query: QUERY }), connections: settings.connections, duration: 1 })
    for (let round = 1; round <= settings.rounds; round++) {
      for (const [i, variant] of VARIANTS.entries()) {
        const run = await measure(servers[i].port)
        runs.get(variant).push(run)
        process.stderr.write(`round ${round} ${variant}: ${run.rps.toFixed(0)} req/s, p50 ${run.p50} ms, p99 ${run.p99} ms\n`)
      }
    }
  } finally {
    for (const { child } of servers) child.kill()
  }
  const median = values => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
  const base = median(runs.get('mercurius').map(run => run.rps))
  console.log(`GraphQL \`${QUERY}\`, ${settings.connections} connections, ${settings.rounds} rounds of ${settings.durationS} s (medians)\n`)
  console.log('| variant | req/s | vs Mercurius alone | p50 ms | p99 ms |')
  console.log('|---|---:|---:|---:|---:|')
  for (const variant of VARIANTS) {
    const list = runs.get(variant)
    const rps = median(list.map(run => run.rps))
    const share = `${((rps / base - 1) * 100).toFixed(1)}%`
    console.log(`| ${variant} | ${rps.toFixed(0)} | ${share} | ${median(list.map(run => run.p50))} | ${median(list.map(run => run.p99))} |`)
  }
}

if (process.argv[2] === 'serve') await serve(process.argv[3])
else await main()
