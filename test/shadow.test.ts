// Modes (`mode`): shadow decides and counts as enforce would but lets every request through, telling the app's
// callbacks and the diagnostics channel what it would have refused; report enforces and logs each refusal. On
// Redis and in process.
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { identityKeys, scopeOf, watchedScope } from '../lib/stores/key-names.js'
import { client, getRedis, uniquePrefix, until } from './helpers/redis.js'
import { matchList } from './helpers/match-list.js'

const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

interface Setup {
  app: FastifyInstance
  exceeded: Array<[string, boolean]>
  bans: Array<[string, boolean]>
  logs: Array<{ msg: string, rateGuard?: Record<string, unknown> }>
}

async function makeApp (t: Test, where: Where, opts: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<Setup> {
  const logs: Setup['logs'] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as Setup['logs'][number]) } } } })
  t.teardown(() => app.close())
  const exceeded: Setup['exceeded'] = []
  const bans: Setup['bans'] = []
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), ...RELAXED } : {}
  await app.register(rateGuard, {
    ...store,
    verifyApiKey: () => true,
    max: 2,
    timeWindow: '1 minute',
    onExceeded: (_request, key, { shadow }) => { exceeded.push([key, shadow]) },
    onBanReach: (_request, key, { shadow }) => { bans.push([key, shadow]) },
    ...opts
  })
  app.get('/', async () => 'ok')
  routes?.(app)
  await app.ready()
  return { app, exceeded, bans, logs }
}

const get = async (app: FastifyInstance, apiKey: string): Promise<LightMyRequestResponse> => await app.inject({ url: '/', headers: { 'x-api-key': apiKey } })

for (const where of STORES) {
  t.test(`${where}: shadow mode lets every request through, counting as enforce would, and says what it would have refused`, async t => {
    const { app, exceeded, bans } = await makeApp(t, where, { mode: 'shadow', ban: { threshold: 2, duration: '1 hour' } })
    const replies = []
    for (let i = 0; i < 5; i++) {
      const res = await get(app, 'a')
      replies.push([res.statusCode, res.headers['x-ratelimit-remaining'], res.headers['retry-after']])
    }
    t.strictSame(replies, Array.from({ length: 5 }, (_, i) => [200, String(Math.max(0, 1 - i)), undefined]), 'all 200, no Retry-After; the counts as enforce has them')
    t.strictSame(exceeded, [['apikey:a', true], ['apikey:a', true], ['apikey:a', true]], 'onExceeded told of each, in shadow')
    t.strictSame(bans, [], 'shadow denials strike toward no ban unless asked')
    t.equal((await app.rateGuard.peek('apikey:a')).count, 2, 'the denied requests counted nothing, as enforce')
  })

  t.test(`${where}: shadow: { ban: true } records the bans enforce would start, and still lets the client through`, async t => {
    const { app, bans } = await makeApp(t, where, { mode: 'shadow', shadow: { ban: true }, ban: { threshold: 2, duration: '1 hour' } })
    const codes = []
    for (let i = 0; i < 6; i++) codes.push((await get(app, 'b')).statusCode)
    t.strictSame(codes, [200, 200, 200, 200, 200, 200])
    t.strictSame(bans, [['apikey:b', true]], 'the ban enforce would have started, once')
    t.equal((await app.rateGuard.peek('apikey:b')).status, 'banned', 'and it is recorded: switching to enforce would refuse this client')
  })

  t.test(`${where}: report mode refuses as enforce, and logs each refusal with the key's hash, never the key`, async t => {
    const { app, exceeded, logs } = await makeApp(t, where, { mode: 'report' })
    const codes = []
    for (let i = 0; i < 3; i++) codes.push((await get(app, 'secret-key')).statusCode)
    t.strictSame(codes, [200, 200, 429])
    t.strictSame(exceeded, [['apikey:secret-key', false]])
    const refused = logs.filter(line => line.msg === 'rate-guard: refused')
    t.equal(refused.length, 1)
    t.match(refused[0]!.rateGuard, { outcome: 'limited', budget: 'default', keyHash: /^[\w-]{22}$/ })
    t.notOk(JSON.stringify(logs).includes('secret-key'), 'the key is nowhere in the log')
  })

  t.test(`${where}: a route in shadow mode beside enforcing ones`, async t => {
    const { app, exceeded } = await makeApp(t, where, {}, app => {
      app.get('/trial', { config: { rateLimit: { max: 1, mode: 'shadow' } } }, async () => 'ok')
    })
    const trial = async (): Promise<number> => (await app.inject({ url: '/trial', headers: { 'x-api-key': 'c' } })).statusCode
    t.strictSame([await trial(), await trial(), await trial()], [200, 200, 200], 'the new limit watched, not enforced')
    t.strictSame([(await get(app, 'c')).statusCode, (await get(app, 'c')).statusCode, (await get(app, 'c')).statusCode], [200, 200, 429], 'the plugin\'s still enforced')
    t.strictSame(exceeded, [['apikey:c', true], ['apikey:c', true], ['apikey:c', false]])
  })
}

