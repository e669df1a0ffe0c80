// The fault suite against single redis-server processes (one per case): traffic keeps flowing while Redis is killed and restarted, paused
// (CLIENT PAUSE ALL and WRITE), busy with another connection's script, or has its script cache flushed; and
// registration against a closed port, a frozen server or a user without EVAL. Every request is answered
// within the deadline as failMode says, limiting is exact again afterwards, and each case prints a line
// `RELIABILITY | case | worst latency ms | time to exact ms` for the README's Reliability table.
// fail-modes.test.ts covers a stopped or frozen Redis without traffic in flight, the log rate, WRONGTYPE;
// lifecycle.test.ts the degraded start of an owned client; breaker.test.ts the breaker.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import type { FailMode } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import { Latency, Stream, exactCodes, exactly, lend, makeApp, ms, outcome, reliability, startOwned, timed, watchEscapes, withOwnedClient } from './helpers/faults.js'
import type { App, Timed } from './helpers/faults.js'
import { client, ready, startRedisServer } from './helpers/redis.js'
import { allowing, inTime, lagDuring, overdue, under } from './helpers/lag.js'
import type { RedisProcess } from './helpers/redis.js'
import { TS_LOADER } from './helpers/ts-loader.js'

// Every answer is held to the decision deadline plus the lag measured while it was out (lag.ts).
const TIMEOUT = 100
/** How long registration waits for Redis before it starts degraded or, with `strict`, fails (lib/index.ts). */
const READY_WAIT = 2000
/**
 * The longest a closing client waits for the server's side of its socket before destroying it: ioredis's
 * default disconnectTimeout (the plugin gives the clients it makes 200 ms).
 */
const DISCONNECT_WAIT = 2000
const MODES: readonly FailMode[] = ['open', 'closed', 'local']
/** Pace of the polls that look for the first decision Redis makes again. */
const GAP = 10

const escapes = watchEscapes()

// A redis-server per case, killed, paused, frozen and restarted under traffic: about 17 s on a quiet machine,
// 50 s seen beside two CPU-bound processes and other test runs, near tap's limit of 60 s for a file (.taprc).
t.setTimeout(120_000)

/**
 * Resolves (with performance.now()) once a client has ended for good (status 'end': no socket, no
 * reconnection), or rejects after `waitMs` and the slack the lag meanwhile allows. ioredis closes a socket
 * by half-closing it and waits up to its disconnectTimeout for the server's side before destroying it:
 * against a frozen server, all of it.
 */
async function ended (redis: Redis, waitMs = DISCONNECT_WAIT): Promise<number> {
  const started = performance.now()
  const isEnded = (): boolean => redis.status === 'end'
  if (!isEnded()) {
    const end = once(redis, 'end')
    end.catch(() => {})
    while (!isEnded()) {
      if (performance.now() - started > allowing(waitMs, started)) throw new Error(`client still ${redis.status} after ${Math.round(performance.now() - started)} ms`)
      await Promise.race([end, sleep(20, undefined, { ref: false })])
    }
  }
  return performance.now()
}

/** One app per failMode, each on a client of its own made by the plugin (`redis: url`). */
interface Guarded {
  mode: FailMode
  app: App
  client: Redis
  /** A second registration on the same client, with a deadline no busy machine misses: for exactness. */
  exact: App
}

/** A route with a budget of its own (max 3), to see the in-process twin limit while Redis is away. */
const SMALL = '/small'

async function guarded (t: Test, url: string): Promise<Guarded[]> {
  const made: Guarded[] = []
  for (const mode of MODES) {
    const [app, owned] = await withOwnedClient(async () => await makeApp(t, { redis: url, failMode: mode, timeout: TIMEOUT, max: 100_000 }, app => {
      app.get(SMALL, { config: { rateLimit: { max: 3 } } }, async () => 'ok')
    }))
    const exact = await makeApp(t, { redis: owned, failMode: 'closed', max: 3, timeout: 2000 })
    made.push({ mode, app, client: owned, exact })
  }
  return made
}

/** Whether a sample was sent and answered entirely inside [from, to]. */
function inside (sample: Timed, from: number, to: number): boolean {
  return sample.at >= from && sample.at + sample.ms <= to
}

/**
 * Every answer of a stream: within the bound, and a valid outcome for the mode; those sent and answered
 * while Redis could not decide (between `from` and `to`) decided by failMode.
 */
