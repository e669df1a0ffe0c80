// The edge matrix's harness (test/edges/): the kinds of limit as one table, app instances over real HTTP
// whose clocks can be moved one by one, seeded traffic with hang-ups, and the run of a set of cells whose
// records the checker (edge-check.ts) then judges. A cell is one row: a kind of limit × an edge × a store.
//
// An instance's clock: `Date.now` is read through an AsyncLocalStorage that holds the instance's skew, entered
// when the instance is built (its timers, its Redis client's callbacks) and for every request its server takes
// (serverFactory), so two instances in one process keep two clocks. Redis's TIME is real. The observer reads
// performance.now(), which no skew touches.
import { AsyncLocalStorage } from 'node:async_hooks'
import { createServer, request as httpRequest } from 'node:http'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply } from 'fastify'
import type { Test } from 'tap'
import mercurius from 'mercurius'
import rateGuard from '../../lib/index.js'
import mercuriusRateGuard from '../../lib/adapters/mercurius.js'
import { breaches } from './edge-check.js'
import { uniquePrefix } from './redis.js'
import type { Bound, Fault, Observer } from './edge-check.js'
import { draws } from './random.js'

const skews = new AsyncLocalStorage<number>()
const realNow = Date.now.bind(Date)
let clockMoved = false

/** Runs `fn` on an instance's clock, `skewMs` off the real one. */
function onClock<T> (skewMs: number, fn: () => T): T {
  if (!clockMoved) {
    clockMoved = true
    Date.now = () => realNow() + (skews.getStore() ?? 0)
  }
  return skews.run(skewMs, fn)
}

/** A kind of limit: the route's config, what it promises, how long its handlers run, how often clients send. */
export interface Kind {
  name: string
  config: (zone: string) => Record<string, unknown>
  bound: Bound
  holdMs: readonly [number, number]
  gapMs: readonly [number, number]
  /** How many of a run's first requests hold their slot for the whole run (one with a fault: through it and past). */
  opening?: { count: number }
  /**
   * A budget spent by hand (`fastify.rateGuard.budget(config)`) in the handler, the route itself unlimited:
   * `spend` counts the request, `hold` takes its slot until the handler is done.
   */
  byHand?: 'spend' | 'hold'
  /**
   * A GraphQL field limited by fastify-rate-guard/mercurius (`operations`, with `config` as the field's budget):
   * its requests are `GET /graphql?query={work}`, refused 429.
   */
  graphql?: true
}

const RATE = { max: 4, timeWindow: 1000 }
const rate = (algorithm: 'sliding-log' | 'fixed-window' | 'sliding-window' | 'token-bucket'): Kind => ({
  name: algorithm,
  config: () => ({ algorithm, ...RATE }),
  bound: { kind: 'rate', algorithm, max: RATE.max, windowMs: RATE.timeWindow },
  holdMs: [20, 400],
  gapMs: [20, 200]
})

/**
 * Every kind of limit the matrix holds: each algorithm, a calendar quota, concurrency, maxWait, bans, and a budget
 * spent by hand (a rate spent, a slot held: what the GraphQL and WebSocket adapters build on), and a GraphQL field
 * limited by fastify-rate-guard/mercurius.
 */
