// Webhooks: each sender may deliver 5 events a second. A burst over that is paced, not refused: a delivery
// its limit would allow within a second waits for its place (`maxWait`), counted in Redis across every
// instance, so the sender never gets more than 5 a second through and never has to retry; at most 5 of its
// deliveries wait at once (`maxQueue`), and one that would wait longer is refused with 429 as before. A
// delivery that waited says so: `X-RateLimit-Waited-Ms`.
//
//   node examples/webhooks.js          (after npm run build; REDIS_URL to count in Redis)
//   for i in $(seq 10); do curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -X POST localhost:3000/hooks \
//     -H 'x-api-key: sender-0001' -H 'content-type: application/json' -d '{}' & done; wait

import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

const SENDERS = new Set(['sender-0001'])

export const HOOKS = Object.freeze({ max: 5, timeWindow: '1 second', maxWait: '1 second', maxQueue: 5 })

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string, onEvent?: (event: unknown) => void }} options */
export async function buildApp ({ redis, nameSpace, onEvent = () => {} } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false, verifyApiKey: async (key) => SENDERS.has(key) })
  app.post('/hooks', { config: { rateLimit: HOOKS } }, async (request) => {
    onEvent(request.body)
    return { received: true }
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`webhooks example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`)
}
