// The load shedder (`shed`, issue 46) end to end over real HTTP, on the in-process store and on Redis: the
// in-flight capacity and the critical class's reserve, counted by handlers held on a gate (what really ran, not
// only what the plugin answered); every shed answer (503, Retry-After, the JSON and problem bodies); a shed
// request spends no budget and makes no Redis call; classes (route config, classify, the default rule, a
// client's headers); shadow mode; failMode with Redis down; a client hanging up; the option checks. The
// signals (pressure, event-loop delay, Redis's reply time) and recovery: test/shed-signals.test.ts.
import http from 'node:http'
import { once } from 'node:events'
import net from 'node:net'
import type { FastifyInstance } from 'fastify'
import Fastify from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions, ShedOptions } from '../lib/index.js'
import { client, getRedis, scriptCalls, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { Observer, get, listening, shedMessages, shedOf, waitFor } from './helpers/shed-app.js'
import type { Answer } from './helpers/shed-app.js'

const PROBLEM_TYPE = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity'
/** No sample within a test: the shares stay whole, so only the in-flight count sheds. */
const NO_SAMPLE = '10 seconds'

/** The store options of each store the shedder is run beside. */
async function storeOptions (t: Test, store: 'memory' | 'redis'): Promise<RateGuardOptions> {
  if (store === 'memory') return {}
  const { url } = await getRedis(t)
  // A deadline of 2 s: this file holds the shedder, not Redis's deadline, to account (under coverage on a loaded
  // machine a decision past the default 100 ms was failMode's 503, and the request never reached its handler).
  return { redis: url, nameSpace: uniquePrefix(), timeout: 2000 }
}

/** Holds a request to `path` (its handler waits on the observer's gate): resolves with its answer once let go. */
function hold (base: string, path: string): Promise<Answer> {
  return get(base, path)
}

/** The JSON body of a shed 503 and its Retry-After, checked. */
function isShed (
  t: Test, answer: Answer, retryAfter = '1', what = 'shed', wait = retryAfter === '1' ? '1 second' : `${retryAfter} seconds`
): void {
  t.equal(answer.status, 503, `${what}: 503`)
  t.equal(answer.headers.get('retry-after'), retryAfter, `${what}: Retry-After ${retryAfter}`)
  t.match(answer.headers.get('content-type'), /^application\/json/, `${what}: JSON`)
  t.strictSame(JSON.parse(answer.body), {
    statusCode: 503,
    code: 'FST_RATE_GUARD_SHED',
    error: 'Service Unavailable',
    message: `Server overloaded, retry in ${wait}`
  }, `${what}: the body`)
}

for (const store of ['memory', 'redis'] as const) {
  t.test(`${store}: normal admitted below the capacity less the reserve, critical up to the capacity, exempt always`, async t => {
    const observer = new Observer()
    const shed = { inFlight: 5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } as const
    const { app, base } = await listening(t, { ...await storeOptions(t, store), shed }, app => {
      app.get('/work', observer.held('normal'))
      app.get('/urgent', { config: { priority: 'critical' } }, observer.held('critical'))
      app.get('/health', async () => 'up')
      app.get('/metrics', { config: { priority: 'exempt' } }, async () => 'metrics')
      app.get('/slow-exempt', { config: { priority: 'exempt' } }, observer.held('exempt'))
    })
    t.teardown(() => { observer.open() })
    const messages = shedMessages(t)
    const held: Array<Promise<Answer>> = []
    // 5 × (1 − 0.2) = 4: the fourth normal request is admitted (3 in flight), the fifth is not (4 in flight).
    for (let i = 1; i <= 4; i++) {
      held.push(hold(base, '/work'))
      await waitFor(() => observer.running === i, `normal request ${i} running`)
    }
    t.equal(shedOf(app).inFlight, 4)
    isShed(t, await observer.answered(base, '/work'), '1', 'the fifth normal request')
    t.equal((await get(base, '/nowhere')).status, 503, 'a 404 (sheddable) is shed too')
    // The reserve: critical requests go on until 5 are in flight.
    held.push(hold(base, '/urgent'))
    await waitFor(() => observer.running === 5, 'the critical request running')
    isShed(t, await observer.answered(base, '/urgent'), '1', 'a critical request with the reserve used up')
    isShed(t, await observer.answered(base, '/work'), '1', 'a normal request at capacity')
    // Exempt: never shed, even with everything taken; a held one runs past the capacity.
    t.equal((await get(base, '/health')).status, 200, '/health (the default rule) is exempt')
    t.equal((await get(base, '/metrics')).status, 200, "config.priority 'exempt' is exempt")
    held.push(hold(base, '/slow-exempt'))
    await waitFor(() => observer.mostOf('exempt') === 1, 'the exempt request running at capacity')
    t.match(shedOf(app), { inFlight: 5, limit: 5, admitted: { critical: 1, normal: 1, sheddable: 1 } }, 'stats().shed')
    t.equal(app.rateGuard.stats().decisions.shed, 4, 'four shed, as stats() counts them')
    t.strictSame(messages.map(m => [m.outcome, m.priority, m.reason, m.budget, m.keyKind]), [
      ['shed', 'normal', 'in-flight', 'shed', 'none'],
      ['shed', 'sheddable', 'in-flight', 'shed', 'none'],
      ['shed', 'critical', 'in-flight', 'shed', 'none'],
      ['shed', 'normal', 'in-flight', 'shed', 'none']
    ], 'each on the decision channel, with its class and reason')
    t.equal(observer.mostOf('normal'), 4, 'at most 4 normal handlers ran at once')
    t.equal(observer.mostOf('normal') + observer.mostOf('critical'), 5, 'at most 5 non-exempt handlers ran at once')

    observer.open()
    t.strictSame((await Promise.all(held)).map(a => a.status), [200, 200, 200, 200, 200, 200], 'every held request answered')
    await waitFor(() => shedOf(app).inFlight === 0, 'nothing in flight')
    t.equal((await get(base, '/nowhere')).status, 404, 'a 404 is admitted again')
    const again = [hold(base, '/work'), hold(base, '/urgent')]
    await waitFor(() => observer.running === 2, 'normal and critical admitted again')
    observer.open()
    t.strictSame((await Promise.all(again)).map(a => a.status), [200, 200])
  })
}

t.test('exempt requests in flight take no place: the reserve stays the critical class\'s', async t => {
  const observer = new Observer()
  const { app, base } = await listening(t, { shed: { inFlight: 5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }, app => {
    app.get('/work', observer.held('normal'))
    app.get('/urgent', { config: { priority: 'critical' } }, observer.held('critical'))
    app.get('/healthz', observer.held('exempt'))
  })
  t.teardown(() => { observer.open() })
  const held: Array<Promise<Answer>> = []
  // Slow health checks first: two of them running.
  for (let i = 1; i <= 2; i++) {
    held.push(hold(base, '/healthz'))
    await waitFor(() => observer.running === i, `health check ${i} running`)
  }
  t.equal(shedOf(app).inFlight, 0, 'exempt requests are not counted in flight')
  // The normal requests' share (4 of 5) whole, and the reserve (1) for a critical request.
  for (let i = 1; i <= 4; i++) {
    held.push(hold(base, '/work'))
    await waitFor(() => observer.mostOf('normal') === i, `normal request ${i} running`)
  }
  t.equal((await observer.answered(base, '/work')).status, 503, 'the fifth normal request shed')
  held.push(hold(base, '/urgent'))
  await waitFor(() => observer.mostOf('critical') === 1, 'the critical request admitted to the reserve')
  t.equal((await observer.answered(base, '/urgent')).status, 503, 'the next critical request shed: the capacity full')
  t.equal(observer.mostOf('normal') + observer.mostOf('critical'), 5)
  observer.open()
  t.strictSame((await Promise.all(held)).map(a => a.status), [200, 200, 200, 200, 200, 200, 200])
  await waitFor(() => shedOf(app).inFlight === 0, 'nothing in flight')
})

t.test('every shed answer: Retry-After a whole number of seconds, JSON or problem details', async t => {
  const cases: Array<[RateGuardOptions, string, string]> = [
    [{ shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false } }, '1', '1 second'],
    [{ shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, retryAfter: '3 seconds' } }, '3', '3 seconds'],
    [{ shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, retryAfter: '1500 ms' } }, '2', '2 seconds'],
    [{ shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, retryAfter: 60_000 } }, '60', '1 minute']
  ]
  for (const [options, after, wait] of cases) {
    const observer = new Observer()
    const { base } = await listening(t, options, app => { app.get('/work', observer.held('work')) })
    t.teardown(() => { observer.open() })
    const held = hold(base, '/work')
    await waitFor(() => observer.running === 1, 'one request running')
    const given = JSON.stringify((options.shed as { retryAfter?: unknown }).retryAfter)
    isShed(t, await observer.answered(base, '/work'), after, `retryAfter ${given}`, wait)
    observer.open()
    t.equal((await held).status, 200)
  }

  const observer = new Observer()
  const problem: RateGuardOptions = { errorFormat: 'problem', shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, retryAfter: '3 seconds' } }
  const { base } = await listening(t, problem, app => {
    app.get('/work', observer.held('work'))
  })
  t.teardown(() => { observer.open() })
  const held = hold(base, '/work')
  await waitFor(() => observer.running === 1, 'one request running')
  const shed = await get(base, '/work')
  t.equal(shed.status, 503)
  t.equal(shed.headers.get('retry-after'), '3')
  t.match(shed.headers.get('content-type'), /^application\/problem\+json/)
  t.strictSame(JSON.parse(shed.body), {
    type: PROBLEM_TYPE,
    title: 'Request cannot be satisfied due to temporary reduced capacity',
    status: 503,
    detail: 'Server overloaded, retry in 3 seconds',
    'retry-after': 3
  }, 'the temporary-reduced-capacity problem')
  observer.open()
  t.equal((await held).status, 200)
})

