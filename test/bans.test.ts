// `fastify.rateGuard.bans()`: the bans active now, longest first, read from the ban index (lib/ban-index.ts,
// lua/ban-index.lua), never by scanning the key space. The same answer from both stores; on Redis it costs a
// few commands whatever else the server holds, stops at its deadline, and a close during the call never
// leaves an error for nobody. The Cluster's index (one per slot) is tested in test/cluster.test.ts.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { hashIdentity, identityKeys } from '../lib/stores/key-names.js'
import { MemoryStore } from '../lib/stores/memory.js'
import { RedisStore } from '../lib/stores/redis.js'
import { client, commandCalls, getRedis, scanKeys, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { lend, watchEscapes } from './helpers/faults.js'
import { allowing } from './helpers/lag.js'
import { decideInput } from './helpers/stores.js'
import { matchList } from './helpers/match-list.js'

// Whatever escapes during this file (an unhandled rejection, an ioredis 'error' event nobody listens to)
// fails the last test.
const escaped = watchEscapes()

async function makeApp (t: Test, opts: RateGuardOptions): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { verifyApiKey: () => true, ...opts })
  app.get('/', async () => 'ok')
  app.get('/banning', { config: { rateLimit: { max: 1, ban: { threshold: 1, duration: '1 minute' } } } }, async () => 'ok')
  await app.ready()
  return app
}

/** Every command Redis has counted since it started. */
async function allCalls (redis: Redis): Promise<number> {
  const stats = String(await redis.info('commandstats'))
  return [...stats.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)].reduce((sum, [, n]) => sum + Number(n), 0)
}

/** `n` keys nobody banned (with a TTL), written by Redis itself in one call. */
async function fill (redis: Redis, prefix: string, n: number): Promise<void> {
  await redis.eval("for i = 1, tonumber(ARGV[1]) do redis.call('SET', ARGV[2] .. i, '1', 'PX', 600000) end", 0, n, prefix)
}

const stores = async (t: Test): Promise<Array<[string, RateGuardOptions]>> => [
  ['memory', {}],
  ['redis', { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000 }]
]

t.test('both stores: the longest bans first, bounded by limit, each with its time left and shadow: false', async t => {
  for (const [where, store] of await stores(t)) {
    const app = await makeApp(t, store)
    // Banned shortest first: a store that lists the first it finds, then sorts, lists the wrong ones.
    for (let i = 1; i <= 5; i++) await app.rateGuard.ban(`apikey:c${i}`, i * 120_000)
    for (let i = 0; i < 2; i++) await app.inject({ url: '/banning', headers: { 'x-api-key': 'earned' } })
    const two = await app.rateGuard.bans({ limit: 2 })
    t.strictSame(two.map(b => b.keyHash), [hashIdentity('apikey:c5'), hashIdentity('apikey:c4')], `${where}: the two longest`)
    const all = await app.rateGuard.bans()
    t.strictSame(all.map(b => b.keyHash), [5, 4, 3, 2, 1].map(i => hashIdentity(`apikey:c${i}`)).concat(hashIdentity('apikey:earned')), `${where}: all, longest first, the earned one (1 minute) last`)
    t.ok(all[0]!.retryMs > 10 * 60_000 - 5000 && all[0]!.retryMs <= 10 * 60_000, `${where}: with the time left`)
    t.ok(all.every(b => b.shadow === false), `${where}: none is a shadow ban`)
    // Re-banned shorter: the index follows.
    await app.rateGuard.ban('apikey:c5', 1000)
    t.equal((await app.rateGuard.bans({ limit: 1 }))[0]!.keyHash, hashIdentity('apikey:c4'), `${where}: a ban made shorter moves down`)
    await app.rateGuard.unban('apikey:c4')
    await app.rateGuard.unban({ keyHash: hashIdentity('apikey:earned') })
    t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash), [3, 2, 1, 5].map(i => hashIdentity(`apikey:c${i}`)), `${where}: unbanned ones leave the list`)
    await app.rateGuard.reset('apikey:c3')
    t.equal((await app.rateGuard.bans()).length, 4, `${where}: reset leaves a ban (and its place in the index)`)
  }
})

