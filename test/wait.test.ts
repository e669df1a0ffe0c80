// `maxWait` over real HTTP, as issue 31 asks it to hold: two app instances on one Redis, max 5 per second and
// maxWait 1 s, 15 simultaneous requests → 10 answered 200 (the second five once the window allows, never more
// than five handlers starting in any second), the other five refused at once. A client that leaves while it
// waits gives its place back and its handler never runs; the header and the channel say how long a request
// waited; shadow mode never waits; the in-process store waits as Redis does; options that cannot meet are
// refused at register; the token bucket paces; the fixed window lets the ones that wait through when the next
// window begins. (The stores' places: test/conformance-wait.test.ts.)
import diagnostics from 'node:diagnostics_channel'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import rateGuard from '../lib/index.js'
import { CHANNELS } from '../lib/channels.js'
import type { DecisionMessage } from '../lib/channels.js'
import type { RateGuardOptions } from '../lib/types.js'
import { resolveOptions } from '../lib/options/plugin.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

/** An app listening on loopback with the plugin (`opts`), a GET `/` that records when each handler starts. */
async function listening (t: Test, opts: RateGuardOptions, starts: number[] = [], onError?: (code: string) => void): Promise<{ app: FastifyInstance, base: string }> {
  const app = Fastify()
  if (onError !== undefined) app.addHook('onError', async (_request, _reply, err) => { onError((err as Error & { code: string }).code) })
  await app.register(rateGuard, opts)
  app.get('/', async () => {
    starts.push(Date.now())
    return 'ok'
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => await app.close())
  return { app, base: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` }
}

interface Answer { status: number, waited: number | null, at: number }

async function get (url: string, signal?: AbortSignal): Promise<Answer> {
  const res = await fetch(url, { signal })
  await res.text()
  const waited = res.headers.get('x-ratelimit-waited-ms')
  return { status: res.status, waited: waited === null ? null : Number(waited), at: Date.now() }
}

/** The most of `times` (ms) inside any window of `windowMs` (a half-open (t - window, t]). */
function busiest (times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b)
  let most = 0
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= windowMs) j++
    most = Math.max(most, i - j + 1)
  }
  return most
}

t.test('two instances on one Redis, max 5 per second, maxWait 1 s: of 15 simultaneous requests 10 are answered 200, the second five once the window allows, and 5 are refused at once', async t => {
  const { url } = await getRedis(t)
  const opts: RateGuardOptions = { redis: url, nameSpace: uniquePrefix(), max: 5, timeWindow: '1 second', maxWait: '1 second' }
  const starts: number[] = []
  const [a, b] = [await listening(t, opts, starts), await listening(t, opts, starts)]
  const sent = Date.now()
  const answers = await Promise.all(Array.from({ length: 15 }, async (_, i) => await get(`${(i % 2 === 0 ? a : b).base}/`)))
  const ok = answers.filter(answer => answer.status === 200)
  const refused = answers.filter(answer => answer.status === 429)
  t.equal(ok.length, 10, 'ten answered 200')
  t.equal(refused.length, 5, 'five refused')
  t.ok(refused.every(answer => answer.at - sent < 900), `the refusals came at once, before any wait ended (after ${Math.max(...refused.map(answer => answer.at - sent))} ms at most)`)
  const waited = ok.filter(answer => answer.waited !== null)
  t.equal(waited.length, 5, 'five of them waited, and say so (X-RateLimit-Waited-Ms)')
  t.ok(waited.every(answer => answer.waited! > 0 && answer.waited! <= 1000), `each within maxWait: ${waited.map(answer => answer.waited).join(', ')} ms`)
  t.equal(starts.length, 10, 'ten handlers ran')
  const sorted = [...starts].sort((x, y) => x - y)
  // Counted on Redis's clock, from the first five's decisions, which came after `sent` (the same machine's clock, in whole ms).
  t.ok(sorted[5]! >= sent + 999, `the second five start no earlier than the window allows (${sorted[5]! - sent} ms after the requests were sent)`)
  // A handler starts a little after its decision: a window shortened by that lag (up to 200 ms here) holds no more than five.
  t.ok(busiest(starts, 800) <= 5, `never more than five handler starts in a second (${busiest(starts, 800)} in the busiest 800 ms)`)
})

t.test('the token bucket paces: 5 a second, maxWait 1 s: of 15 simultaneous requests 5 go at once, 5 one every 200 ms, 5 are refused', async t => {
  const { url } = await getRedis(t)
  const starts: number[] = []
  const { base } = await listening(t, { redis: url, nameSpace: uniquePrefix(), algorithm: 'token-bucket', max: 5, timeWindow: '1 second', maxWait: '1 second' }, starts)
  const sent = Date.now()
  const answers = await Promise.all(Array.from({ length: 15 }, async () => await get(`${base}/`)))
  t.equal(answers.filter(answer => answer.status === 200).length, 10, 'ten answered 200')
  t.equal(answers.filter(answer => answer.status === 429).length, 5, 'five refused')
  const waited = answers.map(answer => answer.waited).filter(waited => waited !== null).sort((a, b) => a! - b!)
  t.equal(waited.length, 5, 'five waited')
  // A token back every 200 ms: the nth waits at most n × 200 ms (less the time until it was decided).
  t.ok(waited.every((ms, i) => ms! > 0 && ms! <= (i + 1) * 200), `one every 200 ms: ${waited.join(', ')} ms`)
  const later = [...starts].sort((a, b) => a - b).slice(5)
  t.ok(later.every((start, i) => start >= sent + (i + 1) * 200 - 1), `each starts no earlier than its token is back (${later.map(start => start - sent).join(', ')} ms after sending)`)
})

t.test('the fixed window: 5 a second, maxWait 1 s: of 15 simultaneous requests 5 go in this second, 5 wait for the next, 5 are refused', async t => {
  const { url } = await getRedis(t)
  const starts: number[] = []
  const { base } = await listening(t, { redis: url, nameSpace: uniquePrefix(), algorithm: 'fixed-window', max: 5, timeWindow: '1 second', maxWait: '1 second' }, starts)
  // The windows are the clock's seconds (Redis's, on this machine): the burst starts just after one begins.
  await sleep(1000 - Date.now() % 1000 + 20)
  const second = Math.floor(Date.now() / 1000)
  const answers = await Promise.all(Array.from({ length: 15 }, async () => await get(`${base}/`)))
  t.equal(answers.filter(answer => answer.status === 200).length, 10, 'ten answered 200')
  t.equal(answers.filter(answer => answer.status === 429).length, 5, 'five refused')
  t.equal(answers.filter(answer => answer.waited !== null).length, 5, 'five waited')
  const bySecond = starts.map(start => Math.floor(start / 1000) - second)
  t.strictSame(bySecond.filter(s => s === 0).length, 5, 'five handlers start in the burst\'s second')
  t.strictSame(bySecond.filter(s => s === 1).length, 5, `and five in the next, none earlier (${starts.map(start => start - second * 1000).sort((a, b) => a - b).join(', ')} ms into the burst's second)`)
})

t.test('a client that leaves while it waits gives its place back: its handler never runs, and the next request takes its place', async t => {
  const { url } = await getRedis(t)
  const starts: number[] = []
  const { base } = await listening(t, { redis: url, nameSpace: uniquePrefix(), max: 1, timeWindow: '2 seconds', maxWait: '3 seconds', maxQueue: 1 }, starts)
  t.equal((await get(`${base}/`)).status, 200, 'the first goes at once')
  const leaving = new AbortController()
  const left = get(`${base}/`, leaving.signal).catch((err: Error) => err)
  // Its place is taken once the queue is full: a third is refused while it waits.
  let third = await get(`${base}/`)
  for (let i = 0; third.status === 200 && i < 20; i++) third = await get(`${base}/`)
  t.equal(third.status, 429, 'with the queue full (maxQueue 1), the next is refused')
  leaving.abort()
  t.ok(await left instanceof Error, 'the waiting client left')
  // Its place given back, the queue has room again: the next one waits, and goes.
  let next = await get(`${base}/`)
  for (let i = 0; next.status === 429 && i < 50; i++) next = await get(`${base}/`)
  t.equal(next.status, 200, 'the next request takes its place')
  t.ok(next.waited !== null && next.waited > 0, `and waited (${next.waited} ms)`)
  t.equal(starts.length, 2, 'the handler of the one that left never ran')
})

t.test('a client gone before its wait began gives its place back at once; limits the app computes per request wait as static ones', async t => {
  const { url } = await getRedis(t)
  let opened = (): void => {}
  const gate = new Promise<void>(resolve => { opened = resolve })
  let closed = (): void => {}
  const gone = new Promise<void>(resolve => { closed = resolve })
  let arrived = (): void => {}
  const gated = new Promise<void>(resolve => { arrived = resolve })
  let abandoned = (): void => {}
  const givenBack = new Promise<void>(resolve => { abandoned = resolve })
  const starts: number[] = []
  const { base } = await listening(t, {
    redis: url,
    nameSpace: uniquePrefix(),
    // A max the app computes: the queue's default is worked out per request.
    max: async () => 1,
    timeWindow: '2 seconds',
    maxWait: '3 seconds',
    keyGenerator: async request => {
      if (request.headers['x-gate'] === '1') {
        request.raw.once('close', closed)
        arrived()
        await gate
      }
      return 'one client'
    }
  }, starts, code => { if (code === 'FST_RATE_GUARD_ABANDONED') abandoned() })
  t.equal((await get(`${base}/`)).status, 200, 'the first goes at once')
  const leaving = new AbortController()
  const left = fetch(`${base}/`, { signal: leaving.signal, headers: { 'x-gate': '1' } }).catch((err: Error) => err)
  await gated
  leaving.abort()
  await gone
  opened()
  t.ok(await left instanceof Error, 'its client left before it was decided')
  // Decided after its client left: it would wait, finds its response closed, gives its place back at once, and
  // ends abandoned (its settle sent before the next request's decision).
  await givenBack
  const next = await get(`${base}/`)
  t.equal(next.status, 200, 'the next request finds the place free')
  t.ok(next.waited !== null && next.waited > 1000, `and waits for it, as the first in the queue (${next.waited} ms)`)
  t.equal(starts.length, 2, 'the handler of the one that left never ran')
})

t.test('the channel says how long a request waited; shadow mode never waits, and says what enforce would have waited', async t => {
  const { url } = await getRedis(t)
  const seen: DecisionMessage[] = []
  const listen = (message: unknown): void => { seen.push(message as DecisionMessage) }
  diagnostics.subscribe(CHANNELS.decision, listen)
  t.teardown(() => diagnostics.unsubscribe(CHANNELS.decision, listen))
  const enforced = await listening(t, { redis: url, nameSpace: uniquePrefix(), max: 1, timeWindow: '300 ms', maxWait: '1 second' })
  const [first, second] = await Promise.all([get(`${enforced.base}/`), get(`${enforced.base}/`)])
  t.strictSame([first.status, second.status], [200, 200], 'both go')
  const waitedMs = first.waited ?? second.waited
  t.ok(waitedMs !== null && waitedMs > 0 && waitedMs <= 300, `one waited (${waitedMs} ms)`)
  t.ok(seen.some(message => message.waitedMs === waitedMs && message.outcome === 'allowed'), 'the channel says it, on an allowed decision')
  t.ok(seen.filter(message => message.waitedMs === undefined).length >= 1, 'and nothing for the one that did not wait')

  seen.length = 0
  const shadow = await listening(t, { redis: url, nameSpace: uniquePrefix(), max: 1, timeWindow: '1 minute', maxWait: '2 minutes', mode: 'shadow' })
  const before = Date.now()
  const both = await Promise.all([get(`${shadow.base}/`), get(`${shadow.base}/`)])
  t.ok(Date.now() - before < 30_000, 'shadow mode: nothing waited a minute')
  t.strictSame(both.map(answer => [answer.status, answer.waited]), [[200, null], [200, null]], 'both answered at once, with no waited header')
  t.ok(seen.some(message => message.waitedMs !== undefined && message.waitedMs > 59_000 && message.mode === 'shadow'), 'the channel says what enforce would have waited')
})

t.test('the in-process store waits as Redis does', async t => {
  const starts: number[] = []
  const { base } = await listening(t, { max: 2, timeWindow: '400 ms', maxWait: '1 second' }, starts)
  const answers = await Promise.all(Array.from({ length: 5 }, async () => await get(`${base}/`)))
  t.strictSame(answers.map(answer => answer.status).sort(), [200, 200, 200, 200, 429], 'two at once, two after a window, the fifth refused (it would wait two windows... within maxWait, but the queue holds two)')
  t.equal(answers.filter(answer => answer.waited !== null).length, 2, 'two waited')
})

/** A store of the app's own (`@fastify/rate-limit`'s interface). */
class TheirStore {
  incr (_key: string, callback: (err: Error | null, result?: { current: number, ttl: number }) => void): void { callback(null, { current: 1, ttl: 1000 }) }
  child (): TheirStore { return new TheirStore() }
}

t.test('options that cannot meet maxWait are refused at register, with the code', async t => {
  const cases: Array<[string, RateGuardOptions]> = [
    ['continueExceeding', { maxWait: '1 second', continueExceeding: true }],
    ['exponentialBackoff', { maxWait: '1 second', exponentialBackoff: true }],
    ['a shared budget', { maxWait: '1 second', shared: { max: 10, timeWindow: '1 minute' } }],
    ['maxQueue without maxWait', { maxQueue: 3 }],
    ['a duration that is none', { maxWait: 'soon' as unknown as number }],
    ['a negative wait', { maxWait: -1 }],
    ['a queue of none', { maxWait: '1 second', maxQueue: 0 }],
    ['a wait longer than a timer can', { maxWait: '30 days' }],
    ['an app\'s own store', { maxWait: '1 second', store: TheirStore as unknown as RateGuardOptions['store'] }]
  ]
  for (const [name, opts] of cases) {
    const app = Fastify()
    t.teardown(async () => await app.close())
    await t.rejects((async () => { await app.register(rateGuard, opts) })(), { code: INVALID, message: /"max(Wait|Queue)"/ }, name)
  }
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, {})
  t.throws(() => app.createRateLimit({ maxWait: '1 second' }), { code: INVALID, message: /"createRateLimit\.maxWait": expected false: a check answers at once/ }, 'a check (createRateLimit) answers at once: no maxWait')
  t.throws(() => app.get('/', { config: { rateLimit: { maxWait: '1 second', continueExceeding: true } } }, async () => 'ok'), { code: INVALID, message: /"config\.rateLimit\.maxWait"/ }, 'a route, as the plugin')
})

t.test('maxWait and maxQueue past what the limits can make wait are accepted with a warning that says how far they reach', async t => {
  const warned = (options: RateGuardOptions): string[] => {
    const warnings: string[] = []
    resolveOptions(options, (_name, message) => { warnings.push(message) })
    return warnings
  }
  const cases: Array<[string, RateGuardOptions, string[]]> = [
    ['an hour on a 1 s window (the sliding log: one window per max queued)', { max: 5, timeWindow: '1 second', maxWait: '1 hour' },
      ['rate-guard: maxWait 1 hour cannot take effect past 1 second: no request waits longer on these limits (sliding-log, maxQueue 5)']],
    ['maxQueue 1e9', { max: 5, timeWindow: '1 second', maxWait: '1 second', maxQueue: 1e9 },
      ['rate-guard: maxQueue 1000000000 cannot take effect past 5: the limits free no more places within maxWait 1 second (sliding-log)']],
    ['the fixed window reserves the next window only', { algorithm: 'fixed-window', max: 5, timeWindow: '1 second', maxWait: '3 seconds', maxQueue: 20 }, [
      'rate-guard: maxWait 3 seconds cannot take effect past 1 second: no request waits longer on these limits (fixed-window, maxQueue 20)',
      'rate-guard: maxQueue 20 cannot take effect past 5: the limits free no more places within maxWait 3 seconds (fixed-window)'
    ]],
    ['the sliding window, this window or the next', { algorithm: 'sliding-window', max: 5, timeWindow: '1 second', maxWait: '3 seconds', maxQueue: 10 },
      ['rate-guard: maxWait 3 seconds cannot take effect past 2 seconds: no request waits longer on these limits (sliding-window, maxQueue 10)']],
    ['a queue of two windows\' max reaches two windows', { algorithm: 'token-bucket', max: 5, timeWindow: '1 second', maxWait: '2 seconds', maxQueue: 10 }, []],
    ['the longest limit decides how long', { limits: [{ max: 5, timeWindow: '1 second' }, { max: 100, timeWindow: '1 minute' }], maxWait: '1 minute' }, []],
    ['limits the app computes are not known at register', { max: async () => 5, timeWindow: '1 second', maxWait: '1 hour', maxQueue: 1e9 }, []]
  ]
  for (const [name, options, warnings] of cases) t.strictSame(warned(options), warnings, name)

  // Through fastify.log, a route's named under config.rateLimit; it registers and waits as it says.
  const lines: Array<{ level: number, msg: string }> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  t.teardown(async () => await app.close())
  await app.register(rateGuard, {})
  app.post('/hooks', { config: { rateLimit: { max: 1, timeWindow: '1 second', maxWait: '1 hour' } } }, async () => 'ok')
  await app.ready()
  t.strictSame(lines.filter(line => line.msg.includes('maxWait')).map(line => [line.level, line.msg]), [
    [40, 'rate-guard: config.rateLimit.maxWait 1 hour cannot take effect past 1 second: no request waits longer on these limits (sliding-log, maxQueue 1)']
  ])
})

t.test('maxWaiting: a positive integer, at register only', async t => {
  for (const maxWaiting of [0, -1, 1.5, '10', Infinity]) {
    const app = Fastify()
    t.teardown(async () => await app.close())
    await t.rejects((async () => { await app.register(rateGuard, { maxWaiting: maxWaiting as number }) })(), { code: INVALID, message: /"maxWaiting": expected a positive integer/ }, String(maxWaiting))
  }
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { maxWaiting: 3 })
  t.throws(() => app.get('/', { config: { rateLimit: { maxWaiting: 3 } as never } }, async () => 'ok'), { code: INVALID, message: /"config\.rateLimit\.maxWaiting".*at register only/ }, 'not on a route: the room is the registration\'s')
})