export const KINDS: readonly Kind[] = [
  rate('sliding-log'), rate('fixed-window'), rate('sliding-window'), rate('token-bucket'),
  {
    name: 'quota',
    config: zone => ({ limits: [{ max: 6, per: 'day', timeZone: zone }] }),
    bound: { kind: 'period', max: 6 },
    holdMs: [20, 300],
    gapMs: [40, 250]
  },
  {
    name: 'concurrency',
    config: () => ({ max: 1000, timeWindow: 60_000, concurrency: { max: 2, lease: '2 seconds' } }),
    bound: { kind: 'running', max: 2, leaseMs: 2000 },
    holdMs: [400, 1500],
    gapMs: [50, 250],
    // Both slots held from before a fault to well past a lease after it: a slot the fault lost shows.
    opening: { count: 2 }
  },
  {
    name: 'maxWait',
    config: () => ({ max: 3, timeWindow: 1000, maxWait: '1 second' }),
    bound: { kind: 'rate', algorithm: 'sliding-log', max: 3, windowMs: 1000, aheadMs: 1000 },
    holdMs: [20, 300],
    gapMs: [40, 250]
  },
  {
    name: 'ban',
    config: () => ({ max: 3, timeWindow: 1000, ban: { threshold: 2, duration: '2 seconds' } }),
    bound: { kind: 'rate', algorithm: 'sliding-log', max: 3, windowMs: 1000, banMs: 2000 },
    holdMs: [20, 300],
    gapMs: [40, 250]
  },
  { ...rate('sliding-log'), name: 'spent', byHand: 'spend' },
  {
    ...rate('sliding-log'),
    name: 'graphql',
    graphql: true
  },
  {
    name: 'held',
    config: () => ({ max: 1000, timeWindow: 60_000, concurrency: { max: 2, lease: '2 seconds' } }),
    bound: { kind: 'running', max: 2, leaseMs: 2000 },
    holdMs: [400, 1500],
    gapMs: [50, 250],
    opening: { count: 2 },
    byHand: 'hold'
  }
]

/**
 * The zone (an `Etc/GMT` one, whole hours) whose midnight is nearest the real time on the side asked, at
 * least 90 s from it so Redis's clock stays in one period for a run; and that midnight. Instances' clocks are
 * moved to it: 'ahead' of Redis when the midnight is still to come, 'behind' when it has passed.
 */
export function nearestMidnight (side: 'ahead' | 'behind' = 'ahead', now = realNow()): { zone: string, midnight: number } {
  const DAY = 86_400_000
  let best = { zone: 'UTC', midnight: side === 'ahead' ? Math.ceil(now / DAY) * DAY : Math.floor(now / DAY) * DAY }
  for (let hours = -12; hours <= 14; hours++) {
    const local = now + hours * 3_600_000
    for (const day of [Math.floor(local / DAY), Math.ceil(local / DAY)]) {
      const midnight = day * DAY - hours * 3_600_000
      const far = side === 'ahead' ? midnight - now : now - midnight
      if (far >= 90_000 && far < Math.abs(best.midnight - now)) {
        // Etc/GMT's sign is POSIX's: Etc/GMT-11 is eleven hours ahead of UTC.
        best = { zone: hours === 0 ? 'UTC' : `Etc/GMT${hours > 0 ? '-' : '+'}${Math.abs(hours)}`, midnight }
      }
    }
  }
  return best
}

