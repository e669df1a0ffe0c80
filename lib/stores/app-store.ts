import type { FastifyBaseLogger } from 'fastify'
import { deadline } from '../deadline.js'
import type { Decidable, Verdict } from './store.js'
import type { TheirStore } from '../types.js'
import type { Decision } from './store.js'

// A store of the app's own with `@fastify/rate-limit`'s interface (its `store` option): the app's store counts
// and this plugin answers as theirs does over it. `incr(key, callback, timeWindow, max)` gives the count and
// the ms left in its window; the request passes while the count is at most `max`, and `ban: N` answers 403
// once the count is more than N over it. The store decides what a window is: the scripts, bans beyond
// `ban: N` and held answers do not apply. Each call has the decision's deadline; when the store fails or
// misses it, `failMode` decides, as when Redis cannot.

/** `increment: false` on a store without `read`: their message, word for word. */
const NO_READ = 'The configured rate-limit store does not implement a `read` method, which is required to use `{ increment: false }`'

type Failed = (input: Decidable, err: Error, log: FastifyBaseLogger) => Verdict

export class TheirBudget {
  readonly #store: TheirStore
  readonly #banDenials: number | null
  readonly #timeout: number
  readonly #failed: Failed

  /**
   * `timeout`: how long the store has (`callbackTimeout`); `failed`: what decides when it fails or is later (`failMode`,
   * the error reported).
   */
  /** `banDenials`: their `ban: N` (denials past the limit answered 403), or none. */
  constructor (store: TheirStore, banDenials: number | null, timeout: number, failed: Failed) {
    this.#store = store
    this.#banDenials = banDenials
    this.#timeout = timeout
    this.#failed = failed
  }

  /** Counts the request under `key` (theirs: the key, with the route's `groupId` after it), or with `peek` reads its count. */
  async decide (input: Decidable, key: unknown, log: FastifyBaseLogger): Promise<Verdict> {
    const { max, windowMs } = input.limits[0]!
    const method = input.peek ? this.#store.read : this.#store.incr
    if (method === undefined) throw new Error(NO_READ)
    let count: { current: number, ttl: number }
    try {
      count = await deadline(new Promise((resolve, reject) => {
        method.call(this.#store, key, (err, result) => { if (err) reject(err); else resolve(result!) }, windowMs, max)
      }), this.#timeout)
    } catch (err) {
      return this.#failed(input, err as Error, log)
    }
    return decision(count.current, Math.max(0, count.ttl), max, windowMs, this.#banDenials, input.peek)
  }
}

/** Their answer over a count: allowed up to `max`, limited over it, banned more than `ban` over it (on every such request). */
function decision (current: number, ttl: number, max: number, windowMs: number, ban: number | null, peek: boolean): Decision {
  const over = current > max && !peek
  const banned = over && ban !== null && current - max > ban
  return {
    status: banned ? 'banned' : over ? 'limited' : 'allowed',
    limit: max,
    windowMs,
    count: current,
    resetMs: ttl,
    // At least 1 ms: a refusal with no wait at all says its request never passes (lib/request/respond.ts).
    retryMs: over ? Math.max(1, ttl) : 0,
    banStarted: banned,
    offence: banned ? 1 : 0,
    limits: [{ limit: max, windowMs, count: current, resetMs: ttl }],
    at: 0,
    member: ''
  }
}