t.test('a shed request spends no budget and makes no Redis call', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url)
  for (const store of ['memory', 'redis'] as const) {
    const observer = new Observer()
    const options: RateGuardOptions = store === 'redis' ? { redis: server.url, nameSpace: uniquePrefix(), timeout: 2000 } : {}
    const { base } = await listening(t, { ...options, shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }, app => {
      app.get('/work', { config: { rateLimit: false } }, observer.held('work'))
      app.get('/limited', { config: { rateLimit: { max: 2, timeWindow: '1 hour' } } }, async () => 'ok')
    })
    t.teardown(() => { observer.open() })
    // 1 × 0.8: one normal request in flight and the rest are shed.
    const held = hold(base, '/work')
    await waitFor(() => observer.running === 1, 'one request running')
    const before = await scriptCalls(redis)
    for (let i = 0; i < 5; i++) t.equal((await get(base, '/limited')).status, 503, `${store}: /limited shed while full (${i + 1})`)
    if (store === 'redis') t.equal(await scriptCalls(redis), before, 'no script call for the shed requests')
    observer.open()
    t.equal((await held).status, 200)
    const after = []
    for (let i = 0; i < 3; i++) after.push((await get(base, '/limited')).status)
    t.strictSame(after, [200, 200, 429], `${store}: the budget of 2 untouched by the shed requests`)
    if (store === 'redis') t.ok(await scriptCalls(redis) > before, 'the budget is decided by Redis (the count above can move)')
  }
})

