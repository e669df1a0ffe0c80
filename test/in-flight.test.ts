// `concurrency` over real HTTP, as issue 31 asks it to hold: two app instances on one Redis share one count of
// a client's requests in flight; the slots of a process killed with SIGKILL come free within a lease (+ 1 s);
// a request running three times its lease keeps its slot. (How it meets bans, costs, shadow mode, failMode
// and the rest: test/in-flight-features.test.ts; the stores' leases: test/leases-conformance.test.ts.)
import { fork } from 'node:child_process'
import diagnostics from 'node:diagnostics_channel'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import rateGuard from '../lib/index.js'
import { CHANNELS } from '../lib/channels.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'
import { firstFulfilled } from './helpers/first.js'

const HOLDER = fileURLToPath(new URL('./fixtures/in-flight-holder.ts', import.meta.url))

/** A gate the held handlers wait on, opened by the test. */
function gate (): { wait: Promise<void>, open: () => void } {
  let open = (): void => {}
  const wait = new Promise<void>(resolve => { open = resolve })
  return { wait, open }
}

/** An app listening on loopback with the plugin on `url` under `nameSpace`; `routes` declares its routes. */
async function listening (t: Test, url: string, nameSpace: string, routes: (app: FastifyInstance) => void): Promise<{ app: FastifyInstance, base: string }> {
  const app = Fastify()
  await app.register(rateGuard, { redis: url, nameSpace, max: 100, timeWindow: '1 hour' })
  routes(app)
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => await app.close())
  return { app, base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` }
}

interface Answer { status: number, code?: string, retryAfter: string | null }

async function get (url: string, signal?: AbortSignal): Promise<Answer> {
  const res = await fetch(url, { signal })
  const body = await res.text()
  return { status: res.status, retryAfter: res.headers.get('retry-after'), ...(res.status === 200 ? {} : { code: (JSON.parse(body) as { message: string }).message }) }
}

t.test('two instances on one Redis: max 3, 8 simultaneous slow requests → exactly 3 handlers run, 5 are refused', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const held = gate()
  let running = 0
  let most = 0
  const started: Array<() => void> = []
  const threeRunning = new Promise<void>(resolve => started.push(resolve))
  const routes = (app: FastifyInstance): void => {
    app.get('/slow', { config: { rateLimit: { concurrency: { max: 3 } } } }, async () => {
      most = Math.max(most, ++running)
      if (running === 3) started[0]!()
      await held.wait
      running--
      return 'done'
    })
  }
  const [a, b] = [await listening(t, url, nameSpace, routes), await listening(t, url, nameSpace, routes)]
  const answers = Array.from({ length: 8 }, (_, i) => get(`${(i % 2 === 0 ? a : b).base}/slow`))
  await threeRunning
  // The five refusals come while the three are held.
  const early = await firstFulfilled(answers, 5)
  t.equal(running, 3, 'three handlers are running')
  t.strictSame(early.map(answer => answer.status), [429, 429, 429, 429, 429], 'the other five are refused at once')
  t.ok(early.every(answer => answer.retryAfter === '1' && /in flight/.test(answer.code!)), 'each a 429 in flight, Retry-After: 1')
  held.open()
  const all = await Promise.all(answers)
  t.equal(all.filter(answer => answer.status === 200).length, 3, 'the three held ones end 200')
  t.equal(most, 3, 'never more than three at once, across both instances')
  const again = await Promise.all([a, b, a].map(async ({ base }) => await get(`${base}/slow`)))
  t.strictSame(again.map(answer => answer.status), [200, 200, 200], 'their slots were released: three more run')
})

t.test('a process killed with SIGKILL while holding slots: they come free within a lease and a second', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const leaseMs = 1500
  const child = fork(HOLDER, [], { execArgv: process.execArgv, env: { ...process.env, REDIS_URL: url, NAME_SPACE: nameSpace, LEASE_MS: String(leaseMs) }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  t.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  const messages: Array<{ port?: number, holding?: number }> = []
  child.on('message', (message: { port?: number, holding?: number }) => messages.push(message))
  const heard = async (test: (message: { port?: number, holding?: number }) => boolean): Promise<void> => {
    while (!messages.some(test)) await once(child, 'message')
  }
  await heard(message => message.port !== undefined)
  const port = messages.find(message => message.port !== undefined)!.port!
  // Two requests the child holds forever: both its slots (max 2).
  const holders = [0, 1].map(() => get(`http://127.0.0.1:${port}/hold`).catch(() => undefined))
  await heard(message => message.holding === 2)
  const { base } = await listening(t, url, nameSpace, app => {
    app.get('/hold', { config: { rateLimit: { concurrency: { max: 2, lease: leaseMs } } } }, async () => 'free')
  })
  t.equal((await get(`${base}/hold`)).status, 429, 'another instance sees the two slots taken')
  // Renewed while it lives: still taken past a lease.
  await sleep(leaseMs + 200)
  t.equal((await get(`${base}/hold`)).status, 429, 'still taken a lease later: the holder renews them')
  child.kill('SIGKILL')
  await once(child, 'exit')
  const killedAt = performance.now()
  let freedMs = Infinity
  while (performance.now() - killedAt < leaseMs + 3000) {
    if ((await get(`${base}/hold`)).status === 200) {
      freedMs = performance.now() - killedAt
      break
    }
    await sleep(50)
  }
  await Promise.all(holders)
  t.ok(freedMs <= leaseMs + 1000, `free again ${Math.round(freedMs)} ms after the kill (lease ${leaseMs} ms + 1 s)`)
})

