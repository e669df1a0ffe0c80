// Escalating bans (`ban.escalate`), through fastify.inject against a real Redis: each ban a client earns
// before the last is forgotten is longer, by a factor up to `maxDuration` or along a list whose last step
// repeats; onBanReach is told each ban's length and rank; `unban` forgives (the next ban is the first again);
// `forget` after a ban ends, the ladder starts over. To reach the next ban without waiting for one to end, a
// case deletes only the identity's `banned` key, as its expiry would; the strikes and offences stay.
import { setTimeout as sleep } from 'node:timers/promises'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { BanInfo, BanOptions, RateGuardOptions } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

// The default key of a client known by its address: the bare address, as @fastify/rate-limit writes it.
const LOCAL = '127.0.0.1'
/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

interface Setup {
  app: FastifyInstance
  redis: Redis
  keys: ReturnType<typeof identityKeys>
  bans: Array<{ key: string } & BanInfo>
  /** The code of each error a request ended with, as the app's error handling sees it. */
  errors: string[]
}

/** 1 request a minute, so after the first every request is a denial: `threshold` denials start a ban. */
async function setup (t: Test, ban: BanOptions, opts: RateGuardOptions = {}): Promise<Setup> {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const bans: Setup['bans'] = []
  const errors: string[] = []
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, {
    redis: url,
    nameSpace,
    ...RELAXED,
    max: 1,
    timeWindow: '1 minute',
    ban,
    onBanReach: (_request, key, info) => { bans.push({ key, ...info }) },
    // endBan lifts bans behind the plugin's back, which only an instance without the ban cache sees.
    banCache: false,
    ...opts
  })
  app.addHook('onError', async (_request, _reply, err) => { errors.push(String((err as { code?: unknown }).code)) })
  app.get('/', async () => 'ok')
  await app.ready()
  // Bans, strikes and offences are per identity: the same keys under any budget.
  return { app, redis: client(t, url), keys: identityKeys(nameSpace, GLOBAL_SCOPE, LOCAL), bans, errors }
}

async function statuses (app: FastifyInstance, n: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject('/')).statusCode)
  return out
}

/**
 * Earns the next ban with threshold 2 (a 429, then the 403 that starts it) and returns the 403's Retry-After;
 * `first` also spends the one allowed request.
 */
async function earnBan (t: Test, s: Setup, first = false): Promise<string | undefined> {
  if (first) t.equal((await s.app.inject('/')).statusCode, 200)
  t.equal((await s.app.inject('/')).statusCode, 429, 'one denial: a strike')
  const banned = await s.app.inject('/')
  t.equal(banned.statusCode, 403, 'the second: banned')
  // @fastify/rate-limit's body (no code); the error thrown, as the app's error handling sees it, is coded.
  t.match(banned.json(), { statusCode: 403, error: 'Forbidden', message: /^Rate limit exceeded, retry in / })
  t.notOk('code' in banned.json(), 'no code in the body')
  t.equal(s.errors.at(-1), 'FST_RATE_GUARD_BANNED')
  return banned.headers['retry-after']?.toString()
}

/** What the ban's expiry does: the banned key goes, strikes (none after a ban) and offences stay. */
async function endBan (s: Setup): Promise<void> {
  await s.redis.del(s.keys.banned)
}

/** A PTTL read just after the key was set: at most `expected`, and less only by the time since (up to 1/4, or 500 ms). */
function near (t: Test, pttl: number, expected: number, what: string): void {
  t.ok(pttl > expected - Math.min(500, expected / 4) && pttl <= expected, `${what}: PTTL ${pttl} ≈ ${expected}`)
}

t.test('a factor: 1 s, 2 s, 4 s, then 4 s (maxDuration); onBanReach told each length and rank', async t => {
  const forget = 3_600_000
  const s = await setup(t, { threshold: 2, duration: '1s', escalate: 2, maxDuration: '4s', forget: '1 hour' })
  const ladder = [1000, 2000, 4000, 4000]
  for (const [i, durationMs] of ladder.entries()) {
    const offence = i + 1
    t.equal(await earnBan(t, s, i === 0), String(durationMs / 1000), `ban ${offence}: Retry-After is the ladder's step`)
    t.strictSame(s.bans[i], { key: LOCAL, durationMs, offence, shadow: false }, `ban ${offence}: onBanReach(request, key, { durationMs: ${durationMs}, offence: ${offence}, shadow: false })`)
    t.equal(await s.redis.get(s.keys.offences), String(offence), `ban ${offence}: the offences counter`)
    near(t, await s.redis.pttl(s.keys.offences), durationMs + forget, `ban ${offence}: offences live for the ban plus forget`)
    near(t, await s.redis.pttl(s.keys.banned), durationMs, `ban ${offence}: the ban's own TTL`)
    const held = await s.app.inject('/')
    t.strictSame([held.statusCode, held.headers['retry-after']], [403, String(durationMs / 1000)], `ban ${offence}: a request during the ban meets the remaining ban`)
    t.equal(s.bans.length, offence, `ban ${offence}: onBanReach once per ban, not per banned request`)
    await endBan(s)
  }
})

