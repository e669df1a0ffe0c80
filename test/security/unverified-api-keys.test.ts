// Attack: a client sends a fresh random x-api-key with every request, to get a fresh budget (and escape its
// ban) each time, writing a new identity to Redis at its own rate. Defence: an API key is an identity only
// when the app verifies it (`verifyApiKey`); by default there is no API-key tier, and naming the header
// without a way to verify it is refused at register. Against a real Redis.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { getRedis, client, scanKeys, uniquePrefix } from '../helpers/redis.js'
import { matchList } from '../helpers/match-list.js'

interface Made { app: FastifyInstance, nameSpace: string, url: string, logs: Array<{ level: number, msg: string }> }

async function make (t: Test, options: RateGuardOptions): Promise<Made> {
  const { url } = await getRedis(t)
  const logs: Made['logs'] = []
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { logs.push(JSON.parse(line) as Made['logs'][number]) } } } })
  t.teardown(() => app.close())
  const nameSpace = uniquePrefix()
  await app.register(rateGuard, { redis: url, nameSpace, timeout: 3000, ...options })
  app.get('/', async () => 'ok')
  await app.ready()
  return { app, nameSpace, url, logs }
}

const rotating = async (app: FastifyInstance, n: number): Promise<number[]> => {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject({ url: '/', headers: { 'x-api-key': `rotating-${i}-${Math.random()}` } })).statusCode)
  return out
}

t.test('by default, a fresh x-api-key per request buys nothing: the client is its IP, limited and banned', async t => {
  const { app, nameSpace, url, logs } = await make(t, { max: 5, timeWindow: '1 minute', ban: { threshold: 2, duration: '1 minute' } })
  t.same(await rotating(app, 20), [200, 200, 200, 200, 200, 429, ...Array(14).fill(403)], '20 requests with 20 fresh keys from one IP: max 5, then limited and banned')
  const keys = await scanKeys(client(t, url), nameSpace)
  t.ok(keys.length <= 4, `Redis holds the IP's keys alone, not one per key sent (${keys.length})`)
  matchList(t, logs.filter(line => /keyed by/.test(line.msg)), [{ level: 30, msg: 'rate-guard: clients are keyed by authenticated user → client IP' }], 'the tiers in use, logged once at register')
})

t.test('with verifyApiKey, a verified key has a budget of its own, and the tiers say so', async t => {
  const { app, logs } = await make(t, { max: 2, timeWindow: '1 minute', verifyApiKey: apiKey => apiKey === 'real' })
  const statuses = async (apiKey: string, n: number): Promise<number[]> => {
    const out: number[] = []
    for (let i = 0; i < n; i++) out.push((await app.inject({ url: '/', headers: { 'x-api-key': apiKey } })).statusCode)
    return out
  }
  t.same(await statuses('real', 3), [200, 200, 429], 'the verified key: its own budget')
  t.same(await statuses('fake', 3), [200, 200, 429], 'an unverified one: the IP\'s')
  matchList(t, logs.filter(line => /keyed by/.test(line.msg)), [{ msg: 'rate-guard: clients are keyed by verified API key (x-api-key) → authenticated user → client IP' }])
})

t.test('naming an API-key header without a way to verify keys is refused at register, saying how to vouch for them', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(rateGuard, { apiKeyHeader: 'x-api-key' }) }, {
    code: 'FST_RATE_GUARD_INVALID_OPTION',
    message: /"apiKeyHeader": expected false, or a header given with verifyApiKey .*verifyApiKey: \(\) => true/
  })
  const off = Fastify()
  t.teardown(() => off.close())
  await off.register(rateGuard, { apiKeyHeader: false })
  await off.ready()
  t.pass('apiKeyHeader: false needs nothing')
})

t.test('a key generator of the app\'s own logs no tiers: it decides who a client is', async t => {
  const { logs } = await make(t, { keyGenerator: request => request.ip })
  t.same(logs.filter(line => /keyed by/.test(line.msg)), [])
})
