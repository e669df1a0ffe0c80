// OpenTelemetry metrics and spans from the plugin's diagnostics channels (@opentelemetry/api, a dev
// dependency here: your app has its SDK set up). Nothing in the plugin depends on it.
//
//   rate_guard.decisions                 counter, attributes rate_guard.namespace, .budget, .limit, .outcome
//   rate_guard.redis.call.duration       histogram (s), attributes rate_guard.namespace, .mode, .algorithm; bucket
//                                        advice from 0.1 ms to 0.5 s (the SDK's default buckets start at 5 s' scale)
//   a span per script call to Redis      "rate-guard decide" (or peek, settle), with the batch's size
//
// instrumentRateGuard() uses the global meter and tracer unless given others; it returns a function that stops.

import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import { SpanKind, SpanStatusCode, metrics, trace } from '@opentelemetry/api'
import { CHANNELS } from 'fastify-rate-guard'

/**
 * @param {{ meter?: import('@opentelemetry/api').Meter, tracer?: import('@opentelemetry/api').Tracer }} options
 */
export function instrumentRateGuard ({ meter = metrics.getMeter('fastify-rate-guard'), tracer = trace.getTracer('fastify-rate-guard') } = {}) {
  const decisions = meter.createCounter('rate_guard.decisions', { description: 'Rate limit decisions', unit: '{decision}' })
  const duration = meter.createHistogram('rate_guard.redis.call.duration', {
    description: 'Script calls to Redis, each deciding a batch',
    unit: 's',
    advice: { explicitBucketBoundaries: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5] }
  })
  /** @param {unknown} message a DecisionMessage */
  const onDecision = (message) => {
    const { nameSpace, budget, limit, outcome } = /** @type {import('fastify-rate-guard').DecisionMessage} */ (message)
    decisions.add(1, { 'rate_guard.namespace': nameSpace, 'rate_guard.budget': budget, 'rate_guard.limit': limit ?? '', 'rate_guard.outcome': outcome })
  }
  // The TracingChannel's context object travels from start to asyncEnd: the span rides on it.
  /** @type {WeakMap<object, { span: import('@opentelemetry/api').Span, started: number }>} */
  const calls = new WeakMap()
  const handlers = {
    /** @param {import('fastify-rate-guard').RedisCallContext} context */
    start: (context) => {
      const span = tracer.startSpan(`rate-guard ${context.mode}`, {
        kind: SpanKind.CLIENT,
        attributes: { 'db.system': 'redis', 'rate_guard.namespace': context.nameSpace, 'rate_guard.algorithm': context.algorithm, 'rate_guard.batch_size': context.batchSize }
      })
      calls.set(context, { span, started: performance.now() })
    },
    end: () => {},
    asyncStart: () => {},
    /** @param {import('fastify-rate-guard').RedisCallContext} context */
    asyncEnd: (context) => {
      const call = calls.get(context)
      if (call === undefined) return
      duration.record((performance.now() - call.started) / 1000, { 'rate_guard.namespace': context.nameSpace, 'rate_guard.mode': context.mode, 'rate_guard.algorithm': context.algorithm })
      call.span.end()
    },
    /** @param {import('fastify-rate-guard').RedisCallContext & { error?: Error }} context */
    error: (context) => {
      const call = calls.get(context)
      if (context.error !== undefined) call?.span.recordException(context.error)
      call?.span.setStatus({ code: SpanStatusCode.ERROR, message: context.error?.message })
    }
  }
  const tracing = /** @type {import('node:diagnostics_channel').TracingChannel<unknown, import('fastify-rate-guard').RedisCallContext & { error?: Error }>} */ (diagnostics.tracingChannel(CHANNELS.redis))
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  tracing.subscribe(handlers)
  return () => {
    diagnostics.unsubscribe(CHANNELS.decision, onDecision)
    tracing.unsubscribe(handlers)
  }
}
