// The test harness itself, against real redis-server processes: if these
// fail, every other Redis test would fail for the wrong reason.
import { once } from 'node:events'
import { createServer } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { containerEngineAnswers, loadTestcontainers, startContainerRedis } from './helpers/container.js'
import {
  client,
  freePort,
  getRedis,
  resolveRedis,
  startRedisServer,
  timeVariant,
  uniquePrefix,
  type Teardownable
} from './helpers/redis.js'

/** Set (or with undefined, unset) an env var for the rest of test `t`. */
function setEnv (t: Teardownable, name: string, value: string | undefined): void {
  const before = process.env[name]
  t.teardown(() => {
    if (before === undefined) delete process.env[name]
    else process.env[name] = before
  })
  if (value === undefined) delete process.env[name]
  else process.env[name] = value
}

function isGone (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return false
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH'
  }
}

t.test('getRedis: a shared Redis that answers PING', async (t) => {
  const first = await getRedis(t)
  const again = await getRedis(t)
  t.same(again, first, 'one Redis per test file')
  t.match(first.url, /^rediss?:\/\//)
  t.ok(first.url.includes(String(first.port)), 'url carries the port')
  const redis = client(t, first.url)
  t.equal(await redis.ping(), 'PONG')
})

t.test('startRedisServer: own process, extra args, kill and restart on the same port', async (t) => {
  const server = await startRedisServer(t, ['--maxmemory', '1mb'])
  const shared = await getRedis(t)
  t.not(server.port, shared.port, 'never the shared server')
  t.equal(server.url, `redis://127.0.0.1:${server.port}`)

  const before = client(t, server.url)
  t.equal(await before.ping(), 'PONG')
  t.same(await before.config('GET', 'maxmemory'), ['maxmemory', '1048576'], 'extra args reach the server')
  const key = uniquePrefix() + 'k'
  await before.set(key, 'v')

  const firstPid = server.pid
  await server.kill()
  t.ok(isGone(firstPid), 'kill() resolves after the process has exited')

  await t.rejects(once(connect(server.port, server.host), 'connect'), { code: 'ECONNREFUSED' }, 'nothing listens while it is down')

  await server.restart()
  t.not(server.pid, firstPid, 'a new process')
  const after = client(t, server.url)
  t.equal(await after.ping(), 'PONG', 'answers again on the same port')
  t.equal(await after.get(key), null, 'no persistence: a restart starts empty')

  // The client from before the crash reconnects by itself.
  if (before.status !== 'ready') await once(before, 'ready')
  t.equal(await before.ping(), 'PONG', 'an existing client reconnects')
})

t.test('startRedisServer: stop() is graceful and idempotent', async (t) => {
  const server = await startRedisServer(t)
  const pid = server.pid
  await server.stop()
  t.ok(isGone(pid))
  await server.stop()
  await server.kill()
  t.pass('stopping a stopped server resolves')
})

t.test('freeze/thaw: commands time out while frozen, succeed after thaw', async (t) => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url, { commandTimeout: 200 })
  t.equal(await redis.ping(), 'PONG')

  server.freeze()
  await t.rejects(redis.ping(), /Command timed out/)
  server.thaw()
  t.equal(await redis.ping(), 'PONG')
  t.equal(await redis.echo('in order'), 'in order', 'replies stay matched to their commands')
})

t.test('freeze: a frozen server can still be stopped', async (t) => {
  const server = await startRedisServer(t)
  const pid = server.pid
  server.freeze()
  await server.stop()
  t.ok(isGone(pid))
})

t.test('startRedisServer: says how to get Redis when redis-server is missing', async (t) => {
  setEnv(t, 'PATH', '/nonexistent')
  await t.rejects(startRedisServer(t), /apt-get install -y redis-server.*REDIS_URL/s)
})

t.test('REDIS_URL comes first, and must answer', async (t) => {
  const shared = await getRedis(t)
  setEnv(t, 'REDIS_URL', shared.url)
  t.same(await resolveRedis(), shared, 'the Redis REDIS_URL names')

  setEnv(t, 'REDIS_URL', `redis://127.0.0.1:${await freePort()}`)
  await t.rejects(resolveRedis(), /does not answer PING.*apt-get install -y redis-server/s)
})

/** A fake container engine on DOCKER_HOST for the rest of `t`: answers the ping, fails everything else. */
async function fakeEngine (t: Teardownable): Promise<void> {
  const engine = createServer((req, res) => {
    res.statusCode = req.url === '/_ping' ? 200 : 500
    res.end(req.url === '/_ping' ? 'OK' : '{"message":"fake engine"}')
  })
  engine.listen(0, '127.0.0.1')
  await once(engine, 'listening')
  t.teardown(() => { engine.close() })
  const address = engine.address()
  if (address === null || typeof address === 'string') throw new Error('no port')
  setEnv(t, 'REDIS_URL', undefined)
  setEnv(t, 'DOCKER_HOST', `tcp://127.0.0.1:${address.port}`)
  setEnv(t, 'DOCKER_TLS_VERIFY', undefined)
}