t.test('redis: bans() reads the index, never the key space: no SCAN, a few commands among 200,000 other keys', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url)
  await fill(redis, 'other:', 200_000)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: server.url, nameSpace, timeout: 3000 })
  await app.rateGuard.ban('apikey:a', 30_000)
  await app.rateGuard.ban('apikey:b', 120_000)
  for (let i = 0; i < 2; i++) await app.inject({ url: '/banning', headers: { 'x-api-key': 'earned' } })

  const scans = await commandCalls(redis, 'scan')
  const before = await allCalls(redis)
  const listed = await app.rateGuard.bans({ limit: 50 })
  const after = await allCalls(redis)
  t.strictSame(listed.map(b => b.keyHash), ['apikey:b', 'apikey:earned', 'apikey:a'].map(hashIdentity), 'b (2 min), earned (1 min), a (30 s)')
  t.equal(await commandCalls(redis, 'scan'), scans, 'no SCAN')
  // The INFO that counted `before` is itself counted once: two commands for bans() (TIME, ZREVRANGE).
  t.ok(after - before - 1 <= 2, `${after - before - 1} commands`)

  const keys = await scanKeys(redis, nameSpace)
  const ttls = await Promise.all(keys.map(async key => await redis.pttl(key)))
  t.same(ttls.filter(ttl => ttl <= 0), [], 'every key, the index too, keeps a TTL')
  const index = await redis.pttl(`${nameSpace}bans`)
  t.ok(index >= 110_000 && index <= 120_000, `the index lives as long as its longest ban: ${index} ms`)
})

t.test('redis: many bans, bounded by limit; entries that are no ban (ended, foreign) left out; a bad index is an error', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: url, nameSpace, timeout: 3000 })
  for (let from = 0; from < 1500; from += 300) {
    await Promise.all(Array.from({ length: 300 }, async (_, i) => { await app.rateGuard.ban(`apikey:flood-${from + i}`, 60_000 + from + i) }))
  }
  t.strictSame((await app.rateGuard.bans({ limit: 5 })).map(b => b.keyHash), [1499, 1498, 1497, 1496, 1495].map(i => hashIdentity(`apikey:flood-${i}`)), 'the five longest')
  t.equal((await app.rateGuard.bans({ limit: 10_000 })).length, 1500, 'and all when asked for as many')

  const index = `${nameSpace}bans`
  await redis.zadd(index, '+inf', 'foreign', 1, `${nameSpace}{${hashIdentity('apikey:ended')}}:banned`)
  t.equal((await app.rateGuard.bans({ limit: 10_000 })).length, 1500, 'an entry scored +inf and one long ended are not listed')
  await redis.del(index)
  await redis.set(index, 'not a sorted set', 'PX', 60_000)
  await t.rejects(app.rateGuard.bans(), /WRONGTYPE/, 'Redis\'s error, as it is')
})

t.test('redis: a ban entered trims the ended ones; an unban takes its entry out; a longer ban lengthens the index\'s TTL', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const nameSpace = uniquePrefix()
  const index = `${nameSpace}bans`
  const app = await makeApp(t, { redis: url, nameSpace, timeout: 3000 })
  const banned = (key: string): string => identityKeys(nameSpace, 'all', key).banned
  await app.rateGuard.ban('apikey:brief', 50)
  await new Promise(resolve => setTimeout(resolve, 100))
  for (let i = 0; i < 2; i++) await app.inject({ url: '/banning', headers: { 'x-api-key': 'earned' } })
  t.strictSame(await redis.zrange(index, '0', '-1'), [banned('apikey:earned')], 'the ended ban was trimmed when the decision entered its own')
  const ttl = await redis.pttl(index)
  t.ok(ttl > 55_000 && ttl <= 60_000, `the index lives as long as the ban: ${ttl} ms`)
  await app.rateGuard.ban('apikey:short', 1000)
  t.ok(await redis.pttl(index) > 55_000, 'a shorter ban leaves the TTL')
  await app.rateGuard.ban('apikey:long', 600_000)
  t.ok(await redis.pttl(index) > 595_000, 'a longer one lengthens it')
  await app.rateGuard.unban('apikey:long')
  await app.rateGuard.unban('apikey:earned')
  t.strictSame(await redis.zrange(index, '0', '-1'), [banned('apikey:short')], 'unbanned: out of the index')
})

