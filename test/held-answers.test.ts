// Answers held in process (lib/held-answers.ts): a client Redis reported banned is answered 403 without a round trip
// until its ban ends, and a denial only time can change is answered 429 until it ends; an operator's change
// on any instance reaches every instance through Redis pub/sub; an instance that cannot hear changes (no
// subscription yet, a lost connection, an ACL without channels) asks Redis.
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Command } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { HeldAnswers, MAX_HELD } from '../lib/held-answers.js'
import { changesChannel } from '../lib/changes.js'
import rateGuard from '../lib/index.js'
import { client, getRedis, ready, SCRIPT_COMMANDS, scriptCalls, startRedisServer, subscribed, uniquePrefix, until } from './helpers/redis.js'
import { matchList } from './helpers/match-list.js'
import { allowing } from './helpers/lag.js'

// The default key of a client known by its address: the bare address, as @fastify/rate-limit writes it.
const ME = '127.0.0.1'

async function makeApp (t: Test, url: string, nameSpace: string, duration = '1 minute'): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, max: 1, timeWindow: '1 minute', ban: { threshold: 1, duration }, timeout: 3000 })
  app.get('/', async () => 'ok')
  await app.ready()
  return app
}

/**
 * Asks `app` until it answers `status` (or 3 s pass), giving the event loop a turn between requests: a change
 * published by another instance arrives as a message, which no event of this app reports, and a held answer
 * is given without ever waiting on I/O.
 */
async function askUntil (app: FastifyInstance, status: number): Promise<number> {
  let got = 0
  const end = Date.now() + 3000
  while (got !== status && Date.now() < end) {
    got = (await app.inject('/')).statusCode
    await new Promise(resolve => setImmediate(resolve))
  }
  return got
}

t.test('a banned flood costs no Redis call; the 403s carry the ban\'s Retry-After', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, url, nameSpace)
  await subscribed(observer, nameSpace, 1)
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403], 'allowed, then denied and banned')
  const before = await scriptCalls(observer)
  const flood = await Promise.all(Array.from({ length: 200 }, async () => await app.inject('/')))
  t.equal(await scriptCalls(observer) - before, 0, 'no script call for 200 requests of a banned client')
  t.ok(flood.every(r => r.statusCode === 403 && Number(r.headers['retry-after']) >= 59 && Number(r.headers['retry-after']) <= 60), 'each a 403 with the ban\'s Retry-After')
  t.equal((await app.inject({ url: '/', remoteAddress: '10.0.0.9' })).statusCode, 200, 'another client is asked of Redis as before')
})

t.test('unban on one instance reaches the others at once; on its own instance before it returns', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const [a, b] = [await makeApp(t, url, nameSpace), await makeApp(t, url, nameSpace)]
  await subscribed(observer, nameSpace, 2)
  t.strictSame([(await a.inject('/')).statusCode, (await a.inject('/')).statusCode, (await b.inject('/')).statusCode], [200, 403, 403], 'banned, on both')

  await a.rateGuard.unban(ME)
  await a.rateGuard.reset(ME)
  t.equal((await a.inject('/')).statusCode, 200, 'a: allowed on the next request')
  await b.rateGuard.reset(ME)
  // b hears the unban through pub/sub: wait for that message to have landed, by asking b until it lets the
  // client through (each try answered from b's cache costs nothing and counts nothing).
  t.equal(await askUntil(b, 200), 200, 'b: allowed once the unban reached it')
})

t.test('a lost subscription forgets every cached ban: an unban it could not hear is seen in Redis', async t => {
  const server = await startRedisServer(t)
  const observer = await ready(client(t, server.url))
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, server.url, nameSpace)
  await subscribed(observer, nameSpace, 1)
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403])
  const before = await scriptCalls(observer)
  t.equal((await app.inject('/')).statusCode, 403)
  t.equal(await scriptCalls(observer) - before, 0, 'held in process')

  await observer.call('CLIENT', 'KILL', 'TYPE', 'pubsub')
  // Lifted behind the plugin's back, with no message: only forgetting the cache can reveal it.
  await observer.del(...(await observer.keys(`${nameSpace}*banned`)), ...(await observer.keys(`${nameSpace}*:log:*`)))
  t.equal(await askUntil(app, 200), 200, 'Redis was asked again, and said allowed')
  await subscribed(observer, nameSpace, 1)
})

