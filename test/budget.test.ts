// fastify.rateGuard.budget(options): a budget the app spends by hand, on the in-process store and on Redis.
// spend: cost units counted (a refusal counts nothing, seen by peek), too costly, settle (down, twice, past
// the limits, after a refusal); a key under the client's, apart from the client's own and from other
// clients'; bad keys and costs; shadow mode, bans, callbacks and the decision channel; maxWait; the allow
// list; headers; a Redis that does not answer (failMode). hold: concurrency's slots, released once. Two
// instances on one Redis, and a Redis Cluster, are in test/budget-cluster.test.ts.
import diagnostics from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { CHANNELS } from '../lib/index.js'
import type { DecisionMessage, RateGuardBudget, RateGuardOptions, RouteRateLimitOptions } from '../lib/index.js'
import { client, getRedis, ready, startRedisServer, uniquePrefix, until } from './helpers/redis.js'
import { allowing } from './helpers/lag.js'
import { budgetApp, fields } from './helpers/budget-app.js'

/** Correctness, not latency: a deadline no loaded machine misses, and a refusal (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['memory', 'redis'] as const
type Where = typeof STORES[number]
const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

export interface Setup {
  app: FastifyInstance
  budget: RateGuardBudget
  /** A request of `client` (its key, as the key generator reads it: the `x-client` header). */
  of: (client: string) => Promise<FastifyRequest>
  /** What the budget holds for `key` (a client's, or `client|sub` for a key under it), counting nothing. */
  peek: (key: string) => Promise<{ count: number, remaining: number, status: string }>
  /** What the app logged at warn and above. */
  logged: Array<{ msg: string, code?: string, rateGuard?: object }>
}

/** An app registered on `where` whose budget is `fastify.rateGuard.budget(budgetOptions)`. */
export async function setup (
  t: Test, where: Where, budgetOptions: RouteRateLimitOptions, opts: RateGuardOptions = {}, level = 'warn'
): Promise<Setup> {
  const logged: Setup['logged'] = []
  const logger = { level, stream: { write: (line: string) => { logged.push(JSON.parse(line) as Setup['logged'][number]) } } }
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), ...RELAXED } : {}
  const { app, budget, of } = await budgetApp(t, { ...store, ...opts }, budgetOptions, { logger })
  const peek = async (key: string): Promise<{ count: number, remaining: number, status: string }> => {
    const { count, remaining, status } = await app.rateGuard.peek(key, { route: 'limiter 1' })
    return { count, remaining, status }
  }
  return { app, budget, of, peek, logged }
}

/** The decision channel's messages while `during` runs. */
async function published (during: () => Promise<void>): Promise<DecisionMessage[]> {
  const seen: DecisionMessage[] = []
  const listen = (message: unknown): void => { seen.push(message as DecisionMessage) }
  diagnostics.subscribe(CHANNELS.decision, listen)
  try {
    await during()
  } finally {
    diagnostics.unsubscribe(CHANNELS.decision, listen)
  }
  return seen
}

