import diagnostics from 'node:diagnostics_channel'
import { isIP } from 'node:net'
import type { Algorithm } from './algorithms/index.js'
import type { FailMode } from './types.js'
import type { Priority, ShedReason } from './shed-types.js'

// What the plugin publishes on `node:diagnostics_channel`, Node's and Fastify's convention for metrics and
// traces: nothing is built or sent while nobody subscribes (each publisher checks `hasSubscribers` first).
// A client is never named: a decision carries its key's hash (the 22 characters of the Redis hash tag), or
// nothing for a budget shared by all clients. Subscribe with `diagnostics_channel.subscribe(name, fn)`;
// `examples/metrics-prometheus.js` turns them into Prometheus metrics.

export const CHANNELS = Object.freeze({
  /** One message per decision the hook answers: `DecisionMessage`. */
  decision: 'rate-guard:decision',
  /** The breaker opened (Redis skipped, failMode answers) or closed again: `BreakerMessage`. */
  breaker: 'rate-guard:breaker',
  /** Redis did not decide (an error, the deadline): `TroubleMessage`. */
  trouble: 'rate-guard:redis-trouble',
  /** A TracingChannel around each script call: `RedisCallContext` (start, end, asyncStart, asyncEnd, error). */
  redis: 'rate-guard:redis'
})

export type Outcome =
  | 'allowed'
  | 'limited'
  | 'banned'
  | 'ban-started'
  /** Refused: the request costs more than a limit holds. */
  | 'too-costly'
  /** Refused: `concurrency`'s units of the client's requests are in flight. */
  | 'in-flight'
  /** Refused: it would have waited (`maxWait`), but `maxWaiting` requests wait in its registration. */
  | 'waiting-full'
  /** Let through unenforced (failMode 'open': Redis did not decide). */
  | 'unenforced'
  /** Refused 503 (failMode 'closed'). */
  | 'unavailable'
  /** Shadow mode: would have been limited or banned (or started a ban), let through. */
  | 'shadow-limited'
  | 'shadow-banned'
  | 'shadow-ban-started'
  /** Refused 503 by the load shedder (`shed`): the process is overloaded (`priority` and `reason` say more). */
  | 'shed'
  /** Shadow mode: the load shedder would have refused it, let through. */
  | 'shadow-shed'

/** Whether a refusal's outcome is a ban's (one it started, or one found): answered 403, or closed, not retried soon. */
export function isBan (outcome: string): boolean {
  return outcome === 'banned' || outcome === 'ban-started'
}

export interface DecisionMessage {
  readonly outcome: Outcome
  readonly nameSpace: string
  /** The budget: `default` (the plugin-wide one), a route's (`GET /search`), a group's, or a limiter's. */
  readonly budget: string
  readonly algorithm: Algorithm
  /** The binding limit's name (`default` unless the limits name theirs), when a store decided. */
  readonly limit: string | undefined
  /** The request's units. */
  readonly cost: number
  /** For a decision Redis made: ms from sending its batch to the answer, and how many requests the batch decided. */
  readonly redisMs: number | undefined
  readonly batchSize: number | undefined
  /** The client's key hash (never the key), undefined for a shared budget's decision or when none was made. */
  readonly keyHash: string | undefined
  /**
   * Which kind of key: the default hierarchy's `apikey`, `user` or `ip`, else `custom` (the app's key generator's);
   * `none` for a request the load shedder answered before its client was named.
   */
  readonly keyKind: 'apikey' | 'user' | 'ip' | 'custom' | 'none'
  readonly mode: 'enforce' | 'shadow' | 'report'
  /**
   * Under the budget's `concurrency`: the units of the client's requests in flight after this decision (its
   * own among them when it took slots); undefined without it, or when no slot was asked for (refused first).
   */
  readonly inFlight: number | undefined
  /**
   * `maxWait`: the ms the request waited before it went on (its limits allowed it then, not at once); in shadow
   * mode, what enforce would have waited (the request did not). Undefined for every other decision.
   */
  readonly waitedMs: number | undefined
  /** For a request the load shedder refused (`shed`, `shadow-shed`): its class, and the signal that shed it. */
  readonly priority?: Priority
  readonly reason?: ShedReason
}

export interface BreakerMessage {
  readonly nameSpace: string
  readonly state: 'open' | 'closed'
}

/**
 * What kind of trouble: `deadline` (no answer in time), `late` (Redis answers, after the deadline: see
 * lib/late.ts), `silent` (a connection that takes commands and answers nothing: lib/silence.ts), `oom` (Redis
 * is out of memory: a request that must be written is not), `redis` (another error Redis answered with),
 * `connection` (no connection, or one lost).
 */
export type TroubleReason = 'deadline' | 'late' | 'silent' | 'oom' | 'redis' | 'connection'

export interface TroubleMessage {
  readonly nameSpace: string
  readonly error: Error
  /** What decided instead, when a request was waiting. */
  readonly failMode: FailMode | undefined
  readonly reason: TroubleReason
}

export interface RedisCallContext {
  readonly nameSpace: string
  /** `decide`, `peek` or `settle`; for `concurrency`'s leases, `acquire`, `release` or `renew`. */
  readonly mode: string
  readonly algorithm: Algorithm
  /** Requests in the call (a batch decides up to 32). */
  readonly batchSize: number
}

export const decisionChannel = diagnostics.channel(CHANNELS.decision)
export const breakerChannel = diagnostics.channel(CHANNELS.breaker)
export const troubleChannel = diagnostics.channel(CHANNELS.trouble)
const redisTracing = diagnostics.tracingChannel<unknown, RedisCallContext & object>(CHANNELS.redis)

/** The kind of a key as the default hierarchy writes it. */
export function keyKindOf (key: string | number): DecisionMessage['keyKind'] {
  if (typeof key !== 'string') return 'custom'
  if (key.startsWith('apikey:')) return 'apikey'
  if (key.startsWith('user:')) return 'user'
  return isIP(key) === 0 ? 'custom' : 'ip'
}

/** `call()` inside the Redis TracingChannel when someone listens (its context made then); as it is otherwise. */
export function traced<T> (context: () => RedisCallContext, call: () => Promise<T>): Promise<T> {
  return redisTracing.hasSubscribers ? redisTracing.tracePromise(call, context()) : call()
}
