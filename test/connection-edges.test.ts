// The Redis connection's edges (issue 27): a connection that stalls mid-reply and stays open (a hung load
// balancer or NAT, played by a proxy that drops Redis's replies on the connections open when it stalls), and
// an event loop blocked right after a batch was sent while Redis's reply arrives in time.
import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import { CHANNELS } from '../lib/index.js'
import type { FailMode, TroubleMessage } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import { silenceAfter } from '../lib/silence.js'
import { Stream, lend, makeApp, ms, outcome, reliability, timed, withOwnedClient } from './helpers/faults.js'
import type { App, LogLine, Timed } from './helpers/faults.js'
import { client, startRedisServer, until } from './helpers/redis.js'
import { startFaultProxy } from './helpers/fault-proxy.js'
import { allowing, overdue } from './helpers/lag.js'

// Every answer is held to the deadline plus the lag measured while it was out (lag.ts).
const TIMEOUT = 100
const MODES: readonly FailMode[] = ['open', 'closed']
/**
 * How long after a stall most requests must be enforced again (the bar: 90 % of them, 5 s later),
 * plus the slack the lag over those 5 s allows.
 */
const BACK_WITHIN = 5000
/** How long the traffic after that point is watched. */
const WATCH = 1000

/** The log line a kept connection leaves: Redis does not answer a fresh connection either. */
const KEPT = /does not answer a fresh connection either/

/** Waits (bounded: the silence plus a busy machine's slack) until the app has logged a line matching `pattern`. */
async function logged (logs: LogLine[], pattern: RegExp, what: string): Promise<void> {
  await until(async () => logs.some(line => pattern.test(line.msg)), what, silenceAfter(TIMEOUT) + 5000)
}

t.test('a plugin-made client whose connection stalls and stays open is replaced: limits are enforced again within seconds', async t => {
  const server = await startRedisServer(t)
  const proxy = await startFaultProxy(t, server.port)
  const apps = new Map<FailMode, App>()
  for (const mode of MODES) apps.set(mode, await makeApp(t, { redis: proxy.url, failMode: mode, timeout: TIMEOUT, max: 1_000_000 }))
  const streams = new Map([...apps].map(([mode, app]) => [mode, new Stream(app.app, `stall-${mode}`)]))
  await Promise.all([...streams.values()].map(async stream => await stream.until(samples => samples.length >= 20, 'traffic before the stall')))
  const before = proxy.connections
  const stalledAt = performance.now()
  proxy.stall()
  const back = (): number => stalledAt + allowing(BACK_WITHIN, stalledAt, stalledAt + BACK_WITHIN)
  await Promise.all([...streams.values()].map(async stream => await stream.until(samples => samples.some(s => s.at >= back() + WATCH), `traffic ${BACK_WITHIN + WATCH} ms after the stall`, BACK_WITHIN + WATCH + 10_000)))
  const from = back()
  for (const [mode, stream] of streams) {
    const samples = await stream.stop()
    const after = samples.filter(s => s.at >= from)
    const enforced = after.filter(s => outcome(mode, s.res) === 'redis')
    t.ok(enforced.length >= 0.9 * after.length, `${mode}: ${enforced.length} of ${after.length} requests enforced by Redis ${Math.round(from - stalledAt)} ms after the stall (at least 90 %)`)
    t.same(samples.filter(s => outcome(mode, s.res) === 'wrong').map(s => s.res.statusCode), [], `${mode}: every answer is Redis's or failMode ${mode}'s`)
    t.same(overdue(TIMEOUT, samples), [], `${mode}: all ${samples.length} answers within the deadline, stalled or not`)
    const back = samples.find(s => s.at > stalledAt && outcome(mode, s.res) === 'redis' && samples.some(f => f.at > stalledAt && f.at < s.at && outcome(mode, f.res) === 'failMode'))
    reliability(t, `connection stalled, kept open (failMode ${mode})`, Math.max(...samples.map(s => s.ms)), back === undefined ? 'never' : back.at - stalledAt)
    t.ok(apps.get(mode)!.logs.some(line => /stopped answering; reconnecting/.test(line.msg)), `${mode}: the reconnection is logged`)
  }
  t.ok(proxy.connections > before, `new connections were made (${proxy.connections - before})`)
})

t.test('a lent client whose connection stalls: the app is told to set socketTimeout', async t => {
  const server = await startRedisServer(t)
  const proxy = await startFaultProxy(t, server.port)
  const redis = lend(t, proxy.url, { enableOfflineQueue: false })
  const { app, logs } = await makeApp(t, { redis, timeout: TIMEOUT, max: 1_000_000 })
  const stream = new Stream(app, 'lent')
  await stream.until(samples => samples.length >= 10, 'traffic before the stall')
  proxy.stall()
  await logged(logs, /lent to rate-guard stopped answering.*socketTimeout/, 'the socketTimeout advice, which names what to set')
  await stream.stop()
  t.equal(redis.status, 'ready', 'a lent client is not cut: it is the app\'s')
})

