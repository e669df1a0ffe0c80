// lib/operator/prometheus.ts (`fastify-rate-guard/prometheus`): the diagnostics channels as Prometheus metrics
// (prom-client), scraped from GET /metrics after real traffic on Redis, mounted as examples/metrics-prometheus.js
// mounts it; and the shipped dashboard (dashboards/grafana.json) held to the series it exports.
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import client from 'prom-client'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { collectRateGuardMetrics } from '../lib/operator/prometheus.js'
import { REFUSED } from '../lib/operator/series.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

/** The app of examples/metrics-prometheus.js, on lib/ (the example's own is run from the package by test/tarball.test.ts). */
async function buildApp ({ redis, nameSpace }: { redis: string, nameSpace: string }): Promise<FastifyInstance> {
  const registry = new client.Registry()
  const stop = collectRateGuardMetrics(registry, { nameSpaces: [nameSpace] })
  const app = Fastify()
  app.addHook('onClose', async () => stop())
  await app.register(rateGuard, { redis, nameSpace, max: 5, timeWindow: '1 minute' })
  app.get('/items', async () => ({ items: [] }))
  app.get('/search', { config: { rateLimit: { max: 2, mode: 'shadow' } } }, async () => ({ results: [] }))
  app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
    reply.type(registry.contentType)
    return await registry.metrics()
  })
  return app
}

t.test('decisions by budget, limit and outcome, and each Redis call\'s latency', async t => {
  const nameSpace = uniquePrefix()
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace })
  t.teardown(() => app.close())
  await app.ready()
  const fresh = (await app.inject('/metrics')).body
  t.ok(fresh.split('\n').includes(`rate_guard_breaker_open{namespace="${nameSpace}"} 0`), 'the breaker gauge has its series before anything happened')
  t.ok(fresh.split('\n').includes(`rate_guard_redis_trouble_total{namespace="${nameSpace}"} 0`), 'and so has the trouble counter')
  for (let i = 0; i < 7; i++) await app.inject('/items')
  for (let i = 0; i < 3; i++) await app.inject('/search')
  const lines = (await app.inject('/metrics')).body.split('\n')
  const ns = `namespace="${nameSpace}"`
  t.ok(lines.includes(`rate_guard_decisions_total{${ns},budget="default",limit="default",outcome="allowed"} 5`))
  t.ok(lines.includes(`rate_guard_decisions_total{${ns},budget="default",limit="default",outcome="limited"} 2`))
  t.ok(lines.includes(`rate_guard_decisions_total{${ns},budget="GET /search",limit="default",outcome="allowed"} 2`))
  t.ok(lines.includes(`rate_guard_decisions_total{${ns},budget="GET /search",limit="default",outcome="shadow-limited"} 1`))
  t.ok(lines.includes(`rate_guard_redis_call_seconds_count{${ns},mode="decide",algorithm="sliding-log"} 9`), 'a call per request (one at a time), but the last /items: its denial was held in process')
  t.ok(lines.includes(`rate_guard_redis_call_seconds_count{${ns},mode="peek",algorithm="sliding-log"} 1`), 'and the probe at registration')
  t.notOk(lines.some(line => /^rate_guard_decisions_total\{[^}]*outcome="unenforced"/.test(line)), 'no decision fell to failMode')
})

