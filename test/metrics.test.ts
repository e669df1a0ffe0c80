// examples/metrics-prometheus.js: the diagnostics channels as Prometheus metrics (prom-client), scraped from
// GET /metrics after real traffic on Redis, through the built package.
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { getRedis, uniquePrefix } from './helpers/redis.js'

interface Example { buildApp: (options: { redis: string, nameSpace: string }) => Promise<FastifyInstance> }

t.test('decisions by budget, limit and outcome, and each Redis call\'s latency', async t => {
  const example = 'metrics-prometheus.js'
  const { buildApp } = await import(`../examples/${example}`) as Example
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix() })
  t.teardown(() => app.close())
  await app.ready()
  for (let i = 0; i < 7; i++) await app.inject('/items')
  for (let i = 0; i < 3; i++) await app.inject('/search')
  const metrics = (await app.inject('/metrics')).body
  t.match(metrics, /^rate_guard_decisions_total\{budget="default",limit="default",outcome="allowed"\} 5$/m)
  t.match(metrics, /^rate_guard_decisions_total\{budget="default",limit="default",outcome="limited"\} 2$/m)
  t.match(metrics, /^rate_guard_decisions_total\{budget="GET \/search",limit="default",outcome="allowed"\} 2$/m)
  t.match(metrics, /^rate_guard_decisions_total\{budget="GET \/search",limit="default",outcome="shadow-limited"\} 1$/m)
  t.match(metrics, /^rate_guard_redis_call_seconds_count\{mode="decide",algorithm="sliding-log"\} 9$/m, 'a call per request (one at a time), but the last /items: its denial was held in process')
  t.match(metrics, /^rate_guard_redis_call_seconds_count\{mode="peek",algorithm="sliding-log"\} 1$/m, 'and the probe at registration')
  t.notMatch(metrics, /rate_guard_decisions_total\{[^}]*outcome="unenforced"/, 'no decision fell to failMode')
})