/** Blocks the event loop for `blockMs` right after the next script call is sent (the Redis TracingChannel's `end`). */
function blockAfterNextSend (t: Test, blockMs: number): { blocked: () => boolean } {
  let done = false
  const none = (): void => {}
  const handlers = {
    start: none,
    asyncStart: none,
    asyncEnd: none,
    error: none,
    end: () => {
      if (done) return
      done = true
      const until = performance.now() + blockMs
      while (performance.now() < until) { /* a CPU-bound handler elsewhere in the app */ }
    }
  }
  const channel = diagnostics.tracingChannel(CHANNELS.redis)
  channel.subscribe(handlers)
  t.teardown(() => channel.unsubscribe(handlers))
  return { blocked: () => done }
}

t.test('a loop blocked 1.5 s right after the send: Redis\'s answer, which arrived in time, decides', async t => {
  const server = await startRedisServer(t)
  for (const mode of MODES) {
    const { app } = await makeApp(t, { redis: server.url, failMode: mode, timeout: TIMEOUT, max: 1_000_000 })
    const block = blockAfterNextSend(t, 1500)
    const sample: Timed = await timed(app, `blocked-${mode}`)
    t.ok(block.blocked(), `${mode}: the loop was blocked for 1.5 s after the send (answered in ${ms(sample.ms)} ms)`)
    t.equal(outcome(mode, sample.res), 'redis', `${mode}: decided by Redis, not by failMode`)
  }
})

t.test('a Redis that answers a little after the deadline is named: the measured p99, the timeout that covers it, and the ghosts', async t => {
  const server = await startRedisServer(t)
  const proxy = await startFaultProxy(t, server.port)
  const troubles: TroubleMessage[] = []
  const onTrouble = (message: unknown): void => { troubles.push(message as TroubleMessage) }
  diagnostics.subscribe(CHANNELS.trouble, onTrouble)
  t.teardown(() => diagnostics.unsubscribe(CHANNELS.trouble, onTrouble))
  const { app, logs, nameSpace } = await makeApp(t, { redis: proxy.url, failMode: 'open', timeout: TIMEOUT, max: 1_000_000 })
  const observer = client(t, server.url)
  const key = 'slow'
  proxy.delay(TIMEOUT + 60)
  const stream = new Stream(app, key)
  const said = (): LogLine | undefined => logs.find(line => /answers, but after the deadline/.test(line.msg))
  await until(async () => said() !== undefined, 'the late-replies warning', 10_000)
  const samples = await stream.stop()
  const line = said()!
  t.ok(Number(line.p99Ms) >= TIMEOUT + 60, `the p99 measured (${Number(line.p99Ms)} ms) is the delay's at least`)
  t.ok(Number(line.coverMs) > Number(line.p99Ms), `and the timeout that covers it says more (${Number(line.coverMs)} ms)`)
  t.equal(line.timeoutMs, TIMEOUT, 'it names the timeout in force')
  t.ok(troubles.some(m => m.reason === 'late' && m.nameSpace === nameSpace), 'the trouble channel says late')
  t.ok(samples.every(s => outcome('open', s.res) === 'failMode'), `all ${samples.length} requests answered by failMode meanwhile`)
  reliability(t, `Redis answering ${TIMEOUT + 60} ms late (p99 ${Number(line.p99Ms)} ms, timeout ${TIMEOUT})`, Math.max(...samples.map(s => s.ms)), 'when timeout covers the p99')
  // Every request Redis counted was answered by failMode: each is a ghost, and stats() counts each once all replies are in.
  const counted = async (): Promise<number> => await observer.zcard(identityKeys(nameSpace, GLOBAL_SCOPE, `apikey:${key}`).log)
  await until(async () => app.rateGuard.stats().ghosts === await counted(), 'the ghosts to match what Redis counted', 5000)
  t.ok(app.rateGuard.stats().ghosts > 0, `stats() counts ${app.rateGuard.stats().ghosts} ghosts, as many as Redis counted`)
})

t.test('a frozen Redis is not a stalled connection: a fresh connection gets no answer either, so the connection is kept', async t => {
  const server = await startRedisServer(t)
  const [{ app, logs }, owned] = await withOwnedClient(async () => await makeApp(t, { redis: server.url, failMode: 'closed', timeout: TIMEOUT, max: 1_000_000 }))
  let reconnects = 0
  owned.on('reconnecting', () => { reconnects++ })
  const stream = new Stream(app, 'frozen')
  await stream.until(samples => samples.length >= 10, 'traffic before the freeze')
  server.freeze()
  await logged(logs, KEPT, 'the fresh connection\'s verdict')
  server.thaw()
  const thawedAt = performance.now()
  await stream.until(samples => samples.some(s => s.at > thawedAt && outcome('closed', s.res) === 'redis'), 'Redis deciding again')
  const samples = await stream.stop()
  const back = samples.find(s => s.at > thawedAt && outcome('closed', s.res) === 'redis')!
  t.equal(reconnects, 0, 'the connection was kept: cutting it would only add a reconnection to the freeze')
  reliability(t, 'Redis frozen (SIGSTOP), owned client: the connection kept', Math.max(...samples.map(s => s.ms)), back.at + back.ms - thawedAt)
})

