// Prometheus metrics from the plugin's diagnostics channels, with prom-client (an optional peer dependency:
// the app installs it; only this module imports it). Nothing in the plugin depends on it: it publishes on
// node:diagnostics_channel, and this module subscribes.
//
//   rate_guard_decisions_total{namespace, budget, limit, outcome}   every decision (outcome: allowed, limited,
//                                                             banned, ban-started, too-costly, in-flight, unenforced,
//                                                             unavailable, shadow-limited, shadow-banned, ...)
//   rate_guard_redis_call_seconds{namespace, mode, algorithm}  each script call (a batch of decisions)
//   rate_guard_breaker_open{namespace}                       1 while the breaker is open
//   rate_guard_redis_trouble_total{namespace}                Redis did not decide
//
// Given `stats` (`() => fastify.rateGuard.stats()`), the load shedder's state (`shed`), read at each scrape:
//   rate_guard_shed_in_flight                                requests the shedder let in whose work is not over
//   rate_guard_shed_limit                                    its in-flight capacity (fixed, or as adapted now)
//   rate_guard_shed_admitted_ratio{priority}                 the share of each class it admits now, 0 to 1
// No series while the app has no shedder (nor a limit while it has no capacity).
//
// The gauge and the trouble counter have a series from the start (0) for every nameSpace given, and for any
// other from its first decision: a dashboard shows "closed, no trouble" rather than no data.
// The package's grafana-dashboard.json is a dashboard on these names.

import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import client from 'prom-client'
import type { Registry } from 'prom-client'
import { CHANNELS } from '../channels.js'
import type { BreakerMessage, DecisionMessage, RedisCallContext, TroubleMessage } from '../channels.js'

/** The options of `collectRateGuardMetrics`. */
export interface PrometheusOptions {
  /** the registrations' nameSpaces, to have their series from the start (default `['rate-guard:']`) */
  nameSpaces?: readonly string[]
  /** `() => fastify.rateGuard.stats()`: the load shedder's gauges, read at each scrape (default: none) */
  stats?: () => {
    readonly shed?: {
      readonly inFlight: number
      readonly limit: number | null
      readonly admitted: Readonly<Record<'critical' | 'normal' | 'sheddable', number>>
    }
  }
}

/** What the shedder's gauges read of `fastify.rateGuard.stats()` (a `StatsSnapshot`'s `shed`). */
type ShedStats = ReturnType<NonNullable<PrometheusOptions['stats']>>

type ShedState = NonNullable<ShedStats['shed']>

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5]

/** The rate guard's four metrics, in `registry`. */
function metricsIn (registry: Registry): {
  decisions: client.Counter, calls: client.Histogram, breaker: client.Gauge, trouble: client.Counter
} {
  const registers = [registry]
  const decisions = new client.Counter({
    name: 'rate_guard_decisions_total',
    help: 'Rate limit decisions, by budget, binding limit and outcome',
    labelNames: ['namespace', 'budget', 'limit', 'outcome'],
    registers
  })
  const calls = new client.Histogram({
    name: 'rate_guard_redis_call_seconds',
    help: 'Script calls to Redis (each decides a batch)',
    labelNames: ['namespace', 'mode', 'algorithm'],
    buckets: BUCKETS,
    registers
  })
  const breaker = new client.Gauge({
    name: 'rate_guard_breaker_open', help: '1 while the breaker skips Redis', labelNames: ['namespace'], registers
  })
  const trouble = new client.Counter({
    name: 'rate_guard_redis_trouble_total',
    help: 'Decisions Redis did not make (errors, deadlines)',
    labelNames: ['namespace'],
    registers
  })
  return { decisions, calls, breaker, trouble }
}

