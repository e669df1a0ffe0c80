// A budget shared by every client of a route (`shared`), beside each client's own, through fastify.inject on
// Redis and in process: it is asked only for a request the client's own budget allowed; when it refuses,
// the client gets the shared budget's 429 and its own count is given back (an undo that is sent, not awaited);
// a request the client's own budget refused costs the shared budget nothing. Its keys live under a hash tag
// of their own, `{s:<hash of the scope>}`.
import Fastify from 'fastify'
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { PeekResult, RateGuardOptions } from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { GLOBAL_SCOPE, identityKeys, scopeOf, sharedKeys } from '../lib/stores/key-names.js'
import { client, getRedis, scanKeys, uniquePrefix } from './helpers/redis.js'

/** Correctness, not latency: a deadline no loaded machine misses, and a 503 (never a silent pass) if one did. */
const RELAXED = { timeout: 3000, failMode: 'closed' } as const
const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

/** Each client's own budget is 5 a minute; all clients of the route share 3 a minute. */
const SHARED_ROUTE = { max: 5, timeWindow: '1 minute', shared: { max: 3, timeWindow: '1 minute' } }

interface Setup {
  app: FastifyInstance
  nameSpace: string
  exceeded: string[]
}

async function makeApp (t: Test, where: Where, opts: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<Setup> {
  const app = Fastify()
  t.teardown(() => app.close())
  const nameSpace = uniquePrefix()
  const exceeded: string[] = []
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace, ...RELAXED } : {}
  await app.register(rateGuard, { ...store, verifyApiKey: () => true, onExceeded: (_request, key) => { exceeded.push(key) }, ...opts })
  routes(app)
  await app.ready()
  return { app, nameSpace, exceeded }
}

async function get (app: FastifyInstance, url: string, apiKey: string): Promise<LightMyRequestResponse> {
  return await app.inject({ url, headers: { 'x-api-key': apiKey } })
}

function legacy (res: LightMyRequestResponse): Array<number | string | undefined> {
  const h = res.headers
  return [res.statusCode, h['x-ratelimit-limit'], h['x-ratelimit-remaining'], h['x-ratelimit-reset'], h['retry-after']].map(v => typeof v === 'number' ? v : v?.toString())
}

/**
 * Peeks until `done` holds, at most 20 times. The undo of a refused request is sent without being awaited;
 * on Redis it goes down the same connection as the peek, ahead of it, so the first peek should already see
 * it: the bound only keeps a lost undo from hanging the test.
 */
async function settled (peek: () => Promise<PeekResult>, done: (p: PeekResult) => boolean): Promise<PeekResult> {
  let seen = await peek()
  for (let i = 1; i < 20 && !done(seen); i++) {
    await new Promise(resolve => setImmediate(resolve))
    seen = await peek()
  }
  return seen
}