t.test('a stalled connection while Redis refuses new ones: the fresh connection fails, so the connection is kept', async t => {
  const server = await startRedisServer(t)
  const proxy = await startFaultProxy(t, server.port)
  const [{ app, logs }, owned] = await withOwnedClient(async () => await makeApp(t, { redis: proxy.url, failMode: 'open', timeout: TIMEOUT, max: 1_000_000 }))
  let closes = 0
  owned.on('close', () => { closes++ })
  const stream = new Stream(app, 'refused')
  await stream.until(samples => samples.length >= 10, 'traffic before the stall')
  proxy.refuse()
  proxy.stall()
  await logged(logs, KEPT, 'the fresh connection\'s verdict')
  const samples = await stream.stop()
  t.equal(closes, 0, 'nothing better to be had: the connection is kept')
  t.ok(samples.every(s => outcome('open', s.res) !== 'wrong'), 'every answer Redis\'s or failMode\'s meanwhile')
})

/** The log line a connection kept through a write pause leaves: the fresh connection's script was held too. */
const PAUSED = /writes are paused/

/** Connections Redis has accepted since it started (INFO stats). */
async function connectionsReceived (observer: Redis): Promise<number> {
  return Number(/total_connections_received:(\d+)/.exec(await observer.info('stats'))![1])
}

/**
 * Requests over real HTTP to `url` in two loops until `stop()`, each timed, read as `outcome` reads an injected
 * answer; `until` resolves once the answers so far satisfy `check` (looked at as each arrives).
 */
function httpStream (url: string, key: string): { samples: Timed[], until: (check: (samples: Timed[]) => boolean, what: string) => Promise<void>, stop: () => Promise<Timed[]> } {
  const samples: Timed[] = []
  const run = { stopped: false }
  let wake = (): void => {}
  const loops = [0, 1].map(async () => {
    while (!run.stopped) {
      const at = performance.now()
      const res = await fetch(url, { headers: { 'x-api-key': key } })
      const body = await res.text()
      const read = { statusCode: res.status, headers: Object.fromEntries(res.headers), json: () => JSON.parse(body) as unknown }
      samples.push({ res: read as unknown as Timed['res'], at, ms: performance.now() - at })
      wake()
      await sleep(5)
    }
  })
  return {
    samples,
    until: async (check, what) => {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([
        new Promise<void>(resolve => { wake = () => { if (check(samples)) resolve() }; wake() }),
        new Promise<never>((_resolve, reject) => { timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), 20_000) })
      ]).finally(() => clearTimeout(timer))
    },
    stop: async () => {
      run.stopped = true
      await Promise.all(loops)
      return samples
    }
  }
}

t.test('CLIENT PAUSE 4000 WRITE (as FAILOVER pauses) is no dead socket: a fresh connection\'s script is held too, so no connection is cut', async t => {
  const server = await startRedisServer(t)
  const observer = client(t, server.url)
  for (const mode of MODES) {
    await t.test(`failMode ${mode}, over HTTP`, async t => {
      const [{ app, logs }, owned] = await withOwnedClient(async () => await makeApp(t, { redis: server.url, failMode: mode, timeout: TIMEOUT, max: 1_000_000 }))
      let cuts = 0
      owned.on('close', () => { cuts++ })
      await app.listen({ port: 0, host: '127.0.0.1' })
      const stream = httpStream(`http://127.0.0.1:${(app.server.address() as { port: number }).port}/`, `pause-${mode}`)
      await stream.until(samples => samples.length >= 10, 'traffic before the pause')
      const connections = await connectionsReceived(observer)
      const pausedAt = performance.now()
      await observer.client('PAUSE', 4000, 'WRITE')
      // A write on a connection of its own comes back when the pause ends: the event that ends the wait below.
      const writer = client(t, server.url)
      const ended = writer.set(`pause-${mode}`, '1', 'PX', 1000).then(() => performance.now())
      // The detector fired (and asked a fresh connection) at least once: then the pause ends.
      await logged(logs, new RegExp(`${PAUSED.source}|stopped answering; reconnecting`), 'the fresh connection\'s verdict')
      const endedAt = await ended
      await stream.until(samples => samples.some(s => s.at > endedAt && outcome(mode, s.res) === 'redis'), 'Redis deciding again')
      const samples = await stream.stop()
      const made = await connectionsReceived(observer) - connections
      t.equal(cuts, 0, `no connection cut in the pause (${cuts} cuts; ${made} new connections: the test's writer and the fresh connections' checks)`)
      t.ok(logs.some(line => PAUSED.test(line.msg)), 'the log says writes are paused and the connection is kept')
      t.same(samples.filter(s => outcome(mode, s.res) === 'wrong').map(s => s.res.statusCode), [], 'every answer Redis\'s or failMode\'s')
      t.same(overdue(TIMEOUT, samples), [], `all ${samples.length} answers within the deadline, paused or not`)
      const back = samples.find(s => s.at > endedAt && outcome(mode, s.res) === 'redis')!
      reliability(t, `CLIENT PAUSE 4000 WRITE (failMode ${mode}): the connection kept`, Math.max(...samples.map(s => s.ms)), back.at + back.ms - pausedAt - 4000)
    })
  }
})