function checkStream (t: Test, label: string, mode: FailMode, samples: Timed[], from: number, to: number): void {
  t.same(overdue(TIMEOUT, samples), [], `${label}, ${mode}: all ${samples.length} answers within the deadline (worst ${ms(Math.max(...samples.map(s => s.ms)))})`)
  const wrong = samples.filter(s => outcome(mode, s.res) === 'wrong')
  t.same(wrong.map(s => `${s.res.statusCode} ${s.res.body.slice(0, 80)}`), [], `${label}, ${mode}: every answer is one failMode ${mode} may give`)
  if (mode === 'local') return
  const during = samples.filter(s => inside(s, from, to))
  t.ok(during.length > 0, `${label}, ${mode}: ${during.length} answers while Redis could not decide`)
  t.ok(during.every(s => outcome(mode, s.res) === 'failMode'), `${label}, ${mode}: each of them decided by failMode`)
}

/** While Redis cannot decide, failMode 'local' still limits: the in-process twin, exact on a fresh identity. */
async function checkTwin (t: Test, label: string, local: Guarded): Promise<number> {
  const started = performance.now()
  const codes = await exactCodes(local.app.app, 3, SMALL)
  const took = performance.now() - started
  t.same(codes, exactly(3), `${label}, local: the in-process twin limits, max + 1 gives exactly one 429`)
  t.ok(inTime(TIMEOUT, { at: started, ms: took }), `${label}, local: a burst of 4 answered in ${ms(took)} ms (bound ${ms(allowing(TIMEOUT, started, started + took))})`)
  return took
}

/**
 * Polls `app` with a fresh identity every GAP ms until Redis counts one (seen by `observer`): Redis decides
 * again. Returns the polls and when the first counted one was answered.
 */
async function untilRedisDecides (g: Guarded, observer: Redis, limitMs = 6000): Promise<{ polls: Timed[], decidedAt: number }> {
  const polls: Timed[] = []
  const started = performance.now()
  for (let i = 0; ; i++) {
    const key = `poll-${i}`
    const poll = await timed(g.app.app, key)
    polls.push(poll)
    if (await observer.zcard(identityKeys(g.app.nameSpace, GLOBAL_SCOPE, `apikey:${key}`).log) === 1) {
      return { polls, decidedAt: poll.at + poll.ms }
    }
    if (performance.now() - started > limitMs) throw new Error(`${g.mode}: Redis did not decide again within ${limitMs} ms`)
    await sleep(GAP)
  }
}

type Recovery = Promise<{ polls: Timed[], decidedAt: number }>

/** Starts polling an app the moment a fault ends, alongside whatever traffic is still running. */
function recovery (g: Guarded, observer: Redis): Recovery {
  const polling = untilRedisDecides(g, observer)
  // Awaited later, by `recover`: a failure is reported there, not as an unhandled rejection meanwhile.
  polling.catch(() => {})
  return polling
}

function recovering (apps: Guarded[], observer: Redis): Recovery[] {
  return apps.map(g => recovery(g, observer))
}

/**
 * After a fault ended (at `endedAt`): checks the polls that waited for Redis to decide again, shows limiting
 * is exact, and prints the RELIABILITY lines (time to exact: until the first request Redis counted again).
 */
async function recover (t: Test, name: string, apps: Guarded[], recoveries: Recovery[], endedAt: number, worst: Map<FailMode, number>): Promise<void> {
  for (const [i, g] of apps.entries()) {
    const { polls, decidedAt } = await recoveries[i]!
    t.ok(polls.every(p => inTime(TIMEOUT, p) && outcome(g.mode, p.res) !== 'wrong'), `${name}, ${g.mode}: ${polls.length} polls until Redis decided again, each valid and within the bound`)
    t.same(await exactCodes(g.exact.app, 3), exactly(3), `${name}, ${g.mode}: exact again, max + 1 gives exactly one 429`)
    const worstMs = Math.max(worst.get(g.mode) ?? 0, ...polls.map(p => p.ms))
    reliability(t, `${name} (failMode ${g.mode})`, worstMs, decidedAt - endedAt)
  }
}

function worstOf (streams: Map<FailMode, Stream>, twin: number): Map<FailMode, number> {
  const worst = new Map<FailMode, number>()
  for (const [mode, stream] of streams) worst.set(mode, Math.max(...stream.samples.map(s => s.ms), mode === 'local' ? twin : 0))
  return worst
}

function redisDecided (mode: FailMode, count: number, after = 0): (samples: Timed[]) => boolean {
  return samples => samples.filter(s => s.at >= after && outcome(mode, s.res) === (mode === 'local' ? 'decided' : 'redis')).length >= count
}

