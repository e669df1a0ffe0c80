// Prometheus metrics from the plugin's diagnostics channels, with prom-client (a dev dependency here: your app
// installs it). Nothing in the plugin depends on it: it publishes on node:diagnostics_channel, and this file
// subscribes.
//
//   rate_guard_decisions_total{namespace, budget, limit, outcome}   every decision (outcome: allowed, limited,
//                                                             banned, ban-started, too-costly, in-flight, unenforced,
//                                                             unavailable, shadow-limited, shadow-banned, ...)
//   rate_guard_redis_call_seconds{namespace, mode, algorithm}  each script call (a batch of decisions)
//   rate_guard_breaker_open{namespace}                       1 while the breaker is open
//   rate_guard_redis_trouble_total{namespace}                Redis did not decide
//
// The gauge and the trouble counter have a series from the start (0) for every nameSpace given, and for any
// other from its first decision: a dashboard shows "closed, no trouble" rather than no data.
// examples/grafana-dashboard.json is a dashboard on these names.
//
//   node examples/metrics-prometheus.js   (after npm run build; REDIS_URL to count in Redis), then GET /metrics

import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import rateGuard, { CHANNELS } from 'fastify-rate-guard'
import client from 'prom-client'

/**
 * Subscribes metrics to the channels, in `registry`; returns a function that unsubscribes them all.
 * @param {import('prom-client').Registry} registry
 * @param {{ nameSpaces?: readonly string[] }} [options] the registrations' nameSpaces, to have their series from the start
 */
export function collectRateGuardMetrics (registry, { nameSpaces = ['rate-guard:'] } = {}) {
  const decisions = new client.Counter({ name: 'rate_guard_decisions_total', help: 'Rate limit decisions, by budget, binding limit and outcome', labelNames: ['namespace', 'budget', 'limit', 'outcome'], registers: [registry] })
  const calls = new client.Histogram({ name: 'rate_guard_redis_call_seconds', help: 'Script calls to Redis (each decides a batch)', labelNames: ['namespace', 'mode', 'algorithm'], buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5], registers: [registry] })
  const breaker = new client.Gauge({ name: 'rate_guard_breaker_open', help: '1 while the breaker skips Redis', labelNames: ['namespace'], registers: [registry] })
  const trouble = new client.Counter({ name: 'rate_guard_redis_trouble_total', help: 'Decisions Redis did not make (errors, deadlines)', labelNames: ['namespace'], registers: [registry] })

  const seen = new Set()
  /** @param {string} namespace */
  const start = (namespace) => {
    if (seen.has(namespace)) return
    seen.add(namespace)
    breaker.set({ namespace }, 0)
    trouble.inc({ namespace }, 0)
  }
  for (const namespace of nameSpaces) start(namespace)
  /** @param {unknown} message a DecisionMessage */
  const onDecision = (message) => {
    const { nameSpace, budget, limit, outcome } = /** @type {import('fastify-rate-guard').DecisionMessage} */ (message)
    start(nameSpace)
    decisions.inc({ namespace: nameSpace, budget, limit: limit ?? '', outcome })
  }
  /** @param {unknown} message a BreakerMessage */
  const onBreaker = (message) => {
    const { nameSpace, state } = /** @type {import('fastify-rate-guard').BreakerMessage} */ (message)
    breaker.set({ namespace: nameSpace }, state === 'open' ? 1 : 0)
  }
  /** @param {unknown} message a TroubleMessage */
  const onTrouble = (message) => { trouble.inc({ namespace: /** @type {import('fastify-rate-guard').TroubleMessage} */ (message).nameSpace }) }
  // The TracingChannel's context object travels from start to asyncEnd: the call's start time rides on it.
  /** @type {WeakMap<object, number>} */
  const started = new WeakMap()
  const tracing = /** @type {import('node:diagnostics_channel').TracingChannel<unknown, import('fastify-rate-guard').RedisCallContext & { error?: Error }>} */ (diagnostics.tracingChannel(CHANNELS.redis))
  const handlers = {
    /** @param {import('fastify-rate-guard').RedisCallContext} context */
    start: (context) => { started.set(context, performance.now()) },
    end: () => {},
    asyncStart: () => {},
    /** @param {import('fastify-rate-guard').RedisCallContext} context */
    asyncEnd: (context) => { calls.observe({ namespace: context.nameSpace, mode: context.mode, algorithm: context.algorithm }, (performance.now() - (started.get(context) ?? performance.now())) / 1000) },
    error: () => {}
  }
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

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string }} options */
export async function buildApp ({ redis, nameSpace } = {}) {
  const registry = new client.Registry()
  const stop = collectRateGuardMetrics(registry, { nameSpaces: [nameSpace ?? 'rate-guard:'] })
  const app = Fastify()
  app.addHook('onClose', async () => stop())
  await app.register(rateGuard, { redis, nameSpace, max: 5, timeWindow: '1 minute' })
  app.get('/items', async () => ({ items: [] }))
  app.get('/search', { config: { rateLimit: { max: 2, mode: 'shadow' } } }, async () => ({ results: [] }))
  // Scraped by Prometheus, so never limited (and guard it on a real network).
  app.get('/metrics', { config: { rateLimit: false } }, async (_request, reply) => {
    reply.type(registry.contentType)
    return await registry.metrics()
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`metrics example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}/metrics`)
}