t.test('a user without channel permission: one warning, and bans are asked of Redis on every request', async t => {
  const server = await startRedisServer(t)
  const admin = await ready(client(t, server.url))
  await admin.acl('SETUSER', 'nochannels', 'on', '>pw', '~*', 'resetchannels', '+@all')
  const warnings: string[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: `redis://nochannels:pw@127.0.0.1:${server.port}`, nameSpace: uniquePrefix(), max: 1, ban: { threshold: 1, duration: '1 minute' }, timeout: 3000 })
  app.get('/', async () => 'ok')
  await app.ready()
  await until(async () => warnings.length > 0, 'the warning')
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403])
  const before = await scriptCalls(admin)
  t.equal((await app.inject('/')).statusCode, 403)
  t.equal(await scriptCalls(admin) - before, 1, 'asked of Redis')
  matchList(t, warnings, [/could not subscribe to changes/], 'one warning, whatever the requests')
})

t.test('a held answer reports the whole wait Redis named, however long: a 10-minute ban says 600 s, not the hold\'s 60', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, url, nameSpace, '10 minutes')
  await subscribed(observer, nameSpace, 1)
  t.equal((await app.inject('/')).statusCode, 200)
  const first = await app.inject('/')
  t.equal(first.statusCode, 403, 'banned by Redis')
  const before = await scriptCalls(observer)
  const held = await Promise.all(Array.from({ length: 20 }, async () => await app.inject('/')))
  t.equal(await scriptCalls(observer) - before, 0, 'held: no script call')
  for (const res of [first, ...held]) {
    const wait = Number(res.headers['retry-after'])
    t.ok(wait >= 599 && wait <= 600, `Retry-After ${wait}, the ban's remaining 10 minutes`)
    t.equal(res.headers['x-ratelimit-reset'], res.headers['retry-after'], 'X-RateLimit-Reset the same')
    t.match(res.json(), { statusCode: 403, message: /retry in 10 minutes$/ }, 'and the message')
  }
})

t.test('a ban set again, shorter, reaches every instance holding the longer one', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const [a, b] = [await makeApp(t, url, nameSpace, '10 minutes'), await makeApp(t, url, nameSpace, '10 minutes')]
  await subscribed(observer, nameSpace, 2)
  t.strictSame([(await a.inject('/')).statusCode, (await a.inject('/')).statusCode, (await b.inject('/')).statusCode], [200, 403, 403], 'banned for 10 minutes, on both')
  const before = await scriptCalls(observer)
  t.equal((await b.inject('/')).headers['retry-after'], '600', 'b holds the ban')
  t.equal(await scriptCalls(observer) - before, 0)

  await a.rateGuard.ban(ME, '5 seconds')
  t.equal((await a.inject('/')).headers['retry-after'], '5', 'a: the new ban\'s wait at once')
  let wait = ''
  const end = Date.now() + 3000
  while (wait !== '5' && Date.now() < end) {
    wait = String((await b.inject('/')).headers['retry-after'])
    await new Promise(resolve => setImmediate(resolve))
  }
  t.equal(wait, '5', 'b: once the change reached it')
})

t.test('a reply Redis gave before an unban, reaching the process after the change, is not held: the next request asks Redis', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  // The decision script's replies to this app can be held back, one at a time, as a slow socket would.
  const lent = await ready(client(t, url))
  let gate: Promise<void> | null = null
  const send = lent.sendCommand.bind(lent)
  lent.sendCommand = ((command: Command, stream?: unknown) => {
    const reply = send(command, stream as never) as Promise<unknown>
    const held = gate
    if (held === null || !SCRIPT_COMMANDS.includes(command.name)) return reply
    gate = null
    return reply.then(async value => { await held; return value })
  }) as typeof lent.sendCommand
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: lent, nameSpace, max: 5, timeWindow: '1 minute', timeout: 3000 })
  app.get('/', async () => 'ok')
  await app.ready()
  await subscribed(observer, nameSpace, 1)

  for (const [change, what] of [[async () => { await app.rateGuard.unban(ME) }, 'unban'], [async () => { await app.rateGuard.ban(ME, '5 seconds') }, 'a shorter ban']] as const) {
    await app.rateGuard.ban(ME, '1 minute')
    let release = (): void => {}
    gate = new Promise(resolve => { release = resolve })
    const asked = app.inject('/')
    // Once the question is written, the change is made on the same connection: Redis answers the question
    // first, but its reply reaches the plugin only after the change is done.
    await until(async () => gate === null, 'the question sent')
    await change()
    release()
    const first = await asked
    t.equal(first.headers['retry-after'], '60', `${what}: the answer Redis gave before it, as it was`)
    const next = await app.inject('/')
    t.not(next.headers['retry-after'], '60', `${what}: the next request is not answered from it`)
  }
})

