// Shared by the fault suites (redis-faults, breaker, fail-modes, cluster): apps whose log lines are kept, timed
// requests, latency statistics, traffic streams that run while a fault happens, the check that limiting
// is exact, and the RELIABILITY lines the README's table is built from. What a timed answer is held to
// (its deadline plus the lag measured while it was out) is lag.ts's.
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { Redis } from 'ioredis'
import type { RedisOptions } from 'ioredis'
import tap from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { client, uniquePrefix } from './redis.js'

export interface LogLine { level: number, msg: string, [field: string]: unknown }

export interface App {
  app: FastifyInstance
  nameSpace: string
  logs: LogLine[]
  /** Log lines about Redis trouble (`Redis did not decide`). */
  trouble: () => LogLine[]
}

/** An app with the plugin on `GET /` (and any routes `routes` adds), its log lines kept, closed at teardown. */
export async function makeApp (t: Test, options: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<App> {
  const logs: LogLine[] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } } } })
  t.teardown(async () => { await app.close() })
  const nameSpace = options.nameSpace ?? uniquePrefix()
  // Clients are told apart by x-api-key (see timed()), keys this app takes as verified.
  await app.register(rateGuard, { verifyApiKey: () => true, ...options, nameSpace })
  app.get('/', async () => 'ok')
  routes?.(app)
  await app.ready()
  return { app, nameSpace, logs, trouble: () => logs.filter(line => /Redis did not decide/.test(line.msg)) }
}

/** A lent client, with the 'error' listener its owner is expected to attach. */
export function lend (t: Test, url: string, opts: RedisOptions = {}): Redis {
  const redis = client(t, url, opts)
  redis.on('error', () => {})
  return redis
}

/**
 * Starts `register` and resolves, as soon as the plugin has created its own client, with that client and
 * the registration still under way. The client is read from `defineCommand`, the one call the plugin makes
 * on a client it owns before any command. No other registration may start until this resolves.
 */
export async function startOwned<T> (register: () => Promise<T>): Promise<{ owned: Redis, done: Promise<T> }> {
  const proto = Redis.prototype as unknown as Record<string, (...args: unknown[]) => unknown>
  const original = proto.defineCommand!
  let found: (client: Redis) => void = () => {}
  const made = new Promise<Redis>(resolve => { found = resolve })
  proto.defineCommand = function (this: Redis, ...args: unknown[]) {
    delete proto.defineCommand
    found(this)
    return original.apply(this, args)
  }
  const done = register()
  try {
    const owned = await Promise.race([made, done.then(() => { throw new Error('the plugin created no client') })])
    return { owned, done }
  } finally {
    delete proto.defineCommand
  }
}

/** Runs `register` to the end; returns what it returned and the one client the plugin created. */
export async function withOwnedClient<T> (register: () => Promise<T>): Promise<[T, Redis]> {
  const { owned, done } = await startOwned(register)
  return [await done, owned]
}

export interface Timed {
  res: LightMyRequestResponse
  /** performance.now() when the request was sent. */
  at: number
  ms: number
}

/** One request, timed; `key` becomes the identity (`x-api-key`). */
export async function timed (app: FastifyInstance, key?: string, url = '/'): Promise<Timed> {
  const at = performance.now()
  const res = await app.inject({ url, headers: key === undefined ? {} : { 'x-api-key': key } })
  return { res, at, ms: performance.now() - at }
}

/**
 * Whether Redis decides a request for `key` (as `outcome` tells), asked up to `tries` times: before a fault,
 * that Redis decides at all. A healthy Redis on a loaded machine may miss a deadline of 100 ms now and then.
 */
export async function redisDecides (app: FastifyInstance, key: string, tries = 10): Promise<boolean> {
  for (let i = 0; i < tries; i++) if (outcome('open', (await timed(app, key)).res) === 'redis') return true
  return false
}

/** Latencies of a set of requests. */
export class Latency {
  readonly samples: number[] = []
  add (ms: number): void { this.samples.push(ms) }
  get worst (): number { return this.samples.length === 0 ? 0 : Math.max(...this.samples) }
  /** The nearest-rank percentile `p` (0–100). */
  percentile (p: number): number {
    const sorted = [...this.samples].sort((a, b) => a - b)
    return sorted[Math.max(0, Math.ceil(p / 100 * sorted.length) - 1)] ?? 0
  }
}

export function ms (value: number): string {
  return value.toFixed(1)
}

