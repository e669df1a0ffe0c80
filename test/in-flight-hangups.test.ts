// Issue 41's first finding, over real HTTP: `concurrency: { max }` bounds the handlers running at once, and a
// client that hangs up frees nothing while its handler runs. The observer is the handler itself (it counts how
// many run at once), not the plugin's answers. The attack: requests to a slow handler, each aborted on a real
// socket once its handler runs, one after another; on both stores, and under failMode 'closed' and 'local'
// with Redis stopped mid-run. Handlers are held on a gate the test opens; what is awaited is an event (a
// handler entered, the server heard the hang-up, an answer), never a sleep.
import http from 'node:http'
import { once } from 'node:events'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { getRedis, startRedisServer, until } from './helpers/redis.js'

/** A promise and what resolves it. */
function deferred (): { promise: Promise<void>, resolve: () => void } {
  let settle = (): void => {}
  const promise = new Promise<void>(resolve => { settle = resolve })
  return { promise, resolve: settle }
}

/** A slow handler that counts how many of it run at once: the test's observer. */
class Observer {
  running = 0
  most = 0
  readonly #gate = deferred()
  readonly #entered = new Map<string, ReturnType<typeof deferred>>()
  readonly #closed = new Map<string, Promise<unknown>>()

  readonly handle = async (request: FastifyRequest, reply: FastifyReply): Promise<string> => {
    const n = String(request.headers['x-n'])
    this.#closed.set(n, once(reply.raw, 'close'))
    this.most = Math.max(this.most, ++this.running)
    this.entered(n).resolve()
    try {
      await this.#gate.promise
    } finally {
      this.running--
    }
    return 'done'
  }

  /** Request `n`'s handler has started. */
  entered (n: string): ReturnType<typeof deferred> {
    let entered = this.#entered.get(n)
    if (entered === undefined) this.#entered.set(n, entered = deferred())
    return entered
  }

  /** The server heard request `n`'s response close (after the plugin's own listener, taken before the handler). */
  async closed (n: string): Promise<void> {
    await this.#closed.get(n)
  }

  /** Lets every handler end. */
  open (): void {
    this.#gate.resolve()
  }
}

/** A GET on a socket of its own, which `abort` destroys: its status, or 'aborted'. */
function send (base: string, path: string, n: number): { answer: Promise<number | 'aborted'>, abort: () => void } {
  const request = http.get(`${base}${path}`, { agent: false, headers: { 'x-n': String(n) } })
  const answer = new Promise<number | 'aborted'>(resolve => {
    request.on('response', res => {
      res.resume()
      res.on('end', () => resolve(res.statusCode!))
      res.on('error', () => resolve('aborted'))
    })
    request.on('error', () => resolve('aborted'))
  })
  return { answer, abort: () => { request.destroy() } }
}

/** An app on loopback whose GET /slow is the observer's, under `options`, and GET /quick answers at once. */
async function listening (t: Test, options: RateGuardOptions, observer: Observer): Promise<{ app: FastifyInstance, base: string }> {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { max: 1000, timeWindow: '1 hour', ...options })
  app.get('/slow', observer.handle)
  app.get('/quick', async () => 'quick')
  await app.listen({ port: 0, host: '127.0.0.1' })
  return { app, base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` }
}

/**
 * The attack: `n` requests to /slow, one after another, each aborted once its handler runs (the server hears
 * the hang-up before the next is sent); one refused is answered before it could be. `between(i)` runs
 * before request i. Gives each request's answer.
 */
async function attack (base: string, observer: Observer, n: number, between?: (i: number) => Promise<void>): Promise<Array<number | 'aborted'>> {
  const answers: Array<number | 'aborted'> = []
  for (let i = 0; i < n; i++) {
    await between?.(i)
    const sent = send(base, '/slow', i)
    const entered = observer.entered(String(i)).promise.then(() => 'entered' as const)
    const first = await Promise.race([sent.answer, entered])
    if (first === 'entered') {
      sent.abort()
      await observer.closed(String(i))
    }
    answers.push(await sent.answer)
  }
  return answers
}

/** Counts each answer: `{ aborted: 3, 429: 27 }`. */
function tally (answers: ReadonlyArray<number | 'aborted'>): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const answer of answers) counts[answer] = (counts[answer] ?? 0) + 1
  return counts
}

/** Waits until a request to /quick, on the same budget, passes: every slot taken was given back. */
async function free (base: string): Promise<void> {
  await until(async () => (await fetch(`${base}/quick`)).status === 200, 'a slot free again', 10_000)
}

for (const where of ['redis', 'memory'] as const) {
  t.test(`${where}: max 3, 30 requests each aborted while its slow handler runs: at most 3 run at once`, async t => {
    const store: RateGuardOptions = where === 'redis' ? { redis: (await getRedis(t)).url, timeout: 5000, failMode: 'closed' } : {}
    const observer = new Observer()
    const { base } = await listening(t, { ...store, concurrency: { max: 3 } }, observer)
    const answers = await attack(base, observer, 30)
    t.equal(observer.most, 3, `at most 3 handlers ran at once (${observer.most})`)
    t.strictSame(tally(answers), { aborted: 3, 429: 27 }, 'three ran, each hung up on; the rest refused while they ran')
    t.equal((await fetch(`${base}/quick`)).status, 429, 'the three hung-up requests still hold their slots')
    observer.open()
    await until(async () => observer.running === 0, 'the handlers to end')
    await free(base)
    t.pass('their slots come back once their handlers end')
  })
}

for (const failMode of ['closed', 'local'] as const) {
  t.test(`redis stopped mid-run, failMode ${failMode}: the hung-up requests' slots hold on both sides of the fault`, async t => {
    const server = await startRedisServer(t)
    const observer = new Observer()
    const { base } = await listening(t, { redis: server.url, timeout: 500, failMode, concurrency: { max: 3 } }, observer)
    // Five sent while Redis answers (three taken there, two refused), then Redis stops: the rest are failMode's.
    const answers = await attack(base, observer, 20, async i => { if (i === 5) await server.stop() })
    const counts = tally(answers)
    if (failMode === 'closed') {
      t.equal(observer.most, 3, `the three taken in Redis run; none more (${observer.most})`)
      t.strictSame(counts, { aborted: 3, 429: 2, 503: 15 }, 'every request after the fault is refused 503')
    } else {
      // The twin knows nothing of Redis's three: the excess the docs state for 'local' is one max more.
      t.equal(observer.most, 6, `Redis's three and the twin's three (${observer.most})`)
      t.strictSame(counts, { aborted: 6, 429: 14 }, 'the twin holds its three though their clients hung up')
    }
    observer.open()
    await until(async () => observer.running === 0, 'the handlers to end')
  })
}