for (const where of STORES) {
  t.test(`${where}: a spend counts its cost; a refusal counts nothing; more than the limit holds is too costly`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 10, timeWindow: '1 minute' })
    const alice = await of('alice')
    t.match(fields(await budget.spend(alice, { cost: 4 })), { ok: true, outcome: 'allowed', limit: 10, remaining: 6, charged: 4, retryMs: 0 })
    t.match(await peek('alice'), { count: 4, remaining: 6 }, 'the store holds the 4 units')
    t.match(fields(await budget.spend(alice)), { ok: true, remaining: 5, charged: 1 }, 'a spend costs 1 by default')
    const refused = await budget.spend(alice, { cost: 6 })
    t.match(fields(refused), { ok: false, outcome: 'limited', remaining: 5, charged: 0 })
    t.ok(refused.retryMs > 0 && refused.retryMs <= 60_000, `a refusal says when to retry (${refused.retryMs} ms)`)
    t.match(await peek('alice'), { count: 5, remaining: 5 }, 'the refusal counted nothing')
    t.match(fields(await budget.spend(alice, { cost: 5 })), { ok: true, remaining: 0, charged: 5 }, 'what is left is spent')
    const costly = await budget.spend(await of('bob'), { cost: 11 })
    t.match(fields(costly), { ok: false, outcome: 'too-costly', retryMs: 0, charged: 0 })
    t.match(await peek('bob'), { count: 0, remaining: 10 }, 'too costly: nothing counted')
  })

  t.test(`${where}: settle makes a spend's final charge, once`, async t => {
    const { budget, of, peek, logged } = await setup(t, where, { max: 10, timeWindow: '1 minute' })
    const alice = await of('alice')
    const first = await budget.spend(alice, { cost: 8 })
    t.equal((await budget.spend(alice, { cost: 5 })).ok, false, '8 of 10 spent: 5 more do not fit')
    await first.settle(3)
    t.match(await peek('alice'), { count: 3, remaining: 7 }, 'settled down to 3: 5 units given back')
    t.equal((await budget.spend(alice, { cost: 5 })).ok, true, 'and the next 5 fit')
    await t.rejects(first.settle(2), { code: 'FST_RATE_GUARD_ALREADY_SETTLED' }, 'a spend settles once')
    await t.rejects(first.settle(-1), { code: 'FST_RATE_GUARD_INVALID_SETTLE' })
    const refused = await budget.spend(alice, { cost: 5 })
    t.equal(refused.ok, false)
    await refused.settle(0)
    await refused.settle(9)
    await t.rejects(refused.settle(1.5), { code: 'FST_RATE_GUARD_INVALID_SETTLE' }, 'a bad amount is refused all the same')
    t.match(await peek('alice'), { count: 8 }, 'settling a refusal (twice) changes nothing')
    const bob = await of('bob')
    const spent = await budget.spend(bob, { cost: 2 })
    await spent.settle(25)
    t.match(await peek('bob'), { count: 10, remaining: 0 }, 'settled above the largest limit: charged what it holds')
    t.match(logged.filter(line => line.msg.includes('settled at more')), [{ code: /SETTLED_PAST_LIMITS/, amount: 25, charged: 10 }], 'with a warning')
  })

  t.test(`${where}: a budget shared by all clients: a spend counts on both, its refusal on neither`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 5, timeWindow: '1 minute', shared: { max: 6, timeWindow: '1 minute' } })
    const [alice, bob] = [await of('alice'), await of('bob')]
    const first = await budget.spend(alice, { cost: 4 })
    t.match(fields(first), { ok: true, charged: 4, remaining: 1 })
    const refused = await budget.spend(bob, { cost: 3 })
    t.match(fields(refused), { ok: false, outcome: 'limited', charged: 0, limit: 6, remaining: 2 }, 'the shared budget refuses Bob')
    t.match(await peek('bob'), { count: 0 }, 'and Bob\'s own count is given back')
    await first.settle(1)
    t.match(await peek('alice'), { count: 1 })
    t.match(fields(await budget.spend(bob, { cost: 5 })), { ok: true, charged: 5, remaining: 0 }, 'settled on both: 1 + 5 of 6 shared')
  })

  t.test(`${where}: a key under the client's is counted apart`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 3, timeWindow: '1 minute' })
    const alice = await of('alice')
    const bob = await of('bob')
    t.match(fields(await budget.spend(alice, { key: 'conn-1', cost: 3 })), { ok: true, remaining: 0 })
    t.equal((await budget.spend(alice, { key: 'conn-1' })).outcome, 'limited', 'the sub-key is spent')
    t.match(fields(await budget.spend(alice, { key: 'conn-2' })), { ok: true, remaining: 2 }, 'another key under it is not')
    t.match(fields(await budget.spend(alice)), { ok: true, remaining: 2 }, 'nor the client\'s own key')
    t.match(fields(await budget.spend(bob, { key: 'conn-1' })), { ok: true, remaining: 2 }, 'another client\'s same sub-key is apart')
    t.match(await peek('alice|conn-1'), { count: 3, remaining: 0 })
    t.match(await peek('alice'), { count: 1 })
    t.match(await peek('bob|conn-1'), { count: 1 })
  })

  t.test(`${where}: odd keys work and stay apart`, async t => {
    const { budget, of } = await setup(t, where, { max: 2, timeWindow: '1 minute' })
    const alice = await of('alice')
    const odd = ['🙂 ünï', 'a\nb\r\n', '{tag}', '}{', '{}', 'x'.repeat(512), 'a|b', 'a', 'b']
    for (const key of odd) t.match(fields(await budget.spend(alice, { key, cost: 2 })), { ok: true, remaining: 0 }, JSON.stringify(key.slice(0, 20)))
    for (const key of odd) t.equal((await budget.spend(alice, { key })).outcome, 'limited', `${JSON.stringify(key.slice(0, 20))}: its own count`)
    // A client whose own key looks like another's key and sub-key: counted apart from it.
    t.match(fields(await budget.spend(await of('alice|a'), { key: 'b' })), { ok: true, remaining: 1 }, '"alice|a" under "b" is not "alice" under "a|b"')
    t.match(fields(await budget.spend(await of('alice%7Ca'), { key: 'b' })), { ok: true, remaining: 1 }, 'nor is "alice%7Ca" under "b"')
    t.match(fields(await budget.spend(await of('alice|a'), { key: 'b' })), { ok: true, remaining: 0 }, '"alice|a" under "b" has its own count')
    // A client whose own key is another's key and sub-key, spending with none: apart from it too.
    t.match(fields(await budget.spend(await of('alice|zz'))), { ok: true, remaining: 1 }, '"alice|zz", under no key')
    t.match(fields(await budget.spend(await of('alice'), { key: 'zz' })), { ok: true, remaining: 1 }, 'is not "alice" under "zz"')
  })

  t.test(`${where}: a bad key or cost is a coded error`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 3, timeWindow: '1 minute' })
    const alice = await of('alice')
    for (const key of ['', 'x'.repeat(513), 7, null, {}] as unknown as string[]) {
      await t.rejects(budget.spend(alice, { key }), { code: INVALID, message: /"key"/ }, `key ${JSON.stringify(key)?.slice(0, 20)}`)
    }
    for (const cost of [0, 1.5, -1, Number.NaN, '2', Infinity] as unknown as number[]) {
      await t.rejects(budget.spend(alice, { cost }), { code: INVALID, message: /"cost"/ }, `cost ${String(cost)}`)
    }
    t.match(await peek('alice'), { count: 0 }, 'none counted anything')
  })

  t.test(`${where}: shadow mode lets a spend over the limit through, and tells everyone`, async t => {
    const told: unknown[] = []
    const { budget, of, peek } = await setup(t, where, {
      max: 2,
      timeWindow: '1 minute',
      mode: 'shadow',
      ban: { threshold: 2, duration: '1 minute' },
      shadow: { ban: true },
      onExceeded: (_request, key, info) => { told.push(['exceeded', key, info]) },
      onBanReach: (_request, key, info) => { told.push(['ban', key, info]) }
    })
    const alice = await of('alice')
    const messages = await published(async () => {
      t.match(fields(await budget.spend(alice, { cost: 2 })), { ok: true, outcome: 'allowed', remaining: 0 })
      const over = await budget.spend(alice)
      t.match(fields(over), { ok: true, outcome: 'shadow-limited', retryMs: 0, charged: 0 })
      const reply = fakeReply()
      over.writeHeaders(reply.reply)
      t.match(reply.headers, { 'x-ratelimit-limit': 2, 'x-ratelimit-remaining': 0 }, 'an allowed request\'s headers')
      t.notOk('retry-after' in reply.headers, 'no Retry-After: nothing refused')
      t.match(await peek('alice'), { count: 2 }, 'shadow mode counts as enforce would: the refusal counted nothing')
      for (let i = 0; i < 3; i++) await budget.spend(alice)
    })
    t.same(messages.map(m => [m.outcome, m.cost, m.mode]), [
      ['allowed', 2, 'shadow'],
      ['shadow-limited', 1, 'shadow'],
      ['shadow-ban-started', 1, 'shadow'],
      ['shadow-banned', 1, 'shadow'],
      ['shadow-banned', 1, 'shadow']
    ], 'each spend published with its outcome and cost')
    t.match(told, [
      ['exceeded', 'alice', { shadow: true }],
      ['exceeded', 'alice', { shadow: true }],
      ['ban', 'alice', { shadow: true, offence: 1, durationMs: 60_000 }],
      ['exceeded', 'alice', { shadow: true }],
      ['exceeded', 'alice', { shadow: true }]
    ], 'onExceeded and onBanReach told, shadow: true')
  })

  t.test(`${where}: threshold refusals start a ban`, async t => {
    const banned: unknown[] = []
    const exceeding: string[] = []
    const { budget, of } = await setup(t, where, {
      max: 1,
      timeWindow: '1 minute',
      onExceeding: (_request, key) => { exceeding.push(key) },
      ban: { threshold: 2, duration: '1 hour' },
      onBanReach: (_request, key, info) => { banned.push([key, info]) }
    })
    const alice = await of('alice')
    const outcomes = []
    for (let i = 0; i < 4; i++) outcomes.push(await budget.spend(alice))
    t.same(outcomes.map(o => [o.ok, o.outcome]), [[true, 'allowed'], [false, 'limited'], [false, 'ban-started'], [false, 'banned']])
    t.ok(outcomes[2]!.retryMs > 59 * 60_000, `the ban's retryMs (${outcomes[2]!.retryMs})`)
    t.ok(outcomes[3]!.retryMs > 59 * 60_000 && outcomes[3]!.retryMs <= 3_600_000)
    t.match(banned, [['alice', { shadow: false, offence: 1 }]])
    t.equal((await budget.spend(await of('bob'))).ok, true, 'another client is not banned')
    t.same(exceeding, ['alice', 'bob'], 'onExceeding told of each allowed spend, as of a route\'s allowed request')
  })

  t.test(`${where}: a banned client holds no slot; refused holds strike toward a ban`, async t => {
    const { budget, of } = await setup(t, where, {
      max: 1, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 hour' }, concurrency: { max: 1 }
    })
    const alice = await of('alice')
    for (let i = 0; i < 3; i++) await budget.spend(alice)
    const held = await budget.hold(alice)
    t.match(held, { ok: false, outcome: 'banned', limit: 1 })
    t.ok(held.inFlight === undefined || held.inFlight === 0)
    const bob = await of('bob')
    const holds = []
    for (let i = 0; i < 4; i++) holds.push(await budget.hold(bob))
    t.same(holds.map(h => [h.ok, h.outcome]), [[true, 'allowed'], [false, 'in-flight'], [false, 'ban-started'], [false, 'banned']])
  })

  t.test(`${where}: maxWait: a spend its limits allow after a wait resolves then`, async t => {
    const { budget, of } = await setup(t, where, { max: 2, timeWindow: 600, maxWait: 2000, algorithm: 'sliding-log' })
    const alice = await of('alice')
    await budget.spend(alice, { cost: 2 })
    // Control: a spend that does not wait, timed the same way.
    const c0 = performance.now()
    await budget.spend(await of('bob'))
    const control = performance.now() - c0
    let took = 0
    let start = 0
    const messages = await published(async () => {
      start = performance.now()
      const spent = await budget.spend(alice)
      took = performance.now() - start
      t.match(fields(spent), { ok: true, outcome: 'allowed', charged: 1 })
    })
    const waited = messages[0]!.waitedMs!
    t.ok(waited > 300 && waited <= 600, `the decision's wait: ${waited} ms`)
    t.ok(took >= waited, `resolved after the wait (${Math.round(took)} ms, waitMs ${waited})`)
    const bound = allowing(waited + control, start, start + took)
    t.ok(took <= bound, `and no later than it allows (${Math.round(took)} ms; control ${Math.round(control)}, bound ${Math.round(bound)})`)
  })

  t.test(`${where}: maxWait with the waiting room full: waiting-full, nothing counted`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 1, timeWindow: 500, maxWait: 2000, algorithm: 'sliding-log' }, { maxWaiting: 1 })
    const [alice, bob] = [await of('alice'), await of('bob')]
    t.equal((await budget.spend(alice)).ok, true)
    t.equal((await budget.spend(bob)).ok, true)
    // Alice's next spend waits, in the registration's one place; Bob's would wait too, but there is none.
    const waiting = budget.spend(alice)
    const full = await budget.spend(bob)
    t.match(fields(full), { ok: false, outcome: 'waiting-full', charged: 0 })
    t.ok(full.retryMs > 0 && full.retryMs <= 500, `retry when its limits let it through: ${full.retryMs} ms`)
    t.match(await peek('bob'), { count: 1 }, 'the refused one counted nothing')
    t.match(fields(await waiting), { ok: true, outcome: 'allowed', charged: 1 }, 'the one waiting goes on')
  })

  t.test(`${where}: the allow list: allow-listed, nothing charged`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 1, timeWindow: '1 minute', allowList: ['vip'] })
    const vip = await of('vip')
    for (let i = 0; i < 3; i++) {
      const spent = await budget.spend(vip, { cost: 5 })
      t.match(fields(spent), { ok: true, outcome: 'allow-listed', charged: 0 })
      await spent.settle(9)
      await t.rejects(spent.settle(-1), { code: 'FST_RATE_GUARD_INVALID_SETTLE' })
      const reply = fakeReply()
      spent.writeHeaders(reply.reply)
      t.same(reply.headers, {}, 'no headers')
    }
    t.match(await peek('vip'), { count: 0 })
  })

  t.test(`${where}: writeHeaders with draft-10 headers`, async t => {
    const { budget, of } = await setup(t, where, { max: 2, timeWindow: '1 minute' }, { standardHeaders: 'draft-10' })
    const alice = await of('alice')
    const allowed = fakeReply()
    ;(await budget.spend(alice, { cost: 2 })).writeHeaders(allowed.reply)
    t.match(allowed.headers, { ratelimit: /r=0/, 'ratelimit-policy': /q=2/ })
    t.notOk('retry-after' in allowed.headers)
    const refused = fakeReply()
    ;(await budget.spend(alice)).writeHeaders(refused.reply)
    t.match(refused.headers, { ratelimit: /r=0/, 'ratelimit-policy': /q=2/, 'retry-after': /^\d+$/ })
    t.ok(Number(refused.headers['retry-after']) >= 1 && Number(refused.headers['retry-after']) <= 60)
  })

  t.test(`${where}: hold takes concurrency's slots until released`, async t => {
    const { app, budget, of } = await setup(t, where, { max: 100, timeWindow: '1 minute', concurrency: { max: 2 } })
    const peekSlots = async (key: string): Promise<number | undefined> =>
      (await app.rateGuard.peek(key, { route: 'limiter 1' })).inFlight?.count
    const alice = await of('alice')
    const one = await budget.hold(alice)
    const two = await budget.hold(alice)
    t.match(one, { ok: true, outcome: 'allowed', limit: 2, inFlight: 1 })
    t.match(two, { ok: true, outcome: 'allowed', inFlight: 2 })
    const third = await budget.hold(alice)
    t.match(third, { ok: false, outcome: 'in-flight', limit: 2 })
    third.release()
    t.match(await budget.hold(alice, { key: 'ws-1' }), { ok: true, inFlight: 1 }, 'a key under the client\'s holds apart')
    t.match(await budget.hold(await of('bob')), { ok: true, inFlight: 1 }, 'another client holds apart')
    one.release()
    one.release()
    await released(peekSlots, 'alice', 1)
    const after = await budget.hold(alice)
    t.match(after, { ok: true, inFlight: 2 }, 'a release frees its slot')
    t.match(await budget.hold(alice), { ok: false, outcome: 'in-flight' }, 'once: a release twice freed one')
    two.release()
    after.release()
    await released(peekSlots, 'alice', 0)
    t.match(await budget.hold(alice, { cost: 2 }), { ok: true, inFlight: 2 }, 'both free again; a hold of 2 slots')
  })

  t.test(`${where}: hold on a budget without concurrency is a coded error`, async t => {
    const { budget, of } = await setup(t, where, { max: 1, timeWindow: '1 minute' })
    await t.rejects(budget.hold(await of('alice')), { code: INVALID, message: /concurrency/ })
  })

  t.test(`${where}: hold in shadow mode and for the allow list`, async t => {
    const { budget, of } = await setup(t, where, { max: 100, timeWindow: '1 minute', concurrency: { max: 1 }, mode: 'shadow', allowList: ['vip'] })
    const alice = await of('alice')
    const messages = await published(async () => {
      t.match(await budget.hold(alice), { ok: true, outcome: 'allowed', inFlight: 1 })
      t.match(await budget.hold(alice), { ok: true, outcome: 'shadow-in-flight', limit: 1 }, 'past concurrency: let through')
    })
    t.same(messages.map(m => [m.outcome, m.mode]), [['allowed', 'shadow'], ['shadow-limited', 'shadow']])
    const vip = await budget.hold(await of('vip'), { cost: 5 })
    t.match(vip, { ok: true, outcome: 'allow-listed', limit: 0, inFlight: undefined })
    vip.release()
  })

  t.test(`${where}: a spend costs what it says, whatever the budget's own cost`, async t => {
    const { budget, of, peek } = await setup(t, where, { max: 10, timeWindow: '1 minute', cost: 3 })
    const alice = await of('alice')
    t.match(fields(await budget.spend(alice)), { ok: true, charged: 1, remaining: 9 })
    t.match(fields(await budget.spend(alice, { cost: 3 })), { ok: true, charged: 3, remaining: 6 })
    t.match(fields(await budget.spend(alice, { cost: 2 })), { ok: true, charged: 2, remaining: 4 })
    t.match(await peek('alice'), { count: 6 })
  })

  t.test(`${where}: mode 'report' logs each refused spend with the key's hash`, async t => {
    const { budget, of, logged } = await setup(t, where, { max: 1, timeWindow: '1 minute', mode: 'report' }, {}, 'info')
    const alice = await of('alice')
    t.equal((await budget.spend(alice)).ok, true)
    t.match(fields(await budget.spend(alice)), { ok: false, outcome: 'limited' })
    const refusals = logged.filter(line => line.msg === 'rate-guard: refused')
    t.match(refusals, [{ rateGuard: { budget: 'limiter 1', keyHash: /^[\w-]{22}$/ } }])
    t.notOk(JSON.stringify(refusals).includes('alice'), 'never the key')
  })
}