t.test('mode and shadow at register: checked', async t => {
  for (const [opts, name] of [[{ mode: 'dry-run' }, 'mode'], [{ shadow: true }, 'shadow'], [{ shadow: { ban: 'yes' } }, 'shadow.ban'], [{ shadow: { bans: true } }, 'shadow.bans']] as const) {
    const app = Fastify()
    t.teardown(() => app.close())
    await t.rejects(async () => { await app.register(rateGuard, opts as unknown as RateGuardOptions) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: new RegExp(name.replace('.', '\\.')) })
  }
})

for (const where of STORES) {
  t.test(`${where}: a limit watched in shadow beside enforced ones: reported, never refusing`, async t => {
    const { app, exceeded } = await makeApp(t, where, {}, app => {
      app.get('/tiered', { config: { rateLimit: { limits: [{ max: 5, timeWindow: '1 minute' }, { max: 2, timeWindow: '1 minute', name: 'planned', mode: 'shadow' }] } } }, async () => 'ok')
    })
    const diagnostics = await import('node:diagnostics_channel')
    const seen: Array<[string, string | undefined]> = []
    const onMessage = (message: unknown): void => {
      const { outcome, limit } = message as { outcome: string, limit: string | undefined }
      seen.push([outcome, limit])
    }
    diagnostics.subscribe('rate-guard:decision', onMessage)
    t.teardown(() => { diagnostics.unsubscribe('rate-guard:decision', onMessage) })
    const replies = []
    for (let i = 0; i < 6; i++) {
      const res = await app.inject({ url: '/tiered', headers: { 'x-api-key': 'w' } })
      replies.push([res.statusCode, res.headers['x-ratelimit-limit']])
    }
    t.strictSame(replies, [[200, '5'], [200, '5'], [200, '5'], [200, '5'], [200, '5'], [429, '5']], 'only the enforced limit refuses, and only its headers show')
    // The watched limit is decided after each answer, not waited for: its reports may come a round trip later.
    await until(async () => exceeded.length === 4, 'the watched limit\'s reports')
    t.strictSame(exceeded.filter(([, shadow]) => shadow).length, 3, 'the watched limit would have refused the 3rd to 5th')
    t.strictSame(exceeded.filter(([, shadow]) => !shadow), [['apikey:w', false]], 'the enforced one refused the 6th')
    t.strictSame(seen.filter(([outcome]) => outcome === 'shadow-limited'), [['shadow-limited', 'planned'], ['shadow-limited', 'planned'], ['shadow-limited', 'planned']], 'reported under its own name')
  })
}

t.test('watched limits at register: one enforced at least, numbers only', async t => {
  for (const [limits, message] of [
    [[{ max: 1, timeWindow: 1000, mode: 'shadow' }], /at least one limit enforced/],
    [[{ max: 1, timeWindow: 1000 }, { max: () => 1, timeWindow: 1000, mode: 'shadow' }], /not functions/],
    [[{ max: 1, timeWindow: 1000, mode: 'report' }], /limits\[0\]\.mode/]
  ] as const) {
    const app = Fastify()
    t.teardown(() => app.close())
    await t.rejects(async () => { await app.register(rateGuard, { limits } as unknown as RateGuardOptions) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message })
  }
})

for (const where of STORES) {
  t.test(`${where}: an onExceeded that throws on a watched limit's report is logged; the request is unharmed`, async t => {
    const { app, logs } = await makeApp(t, where, { onExceeded: () => { throw new Error('callback bug') } }, app => {
      app.get('/tiered', { config: { rateLimit: { limits: [{ max: 5, timeWindow: '1 minute' }, { max: 1, timeWindow: '1 minute', mode: 'shadow' }] } } }, async () => 'ok')
    })
    const codes = []
    for (let i = 0; i < 3; i++) codes.push((await app.inject({ url: '/tiered', headers: { 'x-api-key': 'x' } })).statusCode)
    t.strictSame(codes, [200, 200, 200])
    await until(async () => logs.filter(line => line.msg === 'rate-guard: a watched limit could not be reported').length === 2, 'both reports logged')
  })
}

