// Attack (or accident): a route in shadow mode with `shadow: { ban: true }` records the bans enforce would
// start. Those bans were written to the identity's one `banned` key, which every enforcing decision of the
// registration reads: six requests to a shadow route got the client 403 on every enforced route, for an hour.
// Defence: shadow decisions write only their own key family (`<ns>{hash}:shadow:…`: counts, strikes, bans,
// offences, over-limit waits, and a shared budget's count), held answers follow the keys, so nothing shadow
// mode writes is read by an enforcing decision, in Redis or in process. Shadow bans are still there to see:
// `peek` and `bans()` report them as shadow. Over real HTTP, on both stores.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { hashIdentity } from '../../lib/stores/key-names.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

const STORES = ['redis', 'memory'] as const
type Where = typeof STORES[number]

/** The client every request comes from, over loopback: the default key names it by its address. */
const CLIENT = '127.0.0.1'

async function storeOptions (t: Test, where: Where, nameSpace = uniquePrefix()): Promise<RateGuardOptions> {
  return where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace, timeout: 3000, failMode: 'closed' } : {}
}

/** The app listening on loopback, and a function that GETs a path from it: its status and Retry-After. */
async function listen (t: Test, app: FastifyInstance): Promise<(path: string) => Promise<[number, string | null]>> {
  t.teardown(() => app.close())
  const address = await app.listen({ host: '127.0.0.1', port: 0 })
  return async path => {
    const res = await fetch(`${address}${path}`)
    await res.arrayBuffer()
    return [res.status, res.headers.get('retry-after')]
  }
}

async function times<T> (n: number, fn: () => Promise<T>): Promise<T[]> {
  const out: T[] = []
  for (let i = 0; i < n; i++) out.push(await fn())
  return out
}

for (const where of STORES) {
  t.test(`${where}: a ban shadow mode records is never enforced, on any route, and is reported as shadow`, async t => {
    const app = Fastify()
    await app.register(rateGuard, { ...await storeOptions(t, where), max: 1000, timeWindow: '1 minute' })
    app.get('/items', async () => 'items')
    app.get('/search', {
      config: { rateLimit: { max: 5, timeWindow: '1 minute', mode: 'shadow', shadow: { ban: true }, ban: { threshold: 1, duration: '1 hour' } } }
    }, async () => 'search')
    const get = await listen(t, app)

    t.strictSame(await times(6, async () => await get('/search')), Array.from({ length: 6 }, () => [200, null]), 'shadow: every request goes on')
    t.strictSame(await times(10, async () => await get('/items')), Array.from({ length: 10 }, () => [200, null]), 'the enforced route: 10 of 10 through, no 403')
    t.strictSame(await get('/nope'), [404, null], 'an unmatched URL: the app\'s 404, not the shadow ban\'s 403')
    t.strictSame(await get('/search'), [200, null], 'the shadow route still lets it through')

    const enforced = await app.rateGuard.peek(CLIENT)
    t.match(enforced, { status: 'allowed', count: 10, shadow: false }, 'the enforced budget: allowed, its own count')
    t.ok(enforced.shadowBanMs > 3_500_000, `and the shadow ban beside it (${enforced.shadowBanMs} ms left)`)
    const shadowed = await app.rateGuard.peek(CLIENT, { route: 'GET /search' })
    t.match(shadowed, { status: 'banned', shadow: true }, 'the shadow budget: what it would answer, marked shadow')
    t.equal(shadowed.shadowBanMs, shadowed.retryMs)
    t.strictSame((await app.rateGuard.bans()).map(({ keyHash, shadow }) => ({ keyHash, shadow })), [{ keyHash: hashIdentity(CLIENT), shadow: true }], 'bans() lists it, as shadow')
    await app.rateGuard.unban({ keyHash: hashIdentity(CLIENT) })
    t.strictSame(await app.rateGuard.bans(), [], 'unban by its hash (the operator page\'s button) lifts it')
    t.match(await app.rateGuard.peek(CLIENT, { route: 'GET /search' }), { status: 'limited', shadowBanMs: 0 })
  })

  t.test(`${where}: a shadow route in an enforced route's group counts apart from it`, async t => {
    const app = Fastify()
    await app.register(rateGuard, { ...await storeOptions(t, where), max: 1000, timeWindow: '1 minute' })
    app.get('/a', { config: { rateLimit: { groupId: 'g', max: 3, timeWindow: '1 minute' } } }, async () => 'a')
    app.get('/b', { config: { rateLimit: { groupId: 'g', max: 3, timeWindow: '1 minute', mode: 'shadow' } } }, async () => 'b')
    const get = await listen(t, app)
    t.strictSame((await times(5, async () => await get('/b'))).map(([status]) => status), [200, 200, 200, 200, 200])
    t.strictSame((await times(4, async () => await get('/a'))).map(([status]) => status), [200, 200, 200, 429], 'the group\'s enforced route: its full 3')
    t.match(await app.rateGuard.peek(CLIENT, { groupId: 'g' }), { count: 3 })
  })

  t.test(`${where}: a shadow route's requests are not counted on a shared budget an enforced route counts on`, async t => {
    const app = Fastify()
    await app.register(rateGuard, { ...await storeOptions(t, where), max: 1000, timeWindow: '1 minute' })
    const shared = { max: 3, timeWindow: '1 minute' }
    app.get('/c', { config: { rateLimit: { groupId: 'h', max: 100, timeWindow: '1 minute', shared } } }, async () => 'c')
    app.get('/d', { config: { rateLimit: { groupId: 'h', max: 100, timeWindow: '1 minute', shared, mode: 'shadow' } } }, async () => 'd')
    const get = await listen(t, app)
    t.strictSame((await times(5, async () => await get('/d'))).map(([status]) => status), [200, 200, 200, 200, 200])
    t.strictSame((await times(4, async () => await get('/c'))).map(([status]) => status), [200, 200, 200, 429], 'the shared budget: its full 3 for the enforced route')
  })
}

t.test('redis: an instance in shadow mode beside one enforcing, on one Redis and nameSpace, takes nothing from it', async t => {
  const nameSpace = uniquePrefix()
  const options = { max: 3, timeWindow: '1 minute' }
  const trial = Fastify()
  await trial.register(rateGuard, { ...await storeOptions(t, 'redis', nameSpace), ...options, mode: 'shadow', shadow: { ban: true }, ban: { threshold: 1, duration: '1 hour' } })
  trial.get('/', async () => 'trial')
  const live = Fastify()
  await live.register(rateGuard, { ...await storeOptions(t, 'redis', nameSpace), ...options })
  live.get('/', async () => 'live')
  const [onTrial, onLive] = [await listen(t, trial), await listen(t, live)]
  t.strictSame((await times(6, async () => await onTrial('/'))).map(([status]) => status), [200, 200, 200, 200, 200, 200], 'shadow: counted, banned, let through')
  t.strictSame((await times(4, async () => await onLive('/'))).map(([status]) => status), [200, 200, 200, 429], 'the enforcing instance: its own 3, then 429, never 403')
  t.match(await live.rateGuard.peek(CLIENT), { status: 'limited', shadow: false })
  t.match(await trial.rateGuard.peek(CLIENT), { status: 'banned', shadow: true })
})
