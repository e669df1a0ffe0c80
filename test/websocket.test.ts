// fastify-rate-guard/websocket over real WebSocket clients (`ws`) against apps listening on a port, in process and
// on Redis: messages per client across two instances (what the apps' handlers really received), per connection
// and in bytes; refusals closed or notified; connections per client at the upgrade; order; shadow mode; failMode;
// the options checked at register. Every wait is for an event (a message, a close, a count reached), none a sleep.
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { EventEmitter, once } from 'node:events'
import type { IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import websocket from '@fastify/websocket'
import t from 'tap'
import type { Test } from 'tap'
import WebSocket from 'ws'
import rateGuard from '../lib/index.js'
import { CHANNELS } from '../lib/channels.js'
import type { RateGuardOptions } from '../lib/index.js'
import websocketRateGuard from '../lib/adapters/websocket.js'
import type { Refusal, WebsocketRateGuardOptions } from '../lib/adapters/websocket.js'
import { byteLength } from '../lib/adapters/websocket-gate.js'
import { allowing } from './helpers/lag.js'
import { client, getRedis, ready, scriptCalls, startRedisServer, uniquePrefix } from './helpers/redis.js'

/** An app's observer: what its handlers received (by client), its refusals, and the server side's closes. */
interface Served {
  app: FastifyInstance
  url: string
  /** Messages the app's handler received, by the client's `x-client` header, in order. */
  received: Map<string, string[]>
  /** Refusals the app's own `onRefused` saw (when the test gives none of its own). */
  refused: Refusal[]
  /** Sockets the server closed so far (their 'close' heard by the app's handler). */
  closed: number
  events: EventEmitter
}

const KEYED = { keyGenerator: (request: { headers: Record<string, unknown> }) => String(request.headers['x-client'] ?? 'anonymous') }

async function serve (
  t: Test, guard: RateGuardOptions, options: WebsocketRateGuardOptions, routes?: (app: FastifyInstance) => void
): Promise<Served> {
  const app = Fastify()
  const served: Served = { app, url: '', received: new Map(), refused: [], closed: 0, events: new EventEmitter() }
  await app.register(rateGuard, { global: false, ...guard })
  await app.register(websocket)
  await app.register(websocketRateGuard, {
    ...KEYED,
    onRefused: (_socket, refusal) => { served.refused.push(refusal); served.events.emit('change') },
    ...options
  })
  app.get('/ws', { websocket: true }, (socket, request) => {
    const name = String(request.headers['x-client'] ?? 'anonymous')
    socket.on('message', (data: Buffer) => {
      const text = data.toString()
      served.received.set(name, [...served.received.get(name) ?? [], text])
      served.events.emit('change')
      if (text === 'throw') throw new Error('the app\'s listener failed')
      socket.send(`echo:${text}`)
    })
    socket.on('close', () => { served.closed++; served.events.emit('change') })
  })
  routes?.(app)
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const { port } = app.server.address() as { port: number }
  served.url = `ws://127.0.0.1:${port}`
  return served
}

/** Resolves once `check` holds, looked at each time the app changes. */
async function until (events: EventEmitter | EventEmitter[], check: () => boolean): Promise<void> {
  const all = [events].flat()
  while (!check()) await Promise.race(all.map(async e => await once(e, 'change')))
}

async function open (url: string, name: string, path = '/ws'): Promise<WebSocket> {
  const socket = new WebSocket(`${url}${path}`, { headers: { 'x-client': name } })
  await once(socket, 'open')
  return socket
}

/** An upgrade the server answers in HTTP: its status and headers. */
async function refusedUpgrade (url: string, name: string): Promise<IncomingMessage> {
  const socket = new WebSocket(`${url}/ws`, { headers: { 'x-client': name } })
  const [, response] = await once(socket, 'unexpected-response') as [unknown, IncomingMessage]
  response.resume()
  socket.on('error', () => {})
  return response
}

/** The next `count` messages the client is sent, as text. */
async function next (socket: WebSocket, count = 1): Promise<string[]> {
  const got: string[] = []
  return await new Promise(resolve => {
    const on = (data: Buffer): void => {
      got.push(data.toString())
      if (got.length < count) return
      socket.off('message', on)
      resolve(got)
    }
    socket.on('message', on)
  })
}

const countOf = (served: Served, name: string): number => served.received.get(name)?.length ?? 0

/** The stores each test runs on: in process, and on the shared Redis under a fresh name space. */
async function storesOf (t: Test): Promise<Array<[string, () => RateGuardOptions]>> {
  const { url } = await getRedis(t)
  return [['in process', () => ({})], ['Redis', () => ({ redis: url, nameSpace: uniquePrefix() })]]
}

t.test('a flooding client is limited across two instances; a polite one on the same instance is untouched', async t => {
  // A server of its own: its script calls are these instances' alone.
  const { url } = await startRedisServer(t)
  const nameSpace = uniquePrefix()
  const options = { messages: { max: 20, timeWindow: '1 minute' } }
  const a = await serve(t, { redis: url, nameSpace }, options)
  const b = await serve(t, { redis: url, nameSpace }, options)
  const floods = [await open(a.url, 'flood'), await open(b.url, 'flood')]
  const polite = await open(a.url, 'polite')
  for (let i = 0; i < 50; i++) for (const socket of floods) socket.send(`m${i}`)
  const answered = next(polite, 5)
  for (let i = 0; i < 5; i++) polite.send(`p${i}`)
  t.strictSame(await answered, ['echo:p0', 'echo:p1', 'echo:p2', 'echo:p3', 'echo:p4'], 'the polite client: every message answered')
  await until([a.events, b.events], () => countOf(a, 'flood') + countOf(b, 'flood') + a.refused.length + b.refused.length === 100)
  t.equal(countOf(a, 'flood') + countOf(b, 'flood'), 20, 'the flood: 20 of its 100 messages reached the handlers, both instances together (each alone would let 20 through)')
  t.match(a.refused[0], { error: 'rate_limited', budget: 'messages' })
  t.ok(a.refused.every(refusal => refusal.retryAfter > 0 && refusal.retryAfter <= 60))
  t.equal(countOf(a, 'polite'), 5)
  // Refused now, and known to be until the window frees a place: each instance holds the denial in process.
  const observer = await ready(client(t, url))
  const calls = await scriptCalls(observer)
  for (let i = 50; i < 100; i++) for (const socket of floods) socket.send(`m${i}`)
  await until([a.events, b.events], () => a.refused.length + b.refused.length === 180)
  t.equal(await scriptCalls(observer) - calls, 0, 'a second flood of 100 refused without a call to Redis')
  t.equal(countOf(a, 'flood') + countOf(b, 'flood'), 20)
})

t.test('per connection: each connection of one client has its own count', async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { connectionMessages: { max: 3, timeWindow: '1 minute' } })
    const sockets = [await open(served.url, 'c'), await open(served.url, 'c')]
    for (let i = 0; i < 5; i++) for (const socket of sockets) socket.send(`m${i}`)
    await until(served.events, () => countOf(served, 'c') + served.refused.length === 10)
    t.equal(countOf(served, 'c'), 6, `${store}: 3 a connection`)
    t.match(served.refused[0], { budget: 'connectionMessages' })
    for (const socket of sockets) socket.close()
  }
})

