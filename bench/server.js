// One server variant in its own process (pinned by the runner to one core). argv[2] is JSON:
// { variant, redisUrl, nameSpace, limit?, batches? }: `limit` ({ max, windowMs }) replaces `/`'s limit of
// MAX per WINDOW_MS; `batches` (rate-guard only) subscribes to the plugin's Redis TracingChannel and counts
// the requests in each script call (a subscriber costs a little: off unless asked). It answers over IPC:
//   { type: 'snapshot' }            → { cpuUs, commands, roundTrips, rss, heapUsed }: process CPU (user + system,
//                                     µs), Redis commands and round trips sent by this process, since start
//   { type: 'inject', url, key, count } → sends that many requests in process (to put a key over its limit)
//   { type: 'ban', keys }           → bans those clients the variant's way (see BANS in bench/variants.js)
//   { type: 'drive', url, prefix, pool, requests, inFlight } → sends `requests` requests in process with
//                                     `app.inject`, `inFlight` at a time, keys `<prefix>k<i>` round-robin over
//                                     `pool` clients: { elapsedMs, cpuUs, statuses } (bench/inject.js)
//   { type: 'close' }               → closes the app and its clients, then exits
import Fastify from 'fastify'
import { Pipeline, Redis } from 'ioredis'
import { MAX, REALISTIC, WINDOW_MS } from './plan.js'

const { variant, redisUrl, nameSpace, limit = { max: MAX, windowMs: WINDOW_MS }, batches = false } = JSON.parse(process.argv[2])

// Commands sent to Redis, and round trips: a command sent on its own, or one batch (a pipeline, a MULTI, or
// what autopipelining gathered in one tick), written at once and answered together. Counted in this process,
// so a Redis shared with anyone else does not blur them.
let roundTrips = 0
let commands = 0
const sendCommand = Redis.prototype.sendCommand
Redis.prototype.sendCommand = function (command, stream) {
  commands++
  if (stream === undefined) roundTrips++
  return sendCommand.call(this, command, stream)
}
const exec = Pipeline.prototype.exec
Pipeline.prototype.exec = function (...args) {
  roundTrips++
  return exec.apply(this, args)
}

const clients = []
async function redisClient (options) {
  const client = new Redis(redisUrl, { lazyConnect: true, ...options })
  // A Redis that fails shows in the responses (503s, errors), not as ioredis's unhandled error events.
  client.on('error', () => {})
  clients.push(client)
  await client.connect()
  return client
}

const app = Fastify({ logger: false })
const handler = async () => ({ hello: 'world' })
let ban = async () => {}

/** Sends `count` requests with `key` to `url` in this process (not measured: before the load starts). */
async function inject (url, key, count) {
  for (let i = 0; i < count; i++) await app.inject({ method: 'GET', url, headers: { 'x-api-key': key } })
}

/**
 * `requests` requests in process, `inFlight` at a time, round-robin over `pool` clients: the in-process load of
 * bench/inject.js (no socket: what the plugin and Redis cost without HTTP's).
 */
async function drive ({ url, prefix, pool, requests, inFlight }) {
  const keys = Array.from({ length: pool }, (_, i) => `${prefix}k${i}`)
  const statuses = {}
  let next = 0
  const worker = async () => {
    while (next < requests) {
      const res = await app.inject({ method: 'GET', url, headers: { 'x-api-key': keys[next++ % pool] } })
      statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
    }
  }
  const cpu = process.cpuUsage()
  const started = performance.now()
  await Promise.all(Array.from({ length: inFlight }, worker))
  const used = process.cpuUsage(cpu)
  return { elapsedMs: performance.now() - started, cpuUs: used.user + used.system, statuses }
}

/** Requests per script call, as the plugin sent them (`batches`): size → calls. */
const batchSizes = {}

/** Sends each key two requests to /banned: over a limit of 1, so banned (or blocked) from then on. */
async function banByRequests (keys) {
  for (const key of keys) await inject('/banned', key, 2)
}