/** The redis channel's handlers that time each script call into `calls`. */
function callTimer (calls: client.Histogram): diagnostics.TracingChannelSubscribers<RedisCallContext & object> {
  // The TracingChannel's context object travels from start to asyncEnd: the call's start time rides on it.
  const started = new WeakMap<object, number>()
  return {
    start: (context: RedisCallContext) => { started.set(context, performance.now()) },
    end: () => {},
    asyncStart: () => {},
    asyncEnd: (context: RedisCallContext) => {
      const seconds = (performance.now() - (started.get(context) ?? performance.now())) / 1000
      calls.observe({ namespace: context.nameSpace, mode: context.mode, algorithm: context.algorithm }, seconds)
    },
    error: () => {}
  }
}

/** The load shedder's gauges in `registry`, each set from `stats()` as it is scraped. */
function shedGauges (registry: Registry, stats: () => ShedStats): void {
  type Set = (gauge: client.Gauge, shed: ShedState) => void
  const gauge = (name: string, help: string, labelNames: string[], set: Set): void => {
    const made: client.Gauge = new client.Gauge({
      name,
      help,
      labelNames,
      registers: [registry],
      collect: () => {
        made.reset()
        // prom-client gives a gauge without labels a 0 of its own: no series until one is set.
        if (labelNames.length === 0) made.remove()
        const { shed } = stats()
        if (shed !== undefined) set(made, shed)
      }
    })
  }
  gauge('rate_guard_shed_in_flight', 'Requests the load shedder let in whose work is not over', [], (made, { inFlight }) => {
    made.set(inFlight)
  })
  gauge('rate_guard_shed_limit', 'The load shedder\'s in-flight capacity', [], (made, { limit }) => {
    if (limit !== null) made.set(limit)
  })
  gauge('rate_guard_shed_admitted_ratio', 'The share of each class the load shedder admits', ['priority'], (made, { admitted }) => {
    for (const [priority, share] of Object.entries(admitted)) made.set({ priority }, share)
  })
}

/**
 * Subscribes the rate guard's metrics to its diagnostics channels, in `registry` (and, given `stats`, the load
 * shedder's gauges); returns a function that unsubscribes them all.
 */
export function collectRateGuardMetrics (registry: Registry, { nameSpaces = ['rate-guard:'], stats }: PrometheusOptions = {}):
() => void {
  const { decisions, calls, breaker, trouble } = metricsIn(registry)
  if (stats !== undefined) shedGauges(registry, stats)
  const seen = new Set<string>()
  const start = (namespace: string): void => {
    if (seen.has(namespace)) return
    seen.add(namespace)
    breaker.set({ namespace }, 0)
    trouble.inc({ namespace }, 0)
  }
  for (const namespace of nameSpaces) start(namespace)
  const onDecision = (message: unknown): void => {
    const { nameSpace, budget, limit, outcome } = message as DecisionMessage
    start(nameSpace)
    decisions.inc({ namespace: nameSpace, budget, limit: limit ?? '', outcome })
  }
  const onBreaker = (message: unknown): void => {
    const { nameSpace, state } = message as BreakerMessage
    start(nameSpace) // first: a later first decision must not set an open breaker's gauge back to 0
    breaker.set({ namespace: nameSpace }, state === 'open' ? 1 : 0)
  }
  const onTrouble = (message: unknown): void => { trouble.inc({ namespace: (message as TroubleMessage).nameSpace }) }
  const tracing = diagnostics.tracingChannel<unknown, RedisCallContext & object>(CHANNELS.redis)
  const handlers = callTimer(calls)
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  diagnostics.subscribe(CHANNELS.breaker, onBreaker)
  diagnostics.subscribe(CHANNELS.trouble, onTrouble)
  tracing.subscribe(handlers)
  return () => {
    diagnostics.unsubscribe(CHANNELS.decision, onDecision)
    diagnostics.unsubscribe(CHANNELS.breaker, onBreaker)
    diagnostics.unsubscribe(CHANNELS.trouble, onTrouble)
    tracing.unsubscribe(handlers)
  }
}