/** One app instance over real HTTP: every kind's route, the handlers recording into `observer`. */
export async function instance (t: Test, opts: { redis?: string | string[], nameSpace: string, skewMs?: number, zone: string, observer: Observer }): Promise<{ app: FastifyInstance, base: string }> {
  const skewMs = opts.skewMs ?? 0
  return await onClock(skewMs, async () => {
    const app = Fastify({
      serverFactory: handler => createServer((req, res) => { onClock(skewMs, () => handler(req, res)) })
    })
    t.teardown(async () => await app.close())
    await app.register(rateGuard, {
      ...(opts.redis === undefined ? {} : { redis: opts.redis }),
      nameSpace: opts.nameSpace,
      verifyApiKey: () => true
    })
    app.addContentTypeParser('text/plain', { parseAs: 'string' }, (_request, body, done) => { done(null, body) })
    await graphqlField(app, opts.zone, opts.observer)
    for (const kind of KINDS) {
      if (kind.graphql === true) continue
      if (kind.byHand !== undefined) {
        byHand(app, kind, opts.zone, opts.observer)
        continue
      }
      app.route({
        method: ['GET', 'POST'],
        url: `/${kind.name}`,
        config: { rateLimit: kind.config(opts.zone) },
        handler: async request => {
          const end = opts.observer.begin(String(request.headers['x-api-key']), performance.now(), Number(request.headers['x-sent']))
          await sleep(Number(request.headers['x-hold-ms']))
          end(performance.now())
          return 'ok'
        }
      })
    }
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { app, base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` }
  })
}

/** Mercurius with one field, `work`, limited per client by the GraphQL kind's budget; its resolver records what ran. */
async function graphqlField (app: FastifyInstance, zone: string, observer: Observer): Promise<void> {
  const kind = KINDS.find(k => k.graphql === true)!
  await app.register(mercurius, {
    path: `/${kind.name}`,
    schema: 'type Query { work: String }',
    resolvers: {
      Query: {
        work: async (_root: unknown, _args: unknown, { reply }: { reply: FastifyReply }) => {
          const { headers } = reply.request
          const end = observer.begin(String(headers['x-api-key']), performance.now(), Number(headers['x-sent']))
          await sleep(Number(headers['x-hold-ms']))
          end(performance.now())
          return 'ok'
        }
      }
    }
  })
  await app.register(mercuriusRateGuard, { cost: false, statusCode: 429, operations: { work: kind.config(zone) } })
}

/** `kind`'s route, counted by hand in its handler on a budget of `kind.config` (Kind.byHand); refused as the plugin would. */
function byHand (app: FastifyInstance, kind: Kind, zone: string, observer: Observer): void {
  const budget = app.rateGuard.budget(kind.config(zone))
  app.route({
    method: ['GET', 'POST'],
    url: `/${kind.name}`,
    config: { rateLimit: false },
    handler: async (request, reply) => {
      const answer = kind.byHand === 'spend' ? await budget.spend(request) : await budget.hold(request)
      if ('writeHeaders' in answer) answer.writeHeaders(reply)
      if (!answer.ok) {
        const banned = answer.outcome === 'banned' || answer.outcome === 'ban-started'
        // The plugin's in-flight refusal waits a second; a spend's headers say its own wait.
        if (!reply.hasHeader('retry-after')) reply.header('retry-after', 1)
        return await reply.code(answer.outcome === 'unavailable' ? 503 : banned ? 403 : 429).send('refused')
      }
      const end = observer.begin(String(request.headers['x-api-key']), performance.now(), Number(request.headers['x-sent']))
      try {
        await sleep(Number(request.headers['x-hold-ms']))
        end(performance.now())
        return 'ok'
      } finally {
        if ('release' in answer) answer.release()
      }
    }
  })
}

/**
 * Two app instances sharing `redis` under one `nameSpace` (their clocks `skewsMs` off, if given): their bases.
 */
export async function pair (t: Test, opts: { redis: string | string[], zone: string, observer: Observer }, skewsMs: readonly [number, number] = [0, 0]): Promise<string[]> {
  const nameSpace = uniquePrefix()
  const bases: string[] = []
  for (const skewMs of skewsMs) bases.push((await instance(t, { ...opts, nameSpace, skewMs })).base)
  return bases
}

/** A client leaving: before its handler runs (its body never sent whole) or while it runs. */
export type HangUp = 'before' | 'while'

/**
 * One request on a fresh connection; resolves with its status (and its Retry-After, in seconds, when it has one),
 * or 'gone' once the client hung up.
 */
export async function send (url: string, client: string, holdMs: number, sent: number, hangUp?: { when: HangUp, afterMs: number }): Promise<{ status: number | 'gone', retryAfter?: number }> {
  return await new Promise(resolve => {
    const before = hangUp?.when === 'before'
    const req = httpRequest(url, {
      method: before ? 'POST' : 'GET',
      agent: false,
      headers: { 'x-api-key': client, 'x-hold-ms': String(holdMs), 'x-sent': String(sent), ...(before ? { 'content-type': 'text/plain', 'content-length': '100' } : {}) }
    }, res => {
      res.resume()
      const retryAfter = res.headers['retry-after'] === undefined ? undefined : Number(res.headers['retry-after'])
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, retryAfter }) })
      res.on('error', () => { resolve({ status: 'gone' }) })
    })
    req.on('error', () => { resolve({ status: 'gone' }) })
    if (before) req.write('0123456789')
    else req.end()
    if (hangUp !== undefined) setTimeout(() => { req.destroy(); resolve({ status: 'gone' }) }, hangUp.afterMs)
  })
}

/** A cell: one kind of limit at one edge on one store. */
export interface Cell { name: string, kind: Kind, client: string }

/**
 * How a run's traffic goes: for how long, the odds and kind of a hang-up, the instances a request may go to,
 * and whether it opens with its kind's long holders (a run with a fault).
 */
export interface Traffic { ms: number, hangUp?: HangUp, hangUpOdds?: number, bases: readonly string[], opening?: boolean }

/** Sends `cell`'s seeded traffic for `traffic.ms` and waits for every answer, each told to the observer. */
export async function drive (cell: Cell, seed: number, traffic: Traffic, observer: Observer): Promise<void> {
  // Each cell its own stream from the seed, whatever runs beside it.
  let hash = seed
  for (const c of cell.name) hash = (Math.imul(hash, 31) + c.charCodeAt(0)) >>> 0
  const d = draws(hash, 0.5)
  const answers: Array<Promise<unknown>> = []
  const ends = performance.now() + traffic.ms
  const opening = traffic.opening === true ? cell.kind.opening : undefined
  for (let i = 0; performance.now() < ends; i++) {
    const long = opening !== undefined && i < opening.count
    const holdMs = long ? traffic.ms : d.int(...cell.kind.holdMs)
    const hangUp = !long && traffic.hangUp !== undefined && d.random() < (traffic.hangUpOdds ?? 0.4)
      ? { when: traffic.hangUp, afterMs: traffic.hangUp === 'before' ? d.int(5, 150) : d.int(30, Math.max(40, holdMs - 20)) }
      : undefined
    const url = `${d.pick(traffic.bases)}/${cell.kind.name}${cell.kind.graphql === true ? '?query=%7Bwork%7D' : ''}`
    const sent = performance.now()
    answers.push(send(url, cell.client, holdMs, sent, hangUp).then(({ status, retryAfter }) => {
      observer.answers.push({ client: cell.client, via: url.slice(0, url.lastIndexOf('/')), sent, at: performance.now(), status, retryAfter })
    }))
    await sleep(d.ms(...cell.kind.gapMs))
  }
  await Promise.all(answers)
  // Handlers of clients that hung up may still run: the checker needs their ends.
  if (traffic.hangUp !== undefined) await sleep(Math.max(...cell.kind.holdMs) + 200)
}

/** The seeds a file runs: EDGE_SEED alone when given, else a fixed one and a fresh one (printed). */
export function seeds (t: Test, fixed: number): number[] {
  const given = process.env.EDGE_SEED
  if (given !== undefined && given !== '') return [Number(given)]
  const fresh = Math.floor(Math.random() * 2 ** 31)
  t.comment(`edge matrix seeds: ${fixed} (fixed) and ${fresh} (fresh); replay one with EDGE_SEED=<n>`)
  return [fixed, fresh]
}

/** Whether the cell named `name` runs: every one, or those EDGE names (a part of the name, e.g. `quota/skew`). */
export function selected (name: string): boolean {
  const only = process.env.EDGE
  return only === undefined || only === '' || name.includes(only)
}

/** The line a failing cell prints: its seed, its edge, and how to run it alone. */
export function replay (name: string, seed: number): string {
  return `${name}, seed ${seed} (replay: EDGE_SEED=${seed} EDGE='${name}')`
}

/** Holds every cell's records to its kind's bound (with what `faults` excuse), one assertion a cell. */
export function judge (t: Test, observer: Observer, cells: readonly Cell[], seed: number, faults: readonly Fault[] = []): void {
  for (const cell of cells) {
    const ran = observer.of(cell.client).length
    t.strictSame(breaches(observer, cell.client, cell.kind.bound, faults), [], `${cell.name}: ${ran} ran, within the limit — ${replay(cell.name, seed)}`)
  }
}
