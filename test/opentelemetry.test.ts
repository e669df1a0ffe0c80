// lib/operator/opentelemetry.ts (`fastify-rate-guard/opentelemetry`): the diagnostics channels as OpenTelemetry metrics and spans, read back with the
// SDK's in-memory exporters after real traffic on Redis, through the built package.
import Fastify from 'fastify'
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics'
import type { DataPoint } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { instrumentRateGuard } from '../lib/operator/opentelemetry.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

t.test('a counter of decisions by budget, limit and outcome; a span and a duration per Redis call', async t => {
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 })
  const meterProvider = new MeterProvider({ readers: [reader] })
  const spanExporter = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] })
  const stop = instrumentRateGuard({ meter: meterProvider.getMeter('test'), tracer: tracerProvider.getTracer('test') })
  t.teardown(async () => {
    stop()
    await meterProvider.shutdown()
    await tracerProvider.shutdown()
  })

  const app = Fastify()
  t.teardown(() => app.close())
  const nameSpace = uniquePrefix()
  await app.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace, timeout: 3000, max: 2, verifyApiKey: () => true })
  app.get('/', async () => 'ok')
  await app.ready()
  for (let i = 0; i < 3; i++) await app.inject({ url: '/', headers: { 'x-api-key': 'o' } })

  await reader.forceFlush()
  const exported = metricExporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics))
  const counter = exported.find(m => m.descriptor.name === 'rate_guard.decisions')!
  const points = (counter.dataPoints as Array<DataPoint<number>>).map(p => [p.attributes['rate_guard.outcome'], p.attributes['rate_guard.budget'], p.attributes['rate_guard.limit'], p.value])
  t.ok(counter.dataPoints.every(p => p.attributes['rate_guard.namespace'] === nameSpace), 'every decision says its nameSpace')
  t.strictSame(points.sort(), [['allowed', 'default', 'default', 2], ['limited', 'default', 'default', 1]])
  const histogram = exported.find(m => m.descriptor.name === 'rate_guard.redis.call.duration')!
  const decideCalls = histogram.dataPoints.filter(p => p.attributes['rate_guard.mode'] === 'decide')
  t.equal((decideCalls[0]!.value as { count: number }).count, 3, 'one call per request here')
  t.strictSame((decideCalls[0]!.value as { buckets: { boundaries: number[] } }).buckets.boundaries.slice(0, 3), [0.0001, 0.00025, 0.0005], 'buckets from a tenth of a millisecond, as advised')
  t.equal(decideCalls[0]!.attributes['rate_guard.namespace'], nameSpace)

  const spans = spanExporter.getFinishedSpans()
  const decides = spans.filter(s => s.name === 'rate-guard decide')
  t.equal(decides.length, 3)
  t.match(decides[0]!.attributes, { 'db.system': 'redis', 'rate_guard.algorithm': 'sliding-log', 'rate_guard.batch_size': 1 })
  t.equal(spans.filter(s => s.name === 'rate-guard peek').length, 1, 'and the probe at registration')
})
