import { randomBytes } from 'node:crypto'
import type { FastifyBaseLogger } from 'fastify'
import type { Algorithm } from './algorithms/index.js'
import { andThen } from './awaitable.js'
import type { Decider } from './decider.js'
import { deadline } from './deadline.js'
import type { Decision, Held, LeaseInput, LeaseStore, Store, Verdict } from './stores/store.js'
import type { BanPolicy, FailMode } from './types.js'
import type { IdentityKeys } from './stores/key-names.js'
import { warn } from './warnings.js'

// `concurrency`'s slots as this process holds them: a request's leases taken where its decisions are made
// (Redis under the breaker and the deadline, or in process; when Redis cannot answer, `failMode`: `open` lets
// the request through holding nothing, `closed` refuses it, `local` takes them on the in-process twin; when
// Redis could not decide its rate limits either, `failMode` answers without asking it again), renewed
// while it runs, a third of a lease before they would end, and released once, when its response is over.
// A renewal writes back a lease it finds gone (Redis restarted or failed over without it): the request runs
// still, so its slots count again, past `max` if they must, and new requests are refused until under it.

/** What a request asks for: its client's keys, its units, and the budget's concurrency. */
export interface SlotRequest {
  readonly keys: IdentityKeys
  readonly algorithm: Algorithm
  readonly units: number
  readonly max: number
  readonly leaseMs: number
  readonly ban: BanPolicy | null
  readonly strikeWindowMs: number
  readonly failMode: FailMode
  /**
   * Redis did not decide the request's rate limits (`failMode: 'local'` did, or there is no Redis): its slots are taken
   * in process, Redis not asked.
   */
  readonly failed: boolean
}

/** A verdict on a request's slots, and, when it holds them, how to give them back (once; later calls do nothing). */
export interface Slots {
  readonly verdict: Verdict
  readonly release: (() => void) | null
}

interface Holding extends Held {
  readonly store: LeaseStore
  readonly leaseMs: number
}

export class Leases {
  readonly #decider: Decider
  readonly #log: FastifyBaseLogger
  /** The leases this process holds, by store and key (renewed together), then by request id. */
  readonly #held = new Map<LeaseStore, Map<string, Map<string, Holding>>>()
  /** One renewal timer per lease length in use, and how many requests hold leases of that length. */
  readonly #timers = new Map<number, { readonly timer: NodeJS.Timeout, holders: number }>()
  /** Lease ids: `<random per process><counter>`, unique across instances, never client input. */
  readonly #prefix = randomBytes(9).toString('base64url')
  #counter = 0
  /** When leases written back were last logged: once per lease, not once per key. */
  #restoredSaid = -Infinity

  constructor (decider: Decider, log: FastifyBaseLogger) {
    this.#decider = decider
    this.#log = log
  }

  /** Takes `request`'s slots, or says why not. */
  acquire ({ failed, ...request }: SlotRequest, log: FastifyBaseLogger): Slots | PromiseLike<Slots> {
    const input: LeaseInput = { ...request, id: `${this.#prefix}${(this.#counter++).toString(36)}` }
    const { keys, algorithm, id, units, leaseMs } = input
    const holding: Holding = { key: keys.leases, algorithm, id, units, leaseMs, store: this.#decider.store.leases }
    // The store the answer came from (the in-process twin, under failMode 'local'), and Redis's call, if made.
    let on: Store | undefined
    let asked: Promise<Decision> | undefined
    const verdict = this.#decider.guarded(request.failMode, store => {
      on = store
      const answer = store.leases.acquire(input)
      if (answer instanceof Promise) asked = answer
      return answer
    }, log, failed)
    return andThen(verdict, answer => {
      // Redis took the slots after failMode answered (past the deadline): given back at once, not held a lease long.
      if (asked !== undefined && (on !== this.#decider.store || !('at' in answer))) {
        asked.then(late => { if (late.status === 'allowed') this.#call(() => holding.store.release(holding)) }, () => {})
      }
      const release = answer.status === 'allowed' && on !== undefined ? this.#hold({ ...holding, store: on.leases }) : null
      return { verdict: answer, release }
    })
  }

  #hold (holding: Holding): () => void {
    const { store } = holding
    let byKey = this.#held.get(store)
    if (byKey === undefined) this.#held.set(store, byKey = new Map())
    let byId = byKey.get(holding.key)
    if (byId === undefined) byKey.set(holding.key, byId = new Map())
    byId.set(holding.id, holding)
    const { leaseMs } = holding
    const renewing = this.#timers.get(leaseMs)
    if (renewing !== undefined) renewing.holders++
    else this.#timers.set(leaseMs, { timer: setInterval(() => this.#renew(leaseMs), Math.floor(leaseMs / 3)).unref(), holders: 1 })
    let released = false
    return () => {
      if (released) return
      released = true
      byId.delete(holding.id)
      if (byId.size === 0) byKey.delete(holding.key)
      const timer = this.#timers.get(leaseMs)!
      // The last request holding leases of this length: nothing left to renew.
      if (--timer.holders === 0) {
        clearInterval(timer.timer)
        this.#timers.delete(leaseMs)
      }
      this.#call(() => store.release(holding))
    }
  }

  /** Renews every lease of `leaseMs` held here: one call per key. */
  #renew (leaseMs: number): void {
    for (const [store, byKey] of this.#held) {
      for (const [key, byId] of byKey) {
        const due = [...byId.values()].filter(held => held.leaseMs === leaseMs)
        if (due.length === 0) continue
        this.#call(() => store.renew(key, due, leaseMs), restored => this.#restored(restored, leaseMs))
      }
    }
  }

  /** A renewal wrote back `units` units of leases it found gone: said once per lease. */
  #restored (units: number, leaseMs: number): void {
    if (units === 0 || Date.now() - this.#restoredSaid < leaseMs) return
    this.#restoredSaid = Date.now()
    warn(this.#log, 'LEASES_LOST', 'rate-guard: leases of requests still running were gone from Redis (restarted, ' +
      'failed over or evicted) and were written back; clients past their concurrency max are refused until under it', { units })
  }

  /** A release or a renewal, bounded by the deadline; its failure is reported (a request does not wait for it). */
  #call (call: () => number | Promise<number>, done?: (units: number) => void): void {
    deadline(Promise.resolve().then(call), this.#decider.timeout)
      .then(done, (err: unknown) => this.#decider.report(err as Error, this.#log))
  }

  /** Stops renewing: what is still held ends with its lease, or is released when its response ends. */
  close (): void {
    for (const { timer } of this.#timers.values()) clearInterval(timer)
  }
}