function failModeDecided (mode: FailMode, count: number, after: number): (samples: Timed[]) => boolean {
  return samples => samples.filter(s => s.at >= after && outcome(mode, s.res) === (mode === 'local' ? 'decided' : 'failMode')).length >= count
}

/** A stream of requests (one identity, two loops) per app, running until stopped. */
function streams (apps: Guarded[]): Map<FailMode, Stream> {
  return new Map(apps.map(g => [g.mode, new Stream(g.app.app, 'stream', { loops: 2, gap: 5 })]))
}

async function stopAll (all: Map<FailMode, Stream>): Promise<void> {
  await Promise.all([...all.values()].map(async s => await s.stop()))
}

// ---------------------------------------------------------------------------------------------------------

t.test('a. Redis killed mid-traffic, restarted on the same port', async t => {
  const server = await startRedisServer(t)
  const observer = lend(t, server.url)
  const apps = await guarded(t, server.url)
  // A lent client with ioredis defaults queues while disconnected: the deadline alone bounds its decisions.
  const lent = await ready(lend(t, server.url))
  const lentApp = await makeApp(t, { redis: lent, failMode: 'open', timeout: TIMEOUT, max: 100_000 })
  const lentExact = await makeApp(t, { redis: lent, failMode: 'closed', max: 3, timeout: 2000 })
  const all = streams(apps)
  const lentStream = new Stream(lentApp.app, 'stream', { loops: 2, gap: 5 })

  for (const g of apps) await all.get(g.mode)!.until(redisDecided(g.mode, 10), `${g.mode}: Redis deciding`)
  await lentStream.until(redisDecided('open', 10), 'lent: Redis deciding')

  // A burst in flight at the moment of the kill, on top of the streams.
  const burst = Promise.all(apps.map(async g => await Promise.all(Array.from({ length: 10 }, async () => await timed(g.app.app, 'burst')))))
  const killing = performance.now()
  await server.kill()
  const killed = performance.now()
  for (const g of apps) await all.get(g.mode)!.until(failModeDecided(g.mode, 20, killed), `${g.mode}: failMode deciding`)
  await lentStream.until(failModeDecided('open', 20, killed), 'lent: failMode deciding')
  const local = apps.find(g => g.mode === 'local')!
  const twin = await checkTwin(t, 'killed', local)

  const restarting = performance.now()
  await server.restart()
  const restarted = performance.now()
  t.comment(`Redis was down for ${Math.round(restarting - killing)} ms`)
  const recoveries = recovering(apps, observer)
  const lentRecovery = recovery({ mode: 'open', app: lentApp, client: lent, exact: lentExact }, observer)
  for (const g of apps) await ready(g.client)
  await ready(lent)
  await ready(observer)
  for (const g of apps) await all.get(g.mode)!.until(redisDecided(g.mode, 10, restarted), `${g.mode}: Redis deciding again`)
  await lentStream.until(redisDecided('open', 10, restarted), 'lent: Redis deciding again')
  await stopAll(all)
  await lentStream.stop()

  const bursts = await burst
  apps.forEach((g, i) => {
    const answers = bursts[i]!
    t.ok(answers.every(a => inTime(TIMEOUT, a) && outcome(g.mode, a.res) !== 'wrong'), `${g.mode}: the 10 requests in flight at the kill were answered validly within the bound (worst ${ms(Math.max(...answers.map(a => a.ms)))})`)
  })
  // In flight: sent before SIGKILL, answered after it; some of them had to be answered by failMode.
  const inFlight = apps.flatMap((g, i) => [...bursts[i]!, ...all.get(g.mode)!.samples].filter(s => s.at < killing && s.at + s.ms > killing).map(s => outcome(g.mode, s.res)))
  t.ok(inFlight.length > 0 && inFlight.includes('failMode'), `${inFlight.length} requests in flight at the kill, ${inFlight.filter(o => o === 'failMode').length} of them answered by failMode`)
  for (const g of apps) checkStream(t, 'killed', g.mode, all.get(g.mode)!.samples, killed, restarting)
  checkStream(t, 'killed, lent client with default options', 'open', lentStream.samples, killed, restarting)

  await recover(t, 'Redis killed mid-traffic, restarted', apps, recoveries, restarted, worstOf(all, twin))
  const lentPolls = await lentRecovery
  t.same(await exactCodes(lentExact.app, 3), exactly(3), 'lent client: exact again')
  reliability(t, 'Redis killed mid-traffic, restarted (failMode open, lent client with default options)',
    Math.max(...lentStream.samples.map(s => s.ms), ...lentPolls.polls.map(p => p.ms)), lentPolls.decidedAt - restarted)
})

