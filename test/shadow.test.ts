// Modes (`mode`): shadow decides and counts as enforce would but lets every request through, telling the app's
// callbacks and the diagnostics channel what it would have refused; report enforces and logs each refusal. On
// Redis and in process.
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

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
