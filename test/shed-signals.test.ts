// The load shedder's signals end to end over real HTTP (issue 46): the app's `pressure`, the event loop's
// delay (a handler that blocks it), Redis's reply time (a redis-server of the test's own, paused), and the
// in-flight count past the reserve; each sheds the lowest class first (sheddable to none before normal
// falls at all), never critical or exempt, says its reason (stats().shed, the decision channel), and the
// classes ramp back gradually once calm, within `recovery`. Conditions are waited for by polling stats()
// (every millisecond or so, capped by the lag measured meanwhile: test/helpers/lag.ts), never a sleep.
// The in-flight capacity, answers, classes and options: test/shed.test.ts.
import { performance } from 'node:perf_hooks'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { ShedSnapshot } from '../lib/shed/shedder.js'
import { allowing } from './helpers/lag.js'
import { client, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { Observer, get, listening, shedMessages, shedOf, waitFor } from './helpers/shed-app.js'

/** What stats().shed said at each poll, from the first until `done` held (or the cap: an error). */
async function watch (app: FastifyInstance, done: (shed: ShedSnapshot) => boolean, what: string, ms = 10_000): Promise<ShedSnapshot[]> {
  const seen: ShedSnapshot[] = []
  const started = performance.now()
  for (;;) {
    const shed = shedOf(app)
    seen.push(shed)
    if (done(shed)) return seen
    if (performance.now() - started > allowing(ms, started)) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 1))
  }
}

t.test("pressure: sheddable to none before normal falls, critical and exempt kept, reason 'pressure', a gradual ramp back", async t => {
  let flag = false
  const recoveryMs = 500
  const shed = { pressure: () => flag, sampleInterval: 10, recovery: recoveryMs, eventLoopDelay: false, eventLoopUtilization: false } as const
  const { app, base } = await listening(t, { shed }, app => {
    app.get('/work', async () => 'work')
    app.get('/later', { config: { priority: 'sheddable' } }, async () => 'later')
    app.get('/urgent', { config: { priority: 'critical' } }, async () => 'urgent')
    app.get('/health', async () => 'up')
  })
  const messages = shedMessages(t)
  await waitFor(() => shedOf(app).readings.pressure === false, 'a calm sample')
  t.equal((await get(base, '/later')).status, 200, 'calm: sheddable admitted')

  flag = true
  const falling = await watch(app, shed => shed.admitted.normal === 0, 'normal shed whole')
  const early = falling.filter(shed => shed.admitted.normal < 1 && shed.admitted.sheddable > 0)
  t.strictSame(early, [], 'normal never fell while sheddable was still admitted')
  t.ok(falling.some(shed => shed.admitted.sheddable > 0 && shed.admitted.sheddable < 1), 'sheddable halved on the way down')
  t.ok(falling.some(shed => shed.admitted.sheddable === 0 && shed.admitted.normal === 1), 'sheddable at none, normal still whole')
  t.match(shedOf(app), { over: 'pressure', readings: { pressure: true }, admitted: { critical: 1, normal: 0, sheddable: 0 } })

  t.equal((await get(base, '/work')).status, 503, 'normal shed')
  t.equal((await get(base, '/later')).status, 503, 'sheddable shed')
  t.equal((await get(base, '/nowhere')).status, 503, 'a 404 shed')
  t.equal((await get(base, '/urgent')).status, 200, 'critical kept')
  t.equal((await get(base, '/health')).status, 200, 'exempt kept')
  t.strictSame(messages.map(m => [m.outcome, m.priority, m.reason, m.keyKind, m.budget]), [
    ['shed', 'normal', 'pressure', 'none', 'shed'],
    ['shed', 'sheddable', 'pressure', 'none', 'shed'],
    ['shed', 'sheddable', 'pressure', 'none', 'shed']
  ], 'each on the decision channel, reason pressure')

  flag = false
  const calm = performance.now()
  const rising = await watch(app, shed => shed.admitted.normal === 1, 'normal admitted whole again')
  const tookMs = performance.now() - calm
  const normal = rising.map(shed => shed.admitted.normal)
  t.ok(normal.every((share, i) => i === 0 || share >= normal[i - 1]!), 'normal only climbs')
  const between = new Set(normal.filter(share => share > 0 && share < 1))
  t.ok(between.size >= 5, `gradually: ${between.size} shares between none and whole seen on the way`)
  t.ok(rising.every(shed => shed.admitted.sheddable === 0), 'sheddable still shed while normal climbs back (normal first)')
  // recovery / sampleInterval = 50 samples, none sooner than 10 ms after the last.
  t.ok(tookMs >= recoveryMs * 0.8, `not at once: ${Math.round(tookMs)} ms`)
  t.ok(tookMs <= allowing(recoveryMs, calm), `within recovery (${recoveryMs} ms and the lag): ${Math.round(tookMs)} ms`)
  await watch(app, shed => shed.admitted.sheddable === 1, 'sheddable admitted whole again')
  t.equal((await get(base, '/later')).status, 200, 'sheddable admitted again')
  t.equal(shedOf(app).over, null)
})