t.test('bytes: a message costs its byte length; an empty one costs nothing', async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { bytes: { max: 100, timeWindow: '1 minute' } })
    const socket = await open(served.url, 'b')
    for (let i = 0; i < 4; i++) socket.send('x'.repeat(30))
    await until(served.events, () => countOf(served, 'b') + served.refused.length === 4)
    t.equal(countOf(served, 'b'), 3, `${store}: 90 bytes let through, the 4th 30 refused`)
    t.match(served.refused, [{ budget: 'bytes', error: 'rate_limited' }])
    socket.send('')
    socket.send('y'.repeat(10))
    await until(served.events, () => countOf(served, 'b') === 5)
    t.strictSame(served.received.get('b')!.slice(3), ['', 'y'.repeat(10)], `${store}: the empty message, then 10 bytes, fit`)
    socket.send('z'.repeat(200))
    await until(served.events, () => served.refused.length === 2)
    t.match(served.refused[1], { error: 'too_costly', retryAfter: 0 }, `${store}: 200 bytes never fit in 100`)
    socket.close()
  }
})

t.test('the byte length of each form ws gives a message in', async t => {
  t.equal(byteLength(Buffer.from('abc')), 3)
  t.equal(byteLength(new ArrayBuffer(7)), 7)
  t.equal(byteLength([Buffer.from('ab'), Buffer.from('cde')]), 5, 'fragments')
})

