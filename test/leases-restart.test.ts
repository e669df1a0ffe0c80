// `concurrency` across a Redis restart that lost its data (issue 41), over real HTTP with two instances: the
// requests still running renew their leases, and the first renewal after the restart writes them back, so the
// requests sent next are refused, and the handlers themselves never count more than max running at once.
// (Before, renewal used ZADD XX, which only touches leases that still exist: max 3, six running.)
import diagnostics from 'node:diagnostics_channel'
import t from 'tap'
import type { Test } from 'tap'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import rateGuard from '../lib/index.js'
import { CHANNELS } from '../lib/channels.js'
import type { RedisCallContext } from '../lib/channels.js'
import { startRedisServer, uniquePrefix } from './helpers/redis.js'

const MAX = 3
const LEASE_MS = 1500

interface Answer { status: number, message?: string }

async function get (url: string, key = 'client'): Promise<Answer> {
  const res = await fetch(url, { headers: { 'x-api-key': key } })
  const body = await res.text()
  return { status: res.status, ...(res.status === 200 ? {} : { message: (JSON.parse(body) as { message: string }).message }) }
}

/**
 * An app on loopback, `GET /slow` held open under `concurrency: { max: 3 }`; `failMode: 'closed'`, so no answer
 * is let through unasked. Clients are told apart by `x-api-key`; what it logs goes to `logs`.
 */
async function listening (t: Test, url: string, nameSpace: string, handler: (request: FastifyRequest) => Promise<string>, logs: string[] = []): Promise<string> {
  const app: FastifyInstance = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { logs.push((JSON.parse(line) as { msg: string }).msg) } } } })
  await app.register(rateGuard, { redis: url, nameSpace, max: 100, timeWindow: '1 hour', failMode: 'closed', verifyApiKey: () => true })
  app.get('/slow', { config: { rateLimit: { concurrency: { max: MAX, lease: LEASE_MS } } } }, handler)
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => await app.close())
  return `http://127.0.0.1:${(app.server.address() as { port: number }).port}/slow`
}

/**
 * Resolves with the first renewal of `nameSpace`'s `requests` requests that Redis answered and that was sent once
 * `after()` held: a renewal sent after the old server exited ran on the new one.
 */
async function renewalAfter (t: Test, nameSpace: string, requests: number, after: () => boolean): Promise<number> {
  const sentAfter = new WeakSet<object>()
  return await new Promise(resolve => {
    const ours = (context: unknown): boolean => {
      const { nameSpace: its, mode, batchSize } = context as RedisCallContext
      return its === nameSpace && mode === 'renew' && batchSize === requests
    }
    const handlers = {
      start: (context: object) => { if (ours(context) && after()) sentAfter.add(context) },
      end: () => {},
      asyncStart: () => {},
      asyncEnd: (context: object) => { if (sentAfter.has(context)) resolve(Number((context as { result?: unknown }).result)) },
      error: () => {}
    }
    const tracing = diagnostics.tracingChannel(CHANNELS.redis)
    tracing.subscribe(handlers)
    t.teardown(() => { tracing.unsubscribe(handlers) })
  })
}

t.test('Redis restarted with its data lost while 3 of max 3 run: the first renewal writes them back, 3 more are refused', async t => {
  const server = await startRedisServer(t)
  const nameSpace = uniquePrefix()
  let open = (): void => {}
  const held = new Promise<void>(resolve => { open = resolve })
  // The handlers count the client's requests running at once; the other client's request only says it runs.
  let running = 0
  let most = 0
  let started = 0
  let otherRunning = false
  let answered = 0
  // Each step waits for an event: `wake` re-checks the waiting condition whenever a handler starts or an answer comes.
  let wake = (): void => {}
  const when = async (ready: () => boolean): Promise<void> => {
    await new Promise<void>(resolve => { wake = () => { if (ready()) resolve() }; wake() })
  }
  const handler = async (request: FastifyRequest): Promise<string> => {
    if (request.headers['x-api-key'] === 'other') otherRunning = true
    else {
      most = Math.max(most, ++running)
      started++
    }
    wake()
    await held
    if (request.headers['x-api-key'] !== 'other') running--
    return 'done'
  }
  const logs: string[] = []
  const a = await listening(t, server.url, nameSpace, handler, logs)
  const b = await listening(t, server.url, nameSpace, handler)
  const first = Array.from({ length: MAX }, async () => await get(a))
  // Another client's request holds a slot too: its lease, at a key of its own, is written back in the same round.
  const other = get(a, 'other')
  await when(() => running === MAX && otherRunning)
  let stopped = false
  const renewed = [MAX, 1].map(async requests => await renewalAfter(t, nameSpace, requests, () => stopped))
  await server.stop()
  stopped = true
  // Started with neither snapshot nor append-only file: the new server starts empty.
  await server.restart()
  t.strictSame(await Promise.all(renewed), [MAX, 1], 'the first renewals after the restart wrote back the leases they found gone (3, 1)')
  // What a renewal's answer leads to runs a few promise turns after it: all of them are over by the next macrotask.
  await new Promise(resolve => setImmediate(resolve))
  t.equal(logs.filter(msg => /were gone from Redis .* written back/.test(msg)).length, 1, 'said once, not once per client')

  const next = Array.from({ length: MAX }, async () => {
    const answer = await get(b)
    answered++
    wake()
    return answer
  })
  // Each of the 3 answered, or let through (then held open: it does not answer while held).
  await when(() => started - MAX + answered === MAX)
  t.equal(running, MAX, `${running} of the client's handlers running at once after 3 more were sent to the other instance`)
  t.equal(answered, MAX, `${answered} of the 3 answered while the first 3 run`)
  open()
  const refused = await Promise.all(next)
  t.strictSame(refused.map(answer => answer.status), [429, 429, 429], 'the 3 sent next were refused')
  t.ok(refused.every(answer => /in flight/.test(answer.message ?? '')), 'each refused for the requests in flight, not by failMode')
  t.strictSame((await Promise.all([...first, other])).map(answer => answer.status), [200, 200, 200, 200], 'the first 3 and the other client\'s end')
  t.equal(most, MAX, `at most ${MAX} of the client's handlers ran at once (${most})`)
  const after = await Promise.all([a, b, a].map(async url => await get(url)))
  t.strictSame(after.map(answer => answer.status), [200, 200, 200], 'their leases were released: 3 more run')
})