t.test('a list: 1 s, 5 s, 1 minute, the last repeating', async t => {
  const s = await setup(t, { threshold: 2, escalate: ['1s', '5s', '1 minute'] })
  const ladder = [1000, 5000, 60_000, 60_000]
  for (const [i, durationMs] of ladder.entries()) {
    t.equal(await earnBan(t, s, i === 0), String(durationMs / 1000), `ban ${i + 1}: Retry-After`)
    t.strictSame(s.bans[i], { key: LOCAL, durationMs, offence: i + 1, shadow: false }, `ban ${i + 1}: onBanReach`)
    await endBan(s)
  }
  near(t, await s.redis.pttl(s.keys.offences), 60_000 + 86_400_000, 'the default forget is a day')
})

t.test('a factor without maxDuration climbs to a day; a fractional factor rounds each step up', async t => {
  const day = await setup(t, { threshold: 2, duration: '12 hours', escalate: 3 })
  for (const [i, durationMs] of [43_200_000, 86_400_000, 86_400_000].entries()) {
    t.equal(await earnBan(t, day, i === 0), String(durationMs / 1000))
    t.equal(day.bans[i]!.durationMs, durationMs, `ban ${i + 1}: ${durationMs} ms`)
    await endBan(day)
  }
  const odd = await setup(t, { threshold: 2, duration: 1001, escalate: 1.5, maxDuration: 3000 })
  for (const [i, durationMs] of [1001, 1502, 2253, 3000, 3000].entries()) {
    await earnBan(t, odd, i === 0)
    t.equal(odd.bans[i]!.durationMs, durationMs, `ban ${i + 1}: ${durationMs} ms`)
    await endBan(odd)
  }
})

t.test('without escalate every ban is as long, offence 1, and no offences key is written', async t => {
  const s = await setup(t, { threshold: 2, duration: '10s' })
  for (let i = 0; i < 3; i++) {
    t.equal(await earnBan(t, s, i === 0), '10')
    await endBan(s)
  }
  t.strictSame(s.bans.map(b => [b.durationMs, b.offence]), [[10_000, 1], [10_000, 1], [10_000, 1]])
  t.equal(await s.redis.exists(s.keys.offences), 0)
})

t.test('unban forgives: the next ban is the first again', async t => {
  const s = await setup(t, { threshold: 2, duration: '1s', escalate: 2, maxDuration: '8s' })
  await earnBan(t, s, true)
  await endBan(s)
  t.equal(await earnBan(t, s), '2', 'the second ban is 2 s')
  await s.app.rateGuard.unban(LOCAL)
  t.equal(await s.redis.exists(s.keys.offences), 0, 'unban deleted the offences')
  t.equal(await earnBan(t, s), '1', 'after unban, the next ban is the first again')
  t.strictSame(s.bans.map(b => [b.durationMs, b.offence]), [[1000, 1], [2000, 2], [1000, 1]])
})

t.test('an admin ban neither counts as an offence nor resets the ladder', async t => {
  const s = await setup(t, { threshold: 2, duration: '1s', escalate: 2, maxDuration: '8s' })
  await earnBan(t, s, true)
  await endBan(s)
  await s.app.rateGuard.ban(LOCAL, '30s')
  t.strictSame([(await s.app.inject('/')).statusCode, (await s.app.inject('/')).headers['retry-after']], [403, '30'])
  await endBan(s)
  t.equal(await earnBan(t, s), '2', 'the next earned ban is the second')
})

