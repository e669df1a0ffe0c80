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

t.test('the load shedder: its gauges, observed at each collection, and its sheds among the decisions', async t => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
  const meterProvider = new MeterProvider({ readers: [reader] })
  const app = Fastify()
  let reads = 0
  const stats = (): ReturnType<typeof app.rateGuard.stats> => {
    reads++
    return app.rateGuard.stats()
  }
  const stop = instrumentRateGuard({ meter: meterProvider.getMeter('test'), stats })
  t.teardown(async () => {
    stop()
    await meterProvider.shutdown()
  })
  t.teardown(() => app.close())
  const nameSpace = uniquePrefix()
  // Two in flight, one of them kept for the critical class; no signal, and no sample within the test.
  const shed = { inFlight: 2, reserve: 0.5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: '10 seconds' } as const
  await app.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace, timeout: 3000, max: 5, shed })
  let release: () => void = () => {}
  let entered: () => void = () => {}
  const holding = new Promise<void>(resolve => { entered = resolve })
  app.get('/hold', async () => {
    await new Promise<void>(resolve => { release = resolve; entered() })
    return 'done'
  })
  app.get('/', async () => 'ok')
  await app.ready()
  const held = app.inject('/hold')
  await holding
  t.equal((await app.inject('/')).statusCode, 503, 'one in flight: a normal request is shed')

  const gauges = async (): Promise<Record<string, Array<[string | undefined, number]>>> => {
    exporter.reset()
    await reader.forceFlush()
    const exported = exporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics))
    return Object.fromEntries(exported.filter(m => m.descriptor.name.startsWith('rate_guard.shed.')).map(m => [m.descriptor.name,
      (m.dataPoints as Array<DataPoint<number>>).map(p => [p.attributes['rate_guard.priority'] as string | undefined, p.value])]))
  }
  t.strictSame(await gauges(), {
    'rate_guard.shed.in_flight': [[undefined, 1]],
    'rate_guard.shed.limit': [[undefined, 2]],
    'rate_guard.shed.admitted': [['critical', 1], ['normal', 1], ['sheddable', 1]]
  }, 'in flight, the capacity, and each class\'s share')
  const counter = exporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics)).find(m => m.descriptor.name === 'rate_guard.decisions')!
  const sheds = counter.dataPoints.filter(p => p.attributes['rate_guard.outcome'] === 'shed')
  t.strictSame(sheds.map(p => [p.attributes['rate_guard.budget'], p.value]), [['shed', 1]], 'the shed, among the decisions')
  release()
  await held
  t.strictSame((await gauges())['rate_guard.shed.in_flight'], [[undefined, 0]], 'the held one over')
  const before = reads
  stop()
  await gauges()
  t.equal(reads, before, 'stopped: stats() read no more')
})