t.test('three clients spend the shared budget of 3; then everyone gets its 429 and keeps its own count', async t => {
  for (const where of STORES) {
    const { app, exceeded } = await makeApp(t, where, { standardHeaders: 'draft-10' }, app => {
      app.get('/s', { config: { rateLimit: SHARED_ROUTE } }, async () => 'ok')
    })
    const own = async (apiKey: string): Promise<PeekResult> => await app.rateGuard.peek(`apikey:${apiKey}`, { route: 'GET /s' })

    for (const apiKey of ['a', 'b', 'c']) {
      const res = await get(app, '/s', apiKey)
      t.strictSame(legacy(res), [200, '5', '4', '60', undefined], `${where}: client ${apiKey} passes, with its own budget's headers`)
      t.equal(res.headers['ratelimit-policy'], '"default";q=5;qu="requests";w=60')
    }

    for (const apiKey of ['a', 'd', 'b']) {
      const res = await get(app, '/s', apiKey)
      t.strictSame(legacy(res), [429, '3', '0', '60', '60'], `${where}: client ${apiKey} is refused with the shared budget's headers`)
      t.strictSame([res.headers['ratelimit-policy'], res.headers.ratelimit], ['"default-shared";q=3;qu="requests";w=60', '"default-shared";r=0;t=60'], `${where}: named <budget>-shared`)
      t.strictSame(res.json(), { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 minute' }, `${where}: @fastify/rate-limit's body, no code`)
    }
    t.strictSame(exceeded, ['apikey:a', 'apikey:d', 'apikey:b'], `${where}: onExceeded for each shared refusal, with the client's key`)

    const a = await settled(() => own('a'), p => p.count === 1)
    t.strictSame([a.count, a.remaining, a.status], [1, 4, 'allowed'], `${where}: a's refused request was given back: its own count is still 1`)
    const d = await settled(() => own('d'), p => p.count === 0)
    t.strictSame([d.count, d.remaining], [0, 5], `${where}: d, refused on its first request, has nothing counted`)
    t.equal((await own('c')).count, 1, `${where}: c's own count is its one request`)
  }
})

t.test('a request refused by the client\'s own budget costs the shared budget nothing', async t => {
  for (const where of STORES) {
    const { app, nameSpace } = await makeApp(t, where, {}, app => {
      app.get('/own', { config: { rateLimit: { max: 2, timeWindow: '1 minute', shared: { max: 3, timeWindow: '1 minute' } } } }, async () => 'ok')
    })
    const statuses = []
    for (let i = 0; i < 4; i++) statuses.push(legacy(await get(app, '/own', 'a')))
    t.strictSame(statuses, [[200, '2', '1', '60', undefined], [200, '2', '0', '60', undefined], [429, '2', '0', '60', '60'], [429, '2', '0', '60', '60']],
      `${where}: a spends its own 2, then its own budget refuses it (Limit 2, not the shared 3)`)
    if (where === 'redis') {
      const redis = client(t, (await getRedis(t)).url)
      t.equal(await redis.zcard(sharedKeys(nameSpace, scopeOf('route', 'GET /own'), 'sliding-log').log), 2, 'the shared log holds a\'s 2 allowed requests, not its refusals')
    }
    t.strictSame(legacy(await get(app, '/own', 'b')), [200, '2', '1', '60', undefined], `${where}: b takes the shared budget's last request`)
    t.strictSame(legacy(await get(app, '/own', 'c')), [429, '3', '0', '60', '60'], `${where}: c meets the spent shared budget`)
  }
})

t.test('20 clients at once on a shared budget of 3: exactly 3 pass, and only their requests stay counted', async t => {
  for (const where of STORES) {
    const { app } = await makeApp(t, where, {}, app => {
      app.get('/s', { config: { rateLimit: SHARED_ROUTE } }, async () => 'ok')
    })
    const keys = Array.from({ length: 20 }, (_, i) => `k${i}`)
    const replies = await Promise.all(keys.map(async key => await get(app, '/s', key)))
    const passed = keys.filter((_, i) => replies[i]!.statusCode === 200)
    t.equal(passed.length, 3, `${where}: exactly the shared budget passed`)
    t.ok(replies.every(r => r.statusCode === 200 || (r.statusCode === 429 && r.headers['x-ratelimit-limit'] === '3')), `${where}: every other client got the shared 429`)
    const counts = await Promise.all(keys.map(async key =>
      (await settled(() => app.rateGuard.peek(`apikey:${key}`, { route: 'GET /s' }), p => p.count === (passed.includes(key) ? 1 : 0))).count))
    t.strictSame(counts, keys.map(key => passed.includes(key) ? 1 : 0), `${where}: each refused client's own count was given back`)
  }
})

t.test('the undo works with every algorithm', async t => {
  for (const algorithm of ALGORITHMS) {
    for (const where of STORES) {
      const { app } = await makeApp(t, where, { algorithm }, app => {
        app.get('/s', { config: { rateLimit: SHARED_ROUTE } }, async () => 'ok')
      })
      const what = `${algorithm}, ${where}`
      const own = async (apiKey: string): Promise<PeekResult> => await app.rateGuard.peek(`apikey:${apiKey}`, { route: 'GET /s' })
      for (const apiKey of ['a', 'b', 'c']) t.equal((await get(app, '/s', apiKey)).statusCode, 200, `${what}: ${apiKey} passes`)
      for (const apiKey of ['a', 'a', 'd']) {
        const res = await get(app, '/s', apiKey)
        t.strictSame([res.statusCode, res.headers['x-ratelimit-limit'], res.headers['x-ratelimit-remaining']], [429, '3', '0'], `${what}: ${apiKey} refused by the shared budget`)
      }
      t.equal((await settled(() => own('a'), p => p.count === 1)).count, 1, `${what}: a refused twice, still 1 counted`)
      t.equal((await settled(() => own('d'), p => p.count === 0)).count, 0, `${what}: d refused, nothing counted`)
      // 4 left of a's own 5: the given-back requests are really free again (the shared budget is what stops it).
      t.equal((await own('a')).remaining, 4, `${what}: a has 4 of its own left`)
    }
  }
})

t.test('shared keys live under {s:<hash>}: their own slot, apart from every client\'s; no strikes or bans there', async t => {
  const { url } = await getRedis(t)
  const redis: Redis = client(t, url)
  const { app, nameSpace } = await makeApp(t, 'redis', { ban: { threshold: 1, duration: '1 minute' } }, app => {
    app.get('/s', { config: { rateLimit: SHARED_ROUTE } }, async () => 'ok')
    app.get('/plain', async () => 'ok')
  })
  for (const apiKey of ['a', 'b', 'c']) await get(app, '/s', apiKey)
  // A shared refusal is no strike: with a ban threshold of 1, a client's own refusal would ban it at once.
  t.strictSame([(await get(app, '/s', 'd')).statusCode, (await get(app, '/s', 'd')).statusCode], [429, 429], 'd is refused by the shared budget, and never banned for it')
  await get(app, '/plain', 'a')

  const scope = scopeOf('route', 'GET /s')
  const shared = sharedKeys(nameSpace, scope, 'sliding-log')
  const keys = await scanKeys(redis, nameSpace)
  t.strictSame(keys.filter(key => key.includes('{s:')), [shared.log], 'one shared key: the route\'s shared log')
  t.match(shared.log, new RegExp(`^${nameSpace}\\{s:[A-Za-z0-9_-]{22}\\}:log:${scope}$`), 'its hash tag is s: and the scope\'s hash')
  const own = ['a', 'b', 'c'].flatMap(k => [identityKeys(nameSpace, scope, `apikey:${k}`).log])
  const expected = [shared.log, ...own, identityKeys(nameSpace, GLOBAL_SCOPE, 'apikey:a').log].sort()
  t.strictSame(keys, expected, 'the rest: each client\'s own log (d\'s was given back, so it expired empty), and a\'s plugin-budget log')
  t.equal(await redis.zcard(shared.log), 3)
  t.equal(await redis.exists(identityKeys(nameSpace, scope, 'apikey:d').log), 0, 'the undo removed d\'s only entry: ZREM leaves no empty key')
})

t.test('shared budgets: several limits, given names, a group\'s, the plugin\'s', async t => {
  const { app } = await makeApp(t, 'redis', { standardHeaders: 'draft-10', shared: { max: 1, timeWindow: '1 minute', name: 'everyone' } }, app => {
    app.get('/limits', { config: { rateLimit: { max: 5, shared: { limits: [{ max: 2, timeWindow: '1 minute' }, { max: 10, timeWindow: '1 hour' }] } } } }, async () => 'ok')
    app.get('/g1', { config: { rateLimit: { groupId: 'reports', max: 5, shared: { max: 2, timeWindow: '1 minute' } } } }, async () => 'ok')
    app.get('/g2', { config: { rateLimit: { groupId: 'reports', max: 5, shared: { max: 2, timeWindow: '1 minute' } } } }, async () => 'ok')
    app.get('/p1', async () => 'ok')
    app.get('/p2', async () => 'ok')
    app.get('/none', { config: { rateLimit: { max: 5, shared: false } } }, async () => 'ok')
  })
  t.strictSame([(await get(app, '/limits', 'a')).statusCode, (await get(app, '/limits', 'b')).statusCode], [200, 200])
  const limits = await get(app, '/limits', 'c')
  t.strictSame([limits.statusCode, limits.headers['x-ratelimit-limit'], limits.headers['ratelimit-policy'], limits.headers.ratelimit],
    [429, '2', '"default-shared";q=2;qu="requests";w=60, "default-shared-2";q=10;qu="requests";w=3600', '"default-shared";r=0;t=60, "default-shared-2";r=8;t=3600'],
    'several shared limits: the binding one in X-RateLimit-*, all of them in RateLimit')

  t.strictSame([(await get(app, '/g1', 'a')).statusCode, (await get(app, '/g2', 'b')).statusCode], [200, 200])
  const group = await get(app, '/g1', 'c')
  t.strictSame([group.statusCode, group.headers['ratelimit-policy']], [429, '"reports-shared";q=2;qu="requests";w=60'], 'a group\'s routes share one shared budget, named <group>-shared')

  t.equal((await get(app, '/p1', 'a')).statusCode, 200)
  const plugin = await get(app, '/p2', 'b')
  t.strictSame([plugin.statusCode, plugin.headers['ratelimit-policy']], [429, '"everyone";q=1;qu="requests";w=60'], 'the plugin\'s shared budget is one for all its routes, with the name given')
  t.equal((await get(app, '/none', 'b')).statusCode, 200, 'shared: false turns the plugin\'s off for a route')
})