t.test('a request running three times its lease keeps its slot', async t => {
  const { url } = await getRedis(t)
  const leaseMs = 1000
  const held = gate()
  let began = (): void => {}
  const running = new Promise<void>(resolve => { began = resolve })
  const { base } = await listening(t, url, uniquePrefix(), app => {
    app.get('/long', { config: { rateLimit: { concurrency: { max: 1, lease: leaseMs } } } }, async () => {
      began()
      await held.wait
      return 'done'
    })
  })
  const long = get(`${base}/long`)
  await running
  const startedAt = performance.now()
  const refusals: number[] = []
  for (const at of [1.2, 2.2, 3.2]) {
    await sleep(Math.max(0, startedAt + at * leaseMs - performance.now()))
    const answer = await get(`${base}/long`)
    refusals.push(answer.status)
  }
  t.ok(performance.now() - startedAt >= 3 * leaseMs, 'three leases have passed')
  t.strictSame(refusals, [429, 429, 429], 'the slot is still held after one, two and three leases')
  held.open()
  t.equal((await long).status, 200)
  t.equal((await get(`${base}/long`)).status, 200, 'its slot was released with its response')
})

t.test('peek and the decision channel report the slots in use', async t => {
  const { url } = await getRedis(t)
  const held = gate()
  const seen: Array<{ outcome: string, inFlight: number | undefined }> = []
  const listener = (message: unknown): void => {
    const { outcome, inFlight } = message as { outcome: string, inFlight: number | undefined }
    seen.push({ outcome, inFlight })
  }
  diagnostics.subscribe(CHANNELS.decision, listener)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, listener) })
  let started = 0
  let bothStarted = (): void => {}
  const both = new Promise<void>(resolve => { bothStarted = resolve })
  const { app, base } = await listening(t, url, uniquePrefix(), app => {
    app.get('/streams', { config: { rateLimit: { concurrency: { max: 2 } } } }, async () => {
      if (++started === 2) bothStarted()
      await held.wait
      return 'done'
    })
  })
  t.match(await app.rateGuard.peek('127.0.0.1', { route: 'GET /streams' }), { inFlight: { max: 2, count: 0 } }, 'none in flight yet')
  const streams = [get(`${base}/streams`), get(`${base}/streams`)]
  await both
  t.match(await app.rateGuard.peek('127.0.0.1', { route: 'GET /streams' }), { inFlight: { max: 2, count: 2 } }, 'two in flight')
  t.equal((await get(`${base}/streams`)).status, 429)
  t.equal((await app.rateGuard.peek('127.0.0.1')).inFlight, null, 'a budget without concurrency has none')
  held.open()
  await Promise.all(streams)
  t.strictSame(seen.map(({ outcome, inFlight }) => `${outcome} ${String(inFlight)}`).sort(), ['allowed 1', 'allowed 2', 'in-flight 2'], 'each decision says the units in flight after it')
})

t.test('in process, peek reports the slots in use too', async t => {
  const held = gate()
  let began = (): void => {}
  const running = new Promise<void>(resolve => { began = resolve })
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 100, timeWindow: '1 hour' })
  app.get('/streams', { config: { rateLimit: { concurrency: { max: 2 } } } }, async () => {
    began()
    await held.wait
    return 'done'
  })
  const stream = app.inject('/streams')
  await running
  t.match(await app.rateGuard.peek('127.0.0.1', { route: 'GET /streams' }), { inFlight: { max: 2, count: 1 } }, 'one in flight, in process')
  held.open()
  await stream
  t.match(await app.rateGuard.peek('127.0.0.1', { route: 'GET /streams' }), { inFlight: { max: 2, count: 0 } }, 'none once it ended')
})
