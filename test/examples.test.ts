// The examples of costs and settling (examples/failed-logins.js, examples/llm-tokens.js), of requests in flight
// (examples/streams.js), of waiting instead of 429 (examples/webhooks.js), of WebSocket limits (examples/websocket.js, over a real
// WebSocket client) and of GraphQL (examples/graphql.js, over real HTTP), run against a real Redis through the built package
// (`fastify-rate-guard`, as an app imports it: npm run build first).
import http from 'node:http'
import { once } from 'node:events'
import t from 'tap'
import WebSocket from 'ws'
import type { Test } from 'tap'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { getRedis, uniquePrefix } from './helpers/redis.js'

interface Example { buildApp: (options: { redis: string, nameSpace: string }) => Promise<FastifyInstance> }

async function start (t: Test, file: string): Promise<FastifyInstance> {
  const { buildApp } = await import(`../examples/${file}`) as Example
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix() })
  t.teardown(() => app.close())
  await app.ready()
  return app
}

/** Until the app's onResponse hook has settled the last request (one Redis round trip after the response). */
async function settledCount (app: FastifyInstance, key: string, route: string, count: number): Promise<number> {
  for (let i = 0; ; i++) {
    const seen = await app.rateGuard.peek(key, { route })
    if (seen.count === count || i === 50) return seen.count
    await new Promise(resolve => setImmediate(resolve))
  }
}

t.test('failed logins: five failures per user and address, successes free', async t => {
  const app = await start(t, 'failed-logins.js')
  const login = async (password: string): Promise<LightMyRequestResponse> =>
    await app.inject({ method: 'POST', url: '/login', payload: { user: 'ada', password } })
  for (let i = 0; i < 10; i++) t.equal((await login('correct horse battery staple')).statusCode, 200)
  t.equal(await settledCount(app, 'login:ada@127.0.0.1', 'POST /login', 0), 0, 'ten successful logins cost nothing')
  for (let i = 1; i <= 5; i++) {
    t.equal((await login('guess')).statusCode, 401)
    t.equal(await settledCount(app, 'login:ada@127.0.0.1', 'POST /login', i), i)
  }
  const locked = await login('correct horse battery staple')
  t.equal(locked.statusCode, 429, 'after five failures, even the right password waits')
  t.equal(locked.headers['retry-after'], '900')
})

t.test('LLM tokens: a request reserves 500 and is charged what it used', async t => {
  const app = await start(t, 'llm-tokens.js')
  const chat = async (prompt: string): Promise<LightMyRequestResponse> =>
    await app.inject({ method: 'POST', url: '/chat', headers: { 'x-api-key': 'key-acme-0001' }, payload: { prompt } })
  const first = await chat('x'.repeat(2900))
  t.equal(first.statusCode, 200)
  t.equal(first.headers['x-ratelimit-remaining'], '9500', 'while it ran, it held its reservation of 500')
  t.equal((await chat('x'.repeat(2900))).headers['x-ratelimit-remaining'], '6500', 'the first was charged its 3,000 tokens')
  t.equal((await chat('x'.repeat(2900))).headers['x-ratelimit-remaining'], '3500')
  t.equal((await chat('x'.repeat(2900))).headers['x-ratelimit-remaining'], '500', '9,000 used: the fourth reserves 500 of the 1,000 left')
  const over = await chat('hi')
  t.equal(over.statusCode, 429, 'the fourth was charged its 3,000 though 1,000 were left: the budget is spent')
  t.ok(Number(over.headers['retry-after']) > 0)
})

t.test('streams: at most three open per API key; one that disconnects frees its slot', async t => {
  const file = 'streams.js'
  const { buildApp } = await import(`../examples/${file}`) as { buildApp: (options: { redis: string, nameSpace: string, everyMs: number }) => Promise<FastifyInstance> }
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), everyMs: 50 })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as { port: number }).port
  const agent = new http.Agent({ keepAlive: false })
  interface Opened { status: number, retryAfter?: string, first?: string, close: () => void }
  // A stream, read up to its first event; `close` hangs up, as a client that leaves.
  const open = async (): Promise<Opened> => await new Promise((resolve, reject) => {
    const request = http.get({ host: '127.0.0.1', port, path: '/events', agent, headers: { 'x-api-key': 'key-acme-0001' } }, res => {
      if (res.statusCode !== 200) {
        res.resume()
        resolve({ status: res.statusCode!, retryAfter: res.headers['retry-after'], close: () => {} })
      } else {
        res.once('data', (chunk: Buffer) => resolve({ status: 200, first: String(chunk), close: () => request.destroy() }))
      }
    })
    request.on('error', reject)
  })
  const streams = [await open(), await open(), await open()]
  t.strictSame(streams.map(stream => [stream.status, stream.first]), [[200, 'data: 1\n\n'], [200, 'data: 1\n\n'], [200, 'data: 1\n\n']], 'three streams run')
  t.match(await open(), { status: 429, retryAfter: '1' }, 'the fourth is refused while they run')
  streams[0]!.close()
  // Its slot is released when the server sees the connection close: the next open that finds it free runs.
  let again = await open()
  for (let i = 0; again.status !== 200 && i < 100; i++) again = await open()
  t.equal(again.status, 200, 'a stream whose client left gave its slot back')
  for (const stream of [again, ...streams]) stream.close()
})