t.test('HeldAnswers: bans bounded, capped, and none while not listening', async t => {
  let now = 0
  const held = new HeldAnswers(2, () => now)
  const L = [{ max: 5, windowMs: 1000, burst: 5 }]
  const ban = (key: string): number => held.answer(key, '', L)?.retryMs ?? 0
  held.banned('a', 1000, 0, held.changes)
  t.equal(ban('a'), 0, 'not listening: nothing held')
  held.listening(true)
  held.banned('a', 1000, 0, held.changes)
  held.banned('b', 10 * MAX_HELD, 0, held.changes)
  t.match(held.answer('a', '', L), { status: 'banned', retryMs: 1000, limit: 5, count: 0 }, 'held: the budget\'s own limits, nothing counted')
  t.equal(ban('b'), 10 * MAX_HELD, 'a long ban reports all of its wait')
  held.banned('c', 500, 0, held.changes)
  t.equal(ban('a'), 0, 'full: the oldest went')
  t.equal(ban('c'), 500)
  now = 600
  held.banned('d', 100, 600, held.changes)
  t.strictSame([ban('b'), ban('c'), ban('d')], [0, 0, 100], 'full: the oldest went, live or not (one that ended is dropped when read)')
  held.banned('b', 10 * MAX_HELD, 0, held.changes)
  held.banned('e', 100, 400, held.changes)
  t.equal(ban('e'), 0, 'an answer that ended before it arrived is not held: held times run from the question')
  now = 700
  t.equal(ban('d'), 0, 'ended at its expiry')
  now = MAX_HELD - 1
  t.equal(ban('b'), 9 * MAX_HELD + 1, 'held until MAX_HELD, its wait counted down to the millisecond')
  now = MAX_HELD
  t.equal(ban('b'), 0, 'then no longer held: Redis is asked again')
  now = 700
  held.forget(['b'])
  t.equal(ban('b'), 0, 'an unban')
  held.banned('f', 100, 700, held.changes)
  held.listening(false)
  held.listening(true)
  t.equal(ban('f'), 0, 'a lost subscription forgets everything')
})

t.test('HeldAnswers: holding costs the same however full it is, while identities churn through it', async t => {
  const SIZE = 50_000
  const held = new HeldAnswers(SIZE, () => 0)
  held.listening(true)
  // The control, timed in the same run: as many bans held into a cache with room for them.
  const filling = performance.now()
  for (let i = 0; i < SIZE; i++) held.banned(`full${i}`, MAX_HELD, 0, held.changes)
  const control = performance.now() - filling
  // Each of these finds the cache full of live bans. Scanning it for ended ones on every insert took
  // 50,000 x 50,000 steps (about 10 s on this machine); dropping the first entry of a fresh iterator still
  // walked the map's deleted entries each time (511 ms); one iterator kept (lib/oldest.ts) takes about 70 ms,
  // two to five times as long as filling the cache.
  const started = performance.now()
  for (let i = 0; i < SIZE; i++) held.banned(`new${i}`, MAX_HELD, 0, held.changes)
  const ms = performance.now() - started
  const bound = allowing(8 * control, started, started + ms)
  t.ok(ms <= bound, `${SIZE} bans held into a full cache in ${ms.toFixed(0)} ms (into one with room: ${control.toFixed(0)} ms; bound ${bound.toFixed(0)})`)
  const L = [{ max: 1, windowMs: 1000, burst: 1 }]
  t.equal(held.answer('full0', '', L), undefined, 'the oldest were dropped')
  t.match(held.answer(`new${SIZE - 1}`, '', L), { status: 'banned' }, 'the newest are held')
})