t.test('bans end and are forgotten in real time: the ladder starts over `forget` after a ban ends', async t => {
  // 100 ms bans, forgotten 300 ms after they end; the endings are the behaviour under test: waited for. Both
  // stores at once, so the waits overlap.
  const ban = { threshold: 1, duration: 100, escalate: 2, maxDuration: 400, forget: 300 }
  await Promise.all((['redis', 'memory'] as const).map(async where => {
    const s = await setup(t, ban, where === 'memory' ? { redis: undefined } : {})
    t.strictSame(await statuses(s.app, 2), [200, 403], `${where}: ban 1`)
    await sleep(100 + 5)
    t.strictSame(await statuses(s.app, 1), [403], `${where}: ended by itself, still within forget: the log is full, so the next denial bans again`)
    if (where === 'redis') near(t, await s.redis.pttl(s.keys.offences), 200 + 300, 'offences: ban 2 plus forget')
    // Ban 2 (200 ms) ends, then forget (300 ms) passes.
    await sleep(200 + 300 + 5)
    if (where === 'redis') t.equal(await s.redis.exists(s.keys.offences), 0, 'the offences are forgotten')
    t.strictSame(await statuses(s.app, 1), [403], `${where}: forgotten: banned again`)
    t.strictSame(s.bans.map(b => [b.durationMs, b.offence]), [[100, 1], [200, 2], [100, 1]], `${where}: the third ban is the first of a new ladder`)
  }))
})

/** Registration rejects with the coded error naming `name` and showing the value as `shown`. */
async function refuses (t: Test, ban: unknown, name: string, shown: string): Promise<void> {
  const app = Fastify()
  t.teardown(() => app.close())
  const escaped = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  await t.rejects(async () => { await app.register(rateGuard, { ban } as RateGuardOptions) },
    { code: INVALID, message: new RegExp(`^Invalid rate-guard option "${escaped(name)}": .*got ${escaped(shown)}$`) }, `${name} = ${shown}`)
}

t.test('invalid escalation is refused at register, naming the option', async t => {
  const cases: Array<[unknown, string, string]> = [
    [{ threshold: 2, duration: '1s', escalate: 1 }, 'ban.escalate', '1'],
    [{ threshold: 2, duration: '1s', escalate: 0.5 }, 'ban.escalate', '0.5'],
    [{ threshold: 2, duration: '1s', escalate: -2 }, 'ban.escalate', '-2'],
    [{ threshold: 2, duration: '1s', escalate: Infinity }, 'ban.escalate', 'Infinity'],
    [{ threshold: 2, duration: '1s', escalate: NaN }, 'ban.escalate', 'NaN'],
    [{ threshold: 2, duration: '1s', escalate: '2' }, 'ban.escalate', '"2"'],
    [{ threshold: 2, duration: '1s', escalate: ['1s', '5s'] }, 'ban.escalate', 'an array'],
    [{ threshold: 2, escalate: ['1s', '5s'], maxDuration: '1 minute' }, 'ban.escalate', 'an array'],
    [{ threshold: 2, escalate: [] }, 'ban.escalate', 'an array'],
    [{ threshold: 2, escalate: Array(65).fill('1s') }, 'ban.escalate', 'an array'],
    [{ threshold: 2, escalate: ['1s', 'soon'] }, 'ban.escalate[1]', '"soon"'],
    [{ threshold: 2, escalate: [0] }, 'ban.escalate[0]', '0'],
    [{ threshold: 2, duration: '10s', escalate: 2, maxDuration: '5s' }, 'ban.maxDuration', '"5s"'],
    [{ threshold: 2, duration: '10s', escalate: 2, maxDuration: 'never' }, 'ban.maxDuration', '"never"'],
    [{ threshold: 2, duration: '10s', maxDuration: '1 minute' }, 'ban.maxDuration', '"1 minute"'],
    [{ threshold: 2, duration: '10s', forget: 0 }, 'ban.forget', '0'],
    [{ threshold: 2, escalate: 2 }, 'ban.duration', 'undefined']
  ]
  for (const [ban, name, shown] of cases) await refuses(t, ban, name, shown)

  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, {})
  t.throws(() => app.get('/r', { config: { rateLimit: { ban: { threshold: 2, duration: '1s', escalate: 1 } } } }, async () => 'ok'),
    { code: INVALID, message: /"config\.rateLimit\.ban\.escalate"/ }, 'on a route, named under config.rateLimit')
  t.doesNotThrow(() => app.get('/ok', { config: { rateLimit: { ban: { threshold: 2, escalate: Array(64).fill('1s') } } } }, async () => 'ok'), 'a list of 64 steps is the most')
})
