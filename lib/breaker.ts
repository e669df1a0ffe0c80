/**
 * A circuit breaker for Redis: after `threshold` transient failures in a row it opens, and decisions skip
 * Redis (`failMode` answers at once, so an outage costs no deadline per request). After `coolDownMs` one
 * decision probes Redis; its success closes the breaker, its failure opens it for another cool-down.
 */
export class Breaker {
  readonly #threshold: number
  readonly #coolDownMs: number
  readonly #now: () => number
  #failures = 0
  #openUntil = 0
  #probing = false

  constructor (threshold: number, coolDownMs: number, now: () => number = Date.now) {
    this.#threshold = threshold
    this.#coolDownMs = coolDownMs
    this.#now = now
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
    this.#failures = 0
    this.#probing = false
  }

  /** Redis failed or missed the deadline. */
  failure (): void {
    this.#failures++
    this.#probing = false
    if (this.#failures >= this.#threshold) this.#openUntil = this.#now() + this.#coolDownMs
  }
}