t.test('webhooks: a burst of 10 from one sender is paced at 5 a second, none refused; the 11th to 15th are', async t => {
  const received: number[] = []
  const file = 'webhooks.js'
  const { buildApp } = await import(`../examples/${file}`) as { buildApp: (options: { redis: string, nameSpace: string, onEvent: () => void }) => Promise<FastifyInstance> }
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), onEvent: () => { received.push(Date.now()) } })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/hooks`
  const deliver = async (): Promise<{ status: number, waited: string | null }> => {
    const res = await fetch(url, { method: 'POST', headers: { 'x-api-key': 'sender-0001', 'content-type': 'application/json' }, body: '{}' })
    await res.text()
    return { status: res.status, waited: res.headers.get('x-ratelimit-waited-ms') }
  }
  const sent = Date.now()
  const answers = await Promise.all(Array.from({ length: 15 }, deliver))
  t.equal(answers.filter(answer => answer.status === 200).length, 10, 'ten delivered')
  t.equal(answers.filter(answer => answer.status === 429).length, 5, 'five refused: they would wait more than a second, or find five waiting')
  t.equal(answers.filter(answer => answer.waited !== null).length, 5, 'five waited, and say so')
  const sorted = [...received].sort((a, b) => a - b)
  t.ok(sorted[5]! >= sent + 999, `the second five were handled a second after the first (${sorted[5]! - sent} ms after sending)`)
})

t.test('monthly quota: the free plan\'s 3 a month, refused until the 1st in New York; the pro plan held to 5 a second', async t => {
  const app = await start(t, 'monthly-quota.js')
  const call = async (key: string): Promise<LightMyRequestResponse> => await app.inject({ url: '/v1/forecast', headers: { 'x-api-key': key } })
  t.equal((await call('key-mallory')).statusCode, 401, 'an unknown key, refused before it is counted')
  for (let i = 0; i < 3; i++) t.equal((await call('key-ada')).statusCode, 200)
  const spent = await call('key-ada')
  t.equal(spent.statusCode, 429)
  const daysLeft = Number(spent.headers['retry-after']) / 86_400
  t.ok(daysLeft > 0 && daysLeft <= 31, `Retry-After: the 1st, ${daysLeft.toFixed(2)} days away`)
  t.match(spent.headers['ratelimit-policy'], /"monthly";q=3;.*w=\d+/, 'the month\'s policy, named')
  const burst: number[] = []
  const started = Date.now()
  for (let i = 0; i < 6; i++) burst.push((await call('key-grace')).statusCode)
  const took = Date.now() - started
  t.strictSame(burst.slice(0, 5), [200, 200, 200, 200, 200], 'pro: five in a second')
  // Unless the machine stalled past the second these six took (then the first has left the window).
  if (took < 1000) t.equal(burst[5], 429, `pro: the sixth within the second (${took} ms) refused`)
})

t.test('websocket: 20 messages a minute on a connection, the 21st dropped and told; 3 connections, the 4th refused at the upgrade', async t => {
  const file = 'websocket.js'
  const { buildApp } = await import(`../examples/${file}`) as Example
  const app = await buildApp({ redis: (await getRedis(t)).url, nameSpace: uniquePrefix() })
  t.teardown(() => app.close())
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `ws://127.0.0.1:${(app.server.address() as { port: number }).port}/chat`
  const headers = { 'x-api-key': 'key-acme-0001' }
  const chat = new WebSocket(url, { headers })
  await once(chat, 'open')
  const heard: string[] = []
  const told = new Promise<string>(resolve => {
    chat.on('message', (data: Buffer) => {
      const text = String(data)
      if (text.startsWith('{')) resolve(text)
      else heard.push(text)
    })
  })
  for (let i = 0; i < 25; i++) chat.send(`hello ${i}`)
  t.match(JSON.parse(await told), { error: 'rate_limited' }, 'the 21st: dropped, and the client told')
  t.strictSame(heard, Array.from({ length: 20 }, (_, i) => `hello ${i}`), 'the first 20 reached the room, in order')
  const more = [new WebSocket(url, { headers }), new WebSocket(url, { headers })]
  await Promise.all(more.map(async socket => await once(socket, 'open')))
  const fourth = new WebSocket(url, { headers })
  fourth.on('error', () => {})
  const [, response] = await once(fourth, 'unexpected-response') as [unknown, http.IncomingMessage]
  response.resume()
  t.equal(response.statusCode, 429, 'a 4th connection: refused before the upgrade')
  t.equal(chat.readyState, WebSocket.OPEN, 'the first is still open')
  for (const socket of [chat, ...more]) socket.close()
})

t.test('graphql: a query charged what it returned, over real HTTP; signIn 5 a minute whatever the operation is called', async t => {
  const app = await start(t, 'graphql.js')
  await app.listen({ port: 0, host: '127.0.0.1' })
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}/graphql`
  const post = async (query: string): Promise<any> =>
    await (await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ query }) })).json()
  const products = await post('{ products(first: 20) { name reviews(first: 5) { body } } }')
  t.equal(products.data.products.length, 4)
  t.match(products.extensions.cost, { requestedQueryCost: 540, actualQueryCost: 48, throttleStatus: { maximumAvailable: 1000, restoreRate: 50 } })
  for (let i = 0; i < 5; i++) t.same((await post(`mutation Attempt${i} { signIn(user: "ada") }`)).data, { signIn: true })
  const sixth = await post('mutation Another { signIn(user: "ada") }')
  t.match(sixth.errors, [{ extensions: { code: 'THROTTLED', budget: 'operation:signIn' } }], 'a new operation name does not escape')
})