t.test("event-loop delay: a handler that blocks 300 ms is read at the next sample, reason 'event-loop-delay'", async t => {
  const { app, base } = await listening(t, { shed: { eventLoopDelay: 100, eventLoopUtilization: false, sampleInterval: 50 } }, app => {
    app.get('/busy', async () => {
      const end = performance.now() + 300
      while (performance.now() < end);
      return 'done'
    })
  })
  const messages = shedMessages(t)
  // The sample that reads the block (an earlier one may read a lag of the loaded machine's past the threshold).
  const watching = watch(app, shed => (shed.readings.eventLoopDelayMs ?? 0) >= 200, 'the block read')
  t.equal((await get(base, '/busy')).status, 200)
  const seen = await watching
  t.equal(seen.at(-1)!.over, 'event-loop-delay', `the delay read: ${Math.round(seen.at(-1)!.readings.eventLoopDelayMs!)} ms`)
  t.ok(seen.at(-1)!.admitted.sheddable < 1, 'sheddable halved')
  t.equal((await get(base, '/nowhere')).status, 503, 'a 404 (sheddable) shed')
  t.match(messages, [{ outcome: 'shed', priority: 'sheddable', reason: 'event-loop-delay' }])
})

t.test("event-loop utilization: a handler busy through a sample, reason 'event-loop-utilization'", async t => {
  const { app, base } = await listening(t, { shed: { eventLoopDelay: false, eventLoopUtilization: 0.5, sampleInterval: 50 } }, app => {
    app.get('/busy', async () => {
      const end = performance.now() + 300
      while (performance.now() < end);
      return 'done'
    })
  })
  const messages = shedMessages(t)
  const watching = watch(app, shed => shed.over === 'event-loop-utilization', 'the utilization read')
  t.equal((await get(base, '/busy')).status, 200)
  const seen = await watching
  const utilization = seen.at(-1)!.readings.eventLoopUtilization!
  t.ok(utilization > 0.5 && utilization <= 1, `the utilization read: ${utilization.toFixed(3)}`)
  t.equal(seen.at(-1)!.readings.eventLoopDelayMs, null, 'the delay not read')
  t.equal((await get(base, '/nowhere')).status, 503, 'a 404 (sheddable) shed')
  t.match(messages, [{ outcome: 'shed', priority: 'sheddable', reason: 'event-loop-utilization' }])
})