t.test('messages reach the app in arrival order, with few decisions in flight as with many', async t => {
  for (const [store, guard] of await storesOf(t)) {
    for (const maxPending of [1, 64]) {
      const served = await serve(t, guard(), { messages: { max: 1000, timeWindow: '1 minute' }, bytes: { max: 1_000_000, timeWindow: '1 minute' }, maxPending })
      const socket = await open(served.url, 'o')
      // Every third one empty: it costs nothing on `bytes`, so its decision is in before the message's ahead of it.
      const sent = Array.from({ length: 300 }, (_, i) => i % 3 === 2 ? '' : `m${i}`)
      for (const text of sent) socket.send(text)
      await until(served.events, () => countOf(served, 'o') === 300)
      t.strictSame(served.received.get('o'), sent, `${store}, maxPending ${maxPending}: all 300, in order`)
      socket.close()
    }
  }
})

t.test('a cost function prices messages on `messages`; 0 is free', async t => {
  const served = await serve(t, {}, {
    messages: { max: 10, timeWindow: '1 minute' },
    cost: (data, isBinary) => isBinary ? 0 : (data as Buffer).toString() === 'big' ? 8 : 1
  })
  const socket = await open(served.url, 'k')
  socket.send('big')
  socket.send('a')
  socket.send('b')
  socket.send('c')
  socket.send(Buffer.from('free'), { binary: true })
  await until(served.events, () => countOf(served, 'k') + served.refused.length === 5)
  t.strictSame(served.received.get('k'), ['big', 'a', 'b', 'free'], '8 + 1 + 1 = 10, the binary one free')
})

t.test("onRefused 'close': the socket is closed with the close code and a reason", async t => {
  for (const [store, guard] of await storesOf(t)) {
    for (const [closeCode, expected] of [[undefined, 1008], [4029, 4029]] as const) {
      const served = await serve(t, guard(), { messages: { max: 2, timeWindow: '1 minute' }, onRefused: 'close', closeCode })
      const socket = await open(served.url, 'x')
      for (let i = 0; i < 5; i++) socket.send(`m${i}`)
      const [code, reason] = await once(socket, 'close') as [number, Buffer]
      t.equal(code, expected, `${store}: ${expected}`)
      t.equal(reason.toString(), 'rate limited')
      t.strictSame(served.received.get('x'), ['m0', 'm1'], `${store}: nothing after the refusal reached the app`)
    }
  }
})

t.test("onRefused 'notify': one notice a retry period, and the connection stays open", async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { messages: { max: 2, timeWindow: '1 minute' }, onRefused: 'notify' })
    let decisions = 0
    const decided = (): void => { decisions++; served.events.emit('change') }
    subscribe(CHANNELS.decision, decided)
    const socket = await open(served.url, 'n')
    const messages: string[] = []
    socket.on('message', (data: Buffer) => messages.push(String(data)))
    const got = next(socket, 3)
    for (let i = 0; i < 6; i++) socket.send(`m${i}`)
    const [first, second, notice] = await got
    t.strictSame([first, second], ['echo:m0', 'echo:m1'])
    const told = JSON.parse(notice!) as { error: string, retryAfter: number }
    t.equal(told.error, 'rate_limited', `${store}: the notice`)
    t.ok(told.retryAfter > 0 && told.retryAfter <= 60)
    t.strictSame(Object.keys(told), ['error', 'retryAfter'], 'its shape')
    // Every message decided, so any notice for the last four is on its way before the pong below.
    await until(served.events, () => decisions === 6)
    unsubscribe(CHANNELS.decision, decided)
    socket.ping()
    await once(socket, 'pong')
    t.equal(socket.readyState, WebSocket.OPEN, `${store}: still open`)
    t.equal(messages.length, 3, 'one notice for the four refused')
    t.strictSame(served.received.get('n'), ['m0', 'm1'])
    socket.close()
  }
})

