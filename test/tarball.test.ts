// The done-when: a fresh app that has only the packed tarball (no clone) mounts the operator page, the
// Prometheus and OpenTelemetry wiring and the Grafana dashboard from the package's own exports, as
// docs/operations.md shows. The tarball is packed here from dist/ as npm test built it (pretest), unpacked as the app's
// node_modules/fastify-rate-guard in a directory inside the repo (so fastify, prom-client and @opentelemetry/*
// resolve from the repo's node_modules by upward lookup, as an app's own would), and the app runs in a child
// process with no Redis, printing what it saw as JSON.
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import t from 'tap'
import { distIsBuilt } from './helpers/built.js'

const run = promisify(execFile)
const root = fileURLToPath(new URL('..', import.meta.url))

const APP = `
import { createRequire } from 'node:module'
import Fastify from 'fastify'
import client from 'prom-client'
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics'
import rateGuard from 'fastify-rate-guard'
import { operatorPage } from 'fastify-rate-guard/operator-page'
import { collectRateGuardMetrics } from 'fastify-rate-guard/prometheus'
import { instrumentRateGuard } from 'fastify-rate-guard/opentelemetry'

const dashboard = createRequire(import.meta.url)('fastify-rate-guard/grafana-dashboard.json')
const registry = new client.Registry()
const stopMetrics = collectRateGuardMetrics(registry)
const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
const meters = new MeterProvider({ readers: [reader] })
const stopTelemetry = instrumentRateGuard({ meter: meters.getMeter('app') })

const app = Fastify()
await app.register(rateGuard, { max: 2, timeWindow: '1 minute' })
app.get('/items', async () => ({ items: [] }))
app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
  reply.type(registry.contentType)
  return await registry.metrics()
})
await app.register(operatorPage, { credentials: { user: 'operator', password: 'secret' } })
for (let i = 0; i < 3; i++) await app.inject('/items')
const authorization = 'Basic ' + Buffer.from('operator:secret').toString('base64')
const page = await app.inject({ url: '/rate-guard', headers: { authorization } })
const metrics = await app.inject('/metrics')
await reader.forceFlush()
const decisions = exporter.getMetrics().flatMap(m => m.scopeMetrics.flatMap(s => s.metrics))
  .find(m => m.descriptor.name === 'rate_guard.decisions')
console.log(JSON.stringify({
  page: { status: page.statusCode, type: page.headers['content-type'], html: page.body.slice(0, 15) },
  metrics: metrics.body,
  otel: decisions?.dataPoints.map(p => [p.attributes['rate_guard.budget'], p.attributes['rate_guard.outcome'], p.value]) ?? [],
  queries: dashboard.panels.flatMap(panel => panel.targets.map(target => target.expr))
}))
stopMetrics()
stopTelemetry()
await meters.shutdown()
await app.close()
`

interface Seen { page: { status: number, type: string, html: string }, metrics: string, otel: Array<[string, string, number]>, queries: string[] }

t.test('a fresh app on the tarball alone mounts the operator page, the metrics and the dashboard', async t => {
  distIsBuilt(t, root)
  const packed = mkdtempSync(join(tmpdir(), 'rate-guard-pack-'))
  const app = join(root, 'test', `.tarball-app-${process.pid}`)
  t.teardown(() => {
    rmSync(packed, { recursive: true, force: true })
    rmSync(app, { recursive: true, force: true })
  })
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', packed], { cwd: root })
  const [tarball] = JSON.parse(stdout) as Array<{ filename: string, files: Array<{ path: string }> }>
  const files = new Set(tarball!.files.map(file => file.path))
  for (const tool of ['page', 'view', 'names', 'series', 'prometheus', 'opentelemetry']) {
    t.ok(files.has(`dist/operator/${tool}.js`) && files.has(`dist/operator/${tool}.d.ts`), `dist/operator/${tool} and its types`)
  }
  t.ok(files.has('dashboards/grafana.json') && files.has('CHANGELOG.md'), 'the dashboard and the CHANGELOG')

  const installed = join(app, 'node_modules', 'fastify-rate-guard')
  mkdirSync(installed, { recursive: true })
  await run('tar', ['xzf', join(packed, tarball!.filename), '-C', installed, '--strip-components=1'])
  writeFileSync(join(app, 'app.mjs'), APP)
  const out = await run(process.execPath, ['app.mjs'], { cwd: app, timeout: 30_000 })
  const seen = JSON.parse(out.stdout) as Seen

  t.equal(seen.page.status, 200, 'the operator page answers')
  t.match(seen.page.type, /^text\/html/, 'with HTML')
  t.equal(seen.page.html, '<!doctype html>')
  const lines = seen.metrics.split('\n')
  const series = 'rate_guard_decisions_total{namespace="rate-guard:",budget="default",limit="default"'
  t.ok(lines.includes(`${series},outcome="allowed"} 2`), '/metrics: the allowed requests')
  t.ok(lines.includes(`${series},outcome="limited"} 1`), 'and the one refused')
  const otel = seen.otel.filter(([budget]) => budget === 'default').map(([, outcome, n]) => [outcome, n])
  t.strictSame(Object.fromEntries(otel), { allowed: 2, limited: 1 }, 'OpenTelemetry recorded the same decisions')
  const families = new Set([...seen.metrics.matchAll(/^# TYPE (\w+)/gm)].map(([, name]) => name))
  t.ok(seen.queries.length >= 6, 'the dashboard parses, with its queries')
  for (const query of seen.queries) {
    const names = [...query.matchAll(/rate_guard_\w+/g)].map(([name]) => name.replace(/_(bucket|count|sum)$/, ''))
    t.ok(names.length > 0 && names.every(name => families.has(name)), `the dashboard's ${names.join(', ')}: exported`)
  }

  const cjs = await run(process.execPath, ['-e', "console.log(typeof require('fastify-rate-guard/prometheus').collectRateGuardMetrics)"], { cwd: app })
  t.equal(cjs.stdout.trim(), 'function', 'CommonJS: require(\'fastify-rate-guard/prometheus\')')
})
