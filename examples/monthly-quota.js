// A monthly quota by plan, as APIs are sold: each API key gets its plan's calls a month, reset on the 1st at
// midnight in the billing time zone (New York here: not a rolling 30 days, and not UTC's midnight), and at
// most 5 calls a second whatever the plan. The quota is counted beside the per-second limit, on the default
// algorithm (the exact sliding log counts the second; the quota is a count since the 1st).
//
//   node examples/monthly-quota.js          (after npm run build; REDIS_URL to count in Redis)
//   curl -i localhost:3000/v1/forecast -H 'x-api-key: key-ada'
//
// A 429 from the quota says, in X-RateLimit-Reset and Retry-After, the seconds until the 1st; `RateLimit-Policy`
// names both limits, the month's `w` its length in seconds.

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

/** A toy customer table: each API key's plan. A real one is a database the key is checked against. */
const PLAN_OF = new Map([['key-ada', 'free'], ['key-grace', 'pro']])

/** @type {Readonly<Record<string, number>>} calls a month, by plan */
export const PLANS = Object.freeze({ free: 3, pro: 1000 })

/** @param {import('fastify').FastifyRequest} request */
const planOf = (request) => PLAN_OF.get(String(request.headers['x-api-key']))

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string }} options */
export async function buildApp ({ redis, nameSpace } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false, standardHeaders: 'draft-10' })
  app.get('/v1/forecast', {
    // Unknown keys are refused before anything is counted.
    onRequest: async (request, reply) => { if (planOf(request) === undefined) return await reply.code(401).send({ error: 'unknown API key' }) },
    config: {
      rateLimit: {
        keyGenerator: (request) => String(request.headers['x-api-key']),
        limits: [
          { max: 5, timeWindow: '1 second', name: 'per-second' },
          { max: (request) => PLANS[planOf(request) ?? 'free'] ?? 0, per: 'month', timeZone: 'America/New_York', name: 'monthly' }
        ]
      }
    }
  }, async () => ({ forecast: 'sunny' }))
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`monthly-quota example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`)
}