/**
 * A Redis paused by `pause` for the time `hold` takes, traffic on every failMode app meanwhile. `hold`
 * returns a time until which the pause certainly held: answers before it must all come from failMode.
 */
async function pauseCase (t: Test, name: string, pause: (server: RedisProcess) => Promise<{ hold: (apps: Map<FailMode, Stream>, pausedAt: number) => Promise<number> }>): Promise<void> {
  const server = await startRedisServer(t)
  const observer = await ready(lend(t, server.url))
  const apps = await guarded(t, server.url)
  const all = streams(apps)
  for (const g of apps) await all.get(g.mode)!.until(redisDecided(g.mode, 10), `${g.mode}: Redis deciding`)

  const { hold } = await pause(server)
  const pausedAt = performance.now()
  const local = apps.find(g => g.mode === 'local')!
  const twin = await checkTwin(t, name, local)
  const heldUntil = await hold(all, pausedAt)
  const endedAt = performance.now()
  const recoveries = recovering(apps, observer)
  await stopAll(all)
  for (const g of apps) checkStream(t, name, g.mode, all.get(g.mode)!.samples, pausedAt, heldUntil)
  await recover(t, name, apps, recoveries, endedAt, worstOf(all, twin))
}

t.test('b. CLIENT PAUSE ALL, waited out', async t => {
  await pauseCase(t, 'CLIENT PAUSE 1000 ALL', async server => {
    const pauser = await ready(client(t, server.url))
    const waiter = await ready(client(t, server.url))
    const sent = performance.now()
    await pauser.client('PAUSE', 1000, 'ALL')
    // Another connection's PING is held too: it comes back when the pause ends.
    const ended = waiter.ping()
    return {
      hold: async (all, pausedAt) => {
        for (const [mode, stream] of all) await stream.until(failModeDecided(mode, 10, pausedAt), `${mode}: failMode deciding`)
        t.equal(await ended, 'PONG', 'the pause ended')
        return sent + 1000 - 5
      }
    }
  })
})

t.test('b. CLIENT PAUSE WRITE (the script may write, so it is held), ended by CLIENT UNPAUSE', async t => {
  await pauseCase(t, 'CLIENT PAUSE 5000 WRITE, CLIENT UNPAUSE', async server => {
    const pauser = await ready(client(t, server.url))
    await pauser.client('PAUSE', 5000, 'WRITE')
    t.equal(await pauser.ping(), 'PONG', 'reads are not held by a WRITE pause')
    return {
      hold: async (all, pausedAt) => {
        // Through the deadline-paying decisions and the breaker opening, and a little more.
        for (const [mode, stream] of all) await stream.until(failModeDecided(mode, 20, pausedAt), `${mode}: failMode deciding`)
        const heldUntil = performance.now()
        t.equal(await pauser.client('UNPAUSE'), 'OK', 'unpaused')
        return heldUntil
      }
    }
  })
})

