// Lifecycle: who owns the Redis client, what registration warns about, and that registration never hangs.
// Where a test counts requests against a live Redis, `timeout: 2000` keeps a busy machine from tripping
// the decision deadline: these tests are about ownership and start-up, fail-modes.test.ts is about the deadline.
// What is timed is held to its deadline (or a control timed in the same run) plus the lag measured
// meanwhile (lag.ts).
import { performance } from 'node:perf_hooks'
import fastifyRedis from '@fastify/redis'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { DEFAULTS } from '../lib/options/table.js'
import { SCRIPTS } from '../lib/stores/scripts.js'
import { client, freePort, getRedis, ready, startRedisServer, uniquePrefix, until } from './helpers/redis.js'
import { allowing, inTime } from './helpers/lag.js'

/** The name the sliding log's script is defined under on a client. */
const SLIDING_LOG_COMMAND = SCRIPTS['sliding-log'].command

interface LogLine { level: number, msg: string, [field: string]: unknown }

const WARN = 40
/** How long registration waits for Redis before it starts degraded (lib/index.ts). */
const READY_WAIT = 2000

/** A Fastify app whose log lines are kept, closed at teardown. */
function app (t: Test): { app: FastifyInstance, logs: LogLine[], warnings: () => LogLine[] } {
  const logs: LogLine[] = []
  const made = Fastify({
    logger: { level: 'debug', stream: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } } }
  })
  t.teardown(async () => { await made.close() })
  return { app: made, logs, warnings: () => logs.filter(line => line.level === WARN) }
}

/** Ids of the connections a server has, but the observer's own. */
async function connections (observer: Redis): Promise<string[]> {
  const list = String(await observer.client('LIST'))
  const self = String(await observer.client('ID'))
  return list.split('\n').filter(Boolean).map(line => /\bid=(\d+)/.exec(line)![1]!).filter(id => id !== self)
}

t.test('an owned client (redis: url) is quit on app.close() and stays closed', async t => {
  const server = await startRedisServer(t)
  const observer = await ready(client(t, server.url))
  const { app: server1 } = app(t)
  await server1.register(rateGuard, { redis: server.url, nameSpace: uniquePrefix(), max: 5, timeout: 2000 })
  server1.get('/', async () => 'ok')
  t.equal((await server1.inject('/')).headers['x-ratelimit-remaining'], '4', 'the owned client decides')

  // One connection decides; the other, made by the plugin too, listens for unbans.
  await until(async () => (await connections(observer)).length === 2, 'the unban subscription to connect')
  t.equal((await connections(observer)).length, 2, 'the plugin opened two connections')
  await server1.close()
  await until(async () => (await connections(observer)).length === 0, 'the plugin connection to close')
  // ioredis would reconnect within 100 ms if the connection had merely dropped.
  await new Promise(resolve => setTimeout(resolve, 300))
  t.same(await connections(observer), [], 'no reconnection after close')
})

t.test('app.close() returns promptly when the owned client has lost its Redis', async t => {
  const server = await startRedisServer(t)
  const { app: server1 } = app(t)
  await server1.register(rateGuard, { redis: server.url, nameSpace: uniquePrefix(), failMode: 'open' })
  // The control: the same close, of an app whose Redis is up (a QUIT answered), in the same run.
  const { app: healthy } = app(t)
  await healthy.register(rateGuard, { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), failMode: 'open' })
  await healthy.ready()
  let started = performance.now()
  await healthy.close()
  const control = performance.now() - started
  await server.kill()
  started = performance.now()
  await server1.close()
  const took = performance.now() - started
  const bound = allowing(control, started, started + took)
  t.ok(took <= bound, `closed in ${Math.round(took)} ms (a healthy app's close took ${Math.round(control)} ms; bound ${Math.round(bound)})`)
})