t.test('memory: a watched limit is charged the request\'s cost too', async t => {
  const { app, exceeded } = await makeApp(t, 'memory', {}, app => {
    app.get('/bulk', { config: { rateLimit: { cost: 2, limits: [{ max: 10, timeWindow: '1 minute' }, { max: 3, timeWindow: '1 minute', mode: 'shadow' }] } } }, async () => 'ok')
  })
  for (let i = 0; i < 2; i++) await app.inject({ url: '/bulk', headers: { 'x-api-key': 'y' } })
  t.strictSame(exceeded, [['apikey:y', true]], '2 units fit the watched 3, 4 would not')
})

for (const where of STORES) {
  t.test(`${where}: shadow mode's bans and counts are its own, told as shadow, and lifted by unban and reset`, async t => {
    const { app, bans } = await makeApp(t, where, {}, app => {
      app.get('/trial', { config: { rateLimit: { max: 1, mode: 'shadow', shadow: { ban: true }, ban: { threshold: 1, duration: '1 hour' } } } }, async () => 'ok')
      app.get('/closed', { config: { rateLimit: { max: 0, mode: 'shadow' } } }, async () => 'ok')
    })
    const diagnostics = await import('node:diagnostics_channel')
    const outcomes: string[] = []
    const onMessage = (message: unknown): void => { outcomes.push((message as { outcome: string }).outcome) }
    diagnostics.subscribe('rate-guard:decision', onMessage)
    t.teardown(() => { diagnostics.unsubscribe('rate-guard:decision', onMessage) })
    const trial = async (): Promise<number> => (await app.inject({ url: '/trial', headers: { 'x-api-key': 'e' } })).statusCode
    t.strictSame([await trial(), await trial(), await trial()], [200, 200, 200])
    t.strictSame(outcomes, ['allowed', 'shadow-ban-started', 'shadow-banned'], 'the channel tells the ban as shadow')
    t.strictSame(bans, [['apikey:e', true]])
    t.strictSame([(await get(app, 'e')).statusCode, (await get(app, 'e')).statusCode], [200, 200], 'the plugin\'s enforced budget: its own count, no ban')

    const onTrial = { route: 'GET /trial' }
    t.match(await app.rateGuard.peek('apikey:e', onTrial), { status: 'banned', shadow: true, count: 0 })
    t.match(await app.rateGuard.peek('apikey:e'), { status: 'limited', count: 2, shadow: false }, 'the enforced budget: full, not banned')
    const closed = await app.rateGuard.peek('apikey:e', { route: 'GET /closed' })
    t.match(closed, { status: 'limited', shadow: true }, 'a shadow budget that lets nothing through: refused outright, as its route answers')
    t.ok(closed.shadowBanMs > 0, 'and the shadow ban beside it all the same')
    matchList(t, await app.rateGuard.bans(), [{ shadow: true }])

    await app.rateGuard.unban('apikey:e')
    t.strictSame(await app.rateGuard.bans(), [], 'unban lifts the shadow ban')
    t.match(await app.rateGuard.peek('apikey:e', onTrial), { status: 'limited', count: 1, shadowBanMs: 0 }, 'its count stays, as an unban leaves counts')
    await app.rateGuard.reset('apikey:e')
    t.match(await app.rateGuard.peek('apikey:e', onTrial), { status: 'allowed', count: 0 }, 'reset forgets shadow mode\'s counts')
    t.match(await app.rateGuard.peek('apikey:e'), { status: 'allowed', count: 0 }, 'and the enforced ones')
  })
}

t.test('redis: reset forgets what watched limits counted', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const { app } = await makeApp(t, 'redis', { nameSpace }, app => {
    app.get('/tiered', { config: { rateLimit: { limits: [{ max: 5, timeWindow: '1 minute' }, { max: 1, timeWindow: '1 minute', mode: 'shadow' }] } } }, async () => 'ok')
  })
  const redis = client(t, url)
  const watchedLog = identityKeys(nameSpace, watchedScope(scopeOf('route', 'GET /tiered')), 'apikey:z').log
  await app.inject({ url: '/tiered', headers: { 'x-api-key': 'z' } })
  await until(async () => await redis.exists(watchedLog) === 1, 'the watched limit\'s count')
  await app.rateGuard.reset('apikey:z')
  t.equal(await redis.exists(watchedLog), 0)
})