/** A release is sent, not awaited: resolves once the store holds `count` units in flight for `key`. */
async function released (peek: (key: string) => Promise<number | undefined>, key: string, count: number): Promise<void> {
  await until(async () => await peek(key) === count, `${key}: ${count} in flight`)
}

/** A reply whose headers are recorded (writeHeaders only sets headers). */
function fakeReply (): { reply: Parameters<Spent['writeHeaders']>[0], headers: Record<string, unknown> } {
  const headers: Record<string, unknown> = {}
  const reply = { header (name: string, value: unknown) { headers[name.toLowerCase()] = value; return reply } }
  return { reply: reply as unknown as Parameters<Spent['writeHeaders']>[0], headers }
}

type Spent = Awaited<ReturnType<RateGuardBudget['spend']>>

t.test('two registrations: fastify.rateGuard.budget asks which; of(nameSpace).budget() answers', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { global: false, nameSpace: 'one:' })
  await app.register(rateGuard, { global: false, nameSpace: 'two:' })
  t.throws(() => app.rateGuard.budget({ max: 1, timeWindow: '1 minute' }), { code: INVALID, message: /of\(nameSpace\)\.budget\(\)/ })
  const budget = app.rateGuard.of('two:').budget({ max: 1, timeWindow: '1 minute' })
  let request: FastifyRequest | undefined
  app.get('/', async r => { request = r; return 'ok' })
  await app.ready()
  await app.inject('/')
  t.match(fields(await budget.spend(request!)), { ok: true, outcome: 'allowed', remaining: 0 })
  t.match(fields(await budget.spend(request!)), { ok: false, outcome: 'limited' })
})

