import type { FastifyBaseLogger } from 'fastify'
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import type { EventLoopUtilization, IntervalHistogram } from 'node:perf_hooks'
import type { Callbacks } from '../callbacks.js'
import type { ResolvedShed } from '../options/shed.js'
import type { ShedReason } from '../shed-types.js'
import type { Readings, Shedder } from './shedder.js'
import type { ReplyTimes } from './reply-times.js'

// The load shedder's signals, read once per sample interval by one timer (unref'd: it keeps no process alive)
// and told to the shedder: the event loop's delay (Node's own histogram, sampled every 10 ms in C++, at p99 over
// the interval, less the 10 ms it samples at; and this timer's own lateness, for an interval the loop was
// blocked through), its utilization (perf_hooks), Redis's reply times (./reply-times.ts) and the app's own
// signal (`pressure`, under the callbacks' control: one that throws is read as calm, and logged). The first
// past its threshold, in that order, is the reason requests are shed.

/** The event-loop delay histogram's resolution, ms. */
const RESOLUTION_MS = 10

export class Signals {
  readonly #options: ResolvedShed
  readonly #shedder: Shedder
  readonly #replies: ReplyTimes | undefined
  readonly #callbacks: Callbacks
  readonly #log: FastifyBaseLogger
  readonly #delay: IntervalHistogram | null
  readonly #timer: NodeJS.Timeout
  #elu: EventLoopUtilization | null
  #due: number

  constructor (options: ResolvedShed, shedder: Shedder, replies: ReplyTimes | undefined, callbacks: Callbacks, log: FastifyBaseLogger) {
    this.#options = options
    this.#shedder = shedder
    this.#replies = replies
    this.#callbacks = callbacks
    this.#log = log
    this.#delay = options.eventLoopDelayMs === null ? null : monitorEventLoopDelay({ resolution: RESOLUTION_MS })
    this.#delay?.enable()
    this.#elu = options.eventLoopUtilization === null ? null : performance.eventLoopUtilization()
    this.#due = performance.now() + options.sampleMs
    this.#timer = setInterval(() => { this.sample() }, options.sampleMs).unref()
  }

  /** Reads every signal, and tells the shedder. */
  sample (): void {
    const now = performance.now()
    const late = Math.max(0, now - this.#due)
    this.#due = now + this.#options.sampleMs
    const readings: Readings = {
      eventLoopDelayMs: this.#delayMs(late),
      eventLoopUtilization: this.#utilization(),
      redisTimeMs: this.#options.redisTimeMs === null ? null : this.#replies?.take() ?? null,
      pressure: this.#pressure()
    }
    this.#shedder.sample(now, overOf(this.#options, readings), readings)
  }

  #delayMs (late: number): number | null {
    const histogram = this.#delay
    if (histogram === null) return null
    // An empty histogram's percentile is under a microsecond: read as no delay.
    const measured = histogram.percentile(99) / 1e6 - RESOLUTION_MS
    histogram.reset()
    return Math.max(0, measured, late)
  }

  #utilization (): number | null {
    if (this.#elu === null) return null
    const now = performance.eventLoopUtilization()
    const { utilization } = performance.eventLoopUtilization(now, this.#elu)
    this.#elu = now
    return utilization
  }

  #pressure (): boolean | null {
    const pressure = this.#options.pressure
    if (pressure === null) return null
    return this.#callbacks.run('pressure', () => pressure() === true, () => false, this.#log) as boolean
  }

  close (): void {
    clearInterval(this.#timer)
    this.#delay?.disable()
  }
}

/** The first signal past its threshold, or null. */
function overOf (options: ResolvedShed, readings: Readings): ShedReason | null {
  const { eventLoopDelayMs, eventLoopUtilization, redisTimeMs, pressure } = readings
  if (eventLoopDelayMs !== null && eventLoopDelayMs > options.eventLoopDelayMs!) return 'event-loop-delay'
  if (eventLoopUtilization !== null && eventLoopUtilization > options.eventLoopUtilization!) return 'event-loop-utilization'
  if (redisTimeMs !== null && redisTimeMs > options.redisTimeMs!) return 'redis-time'
  return pressure === true ? 'pressure' : null
}
