import { MAX_DEADLINE } from './deadline.js'

// Redis that answers, but after the deadline.
//
// A Redis a little slower than `timeout` (a congested network, a busy shard) turns almost every decision into
// failMode, while nothing says Redis *is* answering, only late. Every reply's time is kept (the last
// `SAMPLES`, one number each), and when replies arrive after their batch's deadline the app is told the
// measured p99 and the `timeout` that would cover it, at most once per interval. A late reply whose requests
// Redis allowed counted requests that failMode answered instead: ghosts, counted for `stats()`.

/** How many reply times the percentile is taken over. */
const SAMPLES = 1024

/** What a late reply is told as: the p99 of the replies measured, and the `timeout` that would cover it. */
export interface LateNews {
  readonly p99Ms: number
  readonly timeoutMs: number
  readonly coverMs: number
  /** Late replies since the last news. */
  readonly late: number
}

export class LateReplies {
  readonly #timeout: number
  readonly #quietMs: number
  readonly #news: (news: LateNews) => void
  readonly #times = new Float64Array(SAMPLES)
  #taken = 0
  #late = 0
  #lastNews = -Infinity

  /** `news` is called on a late reply, at most once per `quietMs`. */
  constructor (timeout: number, quietMs: number, news: (news: LateNews) => void) {
    this.#timeout = timeout
    this.#quietMs = quietMs
    this.#news = news
  }

  /** A reply came `ms` after its batch was sent; `late`: after its deadline had answered its requests. */
  replied (ms: number, late: boolean): void {
    this.#times[this.#taken++ % SAMPLES] = ms
    if (!late) return
    this.#late++
    const now = Date.now()
    if (now - this.#lastNews < this.#quietMs) return
    this.#lastNews = now
    const p99Ms = this.p99()
    const count = this.#late
    this.#late = 0
    this.#news({ p99Ms, timeoutMs: this.#timeout, coverMs: cover(p99Ms), late: count })
  }

  /** The 99th percentile (nearest rank) of the reply times kept. */
  p99 (): number {
    const times = this.#times.slice(0, Math.min(this.#taken, SAMPLES)).sort()
    return times[Math.max(0, Math.ceil(0.99 * times.length) - 1)]!
  }
}

/** A deadline with room over `p99Ms`: a fifth more, in whole tens of ms, within the longest deadline. */
function cover (p99Ms: number): number {
  return Math.min(MAX_DEADLINE, Math.ceil(p99Ms * 1.2 / 10) * 10)
}
