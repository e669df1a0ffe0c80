// A connection that takes commands and answers nothing.
//
// A hung load balancer or NAT can keep a TCP connection open while bytes stop flowing: no error, no close,
// so ioredis never reconnects, every decision misses its deadline, and the breaker's probes go down the same
// dead socket. Only silence tells: commands were sent and nothing at all came back (no reply, late or in
// time, no error of Redis's own) for `afterMs`. A Redis that is slow but alive keeps being heard (its late
// replies still arrive), and a busy event loop is no silence either: a deadline is declared missed only after
// the poll phase has read what waits in the socket (lib/deadline.ts), and what was read counts as heard.
//
// Silence is judged when a deadline is missed, so it costs nothing while Redis answers in time.

export class Silence {
  readonly #afterMs: number
  readonly #silent: (quiet: () => boolean) => void
  /** When the first command sent since Redis was last heard from was sent; undefined when none is waiting. */
  #since: number | undefined
  /** How many times Redis was heard from: what `quiet` compares. */
  #heard = 0

  /**
   * `silent` is called when commands have waited `afterMs` with nothing heard; then the watch starts over.
   * Its `quiet()` says whether Redis has still not been heard from since (for what it does before acting).
   */
  constructor (afterMs: number, silent: (quiet: () => boolean) => void) {
    this.#afterMs = afterMs
    this.#silent = silent
  }

  /** A command went to Redis at `at` (ms). */
  sent (at: number): void {
    this.#since ??= at
  }

  /** Redis answered something: the connection carries bytes. */
  heard (): void {
    this.#since = undefined
    this.#heard++
  }

  /** A deadline passed with no answer, at `now` (ms): silent for `afterMs` since a command was sent → `silent()`, once. */
  missed (now: number): void {
    if (this.#since === undefined || now - this.#since < this.#afterMs) return
    this.#since = undefined
    const heard = this.#heard
    this.#silent(() => this.#heard === heard)
  }
}

/** How long commands may wait with nothing heard before the connection is taken for dead: well past any deadline. */
export function silenceAfter (timeout: number): number {
  return Math.max(1000, 5 * timeout)
}