t.test('c. BUSY: another connection runs a long script', async t => {
  // lua-time-limit (busy-reply-threshold): after 100 ms of a script, other clients get BUSY at once.
  const server = await startRedisServer(t, ['--lua-time-limit', '100'])
  const observer = await ready(lend(t, server.url))
  const apps = await guarded(t, server.url)
  // An app that sends nothing until Redis answers BUSY: its first trouble is BUSY itself.
  const [fresh] = await withOwnedClient(async () => await makeApp(t, { redis: server.url, failMode: 'open', timeout: TIMEOUT }))
  const all = streams(apps)
  for (const g of apps) await all.get(g.mode)!.until(redisDecided(g.mode, 10), `${g.mode}: Redis deciding`)

  const blocker = await ready(lend(t, server.url))
  const prober = await ready(lend(t, server.url))
  const busyLoop = `local s = redis.call('TIME')
    while true do
      local n = redis.call('TIME')
      if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 1200000 then return 1 end
    end`
  const script = blocker.eval(busyLoop, 0)
  const busyFrom = performance.now()
  // A PING sent while the script runs is held until the threshold passes, then answered BUSY.
  let busy: Error | undefined
  for (let i = 0; busy === undefined && i < 50; i++) busy = await prober.ping().then(() => undefined, (err: Error) => err)
  t.match(busy?.message, /^BUSY /, 'Redis answers BUSY')
  const busyAt = performance.now()

  const first = await timed(fresh.app, 'fresh')
  t.equal(outcome('open', first.res), 'failMode', 'BUSY: failMode decides')
  t.ok(under(TIMEOUT, first), `BUSY is an answer, not a wait: ${ms(first.ms)} ms (${ms(lagDuring(first.at, first.at + first.ms))} ms of it lag)`)
  t.match(fresh.trouble()[0], { level: 40, err: { message: /^BUSY / } }, 'BUSY is transient: logged as a warning')

  const local = apps.find(g => g.mode === 'local')!
  const twin = await checkTwin(t, 'BUSY', local)
  for (const [mode, stream] of all) await stream.until(failModeDecided(mode, 10, busyAt), `${mode}: failMode deciding`)
  t.equal(await script, 1, 'the long script finished')
  const endedAt = performance.now()
  const recoveries = recovering(apps, observer)
  t.comment(`Redis was busy for ${Math.round(endedAt - busyFrom)} ms`)
  await stopAll(all)
  // The script ends 1.2 s after it started (at or after busyFrom) by Redis's TIME, the wall clock, which NTP
  // may slew up to 8.3 % faster than this process's monotonic clock (chrony's maxslewrate): in our time, it
  // ends no sooner than 1.2 / 1.083 s after busyFrom. Answers until then are failMode's.
  for (const g of apps) checkStream(t, 'BUSY', g.mode, all.get(g.mode)!.samples, busyAt, busyFrom + 1200 * 0.9 - 5)
  await recover(t, 'BUSY (a 1.2 s script on another connection, lua-time-limit 100)', apps, recoveries, endedAt, worstOf(all, Math.max(twin, first.ms)))
})

/**
 * What a flush takes away, on the connection the decisions go on: the FUNCTION library (called with FCALL), or,
 * for a user without FUNCTION (the scripts then go EVALSHA for good), the scripts' cache.
 */
const FLUSHES = [
  { fault: 'FUNCTION FLUSH', acl: [], flush: async (redis: Redis) => await redis.call('FUNCTION', 'FLUSH'), calls: ['fcall'], failed: 'fcall', again: 'function|load', refusal: 'Function not found' },
  { fault: 'SCRIPT FLUSH (a user without FUNCTION: EVALSHA)', acl: ['-function', '-fcall'], flush: async (redis: Redis) => await redis.script('FLUSH'), calls: ['evalsha', 'eval'], failed: 'evalsha', again: 'eval', refusal: 'NOSCRIPT' }
] as const

for (const { fault, acl, flush, calls, failed, again, refusal } of FLUSHES) {
  t.test(`d. ${fault} during a burst of 50 concurrent requests: all answered, exactly max allowed`, async t => {
    const server = await startRedisServer(t)
    const observer = await ready(client(t, server.url))
    await observer.acl('SETUSER', 'decider', 'on', '>pw', '~*', '&*', '+@all', ...acl)
    const url = new URL(server.url)
    url.username = 'decider'
    url.password = 'pw'
    const max = 20
    const [app, owned] = await withOwnedClient(async () => await makeApp(t, { redis: url.href, failMode: 'closed', timeout: 2000, max }))
    // The flush goes out on the plugin's own connection right behind the n-th script call of the burst: Redis
    // runs the first n with the functions (or scripts) there and every later one without them, whatever the timing.
    let flushAfter = 0
    let sent = 0
    let flushed: Promise<unknown> = Promise.resolve()
    let onCall = (): void => {}
    const send = owned.sendCommand.bind(owned)
    owned.sendCommand = (command, stream) => {
      const result = send(command, stream)
      // Without FUNCTION, a script's first call on a connection goes as EVAL, then EVALSHA.
      if ((calls as readonly string[]).includes(command.name)) {
        if (++sent === flushAfter) flushed = flush(owned)
        onCall()
      }
      return result
    }
    const latency = new Latency()
    for (const at of [1, 25, 49]) {
      await observer.config('RESETSTAT')
      sent = 0
      flushAfter = at
      const key = `burst-${at}`
      // Requests of one event loop turn share one script call: each request here is sent on its own, once the
      // one before it is on the wire. Redis holds them all (a script may write) until every one is sent, so no
      // answer (nor the call sent again after the refusal) comes back in between.
      await observer.call('CLIENT', 'PAUSE', '10000', 'WRITE')
      const pending: Array<ReturnType<typeof timed>> = []
      for (let i = 0; i < 50; i++) {
        const onWire = new Promise<void>(resolve => { onCall = resolve })
        pending.push(timed(app.app, key))
        await onWire
      }
      await observer.call('CLIENT', 'UNPAUSE')
      const answers = await Promise.all(pending)
      t.equal(await flushed, 'OK', `flushed right after call ${at}`)
      for (const a of answers) latency.add(a.ms)
      const codes = answers.map(a => a.res.statusCode)
      t.equal(codes.filter(c => c === 200).length, max, `flush after call ${at}: exactly ${max} allowed`)
      t.equal(codes.filter(c => c === 429).length, 50 - max, `flush after call ${at}: the other ${50 - max} limited, none failed`)
      t.equal(await observer.zcard(identityKeys(app.nameSpace, GLOBAL_SCOPE, `apikey:${key}`).log), max, 'the log holds exactly max entries')
      const stats = await observer.info('commandstats')
      const stat = (command: string, field: string): number => Number(new RegExp(`cmdstat_${command.replace('|', '\\|')}:.*\\b${field}=(\\d+)`).exec(stats)?.[1] ?? 0)
      t.equal(stat(failed, 'failed_calls'), 50 - at, `Redis ran ${at} as sent, then refused ${50 - at} (${refusal})`)
      t.ok(stat(again, 'calls') >= 1, `and what was flushed was sent again (${again} ×${stat(again, 'calls')})`)
      t.comment(`flush after call ${at}: worst answer ${ms(Math.max(...answers.map(a => a.ms)))} ms; ${stats.split(/\r?\n/).filter(l => /cmdstat_(eval|fcall|function)/.test(l)).join('; ')}`)
    }
    owned.sendCommand = send
    t.same(await exactCodes(app.app, max), exactly(max), 'a fresh identity afterwards: exact')
    reliability(t, `${fault} during a burst of 50 (timeout 2000)`, latency.worst, 0)
  })
}

