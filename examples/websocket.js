// Chat over WebSocket: each client (its API key, or else its address) may send 60 messages a minute across all
// its connections and every instance, 20 a minute on any one connection and 256 KiB a minute, and hold at most
// 3 connections open. A message over a limit is dropped before the chat sees it, and the client is told, once a
// retry period: {"error":"rate_limited","retryAfter":<seconds>}; a 4th connection is refused at the upgrade
// with 429 and `Retry-After`, before any socket opens.
//
//   node examples/websocket.js          (after npm run build; REDIS_URL to count in Redis)
//   npx wscat -c ws://localhost:3000/chat -H 'x-api-key: key-acme-0001'

import Fastify from 'fastify'
import websocket from '@fastify/websocket'
import rateGuard from 'fastify-rate-guard'
import websocketRateGuard from 'fastify-rate-guard/websocket'

const API_KEYS = new Set(['key-acme-0001'])

export const LIMITS = Object.freeze({
  messages: { max: 60, timeWindow: '1 minute' },
  connectionMessages: { max: 20, timeWindow: '1 minute' },
  bytes: { max: 256 * 1024, timeWindow: '1 minute' },
  connections: { max: 3 }
})

/** @param {{ redis?: string | import('ioredis').Redis, nameSpace?: string }} options */
export async function buildApp ({ redis, nameSpace } = {}) {
  const app = Fastify()
  await app.register(rateGuard, { redis, nameSpace, global: false, verifyApiKey: async (key) => API_KEYS.has(key) })
  await app.register(websocket)
  await app.register(websocketRateGuard, { ...LIMITS, onRefused: 'notify' })
  /** @type {Set<{ send (data: string): void }>} */
  const room = new Set()
  app.get('/chat', { websocket: true }, (socket) => {
    room.add(socket)
    socket.on('close', () => room.delete(socket))
    // Only messages within the limits arrive here, in the order they were sent.
    socket.on('message', (data) => {
      for (const member of room) member.send(String(data))
    })
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildApp({ redis: process.env.REDIS_URL })
  await app.listen({ port: Number(process.env.PORT ?? 3000) })
  console.log(`websocket example on ws://localhost:${/** @type {import('node:net').AddressInfo} */ (app.server.address()).port}/chat`)
}