/** A stand-in for testcontainers, as a module, whose containers never start. */
const FAILING_TESTCONTAINERS = 'data:text/javascript,' + encodeURIComponent([
  'export class GenericContainer {',
  '  withCommand () { return this }',
  '  withExposedPorts () { return this }',
  '  withWaitStrategy () { return this }',
  '  async start () { throw new Error("no such image") }',
  '}',
  'export const Wait = { forLogMessage: () => ({}) }'
].join('\n'))

t.test('a container engine that answers but cannot run Redis falls back to redis-server', async (t) => {
  await fakeEngine(t)
  t.equal(await containerEngineAnswers(), true, 'the ping is seen')
  await t.rejects(startContainerRedis(FAILING_TESTCONTAINERS), /no such image/, 'the container path is tried')
  const found = await resolveRedis(FAILING_TESTCONTAINERS)
  t.match(found.url, /^redis:\/\/127\.0\.0\.1:\d+$/, 'a redis-server on loopback instead')
  t.equal(await client(t, found.url).ping(), 'PONG')
})

t.test('a container engine that answers, testcontainers not installed: redis-server, no error', async (t) => {
  await fakeEngine(t)
  const absent = `testcontainers-absent-${uniquePrefix().slice(2, -1)}`
  t.equal(await loadTestcontainers(absent), undefined, 'a package that is not installed loads as undefined')
  t.equal(await startContainerRedis(absent), undefined, 'no container, and no error')
  const found = await resolveRedis(absent)
  t.match(found.url, /^redis:\/\/127\.0\.0\.1:\d+$/, 'a redis-server on loopback instead')
  t.equal(await client(t, found.url).ping(), 'PONG')
})

t.test('loadTestcontainers: installed but broken is an error, not "not installed"', async (t) => {
  await t.rejects(loadTestcontainers('data:text/javascript,throw new Error("a dependency is missing")'),
    /does not load on Node .*a dependency is missing/)
  await t.rejects(loadTestcontainers('node:os'), /not the testcontainers API/)
  t.equal(typeof (await loadTestcontainers(FAILING_TESTCONTAINERS))?.GenericContainer, 'function', 'the API is returned')
})

const SCRIPT = [
  '-- KEYS: none. ARGV: none. Reply: now in ms',
  'local function clock (time) return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) end',
  "local now = clock(redis.call('TIME'))",
  'return now'
].join('\n')

t.test('timeVariant: the clock comes from the last ARGV', async (t) => {
  const variant = timeVariant(SCRIPT)
  const lines = variant.split('\n')
  t.equal(lines[2], 'local now = tonumber(ARGV[#ARGV])')
  t.same([lines[0], lines[1], lines[3]], [SCRIPT.split('\n')[0], SCRIPT.split('\n')[1], 'return now'], 'other lines untouched')
  t.notMatch(variant, /TIME/)

  const redis = client(t, (await getRedis(t)).url)
  const real = Number(await redis.eval(SCRIPT, 0))
  t.ok(Math.abs(real - Date.now()) < 5_000, 'the shipped script reads the server clock')
  t.equal(await redis.eval(variant, 0, 'other', '1700000000123'), 1700000000123, 'the variant reads the last argv')
})

t.test('timeVariant: keeps indentation and CRLF line endings', async (t) => {
  const crlf = 'local a = 1\r\n  local now = redis.call("TIME")[1]\r\nreturn now\r\n'
  t.equal(timeVariant(crlf), 'local a = 1\r\n  local now = tonumber(ARGV[#ARGV])\r\nreturn now\r\n')
})

t.test('timeVariant: throws unless the clock line appears exactly once', async (t) => {
  t.throws(() => timeVariant('return 1'), /found 0/)
  t.throws(() => timeVariant("local now = 5 -- redis.call('TIME') elsewhere?\nlocal now = redis.call('TIME')"), /found 2/)
  t.throws(() => timeVariant("local t = redis.call('TIME')"), /found 0/, 'only a `now =` line counts')
})

t.test('timeVariant: a clock read lazily (no `local`) is swapped too', async (t) => {
  t.equal(timeVariant("local now\n  now = now or ms(redis.call('TIME'))\n"), 'local now\n  now = tonumber(ARGV[#ARGV])\n')
})

t.test('uniquePrefix: a fresh namespace without hash-tag braces', async (t) => {
  const a = uniquePrefix()
  const b = uniquePrefix()
  t.not(a, b)
  for (const p of [a, b]) {
    t.match(p, /^t-[0-9a-f]{12}:$/)
    t.notMatch(p, /[{}]/)
  }
})