switch (variant.kind) {
  case 'bare':
    app.get('/', handler)
    app.get('/banned', handler)
    app.get('/realistic', handler)
    break
  case 'bare-refusal': {
    // No limiter: Fastify's own refusal, the floor under any limiter's banned flood. `/banned` is answered
    // 403 from an onRequest hook with the headers a ban sends, its error through Fastify's error handler.
    const refuse = (request, reply, done) => {
      reply.code(403).header('x-ratelimit-limit', MAX).header('x-ratelimit-remaining', 0).header('x-ratelimit-reset', 600).header('retry-after', 600)
      // An error without a stack trace, as this plugin's refusals are (capturing one costs more than the rest).
      const limit = Error.stackTraceLimit
      Error.stackTraceLimit = 0
      const error = new Error('Rate limit exceeded, retry in 10 minutes')
      Error.stackTraceLimit = limit
      error.statusCode = 403
      done(error)
    }
    app.get('/', handler)
    app.get('/banned', { onRequest: refuse }, handler)
    app.get('/realistic', handler)
    break
  }
  case 'rate-guard': {
    const { rateGuard, CHANNELS } = await import('../dist/index.js')
    const client = await redisClient({ enableOfflineQueue: false, enableAutoPipelining: variant.autopipelining })
    if (batches) {
      const diagnostics = await import('node:diagnostics_channel')
      diagnostics.tracingChannel(CHANNELS.redis).subscribe({
        start: (context) => { if (context.mode === 'decide') batchSizes[context.batchSize] = (batchSizes[context.batchSize] ?? 0) + 1 },
        end () {},
        asyncStart () {},
        asyncEnd () {},
        error () {}
      })
    }
    if (variant.subscribed) {
      const diagnostics = await import('node:diagnostics_channel')
      const nothing = () => {}
      for (const name of [CHANNELS.decision, CHANNELS.breaker, CHANNELS.trouble]) diagnostics.subscribe(name, nothing)
      diagnostics.tracingChannel(CHANNELS.redis).subscribe({ start: nothing, end: nothing, asyncStart: nothing, asyncEnd: nothing, error: nothing })
    }
    // The plugin's defaults otherwise (its 100 ms deadline, failMode 'closed'): a decision Redis misses is a
    // 503 in the responses column, and must not happen.
    // The bench's clients are its API keys, which the app vouches for (as @fastify/rate-limit's variant is
    // told by its keyGenerator): the API-key tier is on only where keys are verified.
    await app.register(rateGuard, { redis: client, algorithm: variant.algorithm, max: limit.max, timeWindow: limit.windowMs, nameSpace, verifyApiKey: () => true })
    app.get('/', handler)
    app.get('/banned', handler)
    app.get('/realistic', { config: { rateLimit: { max: REALISTIC.max, timeWindow: REALISTIC.windowMs } } }, handler)
    ban = async (keys) => {
      for (const key of keys) await app.rateGuard.ban(`apikey:${key}`, '10 minutes')
    }
    break
  }
  case 'frl-redis':
  case 'frl-memory': {
    const { default: rateLimit } = await import('@fastify/rate-limit')
    const store = variant.kind === 'frl-redis'
      ? { redis: await redisClient({ connectTimeout: 500, maxRetriesPerRequest: 1 }) }
      : { cache: 100_000 }
    await app.register(rateLimit, { ...store, nameSpace, max: limit.max, timeWindow: limit.windowMs, keyGenerator: request => request.headers['x-api-key'] })
    app.get('/', handler)
    app.get('/banned', { config: { rateLimit: { max: 1, timeWindow: 600_000, ban: 0 } } }, handler)
    app.get('/realistic', { config: { rateLimit: { max: REALISTIC.max, timeWindow: REALISTIC.windowMs } } }, handler)
    ban = banByRequests
    break
  }
  case 'rlf-redis': {
    const { RateLimiterRedis } = await import('rate-limiter-flexible')
    const client = await redisClient({ enableOfflineQueue: false })
    const limiter = new RateLimiterRedis({ storeClient: client, keyPrefix: `${nameSpace}main`, points: limit.max, duration: limit.windowMs / 1000 })
    const blocking = new RateLimiterRedis({ storeClient: client, keyPrefix: `${nameSpace}banned`, points: 1, duration: 600, blockDuration: 600 })
    app.get('/', { onRequest: rlfHook(limiter) }, handler)
    app.get('/banned', { onRequest: rlfHook(blocking) }, handler)
    const realistic = new RateLimiterRedis({ storeClient: client, keyPrefix: `${nameSpace}realistic`, points: REALISTIC.max, duration: REALISTIC.windowMs / 1000 })
    app.get('/realistic', { onRequest: rlfHook(realistic) }, handler)
    ban = banByRequests
    break
  }
  default:
    throw new Error(`unknown variant kind ${variant.kind}`)
}

/** rate-limiter-flexible as its Fastify example wires it: consume one point per request, 429 on rejection. */
function rlfHook (limiter) {
  const points = limiter.points
  return async function rateLimit (request, reply) {
    const key = request.headers['x-api-key'] ?? request.ip
    try {
      const res = await limiter.consume(key)
      reply.header('x-ratelimit-limit', points)
      reply.header('x-ratelimit-remaining', res.remainingPoints)
      reply.header('x-ratelimit-reset', Math.ceil(res.msBeforeNext / 1000))
    } catch (rejection) {
      if (rejection instanceof Error) throw rejection
      const seconds = Math.ceil(rejection.msBeforeNext / 1000)
      reply.header('x-ratelimit-limit', points)
      reply.header('x-ratelimit-remaining', 0)
      reply.header('x-ratelimit-reset', seconds)
      reply.header('retry-after', seconds)
      return reply.code(429).send({ statusCode: 429, error: 'Too Many Requests', message: `Rate limit exceeded, retry in ${seconds} seconds` })
    }
  }
}

await app.listen({ host: '127.0.0.1', port: 0 })

process.on('message', async (msg) => {
  if (msg.type === 'snapshot') {
    const cpu = process.cpuUsage()
    const { rss, heapUsed } = process.memoryUsage()
    process.send({ type: 'snapshot', cpuUs: cpu.user + cpu.system, commands, roundTrips, rss, heapUsed, batchSizes: { ...batchSizes } })
  } else if (msg.type === 'inject') {
    await inject(msg.url, msg.key, msg.count)
    process.send({ type: 'injected' })
  } else if (msg.type === 'drive') {
    process.send({ type: 'driven', ...await drive(msg) })
  } else if (msg.type === 'ban') {
    await ban(msg.keys)
    process.send({ type: 'banned' })
  } else if (msg.type === 'close') {
    await app.close()
    await Promise.all(clients.map(client => client.quit().catch(() => client.disconnect())))
    process.send({ type: 'closed' }, () => process.exit(0))
  }
})

process.send({ type: 'ready', port: app.server.address().port, pid: process.pid })
