// The operator tools' edges that traffic alone seldom reaches, driven through their own inputs (the diagnostics
// channels, the page's cookies and the proxy's scheme): a breaker that opens, a decision with no binding limit, a
// Redis call that fails or was in flight before the wiring subscribed, a page that has counted TRACKED clients.
import diagnostics from 'node:diagnostics_channel'
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import client from 'prom-client'
import t from 'tap'
import { CHANNELS } from '../lib/index.js'
import type { DecisionMessage, RedisCallContext } from '../lib/index.js'
import { instrumentRateGuard } from '../lib/operator/opentelemetry.js'
import { collectRateGuardMetrics } from '../lib/operator/prometheus.js'
import { buildOperatorApp } from './helpers/operator-app.js'
import { uniquePrefix } from './helpers/redis.js'

const tracing = diagnostics.tracingChannel<unknown, RedisCallContext & { error?: Error }>(CHANNELS.redis)
const decision = (nameSpace: string, keyHash: string): DecisionMessage => ({
  outcome: 'limited',
  nameSpace,
  budget: 'default',
  algorithm: 'sliding-log',
  limit: undefined,
  cost: 1,
  redisMs: undefined,
  batchSize: undefined,
  keyHash,
  keyKind: 'ip',
  mode: 'enforce',
  inFlight: undefined,
  waitedMs: undefined
})

t.test('prometheus: the breaker gauge follows the channel; no binding limit is an empty label; a call seen only ending', async t => {
  const registry = new client.Registry()
  const stop = collectRateGuardMetrics(registry)
  t.teardown(stop)
  const nameSpace = uniquePrefix()
  diagnostics.channel(CHANNELS.breaker).publish({ nameSpace, state: 'open' })
  diagnostics.channel(CHANNELS.decision).publish(decision(nameSpace, 'h1'))
  const context: RedisCallContext = { nameSpace, mode: 'decide', algorithm: 'sliding-log', batchSize: 1 }
  tracing.asyncEnd.publish(context)
  tracing.error.publish({ ...context, error: new Error('READONLY') })
  diagnostics.channel(CHANNELS.trouble).publish({ nameSpace, error: new Error('READONLY'), failMode: 'open', reason: 'redis' })
  const lines = (await registry.metrics()).split('\n')
  t.ok(lines.includes(`rate_guard_breaker_open{namespace="${nameSpace}"} 1`), 'open: 1, though it came before any decision')
  t.ok(lines.includes(`rate_guard_redis_trouble_total{namespace="${nameSpace}"} 1`), 'the trouble counted')
  t.ok(lines.includes(`rate_guard_decisions_total{namespace="${nameSpace}",budget="default",limit="",outcome="limited"} 1`))
  t.ok(lines.includes(`rate_guard_redis_call_seconds_count{namespace="${nameSpace}",mode="decide",algorithm="sliding-log"} 1`),
    'a call already in flight when the wiring subscribed is counted, as taking no time')
  diagnostics.channel(CHANNELS.breaker).publish({ nameSpace, state: 'closed' })
  t.ok((await registry.metrics()).split('\n').includes(`rate_guard_breaker_open{namespace="${nameSpace}"} 0`), 'closed: 0')
})

t.test('opentelemetry: a failed call is an error span; a call seen only ending is left out; no limit is empty', async t => {
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
  const meterProvider = new MeterProvider({ readers: [reader] })
  const spans = new InMemorySpanExporter()
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] })
  const stop = instrumentRateGuard({ meter: meterProvider.getMeter('test'), tracer: tracerProvider.getTracer('test') })
  t.teardown(async () => {
    stop()
    await meterProvider.shutdown()
    await tracerProvider.shutdown()
  })
  const nameSpace = uniquePrefix()
  diagnostics.channel(CHANNELS.decision).publish(decision(nameSpace, 'h1'))
  tracing.asyncEnd.publish({ nameSpace, mode: 'decide', algorithm: 'sliding-log', batchSize: 1 })
  const failed = { nameSpace, mode: 'decide', algorithm: 'sliding-log' as const, batchSize: 2, error: new Error('READONLY') }
  tracing.start.publish(failed)
  tracing.error.publish(failed)
  tracing.asyncEnd.publish(failed)
  const [span] = spans.getFinishedSpans()
  t.equal(spans.getFinishedSpans().length, 1, 'the call seen only ending made no span')
  t.equal(span?.status.message, 'READONLY', 'the failed call: an error span')
  t.equal(span?.events[0]?.name, 'exception', 'with its exception')
  await reader.forceFlush()
  const metrics = exporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics))
  const counted = metrics.find(m => m.descriptor.name === 'rate_guard.decisions')?.dataPoints[0]
  t.equal(counted?.attributes['rate_guard.limit'], '', 'no binding limit: an empty attribute')
})

t.test('opentelemetry: the shedder\'s gauges observe nothing without a shedder, and no limit without a capacity', async t => {
  const admitted = { critical: 1, normal: 0.5, sheddable: 0 }
  for (const shed of [undefined, { inFlight: 3, limit: null, admitted }]) {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
    const meterProvider = new MeterProvider({ readers: [reader] })
    const stop = instrumentRateGuard({ meter: meterProvider.getMeter('test'), stats: () => (shed === undefined ? {} : { shed }) })
    await reader.forceFlush()
    const observed = exporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics))
      .filter(m => m.descriptor.name.startsWith('rate_guard.shed.') && m.dataPoints.length > 0)
      .map(m => [m.descriptor.name, m.dataPoints.map(p => p.value)])
    stop()
    await meterProvider.shutdown()
    t.strictSame(observed, shed === undefined
      ? []
      : [['rate_guard.shed.in_flight', [3]], ['rate_guard.shed.admitted', [1, 0.5, 0]]], shed === undefined ? 'no shedder: nothing' : 'no capacity: no limit')
  }
})

t.test('the page: a cookie header without its cookie, an HTTPS proxy, and the bound on the clients it counts', async t => {
  const app = await buildOperatorApp({ nameSpace: uniquePrefix(), operatorPassword: 'secret' })
  t.teardown(() => app.close())
  const authorization = 'Basic ' + Buffer.from('operator:secret').toString('base64')
  const first = await app.inject({ url: '/rate-guard', headers: { authorization, cookie: 'theme=dark; x=1', 'x-forwarded-proto': 'https' } })
  t.equal(first.statusCode, 200)
  t.match(String(first.headers['set-cookie']), /^rate-guard-device=[^;]+; Path=\/rate-guard; .*; Secure$/, 'a device cookie, Secure over HTTPS')
  const long = await app.inject({ url: '/rate-guard', headers: { authorization, cookie: `${String(first.headers['set-cookie']).split(';')[0]!}; pad=${'x'.repeat(9000)}` } })
  t.ok(long.headers['set-cookie'], 'a Cookie header past 8 KiB is not read: a new device cookie')

  // The page counts every refusal published in the process, whichever registration made it.
  for (let i = 0; i <= 10_000; i++) diagnostics.channel(CHANNELS.decision).publish(decision('any:', `client-${i}`))
  const data = (await app.inject({ url: '/rate-guard/data', headers: { authorization } })).json<{ top: Array<{ keyHash: string }> }>()
  t.strictSame(data.top.map(({ keyHash }) => keyHash), ['client-10000'], 'past 10,000 clients the counts start over')
})