/** One line of the README's Reliability table, printed in one format so it can be collected from a run. */
export function reliability (t: Test, name: string, worstMs: number, exactMs: number | string): void {
  t.comment(`RELIABILITY | ${name} | ${Math.round(worstMs)} | ${typeof exactMs === 'number' ? Math.round(exactMs) : exactMs}`)
}

/**
 * How a response was decided, for `failMode`: by Redis ('redis'), by failMode ('failMode'), or neither
 * ('wrong'). With failMode 'local', the in-process twin answers like Redis: that is 'decided'.
 */
export type Outcome = 'redis' | 'failMode' | 'decided' | 'wrong'

export function outcome (failMode: 'open' | 'closed' | 'local', res: LightMyRequestResponse): Outcome {
  const counted = res.statusCode === 200 && res.headers['x-ratelimit-remaining'] !== undefined && res.headers['x-ratelimit-enforced'] === undefined
  if (failMode === 'local') return counted ? 'decided' : 'wrong'
  if (counted) return 'redis'
  if (failMode === 'open') {
    return res.statusCode === 200 && res.headers['x-ratelimit-enforced'] === 'false' && res.headers['x-ratelimit-remaining'] === undefined ? 'failMode' : 'wrong'
  }
  if (res.statusCode !== 503 || res.headers['retry-after'] !== '1') return 'wrong'
  return (res.json() as { code?: string }).code === 'FST_RATE_GUARD_UNAVAILABLE' ? 'failMode' : 'wrong'
}

/**
 * Requests sent in `loops` sequential loops (each pausing `gap` ms between requests) until `stop()`: the
 * traffic that is in flight while a fault happens. `until` resolves once the samples so far satisfy a
 * condition (checked as each answer arrives).
 */
export class Stream {
  readonly samples: Timed[] = []
  readonly #waiters: Array<{ check: (samples: Timed[]) => boolean, resolve: () => void }> = []
  #stopped = false
  readonly #loops: Array<Promise<void>>

  constructor (app: FastifyInstance, key: string, { loops = 2, gap = 5 } = {}) {
    this.#loops = Array.from({ length: loops }, async () => {
      while (!this.#stopped) {
        this.samples.push(await timed(app, key))
        for (const waiter of [...this.#waiters]) {
          if (waiter.check(this.samples)) {
            this.#waiters.splice(this.#waiters.indexOf(waiter), 1)
            waiter.resolve()
          }
        }
        await sleep(gap)
      }
    })
  }

  /** Resolves when `check(samples)` holds; rejects after `ms` (a stuck stream is a failure, not a hang). */
  async until (check: (samples: Timed[]) => boolean, what: string, ms = 10_000): Promise<void> {
    if (check(this.samples)) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      new Promise<void>(resolve => { this.#waiters.push({ check, resolve }) }),
      new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`stream: timed out waiting for ${what}`)), ms) })
    ]).finally(() => clearTimeout(timer))
  }

  async stop (): Promise<Timed[]> {
    this.#stopped = true
    await Promise.all(this.#loops)
    return this.samples
  }
}

/** `max + 1` parallel requests for a fresh identity: their sorted status codes (exact: one 429). */
export async function exactCodes (app: FastifyInstance, max: number, url = '/'): Promise<number[]> {
  const key = `exact-${uniquePrefix()}`
  const replies = await Promise.all(Array.from({ length: max + 1 }, async () => await app.inject({ url, headers: { 'x-api-key': key } })))
  return replies.map(res => res.statusCode).sort((a, b) => a - b)
}

export function exactly (max: number): number[] {
  return [...new Array<number>(max).fill(200), 429]
}

/**
 * Records every unhandled rejection and every ioredis 'error' event nobody listened to (ioredis prints
 * those with console.error) from now until the file's root test ends; returns what was seen.
 */
export function watchEscapes (): { unhandled: unknown[], unlistened: string[] } {
  const seen = { unhandled: [] as unknown[], unlistened: [] as string[] }
  const onUnhandled = (reason: unknown): void => { seen.unhandled.push(reason) }
  process.on('unhandledRejection', onUnhandled)
  const consoleError = console.error
  console.error = (...args: unknown[]) => {
    if (String(args[0]).includes('Unhandled error event')) seen.unlistened.push(args.map(String).join(' '))
    else consoleError(...args)
  }
  tap.teardown(() => {
    process.off('unhandledRejection', onUnhandled)
    console.error = consoleError
  })
  return seen
}