t.test('a banned client is closed with 1008, whatever onRefused says', async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { messages: { max: 1, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 minute' } }, onRefused: 'notify' })
    const socket = await open(served.url, 'z')
    const notice = next(socket, 2)
    socket.send('a')
    socket.send('b')
    t.match(JSON.parse((await notice)[1]!), { error: 'rate_limited' }, `${store}: the first refusal notified`)
    socket.send('c')
    const [code, reason] = await once(socket, 'close') as [number, Buffer]
    t.equal(code, 1008, `${store}: banned`)
    t.equal(reason.toString(), 'banned')
  }
})

t.test('connections per client: the one over is refused at the upgrade; one closed frees its slot', async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { connections: { max: 2 } })
    const sockets = [await open(served.url, 'q'), await open(served.url, 'q')]
    const refused = await refusedUpgrade(served.url, 'q')
    t.equal(refused.statusCode, 429, `${store}: the third refused before the upgrade`)
    t.equal(refused.headers['retry-after'], '1')
    const other = await open(served.url, 'other')
    t.pass(`${store}: another client is untouched`)
    sockets[0]!.close()
    await until(served.events, () => served.closed === 1)
    const again = await open(served.url, 'q')
    t.pass(`${store}: after one closed, a new one opens`)
    for (const socket of [sockets[1]!, again, other]) socket.close()
  }
})

t.test('shadow mode lets every message and connection through', async t => {
  for (const [store, guard] of await storesOf(t)) {
    const served = await serve(t, guard(), { mode: 'shadow', messages: { max: 2, timeWindow: '1 minute' }, connections: { max: 1 } })
    const sockets = [await open(served.url, 's'), await open(served.url, 's')]
    for (let i = 0; i < 10; i++) sockets[0]!.send(`m${i}`)
    await until(served.events, () => countOf(served, 's') === 10)
    t.equal(served.refused.length, 0, `${store}: nothing refused`)
    for (const socket of sockets) socket.close()
  }
})

t.test('a route changes the options with config.websocketRateLimit, or leaves itself unlimited with false', async t => {
  const served = await serve(t, {}, { messages: { max: 1, timeWindow: '1 minute' } }, app => {
    app.get('/free', { websocket: true, config: { websocketRateLimit: false } }, socket => {
      socket.on('message', (data: Buffer) => socket.send(`free:${String(data)}`))
    })
    app.get('/own', { websocket: true, config: { websocketRateLimit: { messages: { max: 3, timeWindow: '1 minute' }, onRefused: 'close' } } }, socket => {
      socket.on('message', (data: Buffer) => socket.send(`own:${String(data)}`))
    })
    app.get('/plain', async () => 'plain')
    // A route that answers HTTP and upgrades too (@fastify/websocket's wsHandler): limited as the others.
    app.route({
      method: 'GET',
      url: '/both',
      handler: async () => 'http',
      wsHandler: socket => { socket.on('message', (data: Buffer) => socket.send(`both:${String(data)}`)) }
    })
  })
  const free = await open(served.url, 'r', '/free')
  const got = next(free, 5)
  for (let i = 0; i < 5; i++) free.send(`${i}`)
  t.equal((await got).length, 5, 'unlimited')
  const own = await open(served.url, 'r', '/own')
  const echoed = next(own, 3)
  for (let i = 0; i < 4; i++) own.send(`${i}`)
  t.strictSame(await echoed, ['own:0', 'own:1', 'own:2'], 'its own budget of 3, apart from the plugin\'s')
  t.equal((await once(own, 'close'))[0], 1008, 'its own onRefused')
  const both = await open(served.url, 'r2', '/both')
  const answered = next(both)
  for (let i = 0; i < 3; i++) both.send(`${i}`)
  t.strictSame(await answered, ['both:0'])
  await until(served.events, () => served.refused.length === 2)
  t.pass('a wsHandler route: the plugin\'s budget of 1, the other two refused')
  t.equal((await served.app.inject('/both')).body, 'http', 'and its HTTP side answers')
  both.close()
  t.equal((await served.app.inject('/plain')).body, 'plain', 'a plain route is left alone')
  t.equal((await served.app.inject('/ws')).statusCode, 404, 'a WebSocket route asked in plain HTTP: @fastify/websocket answers')
  free.close()
})

