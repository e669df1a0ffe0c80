// Prometheus metrics for an app: the wiring ships in the package (`fastify-rate-guard/prometheus`), the series
// are listed in docs/operations.md, and `fastify-rate-guard/grafana-dashboard.json` is a dashboard on them.
// prom-client is an optional peer dependency: the app installs it.
//
//   node examples/metrics-prometheus.js   (after npm run build; REDIS_URL to count in Redis), then GET /metrics

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'
import { collectRateGuardMetrics } from 'fastify-rate-guard/prometheus'
import client from 'prom-client'

export { collectRateGuardMetrics }

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