t.test('e. startup with the port closed and with a frozen server, default and strict, owned and lent clients', async t => {
  for (const fault of ['port closed', 'frozen'] as const) {
    await t.test(fault, async t => {
      const server = await startRedisServer(t)
      const lentDefault = await ready(lend(t, server.url, { connectionName: 'lent-default' }))
      const lentStrict = await ready(lend(t, server.url, { connectionName: 'lent-strict' }))
      if (fault === 'port closed') {
        await server.stop()
      } else {
        server.freeze()
        t.teardown(() => server.thaw())
      }
      const child = strictChild(server.url)
      interface Registered { app?: App, error?: Error, at: number, ms: number, settledAt: number, owned?: Redis }
      // All four at once, each waiting up to 2 s for Redis; the owned clients are told apart as they are made.
      const register = async (redis: Redis | string, strict: boolean): Promise<{ result: Promise<Registered> }> => {
        const started = performance.now()
        const attempt = async (): Promise<App | Error> => await makeApp(t, { redis, strict, failMode: 'closed', max: 3, timeout: TIMEOUT }).catch((err: Error) => err)
        const { owned, done } = typeof redis === 'string' ? await startOwned(attempt) : { owned: undefined, done: attempt() }
        return {
          result: done.then(made => {
            const settledAt = performance.now()
            const timing = { at: started, ms: settledAt - started, settledAt, owned }
            return made instanceof Error ? { error: made, ...timing } : { app: made, ...timing }
          })
        }
      }
      const pending = [await register(server.url, false), await register(server.url, true), await register(lentDefault, false), await register(lentStrict, true)]
      const [ownedDefault, ownedStrict, lentDefaultApp, lentStrictApp] = await Promise.all(pending.map(async p => await p.result)) as [Registered, Registered, Registered, Registered]
      const startup = new Latency()
      const decisions = new Latency()
      for (const [name, result] of Object.entries({ 'owned client': ownedDefault, 'lent client': lentDefaultApp })) {
        startup.add(result.ms)
        t.equal(result.error, undefined, `${fault}, default, ${name}: registration succeeds`)
        t.ok(inTime(READY_WAIT, result), `${fault}, default, ${name}: ready in ${Math.round(result.ms)} ms (bound ${Math.round(allowing(READY_WAIT, result.at, result.at + result.ms))})`)
        t.ok(result.app?.logs.some(line => line.level === 40 && /Redis is not ready/.test(line.msg)), `${fault}, default, ${name}: warned that it starts degraded`)
        const answer = await timed(result.app!.app)
        decisions.add(answer.ms)
        t.equal(answer.res.statusCode, 503, `${fault}, default, ${name}: failMode closed decides`)
        t.ok(inTime(TIMEOUT, answer), `${fault}, default, ${name}: within the deadline (${ms(answer.ms)} ms)`)
      }
      for (const [name, result] of Object.entries({ 'owned client': ownedStrict, 'lent client': lentStrictApp })) {
        startup.add(result.ms)
        t.match(result.error, { code: 'FST_RATE_GUARD_REDIS_NOT_READY' }, `${fault}, strict, ${name}: registration fails`)
        t.ok(inTime(READY_WAIT, result), `${fault}, strict, ${name}: within ${Math.round(result.ms)} ms (bound ${Math.round(allowing(READY_WAIT, result.at, result.at + result.ms))})`)
      }
      t.not(lentStrict.status, 'end', `${fault}, strict: the lent client is left to its owner`)
      const [endedAt, exited] = await Promise.all([ended(ownedStrict.owned!), child])
      t.pass(`${fault}, strict: the owned client ended for good ${Math.round(endedAt - ownedStrict.settledAt)} ms after the rejection: no socket, no reconnection`)
      t.equal(exited.code, 'FST_RATE_GUARD_REDIS_NOT_READY', `${fault}, strict, in a process of its own: ${exited.code} after ${exited.rejectedAfter} ms`)
      // Bounded by ioredis's disconnectTimeout (2 s) against a frozen server; at once when the port is closed.
      // The child's own lag is not measured: this process's, over the child's life, stands for the machine's.
      t.ok(exited.exitedAfter - exited.rejectedAfter <= allowing(DISCONNECT_WAIT, exited.spawnedAt, exited.exitedAt), `${fault}, strict: nothing keeps that process alive (it exited ${exited.exitedAfter - exited.rejectedAfter} ms after the rejection; bound ${Math.round(allowing(DISCONNECT_WAIT, exited.spawnedAt, exited.exitedAt))})`)

      // Redis back: the degraded apps limit again (their clients kept reconnecting), the strict client stays away.
      let back: number
      if (fault === 'port closed') {
        await server.restart()
        back = performance.now()
      } else {
        server.thaw()
        back = performance.now()
      }
      await ready(ownedDefault.owned!)
      await ready(lentDefault)
      let exactAt = 0
      for (const [name, result] of Object.entries({ 'owned client': ownedDefault, 'lent client': lentDefaultApp })) {
        const polls: Timed[] = []
        while (polls.at(-1)?.res.statusCode !== 200) {
          if (performance.now() - back > 5000) throw new Error(`${name}: not deciding 5 s after Redis came back`)
          polls.push(await timed(result.app!.app, `back-${polls.length}`))
          decisions.add(polls.at(-1)!.ms)
          if (polls.at(-1)?.res.statusCode !== 200) await sleep(GAP)
        }
        exactAt = Math.max(exactAt, performance.now() - back)
        t.ok(polls.every(p => inTime(TIMEOUT, p) && [200, 503].includes(p.res.statusCode)), `${fault}, default, ${name}: Redis decides again after ${polls.length} polls`)
      }
      const observer = await ready(client(t, server.url, { connectionName: 'observer' }))
      // The strict client would have reconnected by now (its backoff starts at 100 ms); give it a little more.
      await sleep(300)
      const unnamed = String(await observer.client('LIST')).split('\n').filter(line => / name= /.test(line))
      t.equal(unnamed.length, 1, `${fault}: one connection the plugin made, the degraded app's; none from the strict one (${unnamed.length})`)
      for (const result of [ownedDefault, lentDefaultApp]) {
        t.same(await exactCodes((await makeApp(t, { redis: result.owned ?? lentDefault, failMode: 'closed', max: 3, timeout: 2000 })).app, 3), exactly(3), `${fault}: exact on that client`)
      }
      reliability(t, `startup, ${fault}: default starts degraded, strict refuses; registration took at most ${Math.round(startup.worst)} ms`, decisions.worst, exactAt)
    })
  }
})