t.test('a lent client is never closed by the plugin', async t => {
  const { url } = await getRedis(t)
  const lent = await ready(client(t, url, { enableOfflineQueue: false }))
  const prefix = uniquePrefix()
  const { app: server1, warnings } = app(t)
  await server1.register(rateGuard, { redis: lent, nameSpace: prefix, max: 2, timeout: 2000 })
  server1.get('/', async () => 'ok')
  t.same((await Promise.all([1, 2, 3].map(async () => (await server1.inject('/')).statusCode))).sort(), [200, 200, 429])
  t.equal(await lent.zcard(identityKeys(prefix, 'all', '127.0.0.1').log), 2, 'the lent client is the one used')
  t.same(warnings(), [], 'a lent client with enableOfflineQueue: false draws no warning')

  await server1.close()
  t.equal(lent.status, 'ready', 'still ready after app.close()')
  t.equal(await lent.ping(), 'PONG', 'still answers')
})

t.test('no Redis: in-process limits and exactly one warning that they are per process', async t => {
  const { app: server1, warnings } = app(t)
  await server1.register(rateGuard, { max: 2, timeWindow: '1 minute' })
  server1.get('/', async () => 'ok')
  await server1.ready()
  const warned = warnings()
  t.equal(warned.length, 1, 'one warning')
  t.match(warned[0]?.msg, /no Redis configured.*this process only/)

  const codes = []
  for (let i = 0; i < 3; i++) codes.push((await server1.inject('/')).statusCode)
  t.same(codes, [200, 200, 429], 'limits hold in process')
  t.equal(warnings().length, 1, 'and requests add no warning')
})

t.test('@fastify/redis: fastify.redis is not taken unasked (as @fastify/rate-limit); given as redis, it is used and never closed', async t => {
  const { url } = await getRedis(t)
  const cache = await ready(client(t, url, { enableOfflineQueue: false }))
  const { app: unasked, warnings: said } = app(t)
  await unasked.register(fastifyRedis, { client: cache })
  await unasked.register(rateGuard, { max: 1 })
  unasked.get('/', async () => 'ok')
  t.same([(await unasked.inject('/')).statusCode, (await unasked.inject('/')).statusCode], [200, 429])
  t.equal(typeof (cache as unknown as Record<string, unknown>)[SLIDING_LOG_COMMAND], 'undefined', 'no script on the app\'s cache: counted in process')
  t.match(said()[0]?.msg, /no Redis configured.*give redis: fastify\.redis/, 'the warning says how to count in it')

  const lent = await ready(client(t, url, { enableOfflineQueue: false }))
  const prefix = uniquePrefix()
  const { app: server1, warnings } = app(t)
  await server1.register(fastifyRedis, { client: lent })
  await server1.register(rateGuard, { redis: server1.redis, nameSpace: prefix, max: 1, timeout: 2000 })
  server1.get('/', async () => 'ok')

  t.same([(await server1.inject('/')).statusCode, (await server1.inject('/')).statusCode], [200, 429])
  t.equal(typeof (lent as unknown as Record<string, unknown>)[SLIDING_LOG_COMMAND], 'function', 'the script is defined on fastify.redis')
  t.equal(await lent.zcard(identityKeys(prefix, 'all', '127.0.0.1').log), 1, 'the count lives in that Redis')
  t.notOk(warnings().some(line => /no Redis configured/.test(line.msg)), 'not in-process mode')

  await server1.close()
  t.equal(lent.status, 'ready', 'fastify.redis still ready after app.close()')
  t.equal(await lent.ping(), 'PONG')
})

t.test('a namespaced @fastify/redis (no client at fastify.redis itself) is not named in the warning', async t => {
  const { app: server1, warnings } = app(t)
  server1.decorate('redis', { cache: {} } as never)
  await server1.register(rateGuard, { max: 1 })
  server1.get('/', async () => 'ok')
  await server1.ready()
  t.match(warnings()[0]?.msg, /no Redis configured, so limits are kept in this process only: each instance of the app counts on its own$/, 'in process, and it says so')
  t.same([(await server1.inject('/')).statusCode, (await server1.inject('/')).statusCode], [200, 429])
})

t.test('a client mapping RESP3 replies to objects still has its eviction policy read', async t => {
  const server = await startRedisServer(t, ['--maxmemory-policy', 'allkeys-lru'])
  const lent = await ready(client(t, server.url, { enableOfflineQueue: false, protocol: 3, replyMapping: 'resp3' }))
  const { app: server1, warnings } = app(t)
  await server1.register(rateGuard, { redis: lent, nameSpace: uniquePrefix(), max: 1 })
  server1.get('/', async () => 'ok')
  await server1.ready()
  t.equal(warnings()[0]?.policy, 'allkeys-lru', 'the policy is read from a map reply')
  t.same([(await server1.inject('/')).statusCode, (await server1.inject('/')).statusCode], [200, 429], 'and limits hold')
})

