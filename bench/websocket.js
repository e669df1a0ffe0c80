// A WebSocket message's added cost (issue 45): an echo server on @fastify/websocket without the adapter, and with
// fastify-rate-guard/websocket counting every message in process and in Redis (127.0.0.1:6379, or REDIS_URL),
// each the same app but for the adapter. N clients each send M messages one after the other, each waiting for
// its echo (its round trip measured); the variants take turns, round after round, so a machine that slows down
// slows them all. Limits are far above the traffic: every message is decided and let through. Printed: messages
// a second and the round trip's p50 and p99, each the median of the rounds. Nothing refused, nothing asserted:
// the figures are this machine's, read beside the bare server's of the same run.
//
//   npm run build && node bench/websocket.js
//   WS_CLIENTS=20 WS_MESSAGES=500 WS_ROUNDS=5 REDIS_URL=redis://127.0.0.1:6379 node bench/websocket.js
//
// The clients run in this process beside the servers (one process, one core's event loop, for every variant
// alike): the figures are relative, the bare server's the baseline.

import { once } from 'node:events'
import { randomBytes } from 'node:crypto'
import Fastify from 'fastify'
import websocket from '@fastify/websocket'
import { Redis } from 'ioredis'
import WebSocket from 'ws'
import rateGuard from 'fastify-rate-guard'
import websocketRateGuard from 'fastify-rate-guard/websocket'

const CLIENTS = Number(process.env.WS_CLIENTS ?? 20)
const MESSAGES = Number(process.env.WS_MESSAGES ?? 500)
const ROUNDS = Number(process.env.WS_ROUNDS ?? 5)
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const NAME_SPACE = `bench-ws-${randomBytes(4).toString('hex')}:`

const HIGH = { max: 1_000_000_000, timeWindow: '1 minute' }
const BY_CLIENT = { keyGenerator: (/** @type {import('fastify').FastifyRequest} */ request) => String(request.headers['x-client']) }

/** The variants: the adapter's options (null: none), and the store. */
const VARIANTS = [
  { name: 'bare (no adapter)', adapter: null, redis: false },
  { name: 'in process: messages', adapter: { messages: HIGH }, redis: false },
  { name: 'in process: messages + per connection + bytes', adapter: { messages: HIGH, connectionMessages: HIGH, bytes: HIGH }, redis: false },
  { name: 'Redis: messages', adapter: { messages: HIGH }, redis: true },
  { name: 'Redis: messages + per connection + bytes', adapter: { messages: HIGH, connectionMessages: HIGH, bytes: HIGH }, redis: true }
]

/** @param {typeof VARIANTS[number]} variant */
async function serve (variant) {
  const app = Fastify()
  if (variant.adapter !== null) {
    await app.register(rateGuard, { global: false, ...(variant.redis ? { redis: REDIS_URL, nameSpace: NAME_SPACE } : {}) })
  }
  await app.register(websocket)
  if (variant.adapter !== null) await app.register(websocketRateGuard, { ...BY_CLIENT, ...variant.adapter })
  app.get('/echo', { websocket: true }, (socket) => {
    socket.on('message', (data) => socket.send(data))
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = /** @type {import('node:net').AddressInfo} */ (app.server.address())
  return { app, url: `ws://127.0.0.1:${port}/echo` }
}

/**
 * One round on one server: every client sends its messages one at a time; each round trip in ms.
 * @param {string} url
 */
async function round (url) {
  const sockets = await Promise.all(Array.from({ length: CLIENTS }, async (_, i) => {
    const socket = new WebSocket(url, { headers: { 'x-client': `client-${i}` } })
    await once(socket, 'open')
    return socket
  }))
  /** @type {number[]} */
  const trips = []
  const started = performance.now()
  await Promise.all(sockets.map(async (socket) => {
    for (let m = 0; m < MESSAGES; m++) {
      const sent = performance.now()
      socket.send(`message ${m}`)
      await once(socket, 'message')
      trips.push(performance.now() - sent)
    }
  }))
  const seconds = (performance.now() - started) / 1000
  await Promise.all(sockets.map(async (socket) => {
    socket.close()
    await once(socket, 'close')
  }))
  trips.sort((a, b) => a - b)
  return { perSecond: trips.length / seconds, p50: trips[Math.floor(trips.length * 0.5)], p99: trips[Math.floor(trips.length * 0.99)] }
}

/** @param {number[]} values */
function median (values) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

const servers = []
for (const variant of VARIANTS) servers.push({ variant, ...(await serve(variant)), rounds: /** @type {Array<Awaited<ReturnType<typeof round>>>} */ ([]) })
// A first round each, not counted: connections, scripts loaded, the JIT warm.
for (const server of servers) await round(server.url)
for (let r = 0; r < ROUNDS; r++) {
  for (const server of servers) {
    server.rounds.push(await round(server.url))
    process.stderr.write(`round ${r + 1}/${ROUNDS}: ${server.variant.name}\n`)
  }
}
for (const { app } of servers) await app.close()
const redis = new Redis(REDIS_URL)
const keys = await redis.keys(`${NAME_SPACE}*`)
if (keys.length > 0) await redis.del(...keys)
redis.disconnect()

const bare = median(servers[0].rounds.map(r => r.perSecond))
console.log(`${CLIENTS} clients × ${MESSAGES} messages, each waiting for its echo; median of ${ROUNDS} rounds (Node ${process.version})\n`)
console.log('| variant | messages/s | vs bare | round trip p50 (ms) | p99 (ms) |')
console.log('|---|---:|---:|---:|---:|')
for (const { variant, rounds } of servers) {
  const perSecond = median(rounds.map(r => r.perSecond))
  const p50 = median(rounds.map(r => r.p50))
  const p99 = median(rounds.map(r => r.p99))
  console.log(`| ${variant.name} | ${Math.round(perSecond)} | ${(perSecond / bare * 100).toFixed(0)}% | ${p50.toFixed(3)} | ${p99.toFixed(3)} |`)
}
