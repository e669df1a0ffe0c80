// The app of test/combination.test.ts: one route per feature under test, every window an hour long but /wait's
// (WAIT), the scripts on the app's clock, which the test moves (test/helpers/app-clock.ts), and the
// events of each request (its handler entered, its settle's outcome, its response's and its abort's hooks done)
// told to the test by the request's `x-step` header, so each step waits for what it started and no more.
//
// The test's own hooks are appended to each route after the plugin's (an `onRoute` hook added after the plugin's
// runs after it, and each appends to the route's list): when ours has run, the plugin's `onResponse` settlement
// or `onRequestAbort` refund has finished. Likewise, the handler's own `close` listener on the response comes
// after the one the plugin's hook put there to give its slots back (`concurrency`).
//
// A request sent with `x-hold: 1` stays in its handler until the test lets it finish (its `release` event) or
// its client hangs up (unless the test says it runs on: then only `release` ends it); the handler counts each
// client's units running on each route, for the test to hold `concurrency` to.
//
// The load shedder (`shed`) runs with a fixed in-flight capacity (SHED) and no signal but that, its routes in
// the classes PRIORITY gives. The app counts what is in flight itself (InFlight: the requests the shedder let
// in whose handler or response is not over), and an `onRequest` hook of its own, ahead of the plugin's, tells
// each request's events that count as the shedder decides it (and the shedder's own, from stats()); a
// subscriber to the decision channel, called as the shedder decides, tells a shed request's events its
// message and each class's admitted share at that moment, which the sampler's timer changes on real time.
import diagnostics from 'node:diagnostics_channel'
import { request as httpRequest } from 'node:http'
import type { ClientRequest, IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import type { Redis } from 'ioredis'
import { CHANNELS } from '../../lib/channels.js'
import rateGuard from '../../lib/index.js'
import type { DecisionMessage, FailMode, Priority, ShedSnapshot, Spent } from '../../lib/index.js'
import type { Teardownable } from './redis-server.js'

const HOUR = '1 hour'

/**
 * Each route's enforced limit (units per client per hour), its static cost, whether it only watches, and its
 * `concurrency.max` (units of a client's requests in flight at once; null: none). `/hold`'s cost is `x-cost`.
 */
export const ROUTES = {
  '/plain': { max: 2, cost: 1, shadow: false, concurrency: null },
  '/bulk': { max: 6, cost: null, shadow: false, concurrency: null },
  '/cost': { max: 4, cost: null, shadow: false, concurrency: null },
  '/settle': { max: 6, cost: 2, shadow: false, concurrency: null },
  // Room for more requests while one is held: refused in flight, they strike toward the ban.
  '/ban': { max: 3, cost: 1, shadow: false, concurrency: 1 },
  '/abort': { max: 2, cost: 1, shadow: false, concurrency: null },
  '/watched': { max: 3, cost: 1, shadow: false, concurrency: null },
  '/search': { max: 1, cost: null, shadow: true, concurrency: null },
  '/hold': { max: 5, cost: null, shadow: false, concurrency: 2 },
  // A rate no run reaches: what shadow mode lets through is the slots' alone.
  '/hold-shadow': { max: 50, cost: 1, shadow: true, concurrency: 1 },
  // A window of WAIT.windowMs, not an hour: a request over the limit waits when its place comes within
  // WAIT.maxWaitMs (the model of test/helpers/combination-wait.ts says when).
  '/wait': { max: 2, cost: 1, shadow: false, concurrency: null },
  // A calendar quota, the tighter of its two limits while a month lasts: a month's, whose end every run crosses
  // (the app's clock moved: see combination.test.ts), beside QUOTA_HOUR_MAX an hour; its cost is `x-cost`, it
  // settles, and its denials strike toward /ban's ban (one client's strikes, wherever).
  '/quota': { max: 3, cost: null, shadow: false, concurrency: null },
  // A day's quota that only watches.
  '/quota-shadow': { max: 1, cost: 1, shadow: true, concurrency: null },
  // A budget spent by hand (fastify.rateGuard.budget()): its handler spends `x-cost` units, refuses as the
  // plugin would, and settles with the spend's own settle.
  '/spent': { max: 4, cost: null, shadow: false, concurrency: null }
} as const satisfies Record<string, { max: number, cost: number | null, shadow: boolean, concurrency: number | null }>
export type Path = keyof typeof ROUTES
/** `/ban`'s policy, and `/quota`'s: denials within the hour that start a ban of an hour. */
export const BAN_THRESHOLD = 2
/** The routes whose policy bans: a denial on either strikes toward the client's one ban. */
export const BANNING: readonly Path[] = ['/ban', '/quota']

/**
 * The load shedder: a fixed capacity of `inFlight` requests, a `reserve` kept for the critical class (normal
 * requests are shed from inFlight × (1 − reserve) in flight: SHED_LINE; sheddable ones from inFlight ×
 * (1 − reserve)²: SHEDDABLE_LINE), and no signal but that: a capacity full is no pressure on the admitted shares,
 * which stay whole, so whether a request is shed is the in-flight count's alone, which the seed drives. Held-open requests (`x-hold`), handlers running on and requests
 * waiting on /wait keep requests in flight between steps; the routes that hold them are critical (/ban,
 * /hold-shadow) or normal (/hold), so the count passes SHED_LINE, where the normal ones are shed.
 */
export const SHED = { inFlight: 12, reserve: 0.25, sampleMs: 250, recoveryMs: 250 } as const
/** The in-flight counts from which normal requests (9), and sheddable ones (7, the next whole number past 6.75), are shed. */
export const SHED_LINE = Math.ceil(SHED.inFlight * (1 - SHED.reserve))
export const SHEDDABLE_LINE = Math.ceil(SHED.inFlight * (1 - SHED.reserve) ** 2)
/** Each route's class for the shedder (`config.priority`); the rest are `normal` (the default rule). */
export const PRIORITY: Readonly<Partial<Record<Path, Priority>>> = {
  '/settle': 'critical', '/quota': 'critical', '/ban': 'critical', '/hold-shadow': 'critical', '/watched': 'exempt', '/search': 'sheddable'
}
/** A route's `config.priority`, where PRIORITY gives one. */
const classOf = (path: Path): { priority?: Priority } => PRIORITY[path] === undefined ? {} : { priority: PRIORITY[path] }

/** Where /quota's month is counted (UTC+14: its months end at 10:00 UTC). */
export const QUOTA_ZONE = 'Pacific/Kiritimati'
/** /quota's other limit: units an hour, which a month's end does not reset. */
export const QUOTA_HOUR_MAX = 5
/** /wait's window, the longest a request there waits for its place, and how many of a client's wait at once. */
export const WAIT = { windowMs: 1000, maxWaitMs: 500, maxQueue: 1 } as const
/**
 * Every lease: longer than the app's clock moves in a run, held still between steps while the leases' renewals
 * run on real time (every third of a lease), so no lease ends under a request still running.
 */
const LEASE = '1 hour'

/** What the handler did with `x-settle`: `ok`, or the rejection's code. */
export type SettleOutcome = 'ok' | string

/** An event that happens once: whether it has, with what, and a promise of it. */
class Deferred<T = void> {
  done = false
  value: T | undefined
  readonly promise: Promise<T>
  #resolve!: (value: T) => void

  constructor () {
    this.promise = new Promise<T>(resolve => { this.#resolve = resolve })
  }

  resolve (value: T): void {
    if (this.done) return
    this.done = true
    this.value = value
    this.#resolve(value)
  }
}

/** What the handler saw as it started: its client's units running on the route (its own included), and headers. */
export interface Started {
  /** When (performance.now()). */
  readonly at: number
  readonly running: number
  /** `X-RateLimit-Limit` as the plugin set it: under shadow mode, a slot refused shows `concurrency.max`. */
  readonly limit: string | undefined
  readonly unenforced: boolean
}

/** The events of one request, by its `x-step`. */
export class Events {
  readonly entered = new Deferred<Started>()
  /** The route's `onRequest` hooks are done (the plugin's decision there allowed it). */
  readonly passed = new Deferred()
  readonly handled = new Deferred<SettleOutcome | undefined>()
  readonly responded = new Deferred()
  /** The server saw the request close; whether it was aborted. */
  readonly closed = new Deferred<boolean>()
  readonly aborted = new Deferred()
  /** A held request (`x-hold`): the test lets its handler finish. */
  readonly release = new Deferred()
  /** Its client hangs up while its handler runs on (a held request's: it ends only when the test lets it finish). */
  runsOn = false
  /** Its response's `close`, a turn after the plugin heard it (a request that left while it waited gave its place back). */
  readonly over = new Deferred()
  /**
   * Two turns after the plugin's hook took it: its decision is made (in process), or its batch sent to Redis
   * with the app's clock (the batcher sends on the turn after it was given the request, which may come a
   * microtask after the hook), so the test may move the clock.
   */
  readonly asked = new Deferred()
  /** Its response is over (`close`, heard after the plugin's: its slots are given back). */
  readonly finished = new Deferred()
  /** The code of the error the request was refused with (Fastify's `onError`), if any. */
  code: string | undefined
  /** What was in flight as the shedder decided it. */
  arrival: Arrival | undefined
  /** The shedder shed it (in shadow mode: would have), as it said on the decision channel then. */
  shed: ShedSeen | undefined
}

/**
 * What was in flight as the shedder decided a request: the app's count (`lower`: requests let in whose handler
 * or response is not over; `upper`: also those whose end came a turn or two before, which the plugin may hear
 * a turn later), and the shedder's own (`counted`, from stats()).
 */
export interface Arrival {
  readonly lower: number
  readonly upper: number
  readonly counted: number
}

/** A request the shedder shed (or, in shadow mode, would have): its decision message, and each class's share then. */
export interface ShedSeen {
  readonly outcome: DecisionMessage['outcome']
  readonly priority: Priority | undefined
  readonly reason: DecisionMessage['reason']
  readonly admitted: ShedSnapshot['admitted']
}

interface Tracked {
  closed: boolean
  entered: boolean
  running: boolean
}

/**
 * The app's count of the requests in flight, as the shedder is to count them: each let in (the app's hooks run
 * after the shedder's: a request it sheds never is), until its response is over (`close`) and its handler,
 * if it started, is over too (a handler that starts after its client left is in flight again while it runs).
 * `lower` counts those. `upper` also counts those whose end came within the same turn (the plugin hears a
 * handler's end a microtask after the app's `finally`), and those whose client left before their handler
 * started, until the app has answered them (Fastify's answer to a body that never came, or /wait's once its
 * place is given back): the plugin, which cannot tell whether a handler is still to come, holds them until then.
 */
class InFlight {
  readonly #of = new WeakMap<FastifyRequest, Tracked>()
  readonly #open = new Set<Tracked>()
  readonly #unanswered = new Set<Tracked>()
  /** Requests whose end came in this turn. */
  #ending = 0

  get lower (): number {
    return this.#open.size
  }

  get upper (): number {
    return this.#open.size + this.#unanswered.size + this.#ending
  }

  /** Let in by the shedder: in flight until its response's `close` (heard after the plugin's) and its handler's end. */
  admitted (request: FastifyRequest, reply: FastifyReply): void {
    const entry: Tracked = { closed: false, entered: false, running: false }
    this.#of.set(request, entry)
    this.#open.add(entry)
    reply.raw.once('close', () => {
      entry.closed = true
      if (!entry.entered && !reply.sent) {
        this.#unanswered.add(entry)
        reply.raw.once('prefinish', () => { this.#unanswered.delete(entry) })
      }
      this.#end(entry)
    })
  }

  /** Its handler starts, or (`running` false) is over. */
  handler (request: FastifyRequest, running: boolean): void {
    const entry = this.#of.get(request)
    if (entry === undefined) return
    entry.running = running
    if (running) {
      entry.entered = true
      this.#unanswered.delete(entry)
      this.#open.add(entry)
    } else {
      this.#end(entry)
    }
  }

  #end (entry: Tracked): void {
    if (!entry.closed || entry.running || !this.#open.delete(entry)) return
    this.#ending++
    queueMicrotask(() => { this.#ending-- })
  }
}

/** How long a step waits for an event it caused before it says which never came (a deadline, not a pause). */
const EVENT_DEADLINE_MS = 10_000

export async function waitFor<T> (event: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`${what} never happened`)) }, EVENT_DEADLINE_MS) })
  try {
    return await Promise.race([event, late])
  } finally {
    clearTimeout(timer)
  }
}

export interface ComboApp {
  readonly app: FastifyInstance
  readonly port: number
  /** The events of the request the test is about to send as step `step`. */
  events (step: number): Events
}

/** A cost the client names in `x-cost`: a number, or a function that throws, rejects, or gives no valid cost. */
function costFromHeader (request: FastifyRequest): number | Promise<number> {
  const given = request.headers['x-cost']
  if (given === 'throw') throw new Error('the cost lookup failed')
  if (given === 'reject') return Promise.reject(new Error('the cost lookup failed'))
  return Promise.resolve(given === 'huge' ? Number.MAX_SAFE_INTEGER : Number(given))
}

/**
 * `store`: Redis (a client the test lends, to know when it is back), or null for the in-process store; `shedMode`,
 * the shedder's mode.
 */
export async function comboApp (
  t: Teardownable, store: { redis: Redis, nameSpace: string } | null, failMode: FailMode, shedMode: 'enforce' | 'shadow'
): Promise<ComboApp> {
  const steps = new Map<string, Events>()
  const of = (request: FastifyRequest): Events | undefined => steps.get(String(request.headers['x-step']))
  const app = Fastify()
  t.teardown(() => app.close())
  const inFlight = new InFlight()
  // Ahead of the shedder's hook (added as the plugin registers): what is in flight as it decides, which it does
  // within `done`, publishing a shed there.
  let deciding: Events | undefined
  app.addHook('onRequest', (request, _reply, done) => {
    const events = of(request)
    const counted = app.rateGuard.stats().shed!.inFlight
    if (events !== undefined) events.arrival = { lower: inFlight.lower, upper: inFlight.upper, counted }
    deciding = events
    done()
    deciding = undefined
  })
  const onDecision = (message: unknown): void => {
    const { outcome, priority, reason } = message as DecisionMessage
    if (deciding === undefined || (outcome !== 'shed' && outcome !== 'shadow-shed')) return
    deciding.shed = { outcome, priority, reason, admitted: app.rateGuard.stats().shed!.admitted }
  }
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, onDecision) })
  // A deadline no loaded machine misses: a 503 here is Redis failing, never a slow test. No breaker: Redis
  // decides again from the first request after it is back.
  // On the app's clock (test/helpers/app-clock.ts), which the test moves: Redis's cannot be.
  await app.register(rateGuard, {
    ...store,
    ...(store === null ? {} : { clock: 'app' as const }),
    timeout: 10_000,
    breaker: false,
    failMode,
    verifyApiKey: () => true,
    max: 1000,
    timeWindow: HOUR,
    shed: {
      inFlight: SHED.inFlight,
      reserve: SHED.reserve,
      eventLoopDelay: false,
      eventLoopUtilization: false,
      sampleInterval: SHED.sampleMs,
      recovery: SHED.recoveryMs,
      mode: shedMode
    }
  })
  // Callback style: `done` runs the next hooks at once, the plugin's among them (the route's come after the app's).
  // The shedder's hook came first: a request here was let in.
  app.addHook('onRequest', (request, reply, done) => {
    inFlight.admitted(request, reply)
    const events = of(request)
    request.raw.once('close', () => events?.closed.resolve(request.raw.aborted))
    reply.raw.once('close', () => setImmediate(() => events?.over.resolve()))
    done()
    setImmediate(() => setImmediate(() => events?.asked.resolve()))
  })
  app.addHook('onRoute', (route: RouteOptions) => {
    const append = (name: 'onRequest' | 'onResponse' | 'onRequestAbort', fn: (request: FastifyRequest) => Promise<void>): void => {
      const existing = route[name] as unknown
      route[name] = [existing ?? [], fn].flat() as never
    }
    append('onRequest', async (request) => { of(request)?.passed.resolve() })
    append('onResponse', async (request) => { of(request)?.responded.resolve() })
    append('onRequestAbort', async (request) => { of(request)?.aborted.resolve() })
  })

  app.addHook('onError', async (request, _reply, error) => {
    const events = of(request)
    if (events !== undefined) events.code = (error as { code?: string }).code
  })

  // The app's own count of each client's units running on each route (`x-cost`'s, on /hold): what the slots bound.
  const running = new Map<string, number>()
  const handler = async (request: FastifyRequest, reply: FastifyReply): Promise<object> => {
    inFlight.handler(request, true)
    const events = of(request)
    const held = `${request.routeOptions.url} ${String(request.headers['x-api-key'])}`
    const units = request.routeOptions.url === '/hold' ? Number(request.headers['x-cost']) : 1
    running.set(held, (running.get(held) ?? 0) + units)
    try {
      reply.raw.once('close', () => events?.finished.resolve())
      const header = (name: string): string | undefined => {
        const value = reply.getHeader(name)
        return value === undefined ? undefined : String(value)
      }
      events?.entered.resolve({ at: performance.now(), running: running.get(held)!, limit: header('x-ratelimit-limit'), unenforced: header('x-ratelimit-enforced') === 'false' })
      if (request.headers['x-hang'] === '1') await new Promise(resolve => request.raw.once('close', resolve))
      // Held: until the test lets it finish, or its client hangs up (unless it runs on: the work goes on).
      const gone = new Promise(resolve => reply.raw.once('close', () => { if (events?.runsOn !== true) resolve(undefined) }))
      if (request.headers['x-hold'] === '1') await Promise.race([events?.release.promise, gone])
      const amount = request.headers['x-settle']
      const charge = spentOf.get(request) ?? request.rateGuard
      const settled = amount === undefined
        ? undefined
        : await charge.settle(Number(amount)).then(() => 'ok', (err: { code?: string }) => err.code ?? String(err))
      events?.handled.resolve(settled)
      if (request.headers['x-status'] !== undefined) reply.code(Number(request.headers['x-status']))
      if (request.headers['x-free'] !== undefined) reply.header('x-free', String(request.headers['x-free']))
      return { settled }
    } finally {
      running.set(held, running.get(held)! - units)
      inFlight.handler(request, false)
    }
  }
  const limit = (path: Path): { max: number, timeWindow: string } => ({ max: ROUTES[path].max, timeWindow: HOUR })
  // The spends of /spent's requests let on, whose settle the handler calls.
  const spentOf = new WeakMap<FastifyRequest, Spent>()
  const spending = app.rateGuard.budget(limit('/spent'))
  app.get('/spent', { config: { ...classOf('/spent'), rateLimit: false } }, async (request, reply) => {
    const given = String(request.headers['x-cost'])
    const spent = await spending.spend(request, { cost: given === 'huge' ? Number.MAX_SAFE_INTEGER : Number(given) })
    spent.writeHeaders(reply)
    if (spent.ok) {
      spentOf.set(request, spent)
      return await handler(request, reply)
    }
    const banned = spent.outcome === 'banned' || spent.outcome === 'ban-started'
    return await reply.code(spent.outcome === 'unavailable' ? 503 : banned ? 403 : 429).send({ refused: spent.outcome })
  })

  app.route({ method: ['GET', 'POST'], url: '/plain', config: { ...classOf('/plain'), rateLimit: { ...limit('/plain'), skipFailedRequests: true } }, handler })
  // The README's example: the cost is the body's item count (a body without items makes it throw).
  app.post('/bulk', { config: { ...classOf('/bulk'), rateLimit: { ...limit('/bulk'), hook: 'preValidation', cost: (request) => (request.body as { items: unknown[] }).items.length } } }, handler)
  app.get('/cost', {
    config: {
      rateLimit: {
        ...limit('/cost'),
        cost: costFromHeader,
        countWhen: (_request, reply) => {
          const free = reply.getHeader('x-free')
          if (free === 'throw') throw new Error('countWhen failed')
          return free !== '1'
        }
      }
    }
  }, handler)
  app.get('/settle', { config: { ...classOf('/settle'), rateLimit: { ...limit('/settle'), cost: ROUTES['/settle'].cost } } }, handler)
  app.get('/ban', { config: { ...classOf('/ban'), rateLimit: { ...limit('/ban'), concurrency: { max: ROUTES['/ban'].concurrency, lease: LEASE }, ban: { threshold: BAN_THRESHOLD, duration: HOUR } } } }, handler)
  app.route({ method: ['GET', 'POST'], url: '/abort', config: { ...classOf('/abort'), rateLimit: { ...limit('/abort'), refundAborted: true } }, handler })
  app.get('/watched', { config: { ...classOf('/watched'), rateLimit: { limits: [{ ...limit('/watched') }, { max: 1, timeWindow: HOUR, mode: 'shadow' }] } } }, handler)
  app.get('/search', { config: { ...classOf('/search'), rateLimit: { ...limit('/search'), cost: costFromHeader, mode: 'shadow', shadow: { ban: true }, ban: { threshold: 1, duration: HOUR } } } }, handler)
  app.get('/hold', { config: { ...classOf('/hold'), rateLimit: { ...limit('/hold'), cost: costFromHeader, concurrency: { max: ROUTES['/hold'].concurrency, lease: LEASE } } } }, handler)
  app.get('/wait', { config: { ...classOf('/wait'), rateLimit: { max: ROUTES['/wait'].max, timeWindow: WAIT.windowMs, maxWait: WAIT.maxWaitMs, maxQueue: WAIT.maxQueue } } }, handler)
  app.get('/quota', {
    config: { ...classOf('/quota'), rateLimit: { limits: [{ max: QUOTA_HOUR_MAX, timeWindow: HOUR }, { max: ROUTES['/quota'].max, per: 'month', timeZone: QUOTA_ZONE }], cost: costFromHeader, ban: { threshold: BAN_THRESHOLD, duration: HOUR } } }
  }, handler)
  app.get('/quota-shadow', { config: { ...classOf('/quota-shadow'), rateLimit: { limits: [{ max: ROUTES['/quota-shadow'].max, per: 'day' }], mode: 'shadow' } } }, handler)
  // Clients of their own (a key of the app's): /search's shadow bans, held on every shadow route, leave them be.
  app.get('/hold-shadow', {
    config: { ...classOf('/hold-shadow'), rateLimit: { ...limit('/hold-shadow'), mode: 'shadow', keyGenerator: (request) => `held ${String(request.headers['x-api-key'])}`, concurrency: { max: ROUTES['/hold-shadow'].concurrency, lease: LEASE } } }
  }, handler)
  await app.listen({ port: 0, host: '127.0.0.1' })
  return {
    app,
    port: (app.server.address() as AddressInfo).port,
    events (step) {
      const events = new Events()
      steps.set(String(step), events)
      return events
    }
  }
}

