// Bans held in process (lib/bans.ts): a client Redis reported banned is answered 403 without a round trip
// until its ban ends; an unban on any instance reaches every instance through Redis pub/sub; an instance
// that cannot hear unbans (no subscription yet, a lost connection, an ACL without channels) asks Redis.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import { BanCache, MAX_CACHED_BAN, unbanChannel } from '../lib/bans.js'
import rateGuard from '../lib/index.js'
import { client, getRedis, ready, startRedisServer, uniquePrefix } from './helpers/redis.js'

const ME = 'ip:127.0.0.1'

/** Polls the server until `check` holds: a server-side change that no client event reports. */
async function until (check: () => Promise<boolean>, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

async function scriptCalls (redis: Redis): Promise<number> {
  const stats = String(await redis.info('commandstats'))
  return [...stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)].reduce((sum, [, calls]) => sum + Number(calls), 0)
}

async function makeApp (t: Test, url: string, nameSpace: string): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace, max: 1, timeWindow: '1 minute', ban: { threshold: 1, duration: '1 minute' }, timeout: 3000 })
  app.get('/', async () => 'ok')
  await app.ready()
  return app
}

async function subscribed (observer: Redis, nameSpace: string, count: number): Promise<void> {
  await until(async () => Number(((await observer.pubsub('NUMSUB', unbanChannel(nameSpace))) as [string, number])[1]) === count, `${count} unban subscriptions`)
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
  let status = 403
  const end = Date.now() + 3000
  while (status === 403 && Date.now() < end) status = (await b.inject('/')).statusCode
  t.equal(status, 200, 'b: allowed once the unban reached it')
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
  let status = 403
  const end = Date.now() + 3000
  while (status === 403 && Date.now() < end) status = (await app.inject('/')).statusCode
  t.equal(status, 200, 'Redis was asked again, and said allowed')
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
  t.match(warnings, [/could not subscribe to unbans/])
  t.strictSame([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403])
  const before = await scriptCalls(admin)
  t.equal((await app.inject('/')).statusCode, 403)
  t.equal(await scriptCalls(admin) - before, 1, 'asked of Redis')
})

t.test('BanCache: bounded, capped, and empty while not listening', async t => {
  let now = 0
  const cache = new BanCache(2, () => now)
  cache.add('a', 1000)
  t.equal(cache.remaining('a'), 0, 'not listening: nothing held')
  cache.listening(true)
  cache.add('a', 1000)
  cache.add('b', 10 * MAX_CACHED_BAN)
  t.equal(cache.remaining('a'), 1000)
  t.equal(cache.remaining('b'), MAX_CACHED_BAN, 'a long ban is held at most MAX_CACHED_BAN, then asked of Redis again')
  cache.add('c', 500)
  t.equal(cache.remaining('a'), 0, 'full: the oldest went')
  t.equal(cache.remaining('c'), 500)
  now = 600
  cache.add('d', 100)
  t.strictSame([cache.remaining('b'), cache.remaining('c'), cache.remaining('d')], [MAX_CACHED_BAN - 600, 0, 100], 'full: the ended ban went first')
  now = 700
  t.equal(cache.remaining('d'), 0, 'ended at its expiry')
  cache.delete('b')
  t.equal(cache.remaining('b'), 0, 'an unban')
  cache.add('e', 100)
  cache.listening(false)
  cache.listening(true)
  t.equal(cache.remaining('e'), 0, 'a lost subscription forgets everything')
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
  t.equal(Number(((await observer.pubsub('NUMSUB', unbanChannel(nameSpace))) as [string, number])[1]), 0, 'no subscription made')

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
