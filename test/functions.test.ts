// The scripts as a FUNCTION library (lib/stores/functions.ts), on real servers: decisions made with FCALL once
// it is loaded, exact; FUNCTION FLUSH and a restart that lost the data under traffic fail no decision; a server
// that refuses FUNCTION keeps EVALSHA; two versions side by side; every master of a Cluster holds it; errors
// name the lua file's line as EVALSHA's do.
import Fastify from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { Cluster } from 'ioredis'
import type { Redis } from 'ioredis'
import { callsFunctions, functionLines, libraryOf, loadLibrary } from '../lib/stores/functions.js'
import { LIBRARY, SCRIPTS } from '../lib/stores/scripts.js'
import { RedisStore } from '../lib/stores/redis.js'
import type { Decision, DecideInput } from '../lib/stores/store.js'
import { client, commandCalls, ready, startRedisServer, uniquePrefix } from './helpers/redis.js'
import { clusterReady, startCluster } from './helpers/cluster.js'
import { inputOf } from './helpers/cluster-batches.js'
import { eachServer, startServer } from './helpers/servers.js'

t.setTimeout(120_000)

/** A store calling functions on a client of `url`, the library loaded. */
async function functionStore (t: Test, url: string): Promise<{ store: RedisStore, redis: Redis, nameSpace: string }> {
  const redis = client(t, url, { maxRetriesPerRequest: 0, enableOfflineQueue: false })
  await ready(redis)
  const store = new RedisStore(redis, false)
  await store.loadFunctions()
  return { store, redis, nameSpace: uniquePrefix() }
}

/** `n` requests of `identity`, max `max`, in one call: the allowed count. */
async function allowed (store: RedisStore, inputs: DecideInput[]): Promise<number> {
  const decisions = await store.decideMany(inputs, 'sliding-log')
  for (const decision of decisions) if (decision instanceof Error) throw decision
  return (decisions as Decision[]).filter(d => d.status === 'allowed').length
}

t.test('the library: one function per script, named by its command and version; a shebang becomes a flag; lines map back to the script\'s', async t => {
  t.match(LIBRARY.name, /^rateguard_[0-9a-f]{12}$/)
  t.ok(LIBRARY.code.startsWith(`#!lua name=${LIBRARY.name}\n`), 'the library names itself')
  const script = SCRIPTS['sliding-log']
  const first = LIBRARY.first.get(script.command)!
  t.equal(LIBRARY.code.split('\n')[first - 1], script.lua.split('\n')[0]!.startsWith('--') ? '' : script.lua.split('\n')[0], 'its text starts at its recorded line')
  t.equal(functionLines(LIBRARY, script.command, `WRONGTYPE x, on @user_function:${first + 9}.`), 'WRONGTYPE x, on @user_script:10.', 'a library line is named as the script\'s')
  t.equal(functionLines(LIBRARY, 'notOurs', 'ERR user_function:5: x'), 'ERR user_function:5: x', 'another function\'s lines are left as they are')
  const flagged = libraryOf([{ command: 'a', lua: '#!lua flags=allow-cross-slot-keys\nreturn 1' }, { command: 'b', lua: '-- a comment\nreturn 2' }])
  t.match(flagged.code, new RegExp(`function_name='${flagged.functions.get('a')!}', flags=\\{'allow-cross-slot-keys'\\}`))
  t.match(flagged.code, new RegExp(`function_name='${flagged.functions.get('b')!}', flags=\\{\\}`))
  t.equal(flagged.functions.get('a'), `a_${flagged.name.slice('rateguard_'.length)}`, 'a function is named by its command and the library\'s version')
  t.notMatch(flagged.code, /a comment/, 'comment lines are left empty')
  t.not(flagged.name, libraryOf([{ command: 'a', lua: 'return 3' }]).name, 'another text, another library')
})

