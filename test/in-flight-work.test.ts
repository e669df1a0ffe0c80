// When a request's `concurrency` slots come back (lib/request/work.ts): when its handler and its response are
// both over, whatever way each ends. Every way a request ends frees its slot (a throw, a 404, a preHandler's
// refusal, a hijacked reply, a stream that fails, app.close()); a client that hangs up frees nothing until
// the app's work ends (a slow preHandler's refusal, a callback-style handler's late answer, an async handler
// that returns nothing, a limiter the app places); a handler that never ends holds it one lease past the
// hang-up; `request.rateGuard.hold()` keeps it for work after the response. Over real HTTP where a client
// must hang up; what is awaited is an event, never a sleep standing for one.
import { once } from 'node:events'
import { Readable } from 'node:stream'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix, until } from './helpers/redis.js'
import { allowing } from './helpers/lag.js'

/** A promise and what resolves it. */
function deferred (): { promise: Promise<void>, resolve: () => void } {
  let settle = (): void => {}
  const promise = new Promise<void>(resolve => { settle = resolve })
  return { promise, resolve: settle }
}

/** An app with the plugin (`options`, in process unless they say), `routes` declared, and GET /quick on the plugin-wide budget. */
async function makeApp (t: Test, options: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 1000, timeWindow: '1 hour', ...options })
  routes(app)
  app.get('/quick', async () => 'quick')
  return app
}

/** The status of GET /quick: 429 while the one slot is taken. */
async function quick (app: FastifyInstance): Promise<number> {
  return (await app.inject('/quick')).statusCode
}

/** A request on a socket of its own to `url`, hung up once `entered` resolves; resolves once the server heard it. */
async function hangUp (url: string, entered: Promise<unknown>, closed: () => Promise<unknown>): Promise<void> {
  const leaving = new AbortController()
  const gone = fetch(url, { signal: leaving.signal }).catch(() => {})
  await entered
  leaving.abort()
  await gone
  await closed()
}

t.test('every way a request ends frees its slot', async t => {
  const failing = (): Readable => new Readable({ read () { this.push('part'); this.destroy(new Error('the stream failed')) } })
  const refuse = async (): Promise<void> => { throw Object.assign(new Error('no'), { statusCode: 403 }) }
  const routes: Record<string, [number | undefined, (app: FastifyInstance) => void]> = {
    'a throw': [500, app => app.get('/end', async () => { throw new Error('the handler failed') })],
    'a synchronous throw': [500, app => app.get('/end', () => { throw new Error('the handler failed') })],
    'a synchronous value': [200, app => app.get('/end', () => 'at once')],
    'a 404 from the handler': [404, app => app.get('/end', (_request, reply) => { reply.callNotFound() })],
    'an unmatched URL (no slot taken)': [404, () => {}],
    'a preHandler that refuses': [403, app => app.get('/end', { preHandler: refuse }, async () => 'never')],
    'a hijacked reply': [200, app => app.get('/end', (_request, reply) => { reply.hijack(); reply.raw.end('mine') })],
    'a stream that fails': [undefined, app => app.get('/end', async () => failing())],
    'a callback-style answer': [200, app => app.get('/end', (_request, reply) => { setImmediate(() => reply.send('later')) })]
  }
  for (const [name, [status, route]] of Object.entries(routes)) {
    const app = await makeApp(t, { concurrency: { max: 1 } }, route)
    const res = await app.inject('/end').catch(() => undefined)
    if (status !== undefined) t.equal(res?.statusCode, status, `${name}: ${status}`)
    t.equal(await quick(app), 200, `${name}: its slot is free`)
  }
})

t.test('redis: app.close() while a request holds its slot: released when it ends', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const redis = client(t, url)
  const entered = deferred()
  const ending = deferred()
  const app = await makeApp(t, { redis: url, nameSpace, timeout: 5000, concurrency: { max: 1 } }, app => {
    app.get('/slow', async () => { entered.resolve(); await ending.promise; return 'done' })
  })
  const running = app.inject('/slow')
  await entered.promise
  const leases = identityKeys(nameSpace, GLOBAL_SCOPE, '127.0.0.1').leases
  t.equal(await redis.zcard(leases), 1, 'its lease is in Redis')
  const closing = app.close()
  ending.resolve()
  t.equal((await running).statusCode, 200)
  await closing
  await until(async () => await redis.zcard(leases) === 0, 'its lease to be released')
  t.pass('released, not left to end with its lease')
})