t.test('the app\'s onRefused is given the socket and the refusal; an error deciding drops the message', async t => {
  const served = await serve(t, {}, { messages: { max: 5, timeWindow: '1 minute' }, cost: data => String(data) === 'bad' ? -1 : 1 })
  const socket = await open(served.url, 'e')
  socket.send('bad')
  socket.send('good')
  await until(served.events, () => countOf(served, 'e') === 1)
  t.strictSame(served.received.get('e'), ['good'], 'the message whose cost failed is dropped; the next goes on')
  t.equal(served.refused.length, 0, 'and not told as a refusal')
  socket.send('throw')
  const [code] = await once(socket, 'close') as [number]
  t.equal(code, 1006, 'a listener that throws: @fastify/websocket\'s error handler terminates the socket')
})

t.test('an onRefused that throws is logged; the connection and the next messages go on', async t => {
  let told = 0
  const served = await serve(t, {}, {
    messages: { max: 1, timeWindow: '1 minute' },
    onRefused: () => { told++; throw new Error('the app\'s onRefused failed') }
  })
  const socket = await open(served.url, 'h')
  for (const text of ['a', 'b', 'c']) socket.send(text)
  socket.ping()
  await once(socket, 'pong')
  await until(served.events, () => countOf(served, 'h') === 1)
  t.equal(socket.readyState, WebSocket.OPEN)
  t.strictSame(served.received.get('h'), ['a'])
  socket.close()
  await until(served.events, () => served.closed === 1)
  t.equal(told, 2, 'told of both refusals, the second after the first threw')
})

t.test('a client that leaves while its connection\'s slot is asked for holds none', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url, { enableOfflineQueue: false })
  redis.on('error', () => {})
  await ready(redis)
  // failMode 'local': with Redis gone, slots are taken in process, after the deadline.
  const served = await serve(t, { redis, failMode: 'local', timeout: 200, breaker: false }, { connections: { max: 1 } })
  server.freeze()
  t.teardown(() => server.stop())
  // A handshake sent by hand, then reset while the server's hook waits for the deadline: its socket is
  // destroyed before the slot is answered.
  const { port } = served.app.server.address() as { port: number }
  const leaving = connect(port, '127.0.0.1')
  await once(leaving, 'connect')
  leaving.on('error', () => {})
  served.app.server.once('upgrade', () => { leaving.resetAndDestroy() })
  leaving.write('GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nx-client: l\r\n' +
    'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n')
  await once(leaving, 'close')
  const staying = await open(served.url, 'l')
  t.pass('the slot the first asked for was given back (or never kept): the next connection opens')
  staying.close()
})

t.test('a refusal gives back what the budgets before it counted', async t => {
  const { url } = await getRedis(t)
  for (const guard of [{}, { redis: url, nameSpace: uniquePrefix() }]) {
    const served = await serve(t, guard, { messages: { max: 10, timeWindow: '1 minute' }, bytes: { max: 10, timeWindow: '1 minute' } })
    const socket = await open(served.url, 'g')
    socket.send('x'.repeat(11))
    await until(served.events, () => served.refused.length === 1)
    for (let i = 0; i < 10; i++) socket.send('y')
    await until(served.events, () => countOf(served, 'g') + served.refused.length === 11)
    t.equal(countOf(served, 'g'), 10, 'the refused message\'s count on `messages` was given back: ten more fit')
    socket.close()
  }
})