/**
 * A request over a real socket (head only: a body it announces never comes), destroyed once `until` resolves
 * or an answer arrives first: the answer's status, or null when it was destroyed unanswered.
 */
export async function hangUp (port: number, head: string, until: Promise<unknown>): Promise<number | null> {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  socket.write(head)
  let received = ''
  const answered = new Promise<number>(resolve => {
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1')
      const status = /^HTTP\/1\.1 (\d{3})/.exec(received)
      if (status !== null) resolve(Number(status[1]))
    })
  })
  const status = await Promise.race([answered, until.then(() => null)])
  socket.destroy()
  return status
}

/** A request's answer, as the client read it. */
export interface Answer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** A request sent over a real socket that may be held open: its answer once it comes, and the request, to abort it. */
export interface Sent {
  /** Its answer, if it came before `until` (a refusal); null while it is held. */
  readonly answer: Answer | null
  /** Its answer whenever it comes (a held one's, once its handler is let finish). */
  readonly answered: Promise<Answer>
  readonly request: ClientRequest
}

/** Sends a request over a connection of its own and waits for its answer or for `until` (its handler started). */
export async function send (port: number, method: string, path: string, headers: Record<string, string>, until: Promise<unknown>): Promise<Sent> {
  const request = httpRequest({ host: '127.0.0.1', port, method, path, headers, agent: false })
  request.on('error', () => {})
  const answered = new Promise<Answer>(resolve => {
    request.once('response', (res: IncomingMessage) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.once('end', () => { resolve({ status: res.statusCode!, headers: res.headers, body }) })
    })
  })
  request.end()
  const answer = await Promise.race([answered, until.then(() => null)])
  return { answer, answered, request }
}
