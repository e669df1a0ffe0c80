// The adapters' harnesses (bench/websocket.js, bench/graphql.js) run short through `npm run bench` (bench/run.js):
// a file of its own beside test/bench-smoke.test.ts, whose server variants take a minute, so the two run side by
// side. No figure is held to anything.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { distIsBuilt } from './helpers/built.js'
import { escape, runBench as run } from './helpers/bench-runner.js'
import { client, getRedis, scanKeys } from './helpers/redis.js'

t.setTimeout(120_000)

t.test('the adapters\' harnesses run through `npm run bench`: each variant serves and prints a row', async (t) => {
  // The runner loads the plugin and its adapters from dist/: it must be the build of lib/ (npm test builds it first).
  distIsBuilt(t, fileURLToPath(new URL('../', import.meta.url)))
  const { url } = await getRedis(t)
  const out = join(t.testdir(), 'latest.json')
  const { code, stdout, stderr } = await run({
    REDIS_URL: url,
    BENCH_HARNESSES: 'websocket,graphql',
    WS_CLIENTS: '2',
    WS_MESSAGES: '20',
    WS_ROUNDS: '1',
    BENCH_GRAPHQL_DURATION: '0.3',
    BENCH_GRAPHQL_WARMUP: '0',
    BENCH_GRAPHQL_ROUNDS: '1',
    BENCH_GRAPHQL_CONNECTIONS: '2',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  const all = JSON.parse(readFileSync(out, 'utf8')) as { harnesses: Record<string, { rows: Array<{ variant: string, perSecond: number }> }> }
  t.same(Object.keys(all.harnesses), ['websocket', 'graphql'], 'the JSON holds each harness selected')
  // WebSocket: the bare server, and the adapter with one budget and with three, in process and on Redis;
  // GraphQL: Mercurius alone, and the adapter in process and on Redis.
  for (const [name, count] of [['websocket', 5], ['graphql', 3]] as const) {
    const { rows } = all.harnesses[name]!
    t.equal(rows.length, count, `${name}: a row for each variant`)
    for (const row of rows) {
      t.ok(row.perSecond > 0, `${name}, ${row.variant}: it served`)
      t.match(stdout, new RegExp(`^\\| ${escape(row.variant)} \\| \\d+ \\|`, 'm'), `${name}, ${row.variant}: a table row`)
    }
  }
  const redis = client(t, url)
  t.same([...await scanKeys(redis, 'bench-ws-'), ...await scanKeys(redis, 'bench-graphql-')], [], 'the runs\' keys were deleted')
})