/** An app whose one held critical request fills `inFlight: 1`: every request but an exempt one is shed, its class on the channel. */
async function classes (t: Test, options: RateGuardOptions['shed'], routes: (app: FastifyInstance) => void): Promise<{
  app: FastifyInstance
  logs: Array<Record<string, unknown>>
  classOf: (path: string, headers?: Record<string, string>) => Promise<string>
}> {
  const observer = new Observer()
  const shed: ShedOptions = { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE, ...options as object }
  const { app, base, logs } = await listening(t, { shed }, app => {
    app.get('/hold', { config: { priority: 'critical' } }, observer.held('hold'))
    routes(app)
  })
  t.teardown(() => { observer.open() })
  const held = hold(base, '/hold')
  t.teardown(async () => { observer.open(); await held })
  await waitFor(() => observer.running === 1, 'the held request running')
  const messages = shedMessages(t)
  const classOf = async (path: string, headers: Record<string, string> = {}): Promise<string> => {
    const seen = messages.length
    const answer = await get(base, path, headers)
    if (answer.status !== 503) return `${answer.status}`
    if (messages.length !== seen + 1) throw new Error(`${path}: a 503 without its one shed message`)
    return messages[seen]!.priority!
  }
  return { app, logs, classOf }
}

t.test('classes: a route\'s config beats classify, which beats the default rule; a client cannot choose its own', async t => {
  const { classOf } = await classes(t, { classify: request => request.url.startsWith('/by-classify') ? 'sheddable' : 'critical' }, app => {
    app.get('/configured', { config: { priority: 'normal' } }, async () => 'ok')
    app.get('/by-classify', async () => 'ok')
    app.get('/health', { config: { priority: 'sheddable' } }, async () => 'ok')
    app.get('/other', async () => 'ok')
  })
  t.equal(await classOf('/configured'), 'normal', 'config.priority beats classify')
  t.equal(await classOf('/health'), 'sheddable', 'config.priority beats the default rule')
  t.equal(await classOf('/by-classify'), 'sheddable', "classify's class")
  t.equal(await classOf('/other'), 'critical', "classify's class")
  t.equal(await classOf('/nowhere'), 'sheddable', 'a 404 is sheddable, whatever classify says')
})

