import type { FastifyBaseLogger } from 'fastify'
import type { BanCache } from './bans.js'
import type { Breaker } from './breaker.js'
import { DeadlineError } from './errors.js'
import type { FailMode } from './options.js'
import type { MemoryStore } from './stores/memory.js'
import type { DecideInput, Decision, Store, UndoInput } from './stores/store.js'

/**
 * One decision under a deadline: the store answers within `timeout` ms, or `failMode` decides — `open`
 * lets the request through unenforced, `closed` refuses it, `local` asks the in-process twin. While the
 * breaker is open, `failMode` decides without asking Redis at all.
 */

export type Verdict = Decision | { readonly status: 'unenforced' | 'unavailable' }

const UNENFORCED: Verdict = Object.freeze({ status: 'unenforced' })
const UNAVAILABLE: Verdict = Object.freeze({ status: 'unavailable' })

/** Redis trouble is logged at most once per this many ms, with the count of what was held back. */
export const TROUBLE_LOG_INTERVAL = 10_000

// Faults in how Redis is set up (no permission, a wrong password, a foreign value at our key, a broken script): they will not
// pass by themselves, so they are logged as errors and do not trip the breaker, since Redis did answer.
// Everything else (connection lost, deadline, BUSY, LOADING, TRYAGAIN, CLUSTERDOWN, READONLY, OOM, …) passes.
const PERMANENT = /^(NOPERM|NOAUTH|WRONGPASS|WRONGTYPE|FST_RATE_GUARD_INVALID_REPLY)|^ERR (?!.*\b(OOM|BUSY|LOADING|TRYAGAIN|CLUSTERDOWN|READONLY|MASTERDOWN)\b)/

/** Whether `err` is a fault in how Redis is set up rather than one that passes. */
export function isPermanent (err: Error): boolean {
  return PERMANENT.test((err as { code?: unknown }).code === undefined ? err.message : String((err as { code?: unknown }).code))
}

export interface LimiterOptions {
  store: Store
  /** Set when `store` is remote: the deadline and `failMode` apply to it. */
  remote: boolean
  failMode: FailMode
  timeout: number
  fallback: MemoryStore | undefined
  /** Set when `store` is remote and the breaker is on. */
  breaker: Breaker | undefined
  /** Set when `store` is remote: the bans Redis reported, held until they end, and how an unban is told to every instance. */
  bans?: BanCache
  announceUnban?: (bannedKey: string) => Promise<unknown>
}

export class Limiter {
  readonly store: Store
  readonly #remote: boolean
  readonly #failMode: FailMode
  readonly #timeout: number
  readonly #fallback: MemoryStore | undefined
  readonly #breaker: Breaker | undefined
  readonly #bans: BanCache | undefined
  readonly #announceUnban: ((bannedKey: string) => Promise<unknown>) | undefined
  #lastLogged = -Infinity
  #heldBack = 0

  constructor ({ store, remote, failMode, timeout, fallback, breaker, bans, announceUnban }: LimiterOptions) {
    this.store = store
    this.#remote = remote
    this.#failMode = failMode
    this.#timeout = timeout
    this.#fallback = fallback
    this.#breaker = breaker
    this.#bans = bans
    this.#announceUnban = announceUnban
  }

  /** An operator lifted the ban on `bannedKey` in the store: forget it here, and tell every instance. */
  readonly unbanned = async (bannedKey: string): Promise<void> => {
    this.#bans?.delete(bannedKey)
    await this.#announceUnban?.(bannedKey)
  }

  decide (input: DecideInput, log: FastifyBaseLogger): Verdict | Promise<Verdict> {
    if (!this.#remote) return this.store.decide(input)
    return this.#decideRemote(input, log)
  }

  async #decideRemote (input: DecideInput, log: FastifyBaseLogger): Promise<Verdict> {
    const banned = this.#bans?.remaining(input.keys.banned) ?? 0
    if (banned > 0) return bannedFor(input, banned)
    if (this.#breaker?.allow() === false) return this.#failModeDecides(input)
    try {
      const decision = await deadline(this.store.decide(input), this.#timeout)
      this.#breaker?.success()
      if (decision.status === 'banned') this.#bans?.add(input.keys.banned, decision.retryMs)
      return decision
    } catch (err) {
      if (isPermanent(err as Error)) this.#breaker?.success()
      else this.#breaker?.failure()
      this.report(err as Error, log)
      return this.#failModeDecides(input)
    }
  }

  /**
   * Gives back a request a decision counted, without making the request wait: on Redis it is sent and not
   * awaited; it is bounded by the deadline, and its failure is reported like a decision's. (It only follows a
   * decision Redis just answered, so the breaker has nothing to save it from.)
   */
  undo (input: UndoInput, log: FastifyBaseLogger): void {
    // The in-process store gives no member: the decision was its own, or the fallback's.
    if (!this.#remote || input.member === '') {
      (this.#fallback ?? this.store).undo(input) as undefined
      return
    }
    deadline(this.store.undo(input), this.#timeout).catch((err: unknown) => this.report(err as Error, log))
  }

  #failModeDecides (input: DecideInput): Verdict {
    if (this.#failMode === 'open') return UNENFORCED
    if (this.#failMode === 'closed') return UNAVAILABLE
    return this.#fallback!.decide(input)
  }

  /** Logs Redis trouble at most once per interval, with how much was held back since the last line. */
  report (err: Error, log: FastifyBaseLogger): void {
    const now = Date.now()
    if (now - this.#lastLogged < TROUBLE_LOG_INTERVAL) {
      this.#heldBack++
      return
    }
    const heldBack = this.#heldBack
    this.#lastLogged = now
    this.#heldBack = 0
    const level = isPermanent(err) ? 'error' : 'warn'
    log[level]({ err, failMode: this.#failMode, heldBack }, 'rate-guard: Redis did not decide; failMode decides')
  }

  async close (): Promise<void> {
    await this.store.close()
    await this.#fallback?.close()
  }
}

/** The answer Redis would give a client whose ban is known here to last `ms` more. */
function bannedFor ({ limits }: DecideInput, ms: number): Decision {
  const states = limits.map(({ burst, windowMs }) => ({ limit: burst, windowMs, count: 0, resetMs: 0 }))
  const { limit, windowMs } = states[0]!
  return { status: 'banned', limit, windowMs, count: 0, resetMs: 0, retryMs: ms, banStarted: false, offence: 0, limits: states, at: 0, member: '' }
}

/** `promise`, or a DeadlineError after `ms`; the timer never outlives the answer. */
export function deadline<T> (promise: Promise<T> | T, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new DeadlineError(ms)), ms)
    Promise.resolve(promise).then(value => {
      clearTimeout(timer)
      resolve(value)
    }, (err: unknown) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}