eachServer(t, 'decisions by FCALL, exact; FUNCTION FLUSH and a restart that lost the data fail none', async (t, server) => {
  const proc = await startServer(t, server)
  const { store, redis, nameSpace } = await functionStore(t, proc.url)
  t.ok(callsFunctions(redis), 'the library is loaded')
  t.match(await redis.call('FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY.name), [[/./, LIBRARY.name, /./, /./, /./, /./]], 'FUNCTION LIST holds it')
  const before = await commandCalls(redis, 'evalsha')
  const inputs = Array.from({ length: 8 }, () => inputOf(nameSpace, 'one', 5))
  t.equal(await allowed(store, inputs), 5, 'exactly max allowed')
  t.ok(await commandCalls(redis, 'fcall') > 0, 'with FCALL')
  t.equal(await commandCalls(redis, 'evalsha'), before, 'and no EVALSHA')

  // Flushed under traffic: the call that meets it loads the library again and goes by EVALSHA; none fails.
  const traffic = Array.from({ length: 20 }, async (_, i) => await allowed(store, [inputOf(nameSpace, `flush-${i}`, 3), inputOf(nameSpace, `flush-${i}`, 3)]))
  await redis.call('FUNCTION', 'FLUSH')
  t.same(await Promise.all(traffic), traffic.map(() => 2), 'every call decided, exactly')
  t.equal(await allowed(store, [inputOf(nameSpace, 'after-flush', 1), inputOf(nameSpace, 'after-flush', 1)]), 1, 'decided after the flush')
  t.ok(callsFunctions(redis), 'loaded again')
  t.match(await redis.call('FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY.name), [[/./, LIBRARY.name, /./, /./, /./, /./]], 'FUNCTION LIST holds it again')

  // Restarted without its data: the first call after the reconnect reloads it, and fails nothing.
  await proc.restart()
  await new Promise(resolve => redis.once('ready', resolve))
  t.equal(await allowed(store, [inputOf(nameSpace, 'restarted', 2), inputOf(nameSpace, 'restarted', 2), inputOf(nameSpace, 'restarted', 2)]), 2, 'decided, exactly, after the restart')
  t.ok(callsFunctions(redis), 'by FCALL again')
  t.equal(await allowed(store, [inputOf(nameSpace, 'restarted-2', 1)]), 1)
})

t.test('a server that refuses FUNCTION keeps EVALSHA, and decides right', async t => {
  const proc = await startRedisServer(t, ['--rename-command', 'FUNCTION', '""'])
  const { store, redis, nameSpace } = await functionStore(t, proc.url)
  t.notOk(callsFunctions(redis), 'refused: EVALSHA for good')
  t.equal(await allowed(store, Array.from({ length: 4 }, () => inputOf(nameSpace, 'x', 3))), 3, 'exactly max allowed')
  t.ok(await commandCalls(redis, 'evalsha') + await commandCalls(redis, 'eval') > 0, 'by EVALSHA')
  await loadLibrary(redis, LIBRARY)
  t.notOk(callsFunctions(redis), 'a refusal is not asked again')
})

t.test('the plugin loads the library at registration: its first decision goes by FCALL', async t => {
  const proc = await startRedisServer(t)
  const observer = await ready(client(t, proc.url))
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: proc.url, nameSpace: uniquePrefix(), max: 1, timeWindow: '1 minute' })
  app.get('/', async () => 'ok')
  await app.ready()
  await observer.config('RESETSTAT')
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429], 'decided exactly')
  t.equal(await commandCalls(observer, 'fcall'), 2, 'each by FCALL')
  t.equal(await commandCalls(observer, 'evalsha') + await commandCalls(observer, 'eval'), 0, 'none by EVALSHA')
})

t.test('functions: false: every call by EVALSHA, and no library loaded', async t => {
  const proc = await startRedisServer(t)
  const redis = await ready(client(t, proc.url))
  const store = new RedisStore(redis, false, '', { functions: false })
  await store.loadFunctions()
  t.equal(await allowed(store, [inputOf(uniquePrefix(), 'a', 1), inputOf(uniquePrefix(), 'b', 1)]), 2, 'decided')
  t.same(await redis.call('FUNCTION', 'LIST'), [], 'nothing loaded')
  t.equal(await commandCalls(redis, 'fcall'), 0, 'no FCALL')
  t.ok(await commandCalls(redis, 'evalsha') + await commandCalls(redis, 'eval') > 0, 'by EVALSHA')
})

t.test('before the library is loaded calls go by EVALSHA and start a load; a lost connection leaves EVALSHA and loads later', async t => {
  const proc = await startRedisServer(t)
  const redis = client(t, proc.url, { maxRetriesPerRequest: 0, enableOfflineQueue: false })
  await ready(redis)
  const store = new RedisStore(redis, false)
  const nameSpace = uniquePrefix()
  t.equal(await allowed(store, [inputOf(nameSpace, 'a', 1), inputOf(nameSpace, 'a', 1)]), 1, 'decided by EVALSHA')
  t.ok(await commandCalls(redis, 'evalsha') + await commandCalls(redis, 'eval') > 0)
  await loadLibrary(redis, LIBRARY)
  t.ok(callsFunctions(redis), 'the call started the load')

  const down = client(t, proc.url, { maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true })
  await loadLibrary(down, LIBRARY)
  t.notOk(callsFunctions(down), 'not connected: not loaded, not refused')
  // The failed command made the lazy client connect: once it is ready, the next load takes.
  await ready(down)
  await loadLibrary(down, LIBRARY)
  t.ok(callsFunctions(down), 'loaded once it could be')
})