/** A client lent to the plugin, with the 'error' listener its owner attaches (its server may be frozen). */
async function lent (t: Test, url: string): Promise<Redis> {
  return await ready(client(t, url, { enableOfflineQueue: false }))
}

t.test('a Redis that does not answer: failMode answers each spend and hold within the deadline', async t => {
  const server = await startRedisServer(t)
  const limits = { max: 5, timeWindow: '1 minute', concurrency: { max: 2 } }
  const open = await setup(t, 'memory', limits, { redis: await lent(t, server.url), failMode: 'open', timeout: 200, breaker: false })
  const closed = await setup(t, 'memory', limits, { redis: await lent(t, server.url), failMode: 'closed', timeout: 200, breaker: false })
  const [openAlice, closedAlice] = [await open.of('alice'), await closed.of('alice')]
  // Control: the same spend on a Redis that answers, timed the same way.
  const c0 = performance.now()
  t.match(fields(await open.budget.spend(openAlice, { cost: 2 })), { ok: true, outcome: 'allowed', charged: 2 })
  const control = performance.now() - c0
  server.freeze()
  t.teardown(() => server.stop())

  const timed = async <T>(what: string, ask: () => Promise<T>): Promise<T> => {
    const started = performance.now()
    const answer = await ask()
    const ms = performance.now() - started
    const bound = allowing(200 + control, started)
    t.ok(ms >= 150 && ms <= bound, `${what}: answered in ${Math.round(ms)} ms (deadline 200, control ${Math.round(control)}; bound ${Math.round(bound)})`)
    return answer
  }
  const unenforced = await timed('open spend', async () => await open.budget.spend(openAlice, { cost: 2 }))
  t.match(fields(unenforced), { ok: true, outcome: 'unenforced', charged: 0, retryMs: 0, limit: 5, remaining: 5 })
  const openReply = fakeReply()
  unenforced.writeHeaders(openReply.reply)
  t.same(openReply.headers, { 'x-ratelimit-enforced': 'false' })
  await unenforced.settle(0)

  const unavailable = await timed('closed spend', async () => await closed.budget.spend(closedAlice, { key: 'conn-1' }))
  t.match(fields(unavailable), { ok: false, outcome: 'unavailable', charged: 0, limit: 5 })
  t.ok(unavailable.retryMs >= 1000, `retryMs ${unavailable.retryMs}`)
  const closedReply = fakeReply()
  unavailable.writeHeaders(closedReply.reply)
  t.match(closedReply.headers, { 'retry-after': /^\d+$/ })
  t.ok(Number(closedReply.headers['retry-after']) >= 1)
  t.notOk('x-ratelimit-enforced' in closedReply.headers)

  const openHold = await timed('open hold', async () => await open.budget.hold(openAlice))
  t.match(openHold, { ok: true, outcome: 'unenforced', limit: 2, inFlight: undefined })
  openHold.release()
  const closedHold = await timed('closed hold', async () => await closed.budget.hold(closedAlice))
  t.match(closedHold, { ok: false, outcome: 'unavailable', limit: 2, inFlight: undefined })
  closedHold.release()

  server.thaw()
  await until(async () => (await closed.budget.spend(closedAlice, { key: 'conn-2' })).outcome === 'allowed', 'Redis deciding again')
  // (What the frozen server was sent, it runs once thawed: late, as any request's; the answers above stand.)
  t.match(fields(await open.budget.spend(openAlice)), { outcome: /^(allowed|limited)$/ }, 'open: Redis decides again')
})
