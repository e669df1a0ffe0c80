// Surprise, not attack: a limiter with options of its own placed as a route's preHandler never ran where
// the plugin-wide hook had already limited the request (one limit per request and registration, as in
// @fastify/rate-limit), and nothing said so. The rule is now in the README; this pins it, and the way out.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'

async function statuses (app: FastifyInstance, url: string, n: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject(url)).statusCode)
  return out
}

t.test('a limiter with options as a route\'s preHandler: skipped under the plugin-wide hook, alone with rateLimit: false', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { max: 100, timeWindow: '1 minute' })
  const strict = app.rateLimit({ max: 1, timeWindow: '1 minute' })
  app.get('/both', { preHandler: strict }, async () => 'ok')
  app.get('/alone', { preHandler: app.rateLimit({ max: 1, timeWindow: '1 minute' }), config: { rateLimit: false } }, async () => 'ok')
  await app.ready()
  t.same(await statuses(app, '/both', 3), [200, 200, 200], 'the plugin-wide hook limited it first: the preHandler limiter is skipped')
  t.same(await statuses(app, '/alone', 3), [200, 429, 429], 'with config.rateLimit false, the limiter alone decides')
})
