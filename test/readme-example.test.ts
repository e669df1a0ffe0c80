// The README's first example, run as pasted (node, ESM, against the built package: `npm run build` first, as
// `npm test` does in pretest), with no logger, as a child process: once against a real redis-server with one
// route declared BEFORE `register` (inserted here), whose warning stderr shows once, with its code, while the
// example answers until a 429; once with Redis down (a closed port), where stderr shows no ioredis
// "Unhandled error event" (the example's `redis.on('error', …)`).
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import t from 'tap'
import type { Test } from 'tap'
import { request } from 'undici'
import { freePort, startRedisServer } from './helpers/redis.js'

t.setTimeout(20_000)

const ROOT = fileURLToPath(new URL('..', import.meta.url))
const EARLY = "app.get('/early', async () => 'early')\n"

/** The README's first ```ts block, importing the built package, with `/early` declared before `register`. */
function readmeExample (): string {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8')
  const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1]
  if (block === undefined) throw new Error('README.md has no ```ts block')
  const dist = pathToFileURL(join(ROOT, 'dist', 'index.js')).href
  const app = block.replace("from 'fastify-rate-guard'", `from '${dist}'`)
  if (app === block || !app.includes('await app.register(')) throw new Error('the first example changed its shape')
  return app.replace('await app.register(', `${EARLY}await app.register(`)
}

interface Running { child: ChildProcess, stderr: () => string, base: string }

/** Runs the example in a directory inside the repository (so `fastify` and `ioredis` resolve), no logger. */
async function run (t: Test, redisUrl: string): Promise<Running> {
  const dir = t.testdir({ 'app.mjs': readmeExample() })
  const port = await freePort()
  const child = spawn(process.execPath, [join(dir, 'app.mjs')], {
    env: { ...process.env, REDIS_URL: redisUrl, PORT: String(port), NODE_OPTIONS: '' },
    stdio: ['ignore', 'ignore', 'pipe']
  })
  let stderr = ''
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  t.teardown(async () => {
    if (child.exitCode !== null) return
    child.kill('SIGTERM')
    await once(child, 'exit')
  })
  const base = `http://localhost:${port}`
  // Listening: the first request that connects (the example prints nothing without a logger).
  for (let deadline = Date.now() + 10_000; ; await new Promise(resolve => setTimeout(resolve, 50))) {
    if (child.exitCode !== null) throw new Error(`the example exited ${child.exitCode}: ${stderr}`)
    try {
      const res = await request(`${base}/health`)
      await res.body.dump()
      break
    } catch (err) {
      if (Date.now() > deadline) throw err
    }
  }
  return { child, stderr: () => stderr, base }
}

t.test('with Redis: the route before register is warned about once, with its code; the example limits', async t => {
  const redis = await startRedisServer(t)
  const { stderr, base } = await run(t, redis.url)
  const statuses: number[] = []
  for (let i = 0; i < 11; i++) {
    const res = await request(`${base}/search?q=fastify`)
    await res.body.dump()
    statuses.push(res.statusCode)
  }
  t.same(statuses, [...Array(10).fill(200), 429], '/search: ten in 10 s, then 429')
  const health = await request(`${base}/health`)
  t.equal(health.statusCode, 200)
  t.same(await health.body.json(), { ok: true })
  const said = stderr().split('\n').filter(line => line.includes('[FST_RATE_GUARD_ROUTES_BEFORE_PLUGIN]'))
  t.equal(said.length, 1, 'the warning, once')
  t.match(said[0], /RateGuardWarning: rate-guard: 1 route\(s\) declared before the plugin .*\/early/, 'naming /early')
  t.notMatch(stderr(), /Unhandled error event:/)
})

t.test('with Redis down: no "Unhandled error event" on stderr', async t => {
  const { stderr, base } = await run(t, `redis://127.0.0.1:${await freePort()}`)
  const res = await request(`${base}/search`)
  await res.body.dump()
  t.equal(res.statusCode, 503, "failMode 'closed' answers while Redis is down")
  // ioredis retries at 50, 100, 150 ms …: within a second it has failed several times, each an 'error' event.
  await new Promise(resolve => setTimeout(resolve, 1000))
  t.notMatch(stderr(), /Unhandled error event:/)
  t.match(stderr(), /\[FST_RATE_GUARD_REDIS_NOT_READY\]/, 'the plugin says Redis is not ready, with its code')
})
