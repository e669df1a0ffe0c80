// OpenTelemetry metrics and spans from the plugin's diagnostics channels (@opentelemetry/api, an optional peer
// dependency: the app has its SDK set up; only this module imports it). Nothing in the plugin depends on it.
//
//   rate_guard.decisions                 counter, attributes rate_guard.namespace, .budget, .limit, .outcome
//   rate_guard.redis.call.duration       histogram (s), attributes rate_guard.namespace, .mode, .algorithm; bucket
//                                        advice from 0.1 ms to 0.5 s (the SDK's default buckets start at 5 s' scale)
//   a span per script call to Redis      "rate-guard decide" (or peek, settle), with the batch's size
//
// Given `stats` (`() => fastify.rateGuard.stats()`), the load shedder's state (`shed`), at each collection:
//   rate_guard.shed.in_flight            gauge, requests the shedder let in whose work is not over
//   rate_guard.shed.limit                gauge, its in-flight capacity (fixed, or as adapted now; none without one)
//   rate_guard.shed.admitted             gauge, the share of each class it admits now (0 to 1), attribute
//                                        rate_guard.priority
// Nothing is observed while the app has no shedder.
//
// instrumentRateGuard() uses the global meter and tracer unless given others; it returns a function that stops.

import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import { SpanKind, SpanStatusCode, metrics, trace } from '@opentelemetry/api'
import type { BatchObservableCallback, Histogram, Meter, ObservableGauge, Span, Tracer } from '@opentelemetry/api'
import { CHANNELS } from '../channels.js'
import type { DecisionMessage, RedisCallContext } from '../channels.js'

/** The options of `instrumentRateGuard`: the meter and tracer to use, else the global ones. */
export interface OpenTelemetryOptions {
  meter?: Meter
  tracer?: Tracer
  /** `() => fastify.rateGuard.stats()`: the load shedder's gauges, observed at each collection (default: none) */
  stats?: () => {
    readonly shed?: {
      readonly inFlight: number
      readonly limit: number | null
      readonly admitted: Readonly<Record<'critical' | 'normal' | 'sheddable', number>>
    }
  }
}

/** What the shedder's gauges read of `fastify.rateGuard.stats()` (a `StatsSnapshot`'s `shed`). */
type ShedStats = ReturnType<NonNullable<OpenTelemetryOptions['stats']>>

/** The load shedder's gauges, observed from one read of `stats()` each collection; returns a function that stops them. */
function shedGauges (meter: Meter, stats: () => ShedStats): () => void {
  const gauge = (name: string, description: string, unit: string): ObservableGauge =>
    meter.createObservableGauge(name, { description, unit })
  const inFlight = gauge('rate_guard.shed.in_flight', 'Requests the load shedder let in whose work is not over', '{request}')
  const limit = gauge('rate_guard.shed.limit', 'The load shedder\'s in-flight capacity', '{request}')
  const admitted = gauge('rate_guard.shed.admitted', 'The share of each class the load shedder admits now', '1')
  const observe: BatchObservableCallback = (result) => {
    const { shed } = stats()
    if (shed === undefined) return
    result.observe(inFlight, shed.inFlight)
    if (shed.limit !== null) result.observe(limit, shed.limit)
    for (const [priority, share] of Object.entries(shed.admitted)) {
      result.observe(admitted, share, { 'rate_guard.priority': priority })
    }
  }
  const observables = [inFlight, limit, admitted]
  meter.addBatchObservableCallback(observe, observables)
  return () => { meter.removeBatchObservableCallback(observe, observables) }
}

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5]

type CallContext = RedisCallContext & { error?: Error }

/** Records the rate guard's decisions and Redis calls as OpenTelemetry metrics and spans; returns a stop function. */
export function instrumentRateGuard ({
  meter = metrics.getMeter('fastify-rate-guard'),
  tracer = trace.getTracer('fastify-rate-guard'),
  stats
}: OpenTelemetryOptions = {}): () => void {
  const decisions = meter.createCounter('rate_guard.decisions', { description: 'Rate limit decisions', unit: '{decision}' })
  const duration = meter.createHistogram('rate_guard.redis.call.duration', {
    description: 'Script calls to Redis, each deciding a batch',
    unit: 's',
    advice: { explicitBucketBoundaries: BUCKETS }
  })
  const onDecision = (message: unknown): void => {
    const { nameSpace, budget, limit, outcome } = message as DecisionMessage
    decisions.add(1, {
      'rate_guard.namespace': nameSpace,
      'rate_guard.budget': budget,
      'rate_guard.limit': limit ?? '',
      'rate_guard.outcome': outcome
    })
  }
  const handlers = callSpans(tracer, duration)
  const tracing = diagnostics.tracingChannel<unknown, CallContext>(CHANNELS.redis)
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  tracing.subscribe(handlers)
  const stopGauges = stats === undefined ? undefined : shedGauges(meter, stats)
  return () => {
    diagnostics.unsubscribe(CHANNELS.decision, onDecision)
    tracing.unsubscribe(handlers)
    stopGauges?.()
  }
}

/** The redis channel's handlers: a span for each script call, and its duration recorded in `duration`. */
function callSpans (tracer: Tracer, duration: Histogram): diagnostics.TracingChannelSubscribers<CallContext> {
  // The TracingChannel's context object travels from start to asyncEnd: the span rides on it.
  const calls = new WeakMap<object, { span: Span, started: number }>()
  return {
    start: (context: CallContext) => {
      const span = tracer.startSpan(`rate-guard ${context.mode}`, {
        kind: SpanKind.CLIENT,
        attributes: {
          'db.system': 'redis',
          'rate_guard.namespace': context.nameSpace,
          'rate_guard.algorithm': context.algorithm,
          'rate_guard.batch_size': context.batchSize
        }
      })
      calls.set(context, { span, started: performance.now() })
    },
    end: () => {},
    asyncStart: () => {},
    asyncEnd: (context: CallContext) => {
      const call = calls.get(context)
      if (call === undefined) return
      const attributes = {
        'rate_guard.namespace': context.nameSpace,
        'rate_guard.mode': context.mode,
        'rate_guard.algorithm': context.algorithm
      }
      duration.record((performance.now() - call.started) / 1000, attributes)
      call.span.end()
    },
    error: (context: CallContext) => {
      const call = calls.get(context)
      if (context.error !== undefined) call?.span.recordException(context.error)
      call?.span.setStatus({ code: SpanStatusCode.ERROR, message: context.error?.message })
    }
  }
}
