import type { FastifyBaseLogger } from 'fastify'
import { isPromise } from './awaitable.js'
import { deadline } from './deadline.js'
import { warn } from './warnings.js'

// The app's callbacks that decide who a request is and what it may do (`verifyApiKey`, `userId`,
// `keyGenerator`, `allowList`, limits and costs that are functions, `countWhen` and `settle` after the
// response) run under control: each gets a deadline (`callbackTimeout`: the app's own lookups, not Redis, so
// longer than the decision's), and one that throws, rejects or misses the deadline is replaced by its
// fallback. A fallback never loosens a limit: what a callback reads is often the client's to break (a body, a
// header), so a failure must buy nothing. A key tier is replaced by the next tier, a key generator by the
// default hierarchy, an allow list by "not allowed", a cost by 1, a limit's `max` or `timeWindow` by a static
// one (lib/request/computed.ts), `countWhen` by "counts" and `settle` by the charge as it stands. `failMode` is for
// Redis, not for the app's own code: the request is still decided, and counted, by the store. The client
// never sees what went wrong: the app's log does, with the error and what was used instead, once a minute at
// most per kind of callback and fallback, per registration.

/** A failing callback is logged at most once per this many ms, per kind and fallback. */
const CALLBACK_LOG_INTERVAL = 60_000

/** The callbacks run under control: how the log names each, and what its fallback is (a limit's says its values). */
const KINDS = {
  verifyApiKey: { name: 'verifyApiKey', used: 'counted under the next key tier' },
  userId: { name: 'userId', used: 'counted under the next key tier' },
  keyGenerator: { name: 'keyGenerator', used: 'counted under the default key' },
  allowList: { name: 'allowList', used: 'not allow-listed: counted' },
  cost: { name: 'cost function', used: 'counted at 1' },
  max: { name: 'max function', used: 'limited at a static max' },
  timeWindow: { name: 'timeWindow function', used: 'limited in a static window' },
  countWhen: { name: 'countWhen', used: 'the response counts: the charge stands' },
  settle: { name: 'settle', used: 'the charge stands' },
  classify: { name: 'shed.classify', used: "classed 'normal'" },
  pressure: { name: 'shed.pressure', used: 'read as calm' }
} as const

export type CallbackKind = keyof typeof KINDS

export class Callbacks {
  readonly #timeout: number
  /** When each kind of callback, with each fallback, was last logged as failing. */
  readonly #warned = new Map<string, number>()

  /** `timeout`: how long a callback that returns a promise has (`callbackTimeout`). */
  constructor (timeout: number) {
    this.#timeout = timeout
  }

  /**
   * What `call` gives, or `fallback()` when it throws, rejects or has not settled within the deadline. `used`
   * says what the fallback is, for the log, when it says more than the kind's own (a limit's values).
   */
  run<T> (
    kind: CallbackKind, call: () => T | PromiseLike<T>, fallback: () => T | PromiseLike<T>, log: FastifyBaseLogger,
    used: string = KINDS[kind].used
  ): T | PromiseLike<T> {
    let value: T | PromiseLike<T>
    try {
      value = call()
    } catch (err) {
      this.#warn(kind, used, err, log)
      return fallback()
    }
    if (!isPromise(value)) return value
    return deadline(Promise.resolve(value), this.#timeout).catch((err: unknown) => {
      this.#warn(kind, used, err, log)
      return fallback()
    })
  }

  #warn (kind: CallbackKind, used: string, err: unknown, log: FastifyBaseLogger): void {
    const now = Date.now()
    const said = `${kind}\n${used}`
    if (now - (this.#warned.get(said) ?? -Infinity) < CALLBACK_LOG_INTERVAL) return
    this.#warned.set(said, now)
    const message = `rate-guard: ${KINDS[kind].name} failed; ${used} (logged once a minute at most)`
    warn(log, 'CALLBACK_FAILED', message, { err, fallback: used }, 'error')
  }
}