t.test("Redis's reply time: Redis paused past the threshold, reason 'redis-time'", async t => {
  const server = await startRedisServer(t)
  const pauser = client(t, server.url)
  const { app, base } = await listening(t, {
    redis: server.url, nameSpace: uniquePrefix(), timeout: 5000, shed: { redisTime: 50, sampleInterval: 20, eventLoopDelay: false, eventLoopUtilization: false }
  }, app => { app.get('/work', async () => 'work') })
  const messages = shedMessages(t)
  t.equal((await get(base, '/work')).status, 200)
  await waitFor(() => shedOf(app).readings.redisTimeMs === null, 'a sample with no reply in it')
  // The sample that reads the paused reply (an earlier one may read a reply the loaded machine slowed past 50 ms).
  const watching = watch(app, shed => (shed.readings.redisTimeMs ?? 0) >= 500, 'the paused reply read')
  // Paused 1 s: the request below reaches Redis within the first half of it on any machine that runs this test.
  await pauser.client('PAUSE', 1000, 'ALL')
  const paused = performance.now()
  t.equal((await get(base, '/work')).status, 200, 'decided once Redis answers')
  const waited = performance.now() - paused
  t.ok(waited >= 500, `the decision waited for the pause: ${Math.round(waited)} ms`)
  const seen = await watching
  const read = seen.at(-1)!.readings.redisTimeMs!
  t.ok(read <= waited, `the reply time read: ${Math.round(read)} ms, of the ${Math.round(waited)} ms the request took`)
  t.equal(seen.at(-1)!.over, 'redis-time')
  t.equal((await get(base, '/nowhere')).status, 503, 'a 404 (sheddable) shed')
  t.match(messages, [{ outcome: 'shed', priority: 'sheddable', reason: 'redis-time' }])
})

t.test('a full capacity sheds lowest class first by its own lines and is no pressure: the shares stay whole', async t => {
  const observer = new Observer()
  let samples = 0
  // The app's pressure, never on, counts the samples.
  const pressure = (): boolean => { samples++; return false }
  const shed = { inFlight: 10, sampleInterval: 10, recovery: 200, eventLoopDelay: false, eventLoopUtilization: false, pressure } as const
  const { app, base } = await listening(t, { shed }, app => {
    app.get('/work', observer.held('work'))
    app.get('/extra', { config: { priority: 'sheddable' } }, observer.held('extra'))
  })
  t.teardown(() => { observer.open() })
  const messages = shedMessages(t)
  const held = Array.from({ length: 7 }, () => get(base, '/work'))
  await waitFor(() => observer.running === 7, 'seven running')
  t.equal((await observer.answered(base, '/extra')).status, 503, 'sheddable: shed from 10 × 0.8² = 6.4, so 7 in flight')
  held.push(get(base, '/work'))
  await waitFor(() => observer.running === 8, 'a normal one let in: its line is 10 × 0.8 = 8')
  const from = samples
  for (let i = 0; i < 5; i++) t.equal((await observer.answered(base, '/work')).status, 503, 'normal: shed at 8')
  await waitFor(() => samples >= from + 5, 'five samples with requests turned away')
  t.match(shedOf(app), { over: null, inFlight: 8, admitted: { normal: 1, sheddable: 1 } }, 'no pressure: the shares stay whole')
  t.strictSame(messages.map(m => [m.priority, m.reason]), [['sheddable', 'in-flight'], ...Array(5).fill(['normal', 'in-flight'])])
  observer.open()
  t.strictSame((await Promise.all(held)).map(a => a.status), Array(8).fill(200))
  const extra = get(base, '/extra')
  await waitFor(() => observer.running === 1, 'a sheddable one let in: room again')
  observer.open()
  t.equal((await extra).status, 200)
})

t.test('a pressure function that throws is read as calm, and logged (FST_RATE_GUARD_CALLBACK_FAILED)', async t => {
  let calls = 0
  const pressure = (): boolean => { calls++; throw new Error('pressure broke') }
  const { app, base, logs } = await listening(t, { shed: { pressure, sampleInterval: 10, eventLoopDelay: false, eventLoopUtilization: false } }, app => {
    app.get('/later', { config: { priority: 'sheddable' } }, async () => 'later')
  })
  await waitFor(() => calls >= 5, 'five samples read')
  t.match(shedOf(app), { over: null, readings: { pressure: false }, admitted: { normal: 1, sheddable: 1 } }, 'calm')
  t.equal((await get(base, '/later')).status, 200, 'nothing shed')
  const failed = logs.filter(l => l.code === 'FST_RATE_GUARD_CALLBACK_FAILED')
  t.equal(failed.length, 1, 'logged once, not once a sample')
  t.match(failed[0], { level: 50, fallback: 'read as calm', msg: /shed\.pressure failed/ })
})
