// Warnings without a logger: under `Fastify()` (abstract-logging's noop logger) each start-up warning is a
// process warning with its FST_RATE_GUARD_* code, said once per registration; with a logger, each goes to it
// (its code in the line) and none through the process; a logger silenced on purpose (pino at 'silent') is the
// app's choice, and nothing is emitted either. A lent client without an 'error' listener is warned about (and left
// as lent); a client the plugin made has its errors reported once per interval.
import diagnostics from 'node:diagnostics_channel'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { CHANNELS } from '../lib/channels.js'
import { WARNINGS, hasLogger } from '../lib/warnings.js'
import { freePort } from './helpers/redis.js'

type Warning = Error & { code?: string }

/** The process warnings emitted while `run` runs (and on the ticks after it), ours only. */
async function processWarnings (t: Test, run: () => Promise<void>): Promise<Warning[]> {
  const seen: Warning[] = []
  const onWarning = (warning: Warning): void => { if (warning.name === 'RateGuardWarning') seen.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))
  await run()
  // A process warning is emitted on the next tick.
  await new Promise(resolve => setImmediate(resolve))
  process.off('warning', onWarning)
  return seen
}

const codes = (warnings: Warning[]): string[] => warnings.map(warning => warning.code!).sort()

/** An app that says every start-up warning that needs no Redis, each once; `early` declared before the plugin. */
async function everyStartupWarning (app: FastifyInstance): Promise<void> {
  app.decorate('rateLimit', 'another plugin\'s' as never)
  app.get('/early', async () => 'early')
  await app.register(rateGuard, {
    max: 1.5,
    timeWindow: '1 minute',
    maxWait: '1 hour',
    // A header theirs names but never sends on an allowed request: switches nothing, with a warning.
    addHeadersOnExceeding: { 'retry-after': true } as RateGuardOptions['addHeadersOnExceeding']
  })
  await app.register(rateGuard, { nameSpace: 'inner:', max: 5 })
  app.get('/beside', { rateLimit: { max: 1 } } as object, async () => 'beside')
  await app.ready()
}

t.test('no logger: each start-up warning is a process warning with its code, once', async t => {
  const app = Fastify({ trustProxy: true })
  t.teardown(() => app.close())
  t.notOk(hasLogger(app.log), 'Fastify() has no logger')
  const warnings = await processWarnings(t, () => everyStartupWarning(app))
  t.same(codes(warnings), [
    WARNINGS.DECORATOR_TAKEN,
    WARNINGS.IN_PROCESS, WARNINGS.IN_PROCESS,
    WARNINGS.NESTED_REGISTRATION,
    WARNINGS.OPTION_UNUSED,
    WARNINGS.RATE_LIMIT_BESIDE_CONFIG, WARNINGS.RATE_LIMIT_BESIDE_CONFIG,
    WARNINGS.ROUTES_BEFORE_PLUGIN, WARNINGS.ROUTES_BEFORE_PLUGIN,
    WARNINGS.TRUSTS_EVERY_PROXY, WARNINGS.TRUSTS_EVERY_PROXY,
    WARNINGS.VALUE_REPLACED,
    WARNINGS.WAIT_UNREACHABLE
  ].sort(), 'each once per registration (two registrations say what both see)')
  const early = warnings.filter(warning => warning.code === WARNINGS.ROUTES_BEFORE_PLUGIN)
  t.match(early[0]?.message, /\/early/, 'naming the route declared before the plugin')
  t.match(warnings.find(warning => warning.code === WARNINGS.VALUE_REPLACED)?.message, /max 1\.5 is not valid; using 1/)
})

t.test('a logger: every warning goes to it with its code, none through the process', async t => {
  const lines: Array<{ level: number, code?: string, msg: string }> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as { level: number, msg: string }) } }
  const app = Fastify({ trustProxy: true, logger: { level: 'warn', stream } })
  t.teardown(() => app.close())
  t.ok(hasLogger(app.log))
  const warnings = await processWarnings(t, () => everyStartupWarning(app))
  t.same(warnings, [], 'nothing through the process')
  const logged = lines.filter(line => line.level === 40)
  t.ok(logged.length >= 8, 'the warnings are logged')
  const coded = logged.filter(line => typeof line.code === 'string' && line.code.startsWith('FST_RATE_GUARD_'))
  t.equal(coded.length, logged.length, 'each with its code')
})

