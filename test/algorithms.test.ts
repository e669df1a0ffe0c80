// The `algorithm` option end to end: validated at register, chosen per plugin or per route, counted by
// its own script under its own key (same hash tag as the log), seen by peek and forgotten by reset. The
// behaviour of each algorithm at its edges is in conformance-log-table.test.ts and conformance-algorithm-tables.test.ts, on both stores.
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../lib/index.js'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import { GLOBAL_SCOPE, identityKeys, scopeOf } from '../lib/stores/key-names.js'
import { LEAN_ALGORITHMS, LEAN_SCRIPTS, SCRIPTS } from '../lib/stores/scripts.js'
import { withLayout } from '../lib/stores/layout.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'
const ME = '127.0.0.1'
const DAY = 24 * 3600_000

t.test('each script is lua/prelude.lua, its algorithm file, lua/quota.lua, lua/ban-index.lua, lua/strikes.lua, then lua/decide.lua, named by its hash, with the one clock line', async t => {
  const names = new Set<string>()
  const prelude = readFileSync(new URL('../lua/prelude.lua', import.meta.url), 'utf8')
  // decide.lua and lean.lua as joined: their `-- layout:` line made the Lua declaring lib/stores/layout.ts's offsets.
  const decide = withLayout(readFileSync(new URL('../lua/decide.lua', import.meta.url), 'utf8'))
  const banIndex = readFileSync(new URL('../lua/ban-index.lua', import.meta.url), 'utf8')
  const strikes = readFileSync(new URL('../lua/strikes.lua', import.meta.url), 'utf8')
  const quota = readFileSync(new URL('../lua/quota.lua', import.meta.url), 'utf8')
  const lean = withLayout(readFileSync(new URL('../lua/lean.lua', import.meta.url), 'utf8'))
  t.match(prelude, /^-- The prelude: /, 'the prelude says what it is')
  for (const name of ['text', 'field', 'largest', 'moved', 'milliseconds']) t.match(prelude, new RegExp(`^--\\s+${name}\\(.*\\n[^]*^local function ${name} \\(`, 'm'), `the prelude provides ${name}, as its header says`)
  t.match(decide, /^-- KEY\s+state.*\n--\s+banned.*\n--\s+override.*\n-- BAN_KEY\s+strikes.*\n--\s+offences.*\n--\s+index/m, 'the frame names the keys')
  t.match(decide, /^-- HEAD\s+mode.*\n(--\s{4,}.*\n)*--\s+base.*\n--\s+requests.*policies/m, 'its arguments')
  t.match(decide, /--\s+\{ status, retry, offence, at, n, /, 'and the reply')
  t.notMatch(decide.replace(/^--.*$/gm, ''), /(KEYS|ARGV)\[(\w+ \+ )?\d/, 'its body names each key\'s and argument\'s place: no bare offsets')
  t.notMatch(lean.replace(/^--.*$/gm, ''), /(KEYS|ARGV)\[(\w+ \+ )?\d/, 'so does the lean frame\'s')
  t.match(lean, /^--\s+lean\(state, max, window, burst, now, base, i\) -> status, count, reset, retry\n/m, 'the lean frame names what an algorithm\'s lean file gives it')
  for (const algorithm of LEAN_ALGORITHMS) {
    const file = readFileSync(new URL(`../lua/lean-${algorithm}.lua`, import.meta.url), 'utf8')
    const { lua } = LEAN_SCRIPTS[algorithm]!
    t.equal(lua, `${prelude}\n${file}\n${banIndex}\n${strikes}\n${lean}`, `${algorithm}: the lean script is the prelude, lua/lean-${algorithm}.lua, the ban index, the strikes, then lua/lean.lua`)
    t.match(file, /^local function lean \(\w+, max, window, burst, now, base, i\)$/m, `${algorithm}: its lean file defines lean`)
    t.equal(lua.match(/^ *now = now or milliseconds\(redis\.call\('TIME'\)\)$/gm)?.length, 1, `${algorithm}: the lean script: Redis TIME is the one clock`)
    t.equal(lua.match(/TIME/g)?.length, 1, `${algorithm}: the lean script: read in one place`)
  }
  for (const algorithm of ALGORITHMS) {
    const file = readFileSync(new URL(`../lua/${algorithm}.lua`, import.meta.url), 'utf8')
    const { command, lua } = SCRIPTS[algorithm]
    t.equal(lua, `${prelude}\n${file}\n${quota}\n${banIndex}\n${strikes}\n${decide}`, `${algorithm}: the script is the prelude, the file, the quotas, the ban index, the strikes, then the frame`)
    t.ok(command.endsWith('_' + createHash('sha1').update(lua).digest('hex').slice(0, 8)), `${algorithm}: ${command} holds its hash`)
    t.equal(lua.match(/^ *now = now or milliseconds\(redis\.call\('TIME'\)\)$/gm)?.length, 1, `${algorithm}: Redis TIME is the one clock`)
    t.equal(lua.match(/TIME/g)?.length, 1, `${algorithm}: read in one place`)
    t.match(file, /^-- Provides, .*\n--\s+count\((\w+), limits, now, member, peek, entries, cost\) -> allowed\n(--\s{4,}.*\n)+--\s+settle\(\1, limits, member, at, now, cost, final\)\n/m, `${algorithm}: the header gives the functions it provides`)
    t.match(file, /^-- state\s+\w+\s+(ZSET|HASH)/m, `${algorithm}: the header names its state key`)
    t.match(file, /^-- limits\s+per limit: max \(units/m, `${algorithm}: its limits with units`)
    t.match(file, /^-- entries\s+per limit: /m, `${algorithm}: and what it reports`)
    t.match(file, /^local function count \(.*\n[^]*^local function settle \(/m, `${algorithm}: it defines count and settle`)
    const state = /^--\s+count\((\w+),/m.exec(file)?.[1]
    t.ok(file.includes(`\nlocal function count (${state}, limits, now, member, peek, entries, cost)\n`) && file.includes(`\nlocal function settle (${state}, limits, member, at, now, cost, final)\n`), `${algorithm}: as the header says`)
    names.add(command)
  }
  t.equal(names.size, ALGORITHMS.length, 'one command per algorithm')
})

t.test('an unknown algorithm fails registration with a coded error naming the option', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await t.rejects(async () => { await app.register(rateGuard, { algorithm: 'leaky-bucket' as never }) }, {
    code: INVALID,
    message: /"algorithm": expected one of 'sliding-log', 'fixed-window', 'sliding-window', 'token-bucket', got "leaky-bucket"/
  })

  const routes = Fastify({ logger: false })
  t.teardown(() => routes.close())
  await routes.register(rateGuard, {})
  await t.rejects(async () => {
    routes.get('/', { config: { rateLimit: { algorithm: 'leaky-bucket' as never } } }, async () => 'ok')
    await routes.ready()
  }, { code: INVALID, message: /"config\.rateLimit\.algorithm": expected one of/ })
})

t.test('on Redis: the plugin algorithm, a route that overrides it, a route that inherits it; peek and reset', async t => {
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  // A fixed window of one day: the window ends at UTC midnight, which the test will not meet.
  await app.register(rateGuard, { redis: url, nameSpace, algorithm: 'fixed-window', max: 2, timeWindow: DAY })
  app.get('/', async () => 'ok')
  app.get('/own', { config: { rateLimit: { algorithm: 'sliding-window', max: 3 } } }, async () => 'ok')
  app.get('/log', { config: { rateLimit: { algorithm: 'sliding-log', max: 1 } } }, async () => 'ok')
  app.get('/inherits', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
  await app.ready()
  const get = async (url: string) => await app.inject({ url })

  const plugin = [await get('/'), await get('/'), await get('/')]
  t.strictSame(plugin.map(r => r.statusCode), [200, 200, 429], 'fixed-window: max 2 on the plugin budget')
  t.strictSame(plugin.map(r => r.headers['x-ratelimit-remaining']), ['1', '0', '0'])
  const retryAfter = Number(plugin[2]!.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= DAY / 1000, `retry-after ${retryAfter} s: when the window ends`)
  const body = plugin[2]!.json()
  t.same(Object.keys(body), ['statusCode', 'error', 'message'], 'their body, without code')
  t.match(body, { statusCode: 429, error: 'Too Many Requests', message: /^Rate limit exceeded, retry in \d+ (second|minute|hour)s?$/ })
  const counter = identityKeys(nameSpace, GLOBAL_SCOPE, ME, 'fixed-window').log
  t.equal(counter, `${identityKeys(nameSpace, GLOBAL_SCOPE, ME).log.replace(':log:', ':fw:')}`, 'same hash tag as the log, its own key')
  t.match(await redis.hgetall(counter), { c1: '2' }, 'one counter, not a log: the denied request wrote nothing')
  const ttl = await redis.pttl(counter)
  t.ok(ttl > 0 && ttl <= DAY, `the counter expires with its window (PTTL ${ttl})`)
  t.equal(await redis.exists(identityKeys(nameSpace, GLOBAL_SCOPE, ME).log), 0, 'no sliding log was written')

  const own = [await get('/own'), await get('/own'), await get('/own'), await get('/own')]
  t.strictSame(own.map(r => r.statusCode), [200, 200, 200, 429], 'sliding-window on the route: its own max 3')
  const window = identityKeys(nameSpace, scopeOf('route', 'GET /own'), ME, 'sliding-window').log
  t.match(await redis.hgetall(window), { p1: '0', c1: '3' }, 'two counters in one hash')

  t.strictSame([(await get('/log')).statusCode, (await get('/log')).statusCode], [200, 429], 'sliding-log on the route')
  t.equal(await redis.zcard(identityKeys(nameSpace, scopeOf('route', 'GET /log'), ME).log), 1)
  t.strictSame([(await get('/inherits')).statusCode, (await get('/inherits')).statusCode], [200, 429], 'a route given only max')
  t.match(await redis.hgetall(identityKeys(nameSpace, scopeOf('route', 'GET /inherits'), ME, 'fixed-window').log), { c1: '1' }, 'inherits fixed-window')

  t.match(await app.rateGuard.peek(ME), { status: 'limited', count: 2, remaining: 0, max: 2 }, 'peek reads the fixed-window counter')
  t.match(await app.rateGuard.peek(ME, { route: 'GET /own' }), { status: 'limited', count: 3, remaining: 0, max: 3 }, 'and the sliding-window one')
  t.match(await redis.hgetall(counter), { c1: '2' }, 'peek counted nothing')

  await app.rateGuard.reset(ME)
  t.equal(await redis.exists(counter, window), 0, 'reset forgets every algorithm\'s state')
  t.equal((await get('/')).statusCode, 200)
  t.equal((await get('/own')).statusCode, 200)
})

t.test('on Redis: bans work the same with every algorithm', async t => {
  const { url } = await getRedis(t)
  for (const algorithm of ALGORITHMS) {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), algorithm, max: 1, timeWindow: DAY, ban: { threshold: 2, duration: '1 hour' } })
    app.get('/', async () => 'ok')
    const codes = []
    for (let i = 0; i < 4; i++) codes.push((await app.inject({ url: '/' })).statusCode)
    t.strictSame(codes, [200, 429, 403, 403], `${algorithm}: allowed, a strike, banned, still banned`)
  }
})

t.test('in process (no Redis): the algorithm applies to the twin too', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { algorithm: 'sliding-window', max: 2, timeWindow: DAY })
  app.get('/', async () => 'ok')
  app.get('/fixed', { config: { rateLimit: { algorithm: 'fixed-window', max: 1 } } }, async () => 'ok')
  const codes = async (url: string, n: number): Promise<number[]> => {
    const out = []
    for (let i = 0; i < n; i++) out.push((await app.inject({ url })).statusCode)
    return out
  }
  t.strictSame(await codes('/', 3), [200, 200, 429])
  t.strictSame(await codes('/fixed', 2), [200, 429])
  t.match(await app.rateGuard.peek(ME), { status: 'limited', count: 2 })
  t.match(await app.rateGuard.peek(ME, { route: 'GET /fixed' }), { status: 'limited', count: 1 })
})
