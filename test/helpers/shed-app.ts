// The load shedder's test apps (test/shed*.test.ts), over real HTTP: an app listening on loopback (port 0),
// handlers held on a gate the test opens and counted as they run (the observer: what really ran, not what the
// plugin answered), the decision channel's shed messages, the app's log, and a wait for a condition that polls
// (a short timer each turn, capped by the lag measured meanwhile), never a bare sleep.
import diagnostics from 'node:diagnostics_channel'
import { Writable } from 'node:stream'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { DecisionMessage } from '../../lib/channels.js'
import type { RateGuardOptions } from '../../lib/index.js'
import type { ShedSnapshot } from '../../lib/shed/shedder.js'
import { until } from './redis.js'

/** A promise and what resolves it. */
export function deferred (): { promise: Promise<void>, resolve: () => void } {
  let settle = (): void => {}
  const promise = new Promise<void>(resolve => { settle = resolve })
  return { promise, resolve: settle }
}

/** Handlers held until `open()`, counted as they run: in all, and by the route's name. */
export class Observer {
  running = 0
  most = 0
  /** Handlers started, in all. */
  entered = 0
  /** Responses of held handlers closed (sent, or their clients hung up) while their handler still ran. */
  hungUp = 0
  readonly #running = new Map<string, number>()
  readonly #most = new Map<string, number>()
  #gate = deferred()
  #next = deferred()

  /** A handler for the route `name` that runs until the gate opens. */
  held (name: string): (request: FastifyRequest, reply: FastifyReply) => Promise<string> {
    return async (_request, reply) => {
      let running = true
      reply.raw.once('close', () => { if (running) this.hungUp++ })
      this.entered++
      this.#next.resolve()
      this.#next = deferred()
      this.most = Math.max(this.most, ++this.running)
      const now = (this.#running.get(name) ?? 0) + 1
      this.#running.set(name, now)
      this.#most.set(name, Math.max(now, this.#most.get(name) ?? 0))
      try {
        await this.#gate.promise
      } finally {
        running = false
        this.running--
        this.#running.set(name, this.#running.get(name)! - 1)
      }
      return name
    }
  }

  /**
   * A GET of `path` that must be answered without running a held handler: its answer, or, when a held handler
   * starts first (the request was let in, and would hang until the gate opens), status 0.
   */
  async answered (base: string, path: string): Promise<Answer> {
    const ran = this.#next.promise.then(() => ({ status: 0, headers: new Headers(), body: 'a held handler started instead' }))
    return await Promise.race([get(base, path), ran])
  }

  /** The most handlers of the route `name` that ran at once. */
  mostOf (name: string): number {
    return this.#most.get(name) ?? 0
  }

  /** Lets every handler running end; those started later are held on a new gate. */
  open (): void {
    this.#gate.resolve()
    this.#gate = deferred()
  }
}

export interface Listening {
  app: FastifyInstance
  base: string
  /** Every line the app logged at warn and above, parsed. */
  logs: Array<Record<string, unknown>>
}

/** An app on loopback under `options` (the plugin's `max` high unless given), its routes declared by `routes`. */
export async function listening (t: Test, options: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<Listening> {
  const logs: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') logs.push(JSON.parse(line) as Record<string, unknown>)
      done()
    }
  })
  const app = Fastify({ logger: { level: 'warn', stream } })
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 100_000, timeWindow: '1 hour', ...options })
  routes(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, logs }
}

/** An answer, read whole. */
export interface Answer {
  status: number
  headers: Headers
  body: string
}

/** A GET of `path` on `base`, read whole. */
export async function get (base: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const response = await fetch(`${base}${path}`, { headers })
  return { status: response.status, headers: response.headers, body: await response.text() }
}

/** `fastify.rateGuard.stats().shed`, which an app with `shed` always has. */
export function shedOf (app: FastifyInstance): ShedSnapshot {
  const shed = app.rateGuard.stats().shed
  if (shed === undefined) throw new Error('stats() has no shed section')
  return shed
}

/** Waits (polling every few ms, 10 s at most plus the lag meanwhile) until `check` holds. */
export async function waitFor (check: () => boolean, what: string, ms = 10_000): Promise<void> {
  await until(async () => check(), what, ms)
}

/** The decision channel's messages of the load shedder ('shed' and 'shadow-shed'), from now to the test's end. */
export function shedMessages (t: Test): DecisionMessage[] {
  const messages: DecisionMessage[] = []
  const listener = (message: unknown): void => {
    const decision = message as DecisionMessage
    if (decision.outcome === 'shed' || decision.outcome === 'shadow-shed') messages.push(decision)
  }
  diagnostics.subscribe('rate-guard:decision', listener)
  t.teardown(() => { diagnostics.unsubscribe('rate-guard:decision', listener) })
  return messages
}