t.test('startup with nothing listening on the port does not hang: failMode decides', async t => {
  for (const failMode of ['open', 'closed', 'local'] as const) {
    const url = `redis://127.0.0.1:${await freePort()}`
    const { app: server1, warnings } = app(t)
    const started = performance.now()
    await server1.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), failMode, max: 1, timeout: 100 })
    server1.get('/', async () => 'ok')
    await server1.ready()
    const took = performance.now() - started
    t.ok(inTime(READY_WAIT, { at: started, ms: took }), `${failMode}: ready in ${Math.round(took)} ms`)
    t.ok(warnings().some(line => /Redis is not ready/.test(line.msg) && line.failMode === failMode), `${failMode}: warned that it starts degraded`)

    const first = await server1.inject('/')
    const second = await server1.inject('/')
    if (failMode === 'open') {
      t.same([first.statusCode, second.statusCode], [200, 200])
      t.equal(first.headers['x-ratelimit-enforced'], 'false')
    } else if (failMode === 'closed') {
      t.same([first.statusCode, second.statusCode], [503, 503])
      t.equal(first.json().code, 'FST_RATE_GUARD_UNAVAILABLE')
    } else {
      t.same([first.statusCode, second.statusCode], [200, 429], 'the in-process twin limits')
    }
  }
})

t.test('startup against a frozen server is bounded too', async t => {
  const server = await startRedisServer(t)
  const lent = await ready(client(t, server.url, { enableOfflineQueue: false }))
  server.freeze()
  t.teardown(() => server.thaw())

  // An owned client connects (the kernel accepts) but never becomes ready.
  const owned = app(t)
  let started = performance.now()
  await owned.app.register(rateGuard, { redis: server.url, nameSpace: uniquePrefix(), failMode: 'closed' })
  owned.app.get('/', async () => 'ok')
  await owned.app.ready()
  let took = performance.now() - started
  t.ok(inTime(READY_WAIT, { at: started, ms: took }), `owned client: ready in ${Math.round(took)} ms (bound ${Math.round(allowing(READY_WAIT, started, started + took))})`)
  t.ok(owned.warnings().some(line => /Redis is not ready/.test(line.msg)), 'owned client: warned that it starts degraded')
  started = performance.now()
  t.equal((await owned.app.inject('/')).statusCode, 503, 'owned client: failMode closed answers')
  const answered = { at: started, ms: performance.now() - started }
  t.ok(inTime(DEFAULTS.timeout, answered), `within the deadline (${Math.round(answered.ms)} ms)`)

  // A lent client was ready before the freeze: the eviction-policy check must not wait forever.
  const borrowed = app(t)
  started = performance.now()
  await borrowed.app.register(rateGuard, { redis: lent, nameSpace: uniquePrefix(), failMode: 'open' })
  borrowed.app.get('/', async () => 'ok')
  await borrowed.app.ready()
  took = performance.now() - started
  t.ok(inTime(READY_WAIT, { at: started, ms: took }), `lent client: ready in ${Math.round(took)} ms (bound ${Math.round(allowing(READY_WAIT, started, started + took))})`)
  const res = await borrowed.app.inject('/')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['x-ratelimit-enforced'], 'false', 'lent client: failMode open answers unenforced')
})

t.test('a lent client that queues while disconnected draws exactly one warning', async t => {
  const { url } = await getRedis(t)
  for (const enableOfflineQueue of [true, undefined, false]) {
    const lent = await ready(client(t, url, enableOfflineQueue === undefined ? {} : { enableOfflineQueue }))
    const { app: server1, warnings } = app(t)
    await server1.register(rateGuard, { redis: lent, nameSpace: uniquePrefix() })
    await server1.ready()
    const queueing = warnings().filter(line => line.option === 'enableOfflineQueue' && /enableOfflineQueue: false/.test(line.msg))
    t.equal(queueing.length, enableOfflineQueue === false ? 0 : 1, `enableOfflineQueue: ${enableOfflineQueue}`)
    t.equal(warnings().length, queueing.length, 'and nothing else is warned about')
  }
})