t.test('two versions side by side: each calls its own functions, neither replaces the other', async t => {
  const proc = await startRedisServer(t)
  const { store, redis, nameSpace } = await functionStore(t, proc.url)
  // Another version: one script changed, one the same as ours (a function of the same command in both).
  const shared = SCRIPTS['fixed-window']
  const other = libraryOf([{ command: 'rateGuardOtherVersion_0', lua: 'return 7' }, shared])
  await redis.call('FUNCTION', 'LOAD', other.code)
  const names = (await redis.call('FUNCTION', 'LIST') as unknown[][]).map(library => library[1])
  t.same(names.sort(), [LIBRARY.name, other.name].sort(), 'both libraries loaded, though they share a script')
  t.equal(await redis.fcall(other.functions.get('rateGuardOtherVersion_0')!, 0), 7, 'the other version\'s function runs')
  t.not(other.functions.get(shared.command), LIBRARY.functions.get(shared.command), 'a shared script is a function of each version\'s own name')
  t.equal(await allowed(store, [inputOf(nameSpace, 'v', 1), inputOf(nameSpace, 'v', 1)]), 1, 'and ours')
})

t.test('a whole call\'s error and one request\'s, by FCALL, name the lua file\'s line', async t => {
  const proc = await startRedisServer(t)
  const { store, redis, nameSpace } = await functionStore(t, proc.url)
  const input = inputOf(nameSpace, 'foreign', 3)
  await redis.set(input.keys.log, 'not a sorted set')
  const [alone] = await store.decideMany([input, inputOf(nameSpace, 'fine', 3)], 'sliding-log')
  t.match((alone as Error).message, /^WRONGTYPE .* lua\/[\w-]+\.lua:\d+ \(@?user_script:\d+\)/, `one request's error: ${(alone as Error).message}`)
  const whole = await store.settle({ keys: input.keys, limits: input.limits, algorithm: 'sliding-log', member: 'm', at: Date.now(), final: 0 }).then(() => null, (err: unknown) => err as Error)
  t.match(whole?.message, /lua\/[\w-]+\.lua:\d+ \(@?user_script:\d+\)/, `a whole call's error: ${whole?.message}`)
  t.ok(await commandCalls(redis, 'fcall') > 0, 'both by FCALL')
})

t.test('a Cluster: the library loaded on every master; decisions across slots by FCALL', async t => {
  const cluster = await startCluster(t)
  const lazy = new Cluster(cluster.urls.slice(0, 1).map(url => ({ host: '127.0.0.1', port: Number(new URL(url).port) })), { lazyConnect: true, enableOfflineQueue: false })
  lazy.on('error', () => {})
  await loadLibrary(lazy, LIBRARY)
  t.notOk(callsFunctions(lazy), 'a client that knows no master yet loads nothing')
  lazy.disconnect()
  const client = new Cluster(cluster.urls.map(url => ({ host: '127.0.0.1', port: Number(new URL(url).port) })), { enableOfflineQueue: false, scaleReads: 'master' })
  client.on('error', () => {})
  t.teardown(() => { client.disconnect() })
  await clusterReady(client)
  const store = new RedisStore(client, false)
  await loadLibrary(client, LIBRARY)
  t.ok(callsFunctions(client))
  const masters = await cluster.masters()
  for (const master of masters) t.match(await master.redis.call('FUNCTION', 'LIST', 'LIBRARYNAME', LIBRARY.name), [[/./, LIBRARY.name, /./, /./, /./, /./]], `master ${master.port} holds it`)
  const nameSpace = uniquePrefix()
  const inputs = Array.from({ length: 60 }, (_, i) => inputOf(nameSpace, `c-${i % 20}`, 2))
  const decisions = await store.decideMany(inputs, 'sliding-log')
  t.same(decisions.filter(d => d instanceof Error).map(String), [], 'none failed')
  t.equal((decisions as Decision[]).filter(d => d.status === 'allowed').length, 40, 'exactly max allowed per identity')
  const fcalls = await Promise.all(masters.map(async master => await commandCalls(master.redis, 'fcall')))
  t.ok(fcalls.every(n => n > 0), `each master ran FCALL (${fcalls.join(', ')})`)
})