t.test('HeldAnswers: a denial is held when only its one limit binds and its count cannot fall first', async t => {
  let now = 1000
  const held = new HeldAnswers(10, () => now)
  held.listening(true)
  const L = [{ max: 5, windowMs: 1000, burst: 5 }]
  const denial = (retryMs: number, resetMs: number, limit = 5, windowMs = 1000) => ({
    status: 'limited' as const,
    limit,
    windowMs,
    count: limit,
    resetMs,
    retryMs,
    banStarted: false,
    offence: 0,
    limits: [{ limit, windowMs, count: limit, resetMs }],
    at: 123,
    member: 'm'
  })
  held.denied('s', L, denial(400, 400), 900, held.changes)
  t.strictSame(held.answer('b', 's', L), { ...denial(300, 300), at: 0, member: '' }, 'times run down from when the question was sent; counts stand still')
  t.equal(held.answer('b', 'other', L), undefined, 'only for its own budget state')
  now = 1300
  t.equal(held.answer('b', 's', L), undefined, 'gone when the wait is over')
  held.denied('t', L, denial(400, 200), 1300, held.changes)
  t.equal(held.answer('b', 't', L), undefined, 'not held: the count falls before the wait ends')
  held.denied('u', L, denial(400, 400, 3), 1300, held.changes)
  t.equal(held.answer('b', 'u', L), undefined, 'not held: an override with other limits answered')
  held.denied('v', L, denial(400, 400, 5, 2000), 1300, held.changes)
  t.equal(held.answer('b', 'v', L), undefined, 'not held: another window')
  const two = [...L, { max: 50, windowMs: 60_000, burst: 50 }]
  held.denied('w', two, { ...denial(400, 400), limits: [{ limit: 5, windowMs: 1000, count: 5, resetMs: 400 }, { limit: 50, windowMs: 60_000, count: 7, resetMs: 30_000 }] }, 1300, held.changes)
  t.equal(held.answer('b', 'w', two), undefined, 'not held: several limits')
  held.denied('x', L, denial(10 * MAX_HELD, 10 * MAX_HELD), 1300, held.changes)
  t.match(held.answer('b', 'x', L), { retryMs: 10 * MAX_HELD, resetMs: 10 * MAX_HELD }, 'a long wait is reported whole, not cut to MAX_HELD')
  now = 1300 + MAX_HELD - 1
  t.match(held.answer('b', 'x', L), { retryMs: 9 * MAX_HELD + 1, resetMs: 9 * MAX_HELD + 1 }, 'counted down while held')
  now = 1300 + MAX_HELD
  t.equal(held.answer('b', 'x', L), undefined, 'held at most MAX_HELD')
  now = 1300
  held.denied('x', L, denial(10 * MAX_HELD, 10 * MAX_HELD), 1300, held.changes)
  held.banned('b', 50, 1300, held.changes)
  t.match(held.answer('b', 'x', L), { status: 'banned', retryMs: 50 }, 'a ban held on the identity answers first')
  held.forget(['x'])
  t.equal(held.answer('', 'x', L), undefined, 'a reset or an override forgets it')
})

t.test('banCache: false asks Redis for every banned request; a non-boolean is a coded error', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, max: 1, ban: { threshold: 1, duration: '1 minute' }, banCache: false, timeout: 3000 })
  app.get('/', async () => 'ok')
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403])
  const before = await scriptCalls(observer)
  t.equal((await app.inject('/')).statusCode, 403)
  t.equal(await scriptCalls(observer) - before, 1, 'asked of Redis')
  t.equal(Number(((await observer.pubsub('NUMSUB', changesChannel(nameSpace))) as [string, number])[1]), 0, 'no subscription made')

  const bad = Fastify()
  t.teardown(() => bad.close())
  await t.rejects(async () => { await bad.register(rateGuard, { banCache: 'yes' as never }) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"banCache": expected true or false/ })
})

