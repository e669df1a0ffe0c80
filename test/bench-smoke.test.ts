// The benchmark (bench/run.js) starts, measures one variant under one scenario, prints its table row, writes
// its JSON, cleans its keys out of Redis and exits 0. It measures nothing worth reading: the figures come from
// `npm run bench`, never from `npm test`.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { client, getRedis, scanKeys } from './helpers/redis.js'

const RUNNER = fileURLToPath(new URL('../bench/run.js', import.meta.url))

interface Row {
  variant: string
  scenario: string
  rps: { median: number } | null
  roundTripsPerRequest: { median: number } | null
  serverCpuUsPerRequest: { median: number } | null
  responses: Record<string, number>
}

function run (env: NodeJS.ProcessEnv): Promise<{ code: number | null, stdout: string, stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [RUNNER], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => { stdout += d.toString() })
    child.stderr.on('data', (d: Buffer) => { stderr += d.toString() })
    child.on('error', reject)
    child.on('exit', (code) => resolve({ code, stdout, stderr }))
  })
}

t.test('one variant, one scenario, one short round', async (t) => {
  const { url } = await getRedis(t)
  const out = join(t.testdir(), 'latest.json')
  const { code, stdout, stderr } = await run({
    REDIS_URL: url,
    BENCH_ONLY: '@fastify/rate-limit redis',
    BENCH_SCENARIOS: 'allowed',
    BENCH_ROUNDS: '1',
    BENCH_DURATION: '0.3',
    BENCH_WARMUP: '0.2',
    BENCH_SINGLE: '0.2',
    // Requests in flight at the window's edges are counted by one side only (the server's round trips or the
    // load generator's answers): few connections keep that within a percent of a short window's requests.
    BENCH_CONNECTIONS: '10',
    BENCH_SCRIPTS: '0',
    BENCH_OUT: out
  })
  t.equal(code, 0, `exits 0; stderr: ${stderr}`)
  t.match(stdout, /^## allowed traffic over 10,000 keys$/m, 'prints the scenario heading')
  t.match(stdout, /^\| @fastify\/rate-limit redis \| [\d,]+ \|/m, 'prints a table row with its requests/s')

  const results = JSON.parse(readFileSync(out, 'utf8')) as { rows: Row[], machine: { nproc: number, redis: string } }
  t.equal(results.rows.length, 1, 'one row in the JSON')
  const [row] = results.rows
  t.equal(row?.variant, '@fastify/rate-limit redis')
  t.ok((row?.rps?.median ?? 0) > 0, 'requests were answered')
  t.same(row?.responses, { 200: 1 }, 'every request of the pool was allowed')
  t.ok(Math.abs((row?.roundTripsPerRequest?.median ?? 0) - 1) < 0.05, 'one Redis round trip per request')
  t.ok((row?.serverCpuUsPerRequest?.median ?? 0) > 0, 'the server reported its CPU')
  t.ok(results.machine.nproc >= 1 && results.machine.redis !== '', 'the machine is noted')

  const redis = client(t, url)
  t.same(await scanKeys(redis, 'bench:'), [], 'the run\'s keys were deleted')
})