t.test('a client that hangs up frees nothing until the app\'s work ends (real HTTP)', async t => {
  const cases: Record<string, (app: FastifyInstance, entered: () => void, finish: Promise<void>) => void> = {
    'a slow preHandler that then refuses': (app, entered, finish) => {
      const refuse = async (): Promise<void> => { entered(); await finish; throw Object.assign(new Error('no'), { statusCode: 403 }) }
      app.get('/work', { preHandler: refuse }, async () => 'never')
    },
    'a callback-style handler answering later': (app, entered, finish) => {
      app.get('/work', (_request, reply) => { entered(); finish.then(() => reply.send('late'), () => {}) })
    },
    'an async handler returning nothing': (app, entered, finish) => {
      app.get('/work', async () => { entered(); await finish })
    },
    'a limiter the app places (fastify.rateLimit())': (app, entered, finish) => {
      // Its budget is the limiter's, on /work and /probe alike.
      const limiter = app.rateLimit({ concurrency: { max: 1 } })
      app.get('/work', { config: { rateLimit: false }, onRequest: limiter }, async () => { entered(); await finish; return 'done' })
      app.get('/probe', { config: { rateLimit: false }, onRequest: [limiter] }, async () => 'probe')
    }
  }
  for (const [name, route] of Object.entries(cases)) {
    const entered = deferred()
    const finish = deferred()
    let closed: Promise<unknown> = Promise.resolve()
    const app = await makeApp(t, { concurrency: { max: 1 } }, app => {
      app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
        if (request.url === '/work') closed = once(reply.raw, 'close')
      })
      route(app, entered.resolve, finish.promise)
    })
    const probe = name.startsWith('a limiter') ? '/probe' : '/quick'
    const onQuick = async (): Promise<number> => (await app.inject(probe)).statusCode
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    await hangUp(`${url}/work`, entered.promise, async () => await closed)
    t.equal(await onQuick(), 429, `${name}: its slot is held after the hang-up`)
    finish.resolve()
    await until(async () => await onQuick() !== 429, `${name}: its slot to come back`)
    t.pass(`${name}: its slot comes back once the work ends`)
  }
})

t.test('a handler that never ends, its client gone: its slot comes back a lease after the hang-up', async t => {
  const leaseMs = 1000
  const entered = deferred()
  // It ends at last only when the test says, long after its slot was let go; /hold holds the slot meanwhile.
  const atLast = deferred()
  const holds = deferred()
  const holdOn = deferred()
  let closed: Promise<unknown> = Promise.resolve()
  const app = await makeApp(t, { concurrency: { max: 1, lease: leaseMs } }, app => {
    app.get('/never', async (_request, reply) => {
      closed = once(reply.raw, 'close')
      entered.resolve()
      await atLast.promise
    })
    app.get('/hold', async () => {
      holds.resolve()
      await holdOn.promise
    })
  })
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  await hangUp(`${url}/never`, entered.promise, async () => await closed)
  const from = performance.now()
  t.equal(await quick(app), 429, 'held after the hang-up')
  let freedMs = Infinity
  while (performance.now() - from < allowing(leaseMs + 2000, from)) {
    if (await quick(app) === 200) {
      freedMs = performance.now() - from
      break
    }
    await new Promise(resolve => setTimeout(resolve, 25))
  }
  t.ok(freedMs >= leaseMs - 50, `not before a lease: ${Math.round(freedMs)} ms`)
  t.ok(freedMs <= allowing(leaseMs + 50, from), `free ${Math.round(freedMs)} ms after the hang-up (a lease: ${leaseMs} ms)`)

  // Another request takes the slot; then the first handler ends: what it gave back is not given back again.
  const holding = app.inject('/hold')
  await holds.promise
  t.equal(await quick(app), 429, 'the slot is held by another request')
  atLast.resolve()
  // The handler's end and what follows it are promise callbacks: all run before the loop's next turn.
  await new Promise(resolve => setImmediate(resolve))
  t.equal(await quick(app), 429, 'the first handler\'s late end gives nothing back twice: the other still holds the slot')
  holdOn.resolve()
  t.equal((await holding).statusCode, 200, 'the other request ends')
  t.equal(await quick(app), 200, 'and its slot is free')
})