t.test('a lent client made with lazyConnect: the subscription connects anyway, and bans are held', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const lent = client(t, url, { lazyConnect: true, enableOfflineQueue: false })
  await lent.connect()
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: lent, nameSpace, max: 1, ban: { threshold: 1, duration: '1 minute' }, timeout: 3000 })
  app.get('/', async () => 'ok')
  await app.ready()
  await subscribed(observer, nameSpace, 1)
  await app.rateGuard.ban(ME, '1 minute')
  t.equal((await app.inject('/')).statusCode, 403, 'asked of Redis once')
  const before = await scriptCalls(observer)
  for (let i = 0; i < 10; i++) t.equal((await app.inject('/')).statusCode, 403)
  t.equal(await scriptCalls(observer) - before, 0, 'then held in process')
})

/** An app whose denials only time can change (no ban policy), unless `extra` says otherwise. */
async function deniedApp (t: Test, url: string, nameSpace: string, extra: Record<string, unknown> = {}): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  const limit = 'limits' in extra ? {} : { max: 1, timeWindow: '1 minute' }
  await app.register(rateGuard, { redis: url, nameSpace, ...limit, timeout: 3000, ...extra })
  app.get('/', async () => 'ok')
  await app.ready()
  return app
}

/** `n` requests one after the other (requests sent together would share one script call). */
async function statuses (app: FastifyInstance, n: number): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < n; i++) codes.push((await app.inject('/')).statusCode)
  return codes
}

t.test('a hot key denied: no Redis call until the wait Redis named is over, with the headers Redis would give', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = await deniedApp(t, url, nameSpace, { max: 2, timeWindow: 700 })
  await subscribed(observer, nameSpace, 1)
  const first = performance.now()
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 200])
  const denied = await app.inject('/')
  t.equal(denied.statusCode, 429, 'denied by Redis')
  t.strictSame(denied.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 second' }, '@fastify/rate-limit\'s body, without a code')
  const before = await scriptCalls(observer)
  const flood = await Promise.all(Array.from({ length: 100 }, async () => await app.inject('/')))
  t.equal(await scriptCalls(observer) - before, 0, 'no script call for 100 requests while the denial holds')
  t.ok(flood.every(r => r.statusCode === 429 && r.body === denied.body), 'each a 429, thrown as Redis\'s would be: the same body')
  t.ok(flood.every(r => r.headers['x-ratelimit-limit'] === '2' && r.headers['x-ratelimit-remaining'] === '0' && r.headers['retry-after'] === '1' && r.headers['x-ratelimit-reset'] === '1'), 'with Redis\'s headers')

  // The first request Redis would allow is not held back: poll until one passes.
  let allowedAt = 0
  while (allowedAt === 0) {
    const status = (await app.inject('/')).statusCode
    if (status === 200) allowedAt = performance.now()
    else await new Promise(resolve => setTimeout(resolve, 5))
  }
  t.ok(allowedAt - first >= 700, `not before the first request left the window (${Math.round(allowedAt - first)} ms)`)
  // A held denial that outlived Redis's (held for Retry-After's whole second) would be allowed at 1000 ms.
  const bound = allowing(700 + 5, first, allowedAt)
  t.ok(allowedAt - first <= bound, `and soon after it did: the held denial ended no later than Redis's (${Math.round(allowedAt - first)} ms; bound ${Math.round(bound)})`)
})

t.test('denials that count toward something are asked of Redis every time', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const cases: Array<[string, Record<string, unknown>]> = [
    ['a ban policy (each denial is a strike)', { ban: { threshold: 100, duration: '1 minute' } }],
    ['max computed per request', { max: async () => 1 }],
    ['several limits', { limits: [{ max: 1, timeWindow: '1 minute' }, { max: 100, timeWindow: '1 hour' }] }],
    ['banCache: false', { banCache: false }]
  ]
  for (const [name, extra] of cases) {
    const nameSpace = uniquePrefix()
    const app = await deniedApp(t, url, nameSpace, extra)
    if (extra.banCache === undefined) await subscribed(observer, nameSpace, 1)
    t.equal((await app.inject('/')).statusCode, 200)
    const before = await scriptCalls(observer)
    t.strictSame(await statuses(app, 5), [429, 429, 429, 429, 429])
    t.equal(await scriptCalls(observer) - before, 5, `${name}: a script call for each denial`)
  }
})

