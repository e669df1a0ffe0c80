// Concurrency and memory bounds: several app instances, each with its own Redis connection, decide against
// one Redis atomically (exactly max allowed, whatever the interleaving and the protocol), and a flood of
// requests never grows a log past max or leaves a key without a TTL.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Redis, RedisOptions } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys, scopeOf } from '../lib/stores/key-names.js'
import { MemoryStore } from '../lib/stores/memory.js'
import { client, getRedis, scanKeys, uniquePrefix } from './helpers/redis.js'
import { decideInput } from './helpers/stores.js'

const INSTANCES = 4
/**
 * These tests are about atomicity, not latency: a deadline generous enough for 200 parallel decisions on a
 * busy 2-core machine, and failMode 'closed' so a missed deadline shows up as a 503, never as a silent 200.
 */
const RELAXED = { timeout: 5000, failMode: 'closed' } as const

function lend (t: Test, url: string, opts: RedisOptions): Redis {
  const redis = client(t, url, opts)
  redis.on('error', () => {})
  return redis
}

/** `INSTANCES` apps sharing one nameSpace, each with its own client made by `redisFor`. */
async function instances (t: Test, redisFor: () => Redis | string, options: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<FastifyInstance[]> {
  const apps: FastifyInstance[] = []
  for (let i = 0; i < INSTANCES; i++) {
    const app = Fastify({ logger: false })
    t.teardown(async () => { await app.close() })
    await app.register(rateGuard, { verifyApiKey: () => true, ...options, redis: redisFor() })
    routes(app)
    await app.ready()
    apps.push(app)
  }
  return apps
}

const CLIENTS: Record<string, RedisOptions | 'owned'> = {
  'RESP3 (default)': {},
  'RESP2 (protocol: 2)': { protocol: 2 },
  'stringNumbers: true': { stringNumbers: true },
  'RESP2 with stringNumbers': { protocol: 2, stringNumbers: true },
  'owned clients (redis: url)': 'owned'
}

t.test('parallel requests on several instances: exactly max allowed', async t => {
  const { url } = await getRedis(t)
  // Each instance sends its 50 requests in one script call: a budget larger than one instance's share shows
  // the budget spent from several of them.
  const max = 120
  const total = 200
  for (const [name, opts] of Object.entries(CLIENTS)) {
    await t.test(name, async t => {
      const nameSpace = uniquePrefix()
      const apps = await instances(t, () => opts === 'owned' ? url : lend(t, url, opts), { ...RELAXED, nameSpace, max, timeWindow: '1 minute' }, app => {
        app.get('/', async () => 'ok')
      })
      const replies = await Promise.all(Array.from({ length: total }, async (_, i) => {
        return await apps[i % INSTANCES]!.inject({ url: '/', headers: { 'x-api-key': 'shared-identity' } })
      }))

      const allowed = replies.filter(res => res.statusCode === 200)
      const limited = replies.filter(res => res.statusCode === 429)
      t.equal(allowed.length, max, 'exactly max allowed across all instances')
      t.equal(limited.length, total - max, 'every other request limited')
      // Each allowed request saw its own place in the window: the decisions were atomic.
      const remaining = allowed.map(res => Number(res.headers['x-ratelimit-remaining'])).sort((a, b) => a - b)
      t.same(remaining, Array.from({ length: max }, (_, i) => i), 'remaining counts down from max - 1 to 0, each value once')
      t.ok(limited.every(res => res.headers['x-ratelimit-remaining'] === '0' && Number(res.headers['retry-after']) >= 1), 'limited replies: 0 remaining and a Retry-After')
      t.ok(limited.every(res => {
        const body = res.json()
        return Object.keys(body).length === 3 && body.statusCode === 429 && body.error === 'Too Many Requests' && /^Rate limit exceeded, retry in /.test(body.message)
      }), 'limited replies: @fastify/rate-limit\'s 429 body, exactly')
      const perInstance = apps.map((_, n) => replies.filter((res, i) => i % INSTANCES === n && res.statusCode === 200).length)
      t.ok(perInstance.filter(allowedHere => allowedHere > 0).length >= 2, `one budget spent from several instances (${perInstance.join(', ')})`)

      const observer = lend(t, url, {})
      t.equal(await observer.zcard(identityKeys(nameSpace, GLOBAL_SCOPE, 'apikey:shared-identity').log), max, 'the log holds exactly max entries')
      const peek = await apps[0]!.rateGuard.peek('apikey:shared-identity')
      t.match(peek, { status: 'limited', count: max, remaining: 0 }, 'every instance sees the same count')
    })
  }
})

t.test('a flood from many identities: every log holds at most max entries and every key has a TTL', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const budgets: Record<string, number> = {
    [GLOBAL_SCOPE]: 5,
    [scopeOf('route', 'GET /b')]: 3,
    [scopeOf('group', 'shared')]: 4
  }
  const apps = await instances(t, () => lend(t, url, {}), { ...RELAXED, nameSpace, max: 5, timeWindow: '1 minute', ban: { threshold: 3, duration: '1 minute' } }, app => {
    app.get('/a', async () => 'a')
    app.get('/b', { config: { rateLimit: { max: 3 } } }, async () => 'b')
    app.get('/c', { config: { rateLimit: { max: 4, groupId: 'shared' } } }, async () => 'c')
    app.get('/d', { config: { rateLimit: { max: 4, groupId: 'shared' } } }, async () => 'd')
  })

  // Identity i sends 4 * (i + 1) requests over the four routes, on every instance at once: the first ones
  // stay under their limits, the middle ones collect strikes, the last ones get banned.
  const identities = Array.from({ length: 12 }, (_, i) => `flood-${i}`)
  const paths = ['/a', '/b', '/c', '/d']
  const requests = identities.flatMap((key, i) => Array.from({ length: 4 * (i + 1) }, (_, j) => ({ key, path: paths[j % 4]!, app: apps[j % INSTANCES]! })))
  const replies = await Promise.all(requests.map(async ({ key, path, app }) => await app.inject({ url: path, headers: { 'x-api-key': key } })))
  const codes = new Set(replies.map(res => res.statusCode))
  t.same([...codes].sort(), [200, 403, 429], 'some allowed, some limited, some banned')

  const observer = lend(t, url, {})
  const keys = await scanKeys(observer, nameSpace)
  t.ok(keys.length > identities.length, `${keys.length} keys under the nameSpace`)

  const shape = new RegExp(`^${nameSpace}\\{[A-Za-z0-9_-]{22}\\}:(log:(.+)|strikes|banned)$`)
  const kinds = new Set<string>()
  // The ban index (lib/stores/ban-index.ts): every ban it names is one of the flood's, and it too has a TTL.
  const index = `${nameSpace}bans`
  const named = await observer.zrange(index, '0', '-1')
  t.ok(named.length > 0 && named.every(key => shape.exec(key)?.[1] === 'banned' && keys.includes(key)), `the ban index names the ${named.length} bans`)
  t.ok(await observer.pttl(index) > 0, 'the ban index has a TTL')
  for (const key of [...new Set(keys)].filter(key => key !== index)) {
    const match = shape.exec(key)
    if (match === null) {
      t.fail(`unexpected key ${key}`)
      continue
    }
    const pttl = await observer.pttl(key)
    if (pttl === -2) continue // expired since the scan
    t.ok(pttl > 0, `${key} has a TTL (${pttl} ms)`)
    const scope = match[2]
    kinds.add(scope === undefined ? match[1]! : 'log')
    if (scope !== undefined) {
      t.ok(scope in budgets, `${key}: a known budget`)
      const card = await observer.zcard(key)
      t.ok(card >= 1 && card <= budgets[scope]!, `${key} holds ${card} of at most ${budgets[scope]}`)
    }
  }
  t.same([...kinds].sort(), ['banned', 'log', 'strikes'], 'logs, strikes and bans were all checked')
})

t.test('the in-process twin stays within its cache bound under a flood of identities', async t => {
  const cache = 100
  const store = new MemoryStore({ cache })
  t.teardown(async () => { await store.close() })
  const decide = (key: string, max = 3): string => store.decide(decideInput({
    keys: identityKeys('t:', GLOBAL_SCOPE, key), max, windowMs: 60_000, banThreshold: 2, banMs: 60_000
  })).status

  t.same([decide('regular'), decide('regular'), decide('regular'), decide('regular')], ['allowed', 'allowed', 'allowed', 'limited'])
  for (let i = 0; i < 10_000; i++) decide(`stranger-${i}`)
  t.ok(store.size <= cache, `${store.size} keys tracked for a cache of ${cache} (logs, strikes and bans)`)
  t.equal(decide('regular'), 'banned', 'a known client at its limit keeps its count and its strike (a second denial starts its ban): the flood did not evict it')
})