/**
 * Registers with `strict: true` and an owned client in a process of its own, which must then exit by itself:
 * the client it made must hold no socket and no timer.
 */
async function strictChild (url: string): Promise<{ code: string, rejectedAfter: number, exitedAfter: number, spawnedAt: number, exitedAt: number }> {
  const source = `
    import Fastify from 'fastify'
    const { default: rateGuard } = await import(new URL('./lib/index.js', 'file://' + process.cwd() + '/').href)
    const started = Date.now()
    process.on('exit', () => console.log(JSON.stringify({ exitedAfter: Date.now() - started })))
    try {
      await Fastify().register(rateGuard, { redis: process.argv[1], strict: true })
    } catch (err) {
      console.log(JSON.stringify({ code: err.code, rejectedAfter: Date.now() - started }))
    }`
  // A plain process: tap's coverage and process tracking (NODE_OPTIONS, TAP*, _TAPJS_*) would count this
  // child's few lines as the whole file's coverage.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^(NODE_OPTIONS|NODE_V8_COVERAGE|TAP|_TAPJS_)/.test(name)))
  const spawnedAt = performance.now()
  const child = spawn(process.execPath, ['--import', TS_LOADER, '--input-type=module', '-e', source, url], {
    env,
    stdio: ['ignore', 'pipe', 'inherit']
  })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => { out += chunk.toString() })
  const killer = setTimeout(() => child.kill('SIGKILL'), 20_000)
  await once(child, 'exit')
  const exitedAt = performance.now()
  clearTimeout(killer)
  return Object.assign({ code: 'none', rejectedAfter: NaN, exitedAfter: NaN, spawnedAt, exitedAt }, ...out.split('\n').filter(Boolean).map(line => JSON.parse(line) as object))
}