t.test('request.rateGuard.hold(): the slot stays for work after the response, until done', async t => {
  const dones: Array<() => void> = []
  const requests: FastifyRequest[] = []
  const app = await makeApp(t, { concurrency: { max: 1 } }, app => {
    app.get('/later', async (request) => {
      requests.push(request)
      dones.push(request.rateGuard.hold(), request.rateGuard.hold())
      return 'answered'
    })
    app.get('/none', { config: { rateLimit: { concurrency: false } } }, async (request) => {
      request.rateGuard.hold()()
      return 'no slot to hold'
    })
  })
  t.equal((await app.inject('/later')).statusCode, 200, 'answered')
  t.equal(await quick(app), 429, 'the slot held past the response')
  dones[0]!()
  dones[0]!()
  t.equal(await quick(app), 429, 'a done called twice counts once: the other hold keeps it')
  dones[1]!()
  t.equal(await quick(app), 200, 'free once every hold is done')
  t.equal((await app.inject('/none')).statusCode, 200, 'a request holding no slot: hold() does nothing')
  t.equal((await app.inject('/later')).statusCode, 200)
  dones.pop()!()
  dones.pop()!()
  t.equal(await quick(app), 200, 'its holds done, its slot is free')
  requests.at(-1)!.rateGuard.hold()()
  t.equal(await quick(app), 200, 'a hold taken once the slots were let go does nothing')
  const unlimited = await makeApp(t, { allowList: ['127.0.0.1'], concurrency: { max: 1 } }, app => {
    app.get('/listed', async (request) => { request.rateGuard.hold()(); return 'nothing counted' })
  })
  t.equal((await unlimited.inject('/listed')).statusCode, 200, 'a request nothing counted: hold() does nothing')
})

t.test('two registrations on one route: one watch of its handler, and each one\'s slot held until it ends', async t => {
  const entered = deferred()
  const finish = deferred()
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 1000, timeWindow: '1 hour', concurrency: { max: 1 } })
  await app.register(async child => {
    await child.register(rateGuard, { nameSpace: uniquePrefix(), max: 1000, timeWindow: '1 hour', concurrency: { max: 1 } })
    child.get('/both', async () => { entered.resolve(); await finish.promise; return 'done' })
    child.get('/inner', async () => 'inner')
  })
  app.get('/outer', async () => 'outer')
  const running = app.inject('/both')
  await entered.promise
  t.strictSame([(await app.inject('/outer')).statusCode, (await app.inject('/inner')).statusCode], [429, 429], 'both registrations hold its slot')
  finish.resolve()
  t.equal((await running).statusCode, 200)
  t.strictSame([(await app.inject('/outer')).statusCode, (await app.inject('/inner')).statusCode], [200, 200], 'both free once it ended')
})

t.test('slots taken once the response is over (limiters run by hand in onResponse) are let go at once', async t => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 1000, timeWindow: '1 hour', global: false })
  const inner = uniquePrefix()
  await app.register(rateGuard, { nameSpace: inner, max: 1000, timeWindow: '1 hour', global: false })
  const outerLimiter = app.rateLimit({ concurrency: { max: 1 } })
  const innerLimiter = app.rateGuard.of(inner).rateLimit({ concurrency: { max: 1 } })
  app.get('/late', { onResponse: async (request, reply) => { await outerLimiter.call(app, request, reply); await innerLimiter.call(app, request, reply) } }, async () => 'late')
  app.get('/outer', { onRequest: outerLimiter }, async () => 'outer')
  app.get('/inner', { onRequest: innerLimiter }, async () => 'inner')
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  t.equal((await fetch(`${url}/late`)).status, 200)
  await until(async () => (await fetch(`${url}/outer`)).status === 200 && (await fetch(`${url}/inner`)).status === 200, 'both limiters\' slots free')
  t.pass('both limiters\' slots are free')
})