t.test('a route with a shared budget: its clients\' denials are asked of Redis (a shared refusal gives counts back); the shared budget\'s are held', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, timeout: 3000 })
  app.get('/own', { config: { rateLimit: { max: 1, timeWindow: '1 minute', shared: { max: 100, timeWindow: '1 minute' } } } }, async () => 'ok')
  app.get('/whole', { config: { rateLimit: { max: 100, timeWindow: '1 minute', shared: { max: 1, timeWindow: '1 minute' } } } }, async () => 'ok')
  await app.ready()
  await subscribed(observer, nameSpace, 1)
  t.equal((await app.inject('/own')).statusCode, 200)
  let before = await scriptCalls(observer)
  t.strictSame([(await app.inject('/own')).statusCode, (await app.inject('/own')).statusCode], [429, 429])
  t.equal(await scriptCalls(observer) - before, 2, 'the client\'s own denials: a script call each')

  t.equal((await app.inject('/whole')).statusCode, 200)
  t.equal((await app.inject({ url: '/whole', remoteAddress: '10.0.0.2' })).statusCode, 429, 'the shared budget is spent')
  before = await scriptCalls(observer)
  const others = []
  for (let i = 0; i < 5; i++) others.push(await app.inject({ url: '/whole', remoteAddress: `10.0.0.${i + 3}` }))
  t.ok(others.every(r => r.statusCode === 429), 'every client refused by the shared budget')
  t.equal(await scriptCalls(observer) - before, 10, 'two calls each, the client\'s own decision and its undo: the shared refusal was held (a third call otherwise)')
})

t.test('an operator\'s reset, override or ban reaches every instance holding a denial', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const [a, b] = [await deniedApp(t, url, nameSpace), await deniedApp(t, url, nameSpace)]
  await subscribed(observer, nameSpace, 2)
  const deniedOnBoth = async (): Promise<void> => {
    // One denial each from Redis first: an instance holds nothing until its subscription is confirmed.
    t.strictSame([(await a.inject('/')).statusCode, (await b.inject('/')).statusCode], [429, 429])
    const before = await scriptCalls(observer)
    t.strictSame([...await statuses(a, 3), ...await statuses(b, 3)], [429, 429, 429, 429, 429, 429], 'denied on both')
    t.equal(await scriptCalls(observer) - before, 0, 'held on both')
  }
  t.strictSame([(await a.inject('/')).statusCode, (await a.inject('/')).statusCode, (await b.inject('/')).statusCode], [200, 429, 429])
  await deniedOnBoth()

  await a.rateGuard.reset(ME)
  t.equal((await a.inject('/')).statusCode, 200, 'reset: a allows the next request at once')
  t.equal(await askUntil(b, 429), 429, 'and b denies it: the budget is spent again')
  await deniedOnBoth()
  await a.rateGuard.reset(ME)
  t.equal(await askUntil(b, 200), 200, 'reset: b allows once the change reached it')
  t.strictSame([(await a.inject('/')).statusCode, (await b.inject('/')).statusCode], [429, 429])
  await deniedOnBoth()

  await a.rateGuard.setOverride(ME, { max: 5, timeWindow: '1 minute', ttl: '1 minute' })
  t.equal((await a.inject('/')).statusCode, 200, 'override: a allows at once')
  t.equal(await askUntil(b, 200), 200, 'and b once the change reached it')
  t.strictSame([...await statuses(a, 2), (await b.inject('/')).statusCode], [200, 200, 429], '5 of 5 spent (one was counted before the override)')
  const before = await scriptCalls(observer)
  await statuses(a, 3)
  t.equal(await scriptCalls(observer) - before, 3, 'a denial under an override with other limits is asked of Redis (the override may end first)')
  await a.rateGuard.clearOverride(ME)
  t.equal(await askUntil(b, 429), 429, 'clearOverride: back on the budget\'s own limit')

  await a.rateGuard.ban(ME, '1 minute')
  t.equal((await a.inject('/')).statusCode, 403, 'ban: a answers 403 at once, not its held 429')
  t.equal(await askUntil(b, 403), 403, 'and b once the change reached it')
})