t.test('f. a wrong or missing password: registration is refused at once, naming it, in both startup modes', async t => {
  const server = await startRedisServer(t, ['--requirepass', 'secret'])
  const cases = { 'a wrong password': [`redis://:wrong@${server.host}:${server.port}`, /WRONGPASS/], 'no password': [server.url, /NOAUTH/] } as const
  for (const [name, [url, reason]] of Object.entries(cases)) {
    for (const strict of [false, true]) {
      const started = performance.now()
      const [error, owned] = await withOwnedClient(async () => await makeApp(t, { redis: url, strict }).then(() => undefined, (err: Error) => err))
      const took = performance.now() - started
      t.match(error, { code: 'FST_RATE_GUARD_REDIS_REFUSED', message: reason }, `${name}, strict: ${strict}: refused (${error?.message})`)
      t.ok(under(READY_WAIT, { at: started, ms: took }), `${name}, strict: ${strict}: at once, not after the ${READY_WAIT} ms registration waits for Redis (${Math.round(took)} ms)`)
      await ended(owned)
    }
  }
})

t.test('f. an ACL user without EVAL/EVALSHA: registration is refused, naming NOPERM', async t => {
  const server = await startRedisServer(t)
  const admin = await ready(client(t, server.url))
  await admin.acl('SETUSER', 'limited', 'on', '>pw', '~*', '+@all', '-eval', '-evalsha')
  const url = `redis://limited:pw@${server.host}:${server.port}`
  const worst = new Latency()
  for (const strict of [false, true]) {
    const started = performance.now()
    const [error, owned] = await withOwnedClient(async () => await makeApp(t, { redis: url, strict }).then(() => undefined, (err: Error) => err))
    const took = performance.now() - started
    worst.add(took)
    t.match(error, { code: 'FST_RATE_GUARD_REDIS_REFUSED', message: /NOPERM/ }, `strict: ${strict}: refused, naming NOPERM (${error?.message})`)
    t.ok(under(READY_WAIT, { at: started, ms: took }), `strict: ${strict}: at once, not after the ${READY_WAIT} ms registration waits for Redis (${Math.round(took)} ms)`)
    const endedAt = await ended(owned)
    const rejectedAt = started + took
    t.ok(inTime(DISCONNECT_WAIT, { at: rejectedAt, ms: endedAt - rejectedAt }), `strict: ${strict}: the owned client is disconnected for good, ${Math.round(endedAt - rejectedAt)} ms after the rejection`)
  }
  const lent = await ready(lend(t, url))
  const started = performance.now()
  await t.rejects(async () => { await makeApp(t, { redis: lent }) }, { code: 'FST_RATE_GUARD_REDIS_REFUSED', message: /NOPERM/ }, 'a lent client of that user: refused too')
  worst.add(performance.now() - started)
  t.equal(lent.status, 'ready', 'the lent client is left open')
  const limitedConnections = async (): Promise<number> => String(await admin.client('LIST')).split('\n').filter(line => / user=limited /.test(line)).length
  for (let i = 0; (await limitedConnections()) > 1 && i < 100; i++) await sleep(20)
  t.equal(await limitedConnections(), 1, 'only the lent connection of that user is left')
  reliability(t, 'ACL user without EVAL/EVALSHA (registration refused)', worst.worst, 'n/a')
})

t.test('no unhandled rejection and no unlistened error event', async t => {
  await new Promise(resolve => setImmediate(resolve))
  t.same(escapes.unhandled.map(String), [], 'no unhandled rejection')
  t.same(escapes.unlistened, [], 'no ioredis error event without a listener')
})
