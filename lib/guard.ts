import type { FastifyBaseLogger } from 'fastify'
import type { Breaker } from './breaker.js'
import { deadline } from './deadline.js'
import { isPermanent } from './trouble.js'
import type { Trouble } from './trouble.js'
import type { FailMode } from './types.js'
import type { MemoryStore } from './stores/memory.js'
import type { Store, Verdict } from './stores/store.js'

// A call to Redis under guard: within the deadline, past the breaker, and when Redis cannot answer, what the
// request's `failMode` says instead — `open` lets it through unenforced, `closed` refuses it, `local` asks the
// in-process twin (made the first time it is needed). `instead` is the one way into failMode: a breaker open,
// a deadline missed, an error of Redis's (for a batch, a call alone, or an app's store) all end there.

const UNENFORCED: Verdict = Object.freeze({ status: 'unenforced' })
const UNAVAILABLE: Verdict = Object.freeze({ status: 'unavailable' })

export class Guard {
  /** The deadline of a call to Redis, ms. */
  readonly timeout: number
  readonly #breaker: Breaker | undefined
  readonly #local: () => MemoryStore
  readonly #trouble: Trouble
  #fallback: MemoryStore | undefined

  /** `breaker`: set when the store is remote and the breaker is on. `local` makes the in-process twin. */
  constructor (timeout: number, breaker: Breaker | undefined, local: () => MemoryStore, trouble: Trouble) {
    this.timeout = timeout
    this.#breaker = breaker
    this.#local = local
    this.#trouble = trouble
  }

  /** The in-process twin, once failMode 'local' made it. */
  get fallback (): MemoryStore | undefined {
    return this.#fallback
  }

  /** Whether Redis may be asked now: always, but while the breaker is open (then failMode answers at once). */
  allow (): boolean {
    return this.#breaker?.allow() !== false
  }

  /** Redis replied to a call (even with an error of its own, or for one request alone: it is there), or did not. */
  readonly settled = (err: Error | undefined): void => {
    if (err === undefined || isPermanent(err)) this.#breaker?.success()
    else this.#breaker?.failure()
  }

  /**
   * `call` on `store` (Redis) under the breaker and the deadline, and when it cannot answer in time, what
   * `failMode` says instead. `failed`: Redis already failed the request, so `failMode` answers at once.
   */
  run<T> (store: Store, failMode: FailMode, call: (store: Store) => T | Promise<T>, log: FastifyBaseLogger, failed: boolean):
  T | Verdict | Promise<T | Verdict> {
    if (failed || !this.allow()) return this.instead(failMode, call, log)
    return deadline(Promise.resolve(call(store)), this.timeout).then(result => {
      this.settled(undefined)
      return result
    }, (err: unknown) => {
      this.settled(err as Error)
      return this.instead(failMode, call, log, err as Error)
    })
  }

  /**
   * What `failMode` says when Redis cannot: through unenforced, refused, or `call` on the in-process twin.
   * `error`, when Redis failed (rather than being skipped): reported first, and named by a refusal.
   */
  instead<T> (failMode: FailMode, call: (store: Store) => T, log: FastifyBaseLogger, error?: Error): T | Verdict {
    if (error !== undefined) this.#trouble.report(error, log, failMode)
    if (failMode === 'open') return UNENFORCED
    if (failMode === 'closed') return error === undefined ? UNAVAILABLE : { status: 'unavailable', error }
    this.#fallback ??= this.#local()
    return call(this.#fallback)
  }
}
