import { breakerChannel } from './channels.js'

/**
 * A circuit breaker for Redis: after `threshold` transient failures in a row it opens, and decisions skip
 * Redis (`failMode` answers at once, so an outage costs no deadline per request). After `coolDownMs` one
 * decision probes Redis; its success closes the breaker, its failure opens it for another cool-down.
 */
export class Breaker {
  readonly #threshold: number
  readonly #coolDownMs: number
  readonly #now: () => number
  readonly #nameSpace: string
  #failures = 0
  #openUntil = 0
  #probing = false

  /**
   * `now`: a monotonic clock in ms (a wall clock, `Date.now()`, is stepped and slewed by NTP, which would end
   * a cool-down early or keep the breaker open). `nameSpace`: the registration's, named when the breaker opens
   * or closes (on `rate-guard:breaker`).
   */
  constructor (threshold: number, coolDownMs: number, now: () => number = () => performance.now(), nameSpace = '') {
    this.#threshold = threshold
    this.#coolDownMs = coolDownMs
    this.#now = now
    this.#nameSpace = nameSpace
  }

  get state (): 'closed' | 'open' | 'half-open' {
    if (this.#failures < this.#threshold) return 'closed'
    return this.#probing || this.#now() >= this.#openUntil ? 'half-open' : 'open'
  }

  /** Whether this call may go to Redis: always while closed; once open, only the one probe per cool-down. */
  allow (): boolean {
    if (this.#failures < this.#threshold) return true
    if (this.#probing || this.#now() < this.#openUntil) return false
    this.#probing = true
    return true
  }

  /** Redis answered (even with an error of its own): it is there. */
  success (): void {
    if (this.#failures >= this.#threshold && breakerChannel.hasSubscribers) {
      breakerChannel.publish({ nameSpace: this.#nameSpace, state: 'closed' })
    }
    this.#failures = 0
    this.#probing = false
  }

  /**
   * The connection to Redis is (re)established: while open, the next decision probes at once instead of
   * waiting out the cool-down (which the fast failures of a connection being made kept starting over).
   */
  connected (): void {
    this.#openUntil = 0
  }

  /** Redis failed or missed the deadline. */
  failure (): void {
    this.#failures++
    this.#probing = false
    if (this.#failures < this.#threshold) return
    this.#openUntil = this.#now() + this.#coolDownMs
    if (this.#failures === this.#threshold && breakerChannel.hasSubscribers) {
      breakerChannel.publish({ nameSpace: this.#nameSpace, state: 'open' })
    }
  }
}
