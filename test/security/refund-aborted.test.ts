// Attack: `refundAborted` gives a request's charge back when the client hangs up. A GET that announces a
// body (`Content-Length: 100`) and sends only part of it is handled at once (Fastify does not wait for a GET's
// body), and its hang-up, after the response, marks the request aborted: were every abort refunded, the
// handler would run on every such request and none would count. Defence: a refund only for work not done,
// when the request ends before its handler starts; once the handler ran, the charge stands, and the handler's
// own `settle()` is honoured after an abort. Over real sockets, on Redis and in process.
import { once } from 'node:events'
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

async function listen (t: Test, where: Where, opts: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<{ app: FastifyInstance, port: number }> {
  const app = Fastify()
  t.teardown(() => app.close())
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000, failMode: 'closed' as const } : {}
  await app.register(rateGuard, { ...store, verifyApiKey: () => true, timeWindow: '1 minute', refundAborted: true, ...opts })
  routes(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, port: (app.server.address() as AddressInfo).port }
}

/**
 * Sends `head` and `body` on a connection of its own and hangs up: once `until` resolves, or the first bytes
 * of an answer came (a refusal). Resolves with the answer's status (0: none came) once the connection is closed.
 */
async function hangUp (t: Test, port: number, head: string, body: string, until: Promise<unknown>): Promise<number> {
  const socket = connect(port, '127.0.0.1')
  t.teardown(() => socket.destroy())
  socket.on('error', () => {})
  await once(socket, 'connect')
  let status = 0
  const answered = once(socket, 'data').then(([chunk]) => { status = Number(/^HTTP\/1\.1 (\d+)/.exec((chunk as Buffer).toString('latin1'))?.[1]) })
  socket.write(`${head}\r\nHost: localhost\r\nx-api-key: k\r\nContent-Length: 100\r\n\r\n${body}`)
  await Promise.race([until, answered])
  socket.destroy()
  await once(socket, 'close')
  return status
}

/** A promise `next()` makes, and the function that resolves the latest one (a handler's "I started"). */
function signal (): { next: () => Promise<void>, fire: () => void } {
  let fire = (): void => {}
  return { next: async () => await new Promise<void>(resolve => { fire = resolve }), fire: () => fire() }
}

/** Peeks until the client's count is `count`, giving the server's close events turns (at most 2 s). */
async function countBecomes (app: FastifyInstance, count: number): Promise<number> {
  const end = Date.now() + 2000
  let seen = -1
  while (seen !== count && Date.now() < end) {
    seen = (await app.rateGuard.peek('apikey:k')).count
    if (seen !== count) await new Promise(resolve => setTimeout(resolve, 5))
  }
  return seen
}

for (const where of STORES) {
  t.test(`${where}: a GET announcing a body it never sends, hung up while its handler runs: the handler ran, so it counts`, async t => {
    let ran = 0
    const started = signal()
    const { app, port } = await listen(t, where, { max: 5 }, app => {
      app.get('/work', async () => {
        ran++
        started.fire()
        await new Promise(resolve => setTimeout(resolve, 10))
        return 'done'
      })
    })
    const statuses: number[] = []
    for (let i = 0; i < 100; i++) statuses.push(await hangUp(t, port, 'GET /work HTTP/1.1', 'partial', started.next()))
    t.equal(ran, 5, 'the handler ran 5 times at max 5 a minute, not 100')
    t.equal(statuses.filter(s => s === 429).length, 95, 'the rest were refused')
    t.equal(await countBecomes(app, 5), 5, 'the 5 that ran stay counted after their hang-ups')
  })

  t.test(`${where}: a handler that settles after its client hung up is honoured`, async t => {
    const settled: string[] = []
    const started = signal()
    const { app, port } = await listen(t, where, { max: 100 }, app => {
      app.get('/chat', async (request) => {
        started.fire()
        // once() would reject on the request's 'error' (its body cut short): only its close is awaited.
        await new Promise(resolve => request.raw.on('close', resolve))
        // The answer's tokens were spent whether or not the client stayed to read them.
        await request.rateGuard.settle(30).then(() => settled.push('ok'), (err: { code: string }) => settled.push(err.code))
        return 'too late'
      })
    })
    await hangUp(t, port, 'GET /chat HTTP/1.1', '', started.next())
    t.equal(await countBecomes(app, 30), 30, 'charged the 30 the handler settled at')
    t.strictSame(settled, ['ok'], 'not refused as already settled')
  })

  t.test(`${where}: a client that hangs up before the handler starts is refunded, and the handler does not run`, async t => {
    let ran = 0
    let entered = (): void => {}
    let release = (): void => {}
    const gate = new Promise<void>(resolve => { release = resolve })
    const { app, port } = await listen(t, where, { max: 100 }, app => {
      app.get('/slow', {
        preHandler: async () => {
          entered()
          await gate
        }
      }, async () => {
        ran++
        return 'done'
      })
      app.post('/upload', async () => {
        ran++
        return 'stored'
      })
    })
    const inPreHandler = new Promise<void>(resolve => { entered = resolve })
    await hangUp(t, port, 'GET /slow HTTP/1.1', '', inPreHandler)
    t.equal(await countBecomes(app, 0), 0, 'hung up during a slow preHandler: given back')
    release()
    await new Promise(resolve => setTimeout(resolve, 50))
    t.equal(ran, 0, 'the handler of a request given back does not run')
    t.equal(await countBecomes(app, 0), 0)

    await hangUp(t, port, 'POST /upload HTTP/1.1\r\nContent-Type: application/json', '{"par', new Promise(resolve => setTimeout(resolve, 20)))
    t.equal(await countBecomes(app, 0), 0, 'hung up while its body was read: given back')
    t.equal(ran, 0)
  })
}

t.test('memory: a request settled before its handler (refused by a preHandler, not counted) and then hung up: nothing more to give back', async t => {
  const errors: string[] = []
  const app = Fastify({ logger: { level: 'error', stream: { write: (line: string) => { errors.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { verifyApiKey: () => true, max: 100, refundAborted: true, skipFailedRequests: true })
  app.get('/private', { preHandler: async (_request, reply) => await reply.code(401).send('no') }, async () => 'never')
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as AddressInfo
  t.equal(await hangUp(t, port, 'GET /private HTTP/1.1', 'partial', new Promise(() => {})), 401)
  t.equal(await countBecomes(app, 0), 0, 'the 401 was given back after its response')
  await new Promise(resolve => setTimeout(resolve, 20))
  t.strictSame(errors, [], 'the hang-up gives nothing back twice')
})
