// A server that refuses TIME in scripts (ElastiCache Serverless does; here a redis-server with TIME renamed
// away): the plugin finds it at start, says so, and decides on the app's clock, exactly, on every script path:
// each algorithm's lean and general scripts, settling, leases, the operator's ban. `clock: 'app'` asks for it on
// any Redis. (The conformance tables run every algorithm's scripts on a time the test sends, the same variant.)
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { client, ready, startRedisServer } from './helpers/redis.js'
import { codes, everyPathApp as makeApp, exactEverywhere } from './helpers/every-path.js'

t.test('a Redis that refuses TIME in scripts: found at start, said once, and every path decides exactly on the app\'s clock', async t => {
  const server = await startRedisServer(t, ['--rename-command', 'TIME', '""'])
  const redis = await ready(client(t, server.url))
  await t.rejects(redis.eval("return redis.call('TIME')", 0), /unknown redis command/i, 'this Redis refuses TIME in a script')
  const { app, logs } = await makeApp(t, { redis: server.url })
  t.match(logs.filter(line => line.msg.includes('clock')), [{ level: 40, msg: /this Redis refuses TIME in scripts.*keep every instance's clock in sync/ }], 'the warning names the clock mode, once')
  await exactEverywhere(t, app)
  const [log] = await redis.keys('*:log:*')
  // The newest entry (a costlier log's first member is its units' count, scored below zero).
  const [, score] = await redis.zrange(log!, '-1', '-1', 'WITHSCORES')
  t.ok(Math.abs(Number(score) - Date.now()) < 60_000, 'the log\'s entries are the app\'s times')
})

t.test('clock: \'app\' on any Redis: the app\'s clock, with the warning', async t => {
  const server = await startRedisServer(t)
  const { app, logs } = await makeApp(t, { redis: server.url, clock: 'app' })
  t.match(logs.filter(line => line.msg.includes('clock')), [{ msg: /clock: 'app'/ }])
  await exactEverywhere(t, app)
})

t.test('clock: \'redis\' on a Redis that has TIME: no warning', async t => {
  const server = await startRedisServer(t)
  const { app, logs } = await makeApp(t, { redis: server.url })
  t.strictSame(logs.filter(line => line.msg.includes('clock')), [])
  t.strictSame(await codes(app, '/sliding-log', 4), [200, 200, 200, 429])
})

t.test('clock must be redis or app', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.register(rateGuard, { clock: 'ntp' as 'app' })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /clock/ })
})
