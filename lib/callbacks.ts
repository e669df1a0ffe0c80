import type { FastifyBaseLogger } from 'fastify'
import { isPromise } from './awaitable.js'
import { deadline } from './deadline.js'

// The app's callbacks that decide who a request is and what it may do (`verifyApiKey`, `userId`,
// `keyGenerator`, `allowList`, limits that are functions) run under control: each gets a deadline
// (`callbackTimeout`: the app's own lookups, not Redis, so longer than the decision's), and one that throws, rejects or misses the deadline is replaced by its fallback (a key tier by
// the next tier, a key generator by the default hierarchy, an allow list by "not allowed", a limit by
// `failMode`). The client never sees what went wrong: the app's log does, with the error, once a minute at
// most per kind of callback and registration. A lookup that fails is no way around the limit: the request
// is counted under its fallback.

/** A failing callback is logged at most once per this many ms, per kind. */
export const CALLBACK_LOG_INTERVAL = 60_000

export class Callbacks {
  readonly #timeout: number
  /** When each kind of callback was last logged as failing. */
  readonly #warned = new Map<string, number>()

  /** `timeout`: how long a callback that returns a promise has (`callbackTimeout`). */
  constructor (timeout: number) {
    this.#timeout = timeout
  }

  /** What `call` gives, or `fallback()` when it throws, rejects or has not settled within the deadline. */
  run<T> (kind: string, call: () => T | PromiseLike<T>, fallback: () => T | PromiseLike<T>, log: FastifyBaseLogger): T | PromiseLike<T> {
    let value: T | PromiseLike<T>
    try {
      value = call()
    } catch (err) {
      this.#warn(kind, err, log)
      return fallback()
    }
    if (!isPromise(value)) return value
    return deadline(Promise.resolve(value), this.#timeout).catch((err: unknown) => {
      this.#warn(kind, err, log)
      return fallback()
    })
  }

  #warn (kind: string, err: unknown, log: FastifyBaseLogger): void {
    const now = Date.now()
    if (now - (this.#warned.get(kind) ?? -Infinity) < CALLBACK_LOG_INTERVAL) return
    this.#warned.set(kind, now)
    log.error({ err }, `rate-guard: ${kind} failed; requests are decided without it (logged once a minute at most)`)
  }
}