t.test('a shadow ban (a key ending :shadow:banned) is listed with shadow: true, on both stores', async t => {
  const keys = identityKeys(uniquePrefix(), 'all', 'apikey:watched')
  const shadowKeys = { ...keys, banned: keys.banned.replace(/:banned$/, ':shadow:banned') }
  const input = decideInput({ keys: shadowKeys, max: 1, windowMs: 60_000, banThreshold: 1, banMs: 60_000 })
  const memory = new MemoryStore({ cache: 100 })
  t.teardown(() => memory.close())
  for (let i = 0; i < 2; i++) memory.decide(input)
  t.strictSame((await memory.bans(keys.banned.slice(0, keys.banned.indexOf('{')), 10)).map(b => b.key), [shadowKeys.banned], 'memory: the shadow ban\'s key')

  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: url, nameSpace, timeout: 3000 })
  const store = new RedisStore(client(t, url), false)
  const onRedis = identityKeys(nameSpace, 'all', 'apikey:watched')
  for (let i = 0; i < 2; i++) await store.decide({ ...input, keys: { ...onRedis, banned: onRedis.banned.replace(/:banned$/, ':shadow:banned') } })
  await app.rateGuard.ban('apikey:enforced', 30_000)
  matchList(t, await app.rateGuard.bans(), [{ keyHash: hashIdentity('apikey:watched'), shadow: true }, { keyHash: hashIdentity('apikey:enforced'), shadow: false }], 'redis: each marked')
})

t.test('redis: a ban from before the index (no entry) is not listed; it is still enforced until it ends', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const app = await makeApp(t, { redis: url, nameSpace, timeout: 3000 })
  await client(t, url).set(identityKeys(nameSpace, 'all', 'apikey:old').banned, '1', 'PX', 60_000)
  t.strictSame(await app.rateGuard.bans(), [], 'not listed')
  t.equal((await app.rateGuard.peek('apikey:old')).status, 'banned', 'still banned')
  await app.rateGuard.ban('apikey:old', 120_000)
  t.strictSame((await app.rateGuard.bans()).map(b => b.keyHash), [hashIdentity('apikey:old')], 'listed once banned again')
})

t.test('redis: a close while bans() is under way never leaves an error for nobody', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url)
  await fill(redis, 'other:', 100_000)
  const app = Fastify()
  await app.register(rateGuard, { redis: server.url, nameSpace: uniquePrefix(), timeout: 3000 })
  await app.ready()
  await app.rateGuard.ban('apikey:a', 60_000)
  const listing = app.rateGuard.bans({ limit: 50 }).then(bans => bans.map(b => b.keyHash), (err: { code?: string }) => err.code)
  await new Promise(resolve => setTimeout(resolve, 20))
  await app.close()
  const outcome = await listing
  t.ok(Array.isArray(outcome) ? outcome.length <= 1 : outcome === 'FST_RATE_GUARD_CLOSED', `resolved with what was read, or rejected with a coded error: ${JSON.stringify(outcome)}`)
  t.strictSame(await app.rateGuard.bans().catch((err: { code?: string }) => err.code), 'FST_RATE_GUARD_CLOSED', 'after the close: the coded error')
  // Whatever the client was still doing has had its turn to fail.
  await new Promise(resolve => setTimeout(resolve, 500))
  t.strictSame(escaped, { unhandled: [], unlistened: [] }, 'nothing escaped')
})

t.test('redis: bans() stops at its deadline', async t => {
  const server = await startRedisServer(t)
  // A lent client without a commandTimeout of its own: the deadline is the operator call's.
  const app = await makeApp(t, { redis: lend(t, server.url), nameSpace: uniquePrefix(), timeout: 100 })
  await app.rateGuard.ban('apikey:a', 60_000)
  server.freeze()
  t.teardown(() => server.thaw())
  const started = performance.now()
  await t.rejects(app.rateGuard.bans(), { code: 'FST_RATE_GUARD_DEADLINE' })
  const took = performance.now() - started
  const bound = allowing(1000, started, started + took)
  t.ok(took >= 1000 - 1 && took <= bound, `rejected after ${Math.round(took)} ms: the operator calls' deadline (1 s; bound ${Math.round(bound)}, with the lag meanwhile)`)
  server.thaw()
})

t.test('nothing escaped during this file', async t => {
  t.strictSame(escaped, { unhandled: [], unlistened: [] })
})
