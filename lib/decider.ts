import type { FastifyBaseLogger } from 'fastify'
import type { Breaker } from './breaker.js'
import { GivenBack } from './changes.js'
import type { HeldAnswers } from './held-answers.js'
import { Batcher } from './batcher.js'
import { decisionChannel } from './channels.js'
import { connectionWatch } from './connection-watch.js'
import { DecisionStats } from './stats.js'
import { ReplyTimes } from './shed/reply-times.js'
import { Trouble } from './trouble.js'
import { deadline } from './deadline.js'
import { Guard } from './guard.js'
import type { FailMode } from './types.js'
import type { MemoryStore } from './stores/memory.js'
import type { Decidable, DecideInput, Decision, RemoteStore, SettleInput, Store, Verdict } from './stores/store.js'

// One decision: at once when it is known here (in process, an answer held), else from Redis under guard
// (lib/guard.ts: the breaker, the deadline, and `failMode` when Redis cannot answer). The way to Redis, in
// order: answers held in process → the breaker → a batch (`lib/batcher.ts`, which owns the deadline, watched
// by lib/connection-watch.ts) → `failMode`.

export interface DeciderOptions {
  store: Store
  /** Set when `store` is remote: the deadline and each request's `failMode` apply to it. */
  remote: boolean
  timeout: number
  /** Makes the in-process twin `failMode: 'local'` counts on, the first time it is needed. */
  local: () => MemoryStore
  /** Set when `store` is remote and the breaker is on. */
  breaker: Breaker | undefined
  /** Set when `store` is remote: answers Redis gave that only time can change, held until they end. */
  held?: HeldAnswers
  /** Tells every instance which keys an operator changed (so they forget what they held for them). */
  announce?: (keys: readonly string[]) => Promise<unknown>
  /** The registration's, named on `rate-guard:redis-trouble`. */
  nameSpace?: string
  /**
   * Set when `store` is remote: called when its connection took commands and returned nothing for a while
   * (see lib/silence.ts), with the error that says so (also published as trouble), and whether Redis has
   * still not been heard from since.
   */
  silent?: (err: Error, quiet: () => boolean) => void
  /** The registration's logger: what is said of the connection itself (Redis answering late). */
  log?: FastifyBaseLogger
}

export class Decider {
  readonly store: Store
  /** This registration's decisions by outcome (`fastify.rateGuard.stats()`). */
  readonly stats = new DecisionStats()
  /** Redis's reply times, for the load shedder's `redisTime` signal (none in process). */
  readonly replyTimes = new ReplyTimes()
  readonly #remote: RemoteStore | undefined
  readonly #trouble: Trouble
  readonly #guard: Guard
  readonly #held: HeldAnswers | undefined
  readonly #announce: ((keys: readonly string[]) => Promise<unknown>) | undefined
  readonly #givenBack: GivenBack | undefined
  readonly #batcher: Batcher | undefined

