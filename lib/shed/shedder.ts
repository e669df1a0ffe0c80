import type { ResolvedShed } from '../options/shed.js'
import type { Priority, ShedReason } from '../shed-types.js'
import { AdaptiveLimit } from './adaptive.js'

// The load shedder's state, one per registration that has `shed`: what is in flight, what share of each class
// is admitted, and the in-flight capacity. No clock of its own and no timer: lib/shed/signals.ts reads the
// signals once per sample interval and tells it (`sample`), and the request's stage asks it (`decide`).
//
// Under pressure (a signal past its threshold), the admitted share of the lowest class still admitted is halved
// each interval: `sheddable` down to none, then `normal`. Calm, the highest class not fully admitted regains
// `sampleMs / recoveryMs` each interval (all of it in `recovery`): `normal` first, then `sheddable`. A share is
// admitted exactly: a credit per class adds the share each request, and a request goes in when it reaches 1,
// so a share of 0.25 admits every fourth request, not a random quarter. `critical` and `exempt` requests are
// never shed by a signal.
//
// The in-flight capacity is a bound of its own, lowest class first too: `sheddable` requests are shed from
// limit × (1 − reserve)² in flight, `normal` ones from limit × (1 − reserve), `critical` ones only when the
// whole capacity is in flight, its reserved share included (and never for an adaptive capacity's probe, which
// holds it at its floor a moment); `exempt` ones never. A capacity full is no pressure on the shares: it sheds
// exactly what does not fit, where halving a share would shed what does.

/** Below this share, a halved class is shed whole. */
const LEAST_SHARE = 0.02

/** Each class's admitted share, credit, and count of shed requests. */
interface Shares {
  normal: number
  sheddable: number
}

/** What `fastify.rateGuard.stats().shed` says. */
export interface ShedSnapshot {
  /** Requests admitted and not done (their handler and response), now. */
  readonly inFlight: number
  /** The in-flight capacity (fixed, or as adapted now); null: none. */
  readonly limit: number | null
  /** The no-load latency the adapted capacity is measured from, ms (null: not adapted, or not measured yet). */
  readonly minRttMs: number | null
  /** The share of each class admitted now, 0 to 1. */
  readonly admitted: { readonly critical: number, readonly normal: number, readonly sheddable: number }
  /** The signal past its threshold at the last sample, if any. */
  readonly over: ShedReason | null
  /** The signals as last read (null: not read). */
  readonly readings: Readings
}

/** The signals as one sample read them: each null when not read (or, for Redis, no reply in the interval). */
export interface Readings {
  readonly eventLoopDelayMs: number | null
  readonly eventLoopUtilization: number | null
  readonly redisTimeMs: number | null
  readonly pressure: boolean | null
}

export const NO_READINGS: Readings = Object.freeze({
  eventLoopDelayMs: null, eventLoopUtilization: null, redisTimeMs: null, pressure: null
})

export class Shedder {
  readonly #reserve: number
  readonly #step: number
  readonly #fixed: number | null
  readonly #adaptive: AdaptiveLimit | null
  readonly #shares: Shares = { normal: 1, sheddable: 1 }
  readonly #credit: Shares = { normal: 0, sheddable: 0 }
  #inFlight = 0
  #peak = 0
  #over: ShedReason | null = null
  /** The reason the classes are shed while they ramp back: the last signal past its threshold. */
  #reason: ShedReason = 'in-flight'
  #readings: Readings = NO_READINGS

  constructor (options: ResolvedShed, now: number) {
    this.#reserve = options.reserve
    this.#step = options.sampleMs / options.recoveryMs
    const { inFlight } = options
    this.#fixed = typeof inFlight === 'number' ? inFlight : null
    this.#adaptive = inFlight !== null && typeof inFlight === 'object' ? new AdaptiveLimit(inFlight, now) : null
  }

  /** Requests admitted and not done. */
  get inFlight (): number {
    return this.#inFlight
  }

  /** The in-flight capacity now (Infinity: none). */
  get limit (): number {
    return this.#fixed ?? this.#adaptive?.limit ?? Infinity
  }

  /** The in-flight capacity outside the adaptive capacity's probes (Infinity: none). */
  get #held (): number {
    return this.#fixed ?? this.#adaptive?.held ?? Infinity
  }

  /** A request of `priority`: admitted (null), or why it is shed. */
  decide (priority: Priority): ShedReason | null {
    if (priority === 'exempt') return null
    // A probe of the adaptive capacity (held at its floor a moment) sheds no critical request.
    if (priority === 'critical') return this.#inFlight < this.#held ? null : 'in-flight'
    if (this.#inFlight >= this.#line(this.limit, priority)) return 'in-flight'
    const share = this.#shares[priority]
    if (share >= 1) return null
    const credit = this.#credit[priority] + share
    if (credit >= 1) {
      this.#credit[priority] = credit - 1
      return null
    }
    this.#credit[priority] = credit
    return this.#reason
  }

  /** A request was admitted (or let through in shadow mode): in flight until `done`. */
  started (): void {
    if (++this.#inFlight > this.#peak) this.#peak = this.#inFlight
  }

  /** A request admitted at `admittedAt` is done, `rttMs` after (its handler and its response). */
  done (rttMs: number, admittedAt: number): void {
    this.#inFlight--
    this.#adaptive?.completed(rttMs, admittedAt)
  }

  /** An interval ended at `now`: `over` is the signal past its threshold, if any, `readings` what was read. */
  sample (now: number, over: ShedReason | null, readings: Readings): void {
    const peak = this.#peak
    this.#peak = this.#inFlight
    this.#adaptive?.sample(now, peak)
    this.#readings = readings
    this.#over = over
    if (this.#over !== null) this.#shed(this.#over)
    else this.#recover()
  }

  /**
   * The in-flight count from which `priority` is shed: limit × (1 − reserve) for `normal`, × (1 − reserve)² for
   * `sheddable`, the next whole number up, the product rounded first (in floating point 50 × (1 − 0.42) is
   * 29.000000000000004, which would let a 30th request in and leave the critical class 20 of its 21).
   */
  #line (limit: number, priority: 'normal' | 'sheddable'): number {
    const left = 1 - this.#reserve
    return Math.ceil(limit * (priority === 'normal' ? left : left * left) - 1e-9)
  }

  #shed (reason: ShedReason): void {
    this.#reason = reason
    const shares = this.#shares
    const lowest = shares.sheddable > 0 ? 'sheddable' : 'normal'
    const halved = shares[lowest] / 2
    shares[lowest] = halved < LEAST_SHARE ? 0 : halved
  }

  #recover (): void {
    const shares = this.#shares
    const highest = shares.normal < 1 ? 'normal' : 'sheddable'
    shares[highest] = Math.min(1, shares[highest] + this.#step)
  }

  snapshot (): ShedSnapshot {
    const limit = this.limit
    const minRtt = this.#adaptive?.minRtt
    return {
      inFlight: this.#inFlight,
      limit: limit === Infinity ? null : limit,
      minRttMs: minRtt === undefined || minRtt === Infinity ? null : minRtt,
      admitted: { critical: 1, normal: this.#shares.normal, sheddable: this.#shares.sheddable },
      over: this.#over,
      readings: this.#readings
    }
  }
}