t.test('a logger silenced on purpose (level silent): nothing through the process either', async t => {
  const app = Fastify({ trustProxy: true, logger: { level: 'silent' } })
  t.teardown(() => app.close())
  t.ok(hasLogger(app.log), 'pino at silent is the app\'s logger')
  t.same(await processWarnings(t, () => everyStartupWarning(app)), [])
})

t.test('no logger, a lent client with no error listener and Redis down: each said once, with its code', async t => {
  const port = await freePort()
  const redis = new Redis({ host: '127.0.0.1', port, lazyConnect: false, retryStrategy: () => 200 })
  const app = Fastify()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  const warnings = await processWarnings(t, async () => {
    await app.register(rateGuard, { redis, max: 5, failMode: 'open' })
    await app.ready()
  })
  t.same(codes(warnings), [WARNINGS.NO_ERROR_LISTENER, WARNINGS.OFFLINE_QUEUE, WARNINGS.REDIS_NOT_READY].sort())
  const said = (code: string): string | undefined => warnings.find(warning => warning.code === code)?.message
  t.match(said(WARNINGS.NO_ERROR_LISTENER), /redis\.on\('error'/, 'naming the fix')
  t.match(said(WARNINGS.REDIS_NOT_READY), /ECONNREFUSED/, 'with the error\'s own message')
  t.equal(redis.listenerCount('error'), 0, 'the app\'s client is left as lent: no listener added')
})

t.test('a lent client with an error listener: nothing said about it', async t => {
  const port = await freePort()
  const redis = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false, retryStrategy: () => 200 })
  const onError = (): void => {}
  redis.on('error', onError)
  const app = Fastify()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  const warnings = await processWarnings(t, async () => {
    await app.register(rateGuard, { redis, max: 5, failMode: 'open' })
    await app.ready()
  })
  t.same(codes(warnings), [WARNINGS.REDIS_NOT_READY])
  t.same(redis.listeners('error'), [onError], 'the app\'s listener alone')
})

t.test('every code is FST_RATE_GUARD_ and its name', async t => {
  for (const [name, code] of Object.entries(WARNINGS)) t.equal(code, `FST_RATE_GUARD_${name}`)
})

t.test('no logger, a client the plugin made with Redis down: its errors are reported once per interval', async t => {
  // Each 'error' event of the client made here is reported (the trouble channel hears every one); the warning
  // is said once per interval, however many come, and ioredis has a listener, so prints nothing of its own.
  const heard: unknown[] = []
  let third: () => void = () => {}
  const thirdHeard = new Promise<void>(resolve => { third = resolve })
  const onTrouble = (message: unknown): void => { if (heard.push(message) === 3) third() }
  diagnostics.subscribe(CHANNELS.trouble, onTrouble)
  t.teardown(() => diagnostics.unsubscribe(CHANNELS.trouble, onTrouble))
  const app = Fastify()
  t.teardown(() => app.close())
  const warnings = await processWarnings(t, async () => {
    await app.register(rateGuard, { redis: `redis://127.0.0.1:${await freePort()}`, max: 5, failMode: 'open' })
    await app.ready()
    await thirdHeard
  })
  t.ok(heard.length >= 3, 'several errors reported')
  t.same(codes(warnings), [WARNINGS.REDIS_NOT_READY, WARNINGS.REDIS_TROUBLE].sort(), 'each said once')
})

t.test('a start-up warning said twice in one registration (a GET route and its HEAD twin) is emitted once', async t => {
  const seen = await processWarnings(t, async () => {
    const app = Fastify()
    t.teardown(async () => await app.close())
    await app.register(rateGuard, {})
    app.get('/twice', { config: { rateLimit: { max: -1 } } }, async () => 'twice')
    await app.ready()
  })
  t.strictSame(codes(seen).filter(code => code === WARNINGS.VALUE_REPLACED), [WARNINGS.VALUE_REPLACED], 'GET and HEAD gave the same message; it was said once')
})
