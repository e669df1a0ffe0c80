// Streams: each API key may hold at most 3 event streams open at once, however long each runs, across every
// instance (`concurrency`), beside a rate of 60 opened a minute. A stream holds its slot until it ends or its
// client disconnects; the 4th is refused with 429 and `Retry-After: 1`.
//
//   node examples/streams.js          (after npm run build; REDIS_URL to count in Redis)
//   curl -N localhost:3000/events -H 'x-api-key: key-acme-0001'        (run it four times at once)

import { Readable } from 'node:stream'
import Fastify from 'fastify'
import rateGuard from 'fastify-rate-guard'

const API_KEYS = new Set(['key-acme-0001'])

export const STREAMS = Object.freeze({ max: 60, timeWindow: '1 minute', concurrency: { max: 3 } })

/**
 * Server-sent events: one a tick until `ticks` have been sent (or the client leaves).
 * @param {number} ticks
 * @param {number} everyMs
 */
function events (ticks, everyMs) {
  let sent = 0
  return new Readable({
    read () {
      if (sent === ticks) return this.push(null)
      setTimeout(() => this.push(`data: ${++sent}\n\n`), sent === 0 ? 0 : everyMs).unref()
    }
  })
}

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string, ticks?: number, everyMs?: number }} options */
export async function buildApp ({ redis, nameSpace, ticks = 600, everyMs = 1000 } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false, verifyApiKey: async (key) => API_KEYS.has(key) })
  app.get('/events', { config: { rateLimit: STREAMS } }, async (request, reply) => {
    reply.type('text/event-stream').header('cache-control', 'no-store')
    return events(ticks, everyMs)
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`streams example on http://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}`)
}
