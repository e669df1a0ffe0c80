// Redis's reply times, for the load shedder's `redisTime` signal: every batch's, since the signal was last read
// (at most `KEPT`: the last ones), taken as their p99. A deadline missed counts as a reply of the deadline's
// length: a Redis that does not answer is at least that slow.

const KEPT = 1024

export class ReplyTimes {
  readonly #times = new Float64Array(KEPT)
  #taken = 0

  /** A batch's reply came `ms` after it was sent (or its deadline of `ms` passed). */
  replied (ms: number): void {
    this.#times[this.#taken++ % KEPT] = ms
  }

  /** The p99 (nearest rank) of the times since the last call; undefined when there were none. */
  take (): number | undefined {
    const n = Math.min(this.#taken, KEPT)
    if (n === 0) return undefined
    const times = this.#times.slice(0, n).sort()
    this.#taken = 0
    return times[Math.max(0, Math.ceil(0.99 * n) - 1)]
  }
}