t.test('an evicting maxmemory-policy draws exactly one warning naming it; noeviction none', async t => {
  for (const policy of ['volatile-lru', 'allkeys-lru', 'noeviction']) {
    const server = await startRedisServer(t, ['--maxmemory-policy', policy])
    for (const lend of [false, true]) {
      const redis = lend ? await ready(client(t, server.url, { enableOfflineQueue: false })) : server.url
      const { app: server1, warnings } = app(t)
      await server1.register(rateGuard, { redis, nameSpace: uniquePrefix() })
      await server1.ready()
      const warned = warnings()
      const how = `${policy}, ${lend ? 'lent' : 'owned'} client`
      if (policy === 'noeviction') {
        t.same(warned, [], `${how}: no warning`)
      } else {
        t.equal(warned.length, 1, `${how}: one warning`)
        t.equal(warned[0]?.policy, policy, `${how}: the warning names the policy`)
        t.match(warned[0]?.msg, /maxmemory-policy is not noeviction/)
      }
    }
  }
})

t.test('a Redis that forbids CONFIG (as managed ones do): no policy to judge, no warning, limits work', async t => {
  const server = await startRedisServer(t)
  const admin = await ready(client(t, server.url))
  await admin.acl('SETUSER', 'noconfig', 'on', '>pw', '~*', '&*', '+@all', '-config')
  const { app: server1, logs, warnings } = app(t)
  await server1.register(rateGuard, { redis: `redis://noconfig:pw@127.0.0.1:${server.port}`, nameSpace: uniquePrefix(), max: 1 })
  server1.get('/', async () => 'ok')
  await server1.ready()
  t.same(warnings(), [], 'no warning')
  t.ok(logs.some(line => line.level === 20 && /could not read maxmemory-policy/.test(line.msg)), 'the refusal is logged at debug level')
  t.same([(await server1.inject('/')).statusCode, (await server1.inject('/')).statusCode], [200, 429])
})

t.test('a foreign command under our name is refused; our own definition is shared', async t => {
  const { url } = await getRedis(t)

  await t.test('a foreign command with our name', async t => {
    const lent = await ready(client(t, url, { enableOfflineQueue: false }))
    lent.defineCommand(SLIDING_LOG_COMMAND, { numberOfKeys: 0, lua: 'return 42' })
    const { app: server1 } = app(t)
    await t.rejects(async () => { await server1.register(rateGuard, { redis: lent, nameSpace: uniquePrefix() }) }, {
      code: 'FST_RATE_GUARD_COMMAND_CONFLICT',
      message: new RegExp(SLIDING_LOG_COMMAND)
    })
    const foreign = (lent as unknown as Record<string, () => Promise<unknown>>)[SLIDING_LOG_COMMAND]!
    t.equal(await foreign.call(lent), 42, 'the foreign command is left as it was')
  })

  await t.test('two registrations on one client, in sibling contexts', async t => {
    const lent = await ready(client(t, url, { enableOfflineQueue: false }))
    const [a, b] = [uniquePrefix(), uniquePrefix()]
    const { app: server1 } = app(t)
    await server1.register(async child => {
      await child.register(rateGuard, { redis: lent, nameSpace: a, max: 1, timeout: 2000 })
      child.get('/a', async () => 'a')
    })
    await server1.register(async child => {
      await child.register(rateGuard, { redis: lent, nameSpace: b, max: 2, timeout: 2000 })
      child.get('/b', async () => 'b')
    })
    const codes = async (path: string, n: number): Promise<number[]> => {
      const out = []
      for (let i = 0; i < n; i++) out.push((await server1.inject(path)).statusCode)
      return out
    }
    t.same(await codes('/a', 2), [200, 429], 'the first registration limits its routes')
    t.same(await codes('/b', 3), [200, 200, 429], 'the second limits its own, on its own budget')
    t.equal(await lent.zcard(identityKeys(a, 'all', '127.0.0.1').log), 1)
    t.equal(await lent.zcard(identityKeys(b, 'all', '127.0.0.1').log), 2)
  })
})