t.test('dashboards/grafana.json charts only what the wiring exports', async t => {
  const dashboard = JSON.parse(readFileSync(new URL('../dashboards/grafana.json', import.meta.url), 'utf8')) as { panels: Array<{ title: string, targets: Array<{ expr: string }> }> }
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix() })
  t.teardown(() => app.close())
  await app.inject('/items')
  const exported = (await app.inject('/metrics')).body
  const series = new Set([...exported.matchAll(/^(rate_guard_\w+?)(?:\{| )/gm)].map(([, name]) => name!))
  const labels = new Set([...exported.matchAll(/(\w+)="/g)].map(([, label]) => label!))
  const refused = dashboard.panels.find(panel => panel.title.startsWith('Refused'))?.targets[0]?.expr ?? ''
  const shown = new Set(/outcome=~\\?"([^"\\]+)/.exec(refused)?.[1]?.split('|'))
  t.strictSame([...shown].sort(), [...REFUSED].sort(), 'the Refused panel counts every refusal the operator page counts, in-flight too')
  t.ok(dashboard.panels.length >= 6, 'decisions by outcome and budget, refusals, latency, the breaker, trouble, failMode answers')
  for (const { title, targets } of dashboard.panels) {
    for (const { expr } of targets) {
      const names = [...expr.matchAll(/rate_guard_\w+/g)].map(([name]) => name)
      t.ok(names.length > 0 && names.every(name => series.has(name)), `${title}: ${names.join(', ')} exported`)
      const used = [...expr.matchAll(/(?:by \(|[{,]\s*)(\w+)(?=\s*[)=!~,])/g)].map(([, label]) => label!)
      t.ok(used.length > 0 && used.every(label => labels.has(label)), `${title}: labels ${used.join(', ')} exported`)
    }
  }
})

t.test('the load shedder: its gauges, read at each scrape, and its sheds among the decisions', async t => {
  const nameSpace = uniquePrefix()
  const registry = new client.Registry()
  const app = Fastify()
  const stop = collectRateGuardMetrics(registry, { nameSpaces: [nameSpace], stats: () => app.rateGuard.stats() })
  app.addHook('onClose', async () => stop())
  // Four in flight, two of them kept for the critical class; no signal, and no sample within the test.
  const shed = { inFlight: 4, reserve: 0.5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: '10 seconds' } as const
  await app.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace, max: 5, timeWindow: '1 minute', shed })
  t.teardown(() => app.close())
  // Requests held in their handler until released; `both` once two are.
  const held: Array<() => void> = []
  let heldTwo: () => void = () => {}
  const both = new Promise<void>(resolve => { heldTwo = resolve })
  app.get('/hold', async () => {
    await new Promise<void>(resolve => { if (held.push(resolve) === 2) heldTwo() })
    return 'done'
  })
  app.get('/items', async () => ({ items: [] }))
  // Never shed, nor counted in flight: the scrape is wanted most when the app is overloaded.
  app.get('/metrics', { config: { rateLimit: false, priority: 'exempt' } }, async (_request, reply) => {
    reply.type(registry.contentType)
    return await registry.metrics()
  })
  await app.ready()
  const scrape = async (): Promise<string[]> => (await app.inject('/metrics')).body.split('\n')
  const idle = await scrape()
  t.ok(idle.includes('rate_guard_shed_in_flight 0'), 'nothing in flight (the scrape is exempt)')
  t.ok(idle.includes('rate_guard_shed_limit 4'), 'the capacity')
  for (const priority of ['critical', 'normal', 'sheddable']) {
    t.ok(idle.includes(`rate_guard_shed_admitted_ratio{priority="${priority}"} 1`), `${priority}: all admitted`)
  }
  const holding = [app.inject('/hold'), app.inject('/hold')]
  await both
  t.equal((await app.inject('/items')).statusCode, 503, 'two in flight: a normal request is shed')
  const busy = await scrape()
  t.ok(busy.includes('rate_guard_shed_in_flight 2'), 'the two held')
  t.ok(busy.includes(`rate_guard_decisions_total{namespace="${nameSpace}",budget="shed",limit="",outcome="shed"} 1`), 'the shed, among the decisions')
  for (const release of held) release()
  await Promise.all(holding)
  t.ok((await scrape()).includes('rate_guard_shed_in_flight 0'), 'the held ones over')
})

t.test('the load shedder\'s gauges: no series without a shedder, no limit without a capacity', async t => {
  for (const shed of [false, { eventLoopDelay: false, eventLoopUtilization: false, pressure: () => false }] as const) {
    const registry = new client.Registry()
    const app = Fastify()
    const stop = collectRateGuardMetrics(registry, { stats: () => app.rateGuard.stats() })
    t.teardown(async () => { stop(); await app.close() })
    await app.register(rateGuard, { max: 5, timeWindow: '1 minute', shed })
    await app.ready()
    const series = (await registry.metrics()).split('\n').filter(line => line.startsWith('rate_guard_shed_'))
    t.strictSame(series, shed === false
      ? []
      : ['rate_guard_shed_in_flight 0', ...['critical', 'normal', 'sheddable'].map(priority => `rate_guard_shed_admitted_ratio{priority="${priority}"} 1`)],
    shed === false ? 'no shedder: no series' : 'a shedder of signals alone: no limit')
  }
})