  constructor ({ store, remote, timeout, local, breaker, held, announce, nameSpace = '', silent, log }: DeciderOptions) {
    this.store = store
    this.#remote = remote ? store as RemoteStore : undefined
    this.#trouble = new Trouble(nameSpace)
    this.#guard = new Guard(timeout, breaker, local, this.#trouble)
    this.#held = held
    this.#announce = announce
    this.#givenBack = announce === undefined ? undefined : new GivenBack(announce, this.#trouble.report)
    const redis = this.#remote
    this.#batcher = redis === undefined
      ? undefined
      : new Batcher(async (inputs, algorithm) => await redis.decideMany(inputs, algorithm), timeout, this.#guard.settled,
        connectionWatch({ timeout, trouble: this.#trouble, stats: this.stats, silent, log, times: this.replyTimes }), input => redis.shardOf(input))
  }

  /** Whether Redis decides (a decision with no member was then failMode 'local''s, in process). */
  get remote (): boolean {
    return this.#remote !== undefined
  }

  /** The deadline of a call to Redis, ms. */
  get timeout (): number {
    return this.#guard.timeout
  }

  /** An operator changed `keys` in the store: forget what is held for them, here and on every instance. */
  readonly forget = async (keys: readonly string[]): Promise<void> => {
    this.#held?.forget(keys)
    await this.#announce?.(keys)
  }

  /**
   * Units given back at `key` (a budget whose denials are held) by a settlement that lands with `settled`:
   * forgotten here once it has landed, and announced to every instance with the others of this turn (see
   * `GivenBack`). Resolves once forgotten here.
   */
  async givenBack (key: string, settled: Promise<void>, log: FastifyBaseLogger): Promise<void> {
    const landed = settled.then(() => this.#held?.forget([key]))
    this.#givenBack?.add(key, landed, log)
    await landed
  }

  /** The verdict on one request: at once when it is known here (in process, an answer held, the breaker open), else from Redis. */
  decide (input: Decidable, log: FastifyBaseLogger): Verdict | Promise<Verdict> {
    const refused = refusedOutright(input)
    if (refused !== undefined) return refused
    if (this.#remote === undefined) return this.store.decide(input) as Decision
    const held = this.#held?.answer(input.keys.banned, input.holdDenials ? input.keys.log : '', input.limits)
    if (held !== undefined) return held
    if (!this.#guard.allow()) return this.#guard.instead(input.failMode, decisionOf(input), log)
    const changes = this.#held?.changes ?? 0
    return new Promise((resolve, reject) => this.#batcher!.add(input, (result, sentAt, batchSize) => {
      // Answered whatever happens here (a logger that throws): a request never waits forever.
      try {
        const verdict = this.#verdict(input, result, sentAt, changes, log)
        // What the decision channel reports of the call, while someone listens (lib/channels.ts).
        resolve(decisionChannel.hasSubscribers && 'limits' in verdict ? { ...verdict, redisMs: Date.now() - sentAt, batchSize } : verdict)
      } catch (err) {
        reject(err)
      }
    }))
  }

  /**
   * A ban on `input`'s client known here, without asking Redis: held in process, or kept by the in-process
   * store. For what must cost nothing (a not-found URL); whatever is not known here is `undefined`.
   */
  knownBan (input: Decidable): Decision | undefined {
    const known = this.#remote === undefined
      ? this.store.decide({ ...input, peek: true }) as Decision
      : this.#held?.answer(input.keys.banned, '', input.limits)
    return known?.status === 'banned' ? known : undefined
  }

  /**
   * What the store knows of `input`, counting nothing (`createRateLimit`'s `increment: false`), under the
   * breaker, the deadline and `failMode`, as a decision is.
   */
  async peek (input: Decidable, log: FastifyBaseLogger): Promise<Verdict> {
    const refused = refusedOutright(input)
    if (refused !== undefined) return refused
    const peek: Decidable = { ...input, peek: true }
    return await this.guarded(peek.failMode, store => store.decide(peek), log)
  }

  /**
   * `call` on the store that decides, one request's call alone (not batched): the in-process store at once;
   * Redis under the guard (lib/guard.ts: the breaker, the deadline, and when it cannot answer in time, what
   * `failMode` says instead; `local`: `call` on the in-process twin). `call` learns which store it runs on.
   * `failed`: Redis already failed the request (`failMode` made its decision), so `failMode` answers this call
   * too, at once: a request waits for Redis one deadline, not one per call.
   */
  guarded<T> (
    failMode: FailMode, call: (store: Store) => T | Promise<T>, log: FastifyBaseLogger, failed = false
  ): T | Verdict | Promise<T | Verdict> {
    if (this.#remote === undefined) return call(this.store)
    return this.#guard.run(this.store, failMode, call, log, failed)
  }

  /**
   * One request's answer from its batch: Redis's decision (whose lasting denials are held, unless an
   * operator's change was heard since it was asked: see `HeldAnswers`), or `failMode`'s.
   */
  #verdict (input: Decidable, result: Decision | Error, sentAt: number, changes: number, log: FastifyBaseLogger): Verdict {
    if (result instanceof Error) return this.failed(input, result, log)
    if (result.status === 'banned') this.#held?.banned(input.keys.banned, result.retryMs, sentAt, changes)
    else if (result.status === 'limited' && input.holdDenials) this.#held?.denied(input.keys.log, input.limits, result, sentAt, changes)
    return result
  }

  /**
   * Changes what a decision counted (to `final` units; 0 gives it back). It never rejects: on Redis it is
   * bounded by the deadline, and its failure is reported like a decision's (a request need not wait for it).
   * It only follows a decision Redis answered, so the breaker has nothing to save it from.
   */
  async settle (input: SettleInput, log: FastifyBaseLogger): Promise<void> {
    // The in-process store gives no member: the decision was its own, or the fallback's.
    if (!this.#remote || input.member === '') {
      await (this.#guard.fallback ?? this.store).settle(input)
      return
    }
    await deadline(Promise.resolve(this.store.settle(input)), this.timeout).catch((err: unknown) => this.report(err as Error, log))
  }

  /** Redis (or a store of the app's own, see lib/stores/app-store.ts) could not decide `input`: reported, and `failMode` decides. */
  readonly failed = (input: Decidable, err: Error, log: FastifyBaseLogger): Verdict => {
    return this.#guard.instead(input.failMode, decisionOf(input), log, err)
  }

  /** Logs Redis trouble at most once per interval, with how much was held back (see `Trouble`). */
  report (err: Error, log: FastifyBaseLogger, failMode?: FailMode): void {
    this.#trouble.report(err, log, failMode)
  }

  async close (): Promise<void> {
    await this.store.close()
    await this.#guard.fallback?.close()
  }
}

/** What a store decides of `input`: the call `failMode: 'local'` makes on the in-process twin. */
function decisionOf (input: Decidable): (store: Store) => Decision {
  return store => store.decide(input) as Decision
}

/**
 * A limit of `max: 0` lets nothing through (`@fastify/rate-limit` takes it so, for a client or a plan with
 * no access): refused without asking the store, counting nothing and no strike, with one window to wait.
 */
export function refusedOutright (input: DecideInput): Decision | undefined {
  for (const closed of input.limits) {
    if (closed.max !== 0) continue
    const { windowMs } = closed
    return {
      status: 'limited',
      limit: 0,
      windowMs,
      count: 0,
      resetMs: windowMs,
      retryMs: windowMs,
      banStarted: false,
      offence: 0,
      // The other limits were not asked: nothing is known of their counts.
      limits: input.limits.map(limit => limit.max === 0
        ? { limit: 0, windowMs: limit.windowMs, count: 0, resetMs: limit.windowMs }
        : { limit: limit.burst, windowMs: limit.windowMs, count: 0, resetMs: 0 }),
      at: 0,
      member: ''
    }
  }
  return undefined
}
