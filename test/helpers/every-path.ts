// An app whose routes reach every script the plugin runs on Redis: each algorithm's lean script (one limit), its
// general script (a cost), its settling (countWhen), concurrency's leases and the operator's ban. The tests of
// what a server takes (test/app-clock.test.ts: no TIME in scripts; test/key-locking.test.ts: a shebang flag)
// run it, and `exactEverywhere` checks each path limits exactly.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { ALGORITHMS } from '../../lib/algorithms/index.js'
import { uniquePrefix } from './redis.js'

export interface LogLine { level: number, msg: string }

/** The app (max 3 a minute; a route per path), and the lines it logs at `level` and above. */
export async function everyPathApp (t: Test, options: RateGuardOptions, level = 'warn'): Promise<{ app: FastifyInstance, logs: LogLine[] }> {
  const logs: LogLine[] = []
  const app = Fastify({ logger: { level, stream: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { nameSpace: uniquePrefix(), max: 3, timeWindow: '1 minute', failMode: 'closed', timeout: 2000, ...options })
  for (const algorithm of ALGORITHMS) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm } } }, async () => 'ok')
    app.get(`/${algorithm}/costly`, { config: { rateLimit: { algorithm, cost: 2, max: 4 } } }, async () => 'ok')
    app.get(`/${algorithm}/free`, { config: { rateLimit: { algorithm, max: 1, countWhen: () => false } } }, async () => 'ok')
  }
  app.get('/slots', { config: { rateLimit: { concurrency: { max: 1 } } } }, async () => 'ok')
  await app.ready()
  return { app, logs }
}

/** The status codes of `n` requests to `url`, one after the other. */
export async function codes (app: FastifyInstance, url: string, n: number): Promise<number[]> {
  const got: number[] = []
  for (let i = 0; i < n; i++) got.push((await app.inject(url)).statusCode)
  return got
}

/** Every path of `everyPathApp` limits exactly (a fresh app: nothing counted yet). */
export async function exactEverywhere (t: Test, app: FastifyInstance): Promise<void> {
  for (const algorithm of ALGORITHMS) {
    t.strictSame(await codes(app, `/${algorithm}`, 4), [200, 200, 200, 429], `${algorithm}: max 3, exactly one 429 (the lean script)`)
    t.strictSame(await codes(app, `/${algorithm}/costly`, 3), [200, 200, 429], `${algorithm}: 2 units of 4, the third refused (the general script)`)
    t.strictSame(await codes(app, `/${algorithm}/free`, 3), [200, 200, 200], `${algorithm}: every request given back (settled)`)
  }
  t.strictSame(await codes(app, '/slots', 2), [200, 200], 'leases taken and released')
  await app.rateGuard.ban('192.0.2.44', '1 minute')
  t.equal((await app.inject({ url: '/sliding-log', remoteAddress: '192.0.2.44' })).statusCode, 403, 'the operator\'s ban (its own script)')
}
