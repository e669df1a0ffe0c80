import type { FastifyRequest } from 'fastify'

// The load shedder's options and classes as the app gives them (`shed`, a route's `config.priority`): see
// lib/shed/ and docs/reliability.md.

/**
 * A request's priority class, for the load shedder (`shed`), highest first: `'exempt'` is never shed (health and
 * readiness checks), `'critical'` only when the process's in-flight capacity is full (its reserved share used up
 * too), `'normal'` after `'sheddable'`, which goes first.
 */
export type Priority = 'exempt' | 'critical' | 'normal' | 'sheddable'

/** Why a request was shed: the signal past its threshold (or the one that last was, while its class ramps back). */
export type ShedReason = 'event-loop-delay' | 'event-loop-utilization' | 'redis-time' | 'pressure' | 'in-flight'

/** The in-flight capacity adapted to latency (`shed.inFlight` as an object): see docs/reliability.md. */
export interface AdaptiveInFlightOptions {
  /** The least it goes down to (default 2), and the most it goes up to (default 1000). */
  floor?: number
  ceiling?: number
  /** How much above the no-load latency the latency may be before the limit comes down (default 1.1: 10% over). */
  tolerance?: number
  /** How often the no-load latency is measured again, the limit held at `floor` for a sample (default '30 seconds'). */
  probeInterval?: number | string
}

/**
 * The process-level load shedder: when a signal passes its threshold, requests are answered 503 with
 * `Retry-After`, lowest priority first, before any limit counts them. Each signal is read once per
 * `sampleInterval`; `false` leaves it unread. See docs/reliability.md.
 */
export interface ShedOptions {
  /** The event loop's delay at p99 over a sample (ms or a duration; default 20 ms). */
  eventLoopDelay?: number | string | false
  /** The event loop's utilization over a sample, 0 to 1 (default 0.7). */
  eventLoopUtilization?: number | false
  /** Redis's reply time at p99 over a sample (ms or a duration; a missed deadline counts as `timeout`; default false). */
  redisTime?: number | string | false
  /** The app's own signal, read once per sample: true when the app is under pressure. */
  pressure?: () => boolean
  /** Requests in flight in the process: a number (fixed), an object (adapted to latency), or false (default: none). */
  inFlight?: number | AdaptiveInFlightOptions | false
  /** The share of `inFlight` kept for the critical class, 0 to 0.9 (default 0.2). */
  reserve?: number
  /** A request's class (beaten by a route's `config.priority`); undefined: the default rule. Synchronous. */
  classify?: (request: FastifyRequest) => Priority | undefined
  /** How often the signals are read (ms or a duration, 10 ms to 10 s; default 100 ms). */
  sampleInterval?: number | string
  /** How long a class takes from all shed to all admitted once the signals are calm (default '5 seconds'). */
  recovery?: number | string
  /** The `Retry-After` of a shed request, rounded up to whole seconds (default '1 second'). */
  retryAfter?: number | string
  /** `'shadow'`: decide, report and count what would be shed, and let it through. Default: the plugin's `mode`. */
  mode?: 'enforce' | 'shadow'
}

/** `RateGuardOptions`' `shed`. */
export interface ShedPluginOptions {
  /** The process-level load shedder (default false; true: its defaults): see `ShedOptions`. */
  shed?: boolean | ShedOptions
}