t.test('classes: the default rule, by the route\'s pattern; no header a client sends changes it', async t => {
  const { classOf } = await classes(t, {}, app => {
    app.get('/work', async () => 'ok')
    app.get('/api/v1/readyz', async () => 'ok')
    app.get('/users/:name', async () => 'ok')
    app.get('/:name', async () => 'ok')
  })
  t.equal(await classOf('/work'), 'normal')
  t.equal(await classOf('/api/v1/readyz'), '200', 'a readiness route is exempt')
  t.equal(await classOf('/health'), 'normal', "a route '/:name' requested as /health is normal")
  t.equal(await classOf('/users/healthz'), 'normal', "a route '/users/:name' requested as /users/healthz is normal")
  t.equal(await classOf('/nowhere/at/all'), 'sheddable', 'a 404 is sheddable')
  const claims = {
    'x-priority': 'critical', priority: 'u=0', 'x-rate-guard-priority': 'exempt', 'x-shed-priority': 'exempt', 'x-health': 'check'
  }
  t.equal(await classOf('/work', claims), 'normal', 'headers claiming a class: still normal')
  t.equal(await classOf('/nowhere/at/all', claims), 'sheddable', 'headers claiming a class on a 404: still sheddable')
})

for (const [what, classify] of [
  ['returns junk', () => 'urgent'],
  ['returns a promise', async () => 'critical'],
  ['throws', () => { throw new Error('classify broke') }]
] as const) {
  t.test(`classes: a classify that ${what} classes 'normal', logged (FST_RATE_GUARD_CALLBACK_FAILED)`, async t => {
    const { classOf, logs } = await classes(t, { classify: classify as () => undefined }, app => { app.get('/work', async () => 'ok') })
    t.equal(await classOf('/work'), 'normal')
    t.equal(await classOf('/nowhere'), 'sheddable', 'a 404 is never classified')
    const failed = logs.filter(l => l.code === 'FST_RATE_GUARD_CALLBACK_FAILED')
    t.equal(failed.length, 1, 'logged once')
    t.match(failed[0], { level: 50, fallback: "classed 'normal'", msg: /shed\.classify failed/ })
  })
}