t.test('a Redis that does not answer: failMode open lets messages through within the deadline; closed refuses with 1013', async t => {
  const server = await startRedisServer(t)
  const lent = async (): Promise<ReturnType<typeof client>> => {
    const redis = client(t, server.url, { enableOfflineQueue: false })
    redis.on('error', () => {})
    return await ready(redis)
  }
  const options = { messages: { max: 5, timeWindow: '1 minute' } }
  const opened = await serve(t, { redis: await lent(), failMode: 'open', timeout: 200, breaker: false }, options)
  const closed = await serve(t, { redis: await lent(), failMode: 'closed', timeout: 200, breaker: false }, { ...options, onRefused: 'close' })
  const notified = await serve(t, { redis: await lent(), failMode: 'closed', timeout: 200, breaker: false }, { ...options, onRefused: 'notify' })
  const sockets = [await open(opened.url, 'f'), await open(closed.url, 'f'), await open(notified.url, 'f')]
  server.freeze()
  t.teardown(() => server.stop())
  const started = performance.now()
  const echoed = next(sockets[0]!, 3)
  for (let i = 0; i < 3; i++) sockets[0]!.send(`m${i}`)
  t.strictSame(await echoed, ['echo:m0', 'echo:m1', 'echo:m2'], 'open: through, unenforced')
  const ms = performance.now() - started
  const bound = allowing(200, started, started + ms)
  t.ok(ms <= bound, `answered in ${Math.round(ms)} ms (deadline 200; bound ${Math.round(bound)})`)
  sockets[1]!.send('m')
  const [code, reason] = await once(sockets[1]!, 'close') as [number, Buffer]
  t.equal(code, 1013, 'closed: try again later')
  t.equal(reason.toString(), 'rate limiting unavailable, try again later')
  const notice = next(sockets[2]!)
  sockets[2]!.send('m')
  t.match(JSON.parse((await notice)[0]!), { error: 'unavailable' }, 'closed, notify: the notice says unavailable')
  sockets[0]!.close()
  sockets[2]!.close()
})

t.test('connections under failMode closed with Redis gone: 503 at the upgrade; a banned client: 403', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url, { enableOfflineQueue: false })
  redis.on('error', () => {})
  await ready(redis)
  const served = await serve(t, { redis, failMode: 'closed', timeout: 200, breaker: false }, { connections: { max: 1 } })
  server.freeze()
  t.teardown(() => server.stop())
  t.equal((await refusedUpgrade(served.url, 'u')).statusCode, 503)
  const banning = await serve(t, {}, { connections: { max: 1 }, ban: { threshold: 2, duration: '1 minute' } })
  const socket = await open(banning.url, 'v')
  t.equal((await refusedUpgrade(banning.url, 'v')).statusCode, 429)
  t.equal((await refusedUpgrade(banning.url, 'v')).statusCode, 403, 'refused again: banned')
  socket.close()
})

t.test('options are checked at register, each with a coded error', async t => {
  const bad: Array<[string, object]> = [
    ['nothing to limit', {}],
    ['messages', { messages: 5 }],
    ['connections', { connections: [] }],
    ['connectionMessages', { connectionMessages: null }],
    ['cost', { messages: { max: 1 }, cost: 3 }],
    ['onRefused', { messages: { max: 1 }, onRefused: 'drop' }],
    ['closeCode', { messages: { max: 1 }, closeCode: 1000 }],
    ['closeCode', { messages: { max: 1 }, closeCode: 4000.5 }],
    ['maxPending', { messages: { max: 1 }, maxPending: 0 }],
    ['a budget\'s own check', { messages: { maximum: 5 } }],
    ['connections\' max', { connections: { max: 0 } }]
  ]
  for (const [what, options] of bad) {
    const app = Fastify()
    await app.register(rateGuard, { global: false })
    await app.register(websocket)
    await t.rejects(async () => { await app.register(websocketRateGuard, options) }, { code: 'FST_RATE_GUARD_INVALID_OPTION' }, what)
    await app.close()
  }
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false })
  await app.register(websocket)
  await app.register(websocketRateGuard, { messages: { max: 1 } })
  t.throws(() => app.get('/ws', { websocket: true, config: { websocketRateLimit: { onRefused: 'drop' as never } } }, () => {}),
    { code: 'FST_RATE_GUARD_INVALID_OPTION' }, 'a route\'s, when it is declared')
  const alone = Fastify()
  t.teardown(() => alone.close())
  await alone.register(rateGuard, { global: false })
  await t.rejects(async () => { await alone.register(websocketRateGuard, { messages: { max: 1 } }) }, /@fastify\/websocket/, 'registered after @fastify/websocket')
})