t.test("an invalid config.priority ('urgent') throws FST_RATE_GUARD_INVALID_OPTION as the route is added", async t => {
  const app = Fastify()
  t.teardown(async () => await app.close())
  await app.register(rateGuard, { shed: true })
  const invalid = { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /config\.priority of \/x/ }
  t.throws(() => app.get('/x', { config: { priority: 'urgent' as 'normal' } }, async () => 'ok'), invalid)
  t.throws(() => app.get('/x', { config: { priority: 1 as unknown as 'normal' } }, async () => 'ok'), invalid)
})

t.test('shadow: nothing refused, what would be shed counted and published as shadow-shed', async t => {
  const cases: Array<[string, RateGuardOptions]> = [
    ["shed.mode 'shadow'", { shed: { mode: 'shadow', inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }],
    ["the plugin's mode 'shadow'", { mode: 'shadow', shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }]
  ]
  for (const [what, options] of cases) {
    const observer = new Observer()
    const { app, base } = await listening(t, options, app => { app.get('/work', observer.held('work')) })
    t.teardown(() => { observer.open() })
    const messages = shedMessages(t)
    const held = [hold(base, '/work'), hold(base, '/work'), hold(base, '/work')]
    await waitFor(() => observer.running === 3, `${what}: three requests running with a capacity of 1`)
    t.equal(shedOf(app).inFlight, 3, `${what}: all three in flight`)
    observer.open()
    t.strictSame((await Promise.all(held)).map(a => a.status), [200, 200, 200], `${what}: none refused`)
    const { decisions } = app.rateGuard.stats()
    t.match(decisions, { shed: 0, 'shadow-shed': 2 }, `${what}: two would have been shed`)
    t.strictSame(messages.map(m => [m.outcome, m.mode, m.priority, m.reason]), [
      ['shadow-shed', 'shadow', 'normal', 'in-flight'],
      ['shadow-shed', 'shadow', 'normal', 'in-flight']
    ], `${what}: on the decision channel`)
  }

  const observer = new Observer()
  const { app, base } = await listening(t, { mode: 'shadow', shed: { mode: 'enforce', inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false } }, app => {
    app.get('/work', observer.held('work'))
  })
  t.teardown(() => { observer.open() })
  const held = hold(base, '/work')
  await waitFor(() => observer.running === 1, 'one request running')
  isShed(t, await observer.answered(base, '/work'), '1', "shed.mode 'enforce' beside the plugin's shadow mode")
  t.equal(observer.most, 1)
  observer.open()
  t.equal((await held).status, 200)
  t.match(app.rateGuard.stats().decisions, { shed: 1, 'shadow-shed': 0 })
})

for (const failMode of ['closed', 'open'] as const) {
  t.test(`failMode '${failMode}' with Redis stopped: the shedder still sheds, and lets critical through to failMode`, async t => {
    const server = await startRedisServer(t)
    const observer = new Observer()
    const { base } = await listening(t, {
      redis: server.url,
      failMode,
      timeout: 200,
      nameSpace: uniquePrefix(),
      shed: { inFlight: 2, reserve: 0.5, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE }
    }, app => {
      app.get('/work', { config: { rateLimit: false } }, observer.held('work'))
      app.get('/limited', async () => 'ok')
      app.get('/urgent', { config: { priority: 'critical' } }, async () => 'ok')
    })
    t.teardown(() => { observer.open() })
    t.equal((await get(base, '/limited')).status, 200, 'decided by Redis while it is up')
    await server.stop()
    // 2 × (1 − 0.5) = 1: with one in flight, normal is shed, critical is not.
    const held = hold(base, '/work')
    await waitFor(() => observer.running === 1, 'one request running')
    isShed(t, await observer.answered(base, '/limited'), '1', 'a normal request, Redis down')
    const urgent = await get(base, '/urgent')
    if (failMode === 'open') t.equal(urgent.status, 200, 'critical: let through, failMode open')
    else {
      t.match({ status: urgent.status, body: JSON.parse(urgent.body) }, { status: 503, body: { code: 'FST_RATE_GUARD_UNAVAILABLE' } },
        'critical: failMode closed answers')
    }
    observer.open()
    t.equal((await held).status, 200)
  })
}

t.test('a client hanging up mid-handler keeps its slot until its handler ends', async t => {
  const observer = new Observer()
  const { app, base } = await listening(t, { shed: { inFlight: 2, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }, app => {
    app.get('/work', observer.held('work'))
  })
  t.teardown(() => { observer.open() })
  // 2 × 0.8 = 1.6: two normal requests at once. Each of eight is sent on a socket of its own and, once its
  // handler runs, its client hangs up; the server hears it before the next is sent.
  const answers: Array<number | 'aborted'> = []
  for (let i = 0; i < 8; i++) {
    const entered = observer.entered
    const request = http.get(`${base}/work`, { agent: false })
    const answer = new Promise<number | 'aborted'>(resolve => {
      request.on('response', res => { res.resume(); res.on('end', () => resolve(res.statusCode!)) })
      request.on('error', () => resolve('aborted'))
    })
    const running = waitFor(() => observer.entered > entered, 'a handler entered').then(() => 'entered' as const)
    const first = await Promise.race([answer, running])
    if (first === 'entered') {
      const hungUp = observer.hungUp
      request.destroy()
      await waitFor(() => observer.hungUp > hungUp, 'the server heard the hang-up')
    }
    answers.push(await answer)
  }
  t.strictSame(answers, ['aborted', 'aborted', 503, 503, 503, 503, 503, 503], 'two ran (their clients left), the rest shed')
  t.equal(observer.running, 2, 'two handlers still running')
  t.equal(observer.most, 2, 'never more than two at once')
  t.equal(shedOf(app).inFlight, 2, 'both still in flight, their clients gone')
  observer.open()
  await waitFor(() => shedOf(app).inFlight === 0, 'the slots given back once the handlers end')
  const again = hold(base, '/work')
  await waitFor(() => observer.running === 1, 'admitted again')
  observer.open()
  t.equal((await again).status, 200)
})

t.test('every place given back: a budget\'s 429, a handler that throws, a 404, a client gone mid-body; nested routes count', async t => {
  const observer = new Observer()
  const shed = { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } as const
  const { app, base } = await listening(t, { shed }, app => {
    app.get('/limited', { config: { rateLimit: { max: 1, timeWindow: '1 hour' } } }, async () => 'ok')
    app.get('/throws', async () => { throw new Error('broken') })
    app.post('/body', async () => 'ok')
    app.register(async child => { child.get('/work', observer.held('nested')) }, { prefix: '/nested' }).after(() => {})
  })
  t.teardown(() => { observer.open() })
  t.strictSame([await get(base, '/limited'), await get(base, '/limited'), await get(base, '/limited')].map(a => a.status), [200, 429, 429])
  t.equal((await get(base, '/throws')).status, 500)
  t.equal((await get(base, '/nowhere')).status, 404)
  t.equal(shedOf(app).inFlight, 0, 'none kept by a 429, a 500 or a 404')
  const { port } = app.server.address() as { port: number }
  for (let i = 0; i < 3; i++) {
    const socket = net.connect(port, '127.0.0.1')
    t.teardown(() => { socket.destroy() })
    await once(socket, 'connect')
    socket.write('POST /body HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"a":')
    await waitFor(() => shedOf(app).inFlight === 1, 'the request in flight, its body not all sent')
    socket.destroy()
    await waitFor(() => shedOf(app).inFlight === 0, 'its place given back once its client left')
  }
  // A route of an encapsulated plugin is counted and shed as any other.
  const held = hold(base, '/nested/work')
  await waitFor(() => observer.running === 1, 'the nested route running')
  t.equal(shedOf(app).inFlight, 1, 'counted in flight')
  t.equal((await observer.answered(base, '/nested/work')).status, 503, 'the second shed')
  observer.open()
  t.equal((await held).status, 200)
  await waitFor(() => shedOf(app).inFlight === 0, 'nothing in flight')
})

t.test('bans: the shedder comes first (a banned client gets its 503), a shed request strikes toward no ban, the ban stands', async t => {
  const observer = new Observer()
  const options: RateGuardOptions = { max: 1, timeWindow: '1 hour', ban: { threshold: 2, duration: '1 minute' } }
  const { app, base } = await listening(t, { ...options, shed: { inFlight: 1, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }, app => {
    app.get('/work', { config: { rateLimit: false } }, observer.held('work'))
    app.get('/limited', async () => 'ok')
  })
  t.teardown(() => { observer.open() })
  const full = async (during: () => Promise<void>): Promise<void> => {
    const held = hold(base, '/work')
    await waitFor(() => observer.running === 1, 'the capacity full')
    await during()
    observer.open()
    t.equal((await held).status, 200)
    await waitFor(() => shedOf(app).inFlight === 0, 'nothing in flight')
  }
  t.equal((await get(base, '/limited')).status, 200, 'the budget of 1 spent')
  await full(async () => {
    for (let i = 0; i < 4; i++) isShed(t, await observer.answered(base, '/limited'), '1', `shed ${i + 1}, over the budget`)
  })
  t.equal((await get(base, '/limited')).status, 429, 'one denial: no strikes came from the four shed (threshold 2)')
  await app.rateGuard.ban('127.0.0.1', '1 minute')
  t.equal((await get(base, '/limited')).status, 403, 'banned')
  await full(async () => { isShed(t, await observer.answered(base, '/limited'), '1', 'a banned client, the capacity full') })
  t.equal((await get(base, '/limited')).status, 403, 'the ban stands')
  t.match(app.rateGuard.stats().decisions, { shed: 5 })
})

t.test("hook 'preHandler': the shedder still answers in onRequest, before the body is read; a costly request is one in flight", async t => {
  const observer = new Observer()
  let parsed = 0
  const options: RateGuardOptions = { hook: 'preHandler', shed: { inFlight: 2, eventLoopDelay: false, eventLoopUtilization: false, sampleInterval: NO_SAMPLE } }
  const { app, base } = await listening(t, options, app => {
    app.addContentTypeParser('text/plain', (_request, payload, done) => {
      parsed++
      payload.resume()
      payload.on('end', () => done(null, 'x'))
    })
    app.post('/upload', async () => 'stored')
    app.get('/costly', { config: { rateLimit: { cost: 5 } } }, observer.held('costly'))
  })
  t.teardown(() => { observer.open() })
  // 2 × 0.8: two normal requests at once, whatever each costs.
  const held = [hold(base, '/costly'), hold(base, '/costly')]
  await waitFor(() => observer.running === 2, 'two requests of cost 5 running')
  t.equal(shedOf(app).inFlight, 2, 'each one in flight')
  const socket = net.connect((app.server.address() as { port: number }).port, '127.0.0.1')
  t.teardown(() => { socket.destroy() })
  await once(socket, 'connect')
  socket.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n')
  let answer = ''
  socket.on('data', (chunk: Buffer) => { answer += chunk.toString() })
  await waitFor(() => answer.includes('FST_RATE_GUARD_SHED'), 'the 503, no byte of the body sent')
  t.match(answer, /^HTTP\/1\.1 503 /)
  t.equal(parsed, 0, 'the body never read')
  observer.open()
  t.strictSame((await Promise.all(held)).map(a => a.status), [200, 200])
})

t.test('options: each bad one a coded error at register; shed: true takes the defaults', async t => {
  const bad: Array<[unknown, RegExp]> = [
    ['yes', /shed/],
    [{ eventLoopDelay: -1 }, /shed\.eventLoopDelay/],
    [{ inFlight: 0 }, /shed\.inFlight/],
    [{ inFlight: 1.5 }, /shed\.inFlight/],
    [{ inFlight: 'many' }, /shed\.inFlight/],
    [{ inFlight: [4] }, /shed\.inFlight/],
    [{ inFlight: { floor: 5, ceiling: 2 } }, /shed\.inFlight\.ceiling/],
    [{ inFlight: { flor: 5 } }, /shed\.inFlight\.flor.*floor/],
    [{ reserve: 1 }, /shed\.reserve/],
    [{ classify: 1 }, /shed\.classify/],
    [{ pressure: true }, /shed\.pressure/],
    [{ sampleInterval: 5 }, /shed\.sampleInterval/],
    [{ recovery: 'soon' }, /shed\.recovery/],
    [{ retryAfter: 0 }, /shed\.retryAfter/],
    [{ inflight: 5 }, /shed\.inflight.*inFlight/],
    [{ mode: 'report' }, /shed\.mode/]
  ]
  for (const [shed, message] of bad) {
    const app = Fastify()
    t.teardown(async () => await app.close())
    const register = async (): Promise<void> => { await app.register(rateGuard, { shed } as RateGuardOptions) }
    await t.rejects(register, { code: 'FST_RATE_GUARD_INVALID_OPTION', message }, JSON.stringify(shed))
  }

  const observer = new Observer()
  const { app, base } = await listening(t, { shed: true }, app => { app.get('/work', observer.held('work')) })
  t.teardown(() => { observer.open() })
  const held = [hold(base, '/work'), hold(base, '/work'), hold(base, '/work')]
  await waitFor(() => observer.running === 3, 'no in-flight capacity by default')
  observer.open()
  t.strictSame((await Promise.all(held)).map(a => a.status), [200, 200, 200])
  const { limit, readings } = shedOf(app)
  t.equal(limit, null)
  t.match(readings, { redisTimeMs: null, pressure: null }, 'Redis and pressure not read by default')
  await waitFor(() => shedOf(app).readings.eventLoopUtilization !== null, 'a sample')
  t.type(shedOf(app).readings.eventLoopDelayMs, 'number', 'the delay read by default')
  t.type(shedOf(app).readings.eventLoopUtilization, 'number', 'the utilization read by default')
})

t.test('shed: false is none; an adapted capacity starts at its floor, measures no-load latency, stays in floor..ceiling', async t => {
  const off = await listening(t, { shed: false }, app => { app.get('/work', async () => 'ok') })
  t.equal((await get(off.base, '/work')).status, 200)
  t.equal(off.app.rateGuard.stats().shed, undefined, 'no shed section')

  const { app, base } = await listening(t, { shed: { inFlight: { ceiling: 4 }, sampleInterval: 10, eventLoopDelay: false, eventLoopUtilization: false } }, app => {
    app.get('/work', async () => await new Promise(resolve => setImmediate(resolve, 'ok')))
  })
  t.match(shedOf(app), { limit: 2, minRttMs: null }, 'the default floor, nothing measured yet')
  const floored = await listening(t, { shed: { inFlight: { floor: 3 }, eventLoopDelay: false, eventLoopUtilization: false } }, app => {
    app.get('/work', async () => 'ok')
  })
  t.match(shedOf(floored.app), { limit: 3 }, 'a floor given, the ceiling by default')
  const limits = new Set<number>()
  const sent: Array<Promise<Answer>> = []
  await waitFor(() => {
    sent.push(get(base, '/work'), get(base, '/work'))
    limits.add(shedOf(app).limit!)
    return shedOf(app).minRttMs !== null
  }, 'the no-load latency measured')
  const statuses = new Set((await Promise.all(sent)).map(a => a.status))
  t.ok([...statuses].every(status => status === 200 || status === 503), `answers: ${[...statuses].join(', ')}`)
  t.ok(shedOf(app).minRttMs! > 0, `no-load latency ${shedOf(app).minRttMs!.toFixed(2)} ms`)
  t.ok([...limits].every(limit => limit >= 2 && limit <= 4), `limits seen: ${[...limits].join(', ')}`)
})
