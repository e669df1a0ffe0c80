// Option validation: every bad option is refused at register with one coded error that names the option
// and the value, and human durations resolve once into the right integer milliseconds.
import { readFileSync, readdirSync } from 'node:fs'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { LONGEST, formatDuration, toMilliseconds } from '../lib/duration.js'
import { resolveOptions } from '../lib/options/plugin.js'
import { resolveLimiterOptions } from '../lib/options/route.js'
import { OPTIONS } from '../lib/options/table.js'

/** resolveOptions' warn for inputs that must replace nothing: a warning fails the test. */
const unexpected = (_name: string, message: string): never => { throw new Error(`unexpected warning: ${message}`) }

const INVALID = 'FST_RATE_GUARD_INVALID_OPTION'

function app (t: Test): FastifyInstance {
  const made = Fastify({ logger: false })
  t.teardown(async () => { await made.close() })
  return made
}

function escape (text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/** Registration rejects with the coded error whose message names `name` and shows the value as `shown`. */
async function refuses (t: Test, options: Record<string, unknown>, name: string, shown: string): Promise<void> {
  const message = new RegExp(`^Invalid rate-guard option "${escape(name)}": .*got ${escape(shown)}$`)
  await t.rejects(async () => { await app(t).register(rateGuard, options as never) }, { code: INVALID, statusCode: 500, message }, `${name} = ${shown}`)
}

type Case = [options: Record<string, unknown>, name: string, shown: string]

const cases: Record<string, Case[]> = {
  max: [
    // A negative, fractional, NaN or infinite max is replaced, as @fastify/rate-limit does (see the fallbacks below).
    [{ max: '10' }, 'max', '"10"'],
    [{ max: 2 ** 53 }, 'max', String(2 ** 53)]
  ],
  timeWindow: [
    // A number that is not a positive integer is replaced (see the fallbacks below); an unreadable one is refused.
    [{ timeWindow: 'abc' }, 'timeWindow', '"abc"'],
    [{ timeWindow: '1 fortnight' }, 'timeWindow', '"1 fortnight"'],
    [{ timeWindow: {} }, 'timeWindow', 'an object'],
    [{ timeWindow: '0.4' }, 'timeWindow', '"0.4"']
  ],
  ban: [
    [{ ban: true }, 'ban', 'true'],
    [{ ban: [] }, 'ban', 'an array'],
    [{ ban: 2 ** 60 }, 'ban', String(2 ** 60)],
    [{ ban: { threshold: 0, duration: '1m' } }, 'ban.threshold', '0'],
    [{ ban: { threshold: 2 } }, 'ban.duration', 'undefined'],
    [{ ban: { duration: '1m' } }, 'ban.threshold', 'undefined'],
    [{ ban: { threshold: 2, duration: 'forever' } }, 'ban.duration', '"forever"']
  ],
  hook: [
    [{ hook: 'onSend' }, 'hook', '"onSend"'],
    [{ hook: 'onResponse' }, 'hook', '"onResponse"']
  ],
  failMode: [
    [{ failMode: 'maybe' }, 'failMode', '"maybe"'],
    [{ failMode: 'open', skipOnError: true }, 'skipOnError', 'true'],
    [{ failMode: 'closed', skipOnError: false }, 'skipOnError', 'false'],
    [{ skipOnError: 'yes' }, 'skipOnError', '"yes"']
  ],
  nameSpace: [
    [{ nameSpace: 'app{1}:' }, 'nameSpace', '"app{1}:"'],
    [{ nameSpace: 'app{' }, 'nameSpace', '"app{"'],
    [{ nameSpace: 'app}' }, 'nameSpace', '"app}"'],
    [{ nameSpace: 'my app:' }, 'nameSpace', '"my app:"'],
    [{ nameSpace: 'app:\t' }, 'nameSpace', '"app:\\t"'],
    [{ nameSpace: 42 }, 'nameSpace', '42']
  ],
  timeout: [
    [{ timeout: 0 }, 'timeout', '0'],
    [{ timeout: -1 }, 'timeout', '-1'],
    [{ timeout: '100ms' }, 'timeout', '"100ms"'],
    [{ timeout: 2.5 }, 'timeout', '2.5'],
    // Node fires a timer of more than 2^31 - 1 ms after 1 ms: every decision would fail open, silently.
    [{ timeout: 60_001 }, 'timeout', '60001'],
    [{ timeout: 2 ** 31 }, 'timeout', '2147483648'],
    [{ timeout: Infinity }, 'timeout', 'Infinity']
  ],
  cache: [
    [{ cache: 0 }, 'cache', '0'],
    [{ cache: -10 }, 'cache', '-10'],
    [{ cache: 1.5 }, 'cache', '1.5'],
    [{ cache: 'big' }, 'cache', '"big"']
  ],
  apiKeyHeader: [
    [{ apiKeyHeader: 'x api key' }, 'apiKeyHeader', '"x api key"'],
    [{ apiKeyHeader: 'x-api-key:' }, 'apiKeyHeader', '"x-api-key:"'],
    [{ apiKeyHeader: '' }, 'apiKeyHeader', '""'],
    [{ apiKeyHeader: 'x-ключ' }, 'apiKeyHeader', '"x-ключ"'],
    [{ apiKeyHeader: true }, 'apiKeyHeader', 'true']
  ],
  redis: [
    [{ redis: 6379 }, 'redis', '6379'],
    [{ redis: { host: '127.0.0.1', port: 6379 } }, 'redis', 'an object'],
    [{ redis: 'http://x' }, 'redis', '"http://x"'],
    [{ redis: '127.0.0.1:6379' }, 'redis', '"127.0.0.1:6379"'],
    [{ redis: true }, 'redis', 'true']
  ],
  allowList: [
    [{ allowList: [1, 2] }, 'allowList', 'an array'],
    [{ allowList: '127.0.0.1' }, 'allowList', '"127.0.0.1"']
  ],
  'other checks': [
    [{ keyGenerator: 'ip' }, 'keyGenerator', '"ip"'],
    [{ standardHeaders: 'draft-7' }, 'standardHeaders', '"draft-7"'],
    [{ legacyHeaders: 'no' }, 'legacyHeaders', '"no"'],
    [{ global: 1 }, 'global', '1'],
    [{ verifyApiKey: true }, 'verifyApiKey', 'true'],
    [{ errorResponseBuilder: {} }, 'errorResponseBuilder', 'an object']
  ]
}

for (const [group, list] of Object.entries(cases)) {
  t.test(`invalid ${group} is refused at register`, async t => {
    for (const [options, name, shown] of list) await refuses(t, options, name, shown)
  })
}

t.test('a non-string groupId is refused with @fastify/rate-limit\'s message, word for word', async t => {
  for (const groupId of [7, true, {}]) {
    await t.rejects(async () => { await app(t).register(rateGuard, { groupId } as never) }, { code: INVALID, statusCode: 500, message: 'groupId must be a string' }, `groupId = ${JSON.stringify(groupId)}`)
  }
})

/** A store class with @fastify/rate-limit's interface (incr, child), counting nothing. */
class Store {
  incr (_key: string, callback: (err: Error | null, result?: { current: number, ttl: number }) => void): void { callback(null, { current: 1, ttl: 1000 }) }
  child (): Store { return new Store() }
}

const moreCases: Record<string, Case[]> = {
  continueExceeding: [
    [{ continueExceeding: 'yes' }, 'continueExceeding', '"yes"'],
    [{ continueExceeding: 1 }, 'continueExceeding', '1']
  ],
  exponentialBackoff: [
    [{ exponentialBackoff: 'yes' }, 'exponentialBackoff', '"yes"']
  ],
  store: [
    [{ store: {} }, 'store', 'an object'],
    [{ store: 'redis' }, 'store', '"redis"'],
    [{ store: class {} }, 'store', 'a function'],
    [{ store: class { incr (): void {} } }, 'store', 'a function']
  ],
  // Wrong types are no fallback: only numbers @fastify/rate-limit replaces are.
  'fallback types': [
    [{ timeWindow: '-5' }, 'timeWindow', '"-5"'],
    [{ ban: '2' }, 'ban', '"2"'],
    [{ failMode: null }, 'failMode', 'null']
  ]
}

for (const [group, list] of Object.entries(moreCases)) {
  t.test(`invalid ${group} is refused at register`, async t => {
    for (const [options, name, shown] of list) await refuses(t, options, name, shown)
  })
}

t.test('continueExceeding and exponentialBackoff are booleans; continueExceeding wins over exponentialBackoff', async t => {
  const overLimit = (input: Record<string, unknown>): unknown => resolveOptions(input, unexpected).route.overLimit
  t.equal(overLimit({}), undefined, 'default: a denied request counts nothing')
  t.equal(overLimit({ continueExceeding: false, exponentialBackoff: false }), undefined)
  t.equal(overLimit({ continueExceeding: true }), 'continue')
  t.equal(overLimit({ exponentialBackoff: true }), 'backoff')
  t.equal(overLimit({ continueExceeding: true, exponentialBackoff: true }), 'continue', 'as @fastify/rate-limit')
  t.equal(resolveOptions({ store: Store }, unexpected).store, Store, 'a store class with incr and child is kept')
  t.equal(resolveOptions({}, unexpected).store, undefined)
  t.equal(resolveOptions({ store: Store, redis: null }, unexpected).redis, undefined, 'redis: null (their default) is no Redis, so a store may be given beside it')
})

t.test('values @fastify/rate-limit replaces by a default get that default, with one warning each', async t => {
  // [options, the option replaced, the value shown, the resolved value]
  const cases: Array<[Record<string, unknown>, 'max' | 'timeWindow' | 'ipv6Subnet', string, number]> = [
    [{ max: -1 }, 'max', '-1', 1000],
    [{ max: -0.5 }, 'max', '-0.5', 1000],
    [{ max: NaN }, 'max', 'NaN', 1000],
    [{ max: Infinity }, 'max', 'Infinity', 1000],
    [{ max: -Infinity }, 'max', '-Infinity', 1000],
    [{ max: 1.5 }, 'max', '1.5', 1],
    [{ max: 0.5 }, 'max', '0.5', 0],
    [{ timeWindow: -5 }, 'timeWindow', '-5', 60_000],
    [{ timeWindow: 0 }, 'timeWindow', '0', 60_000],
    [{ timeWindow: 0.5 }, 'timeWindow', '0.5', 60_000],
    [{ timeWindow: NaN }, 'timeWindow', 'NaN', 60_000],
    [{ timeWindow: Infinity }, 'timeWindow', 'Infinity', 60_000],
    [{ timeWindow: 1500.7 }, 'timeWindow', '1500.7', 1500],
    [{ ipv6Subnet: 129 }, 'ipv6Subnet', '129', 64],
    [{ ipv6Subnet: -1 }, 'ipv6Subnet', '-1', 64],
    [{ ipv6Subnet: NaN }, 'ipv6Subnet', 'NaN', 64],
    [{ ipv6Subnet: '48' }, 'ipv6Subnet', '"48"', 64],
    // As @fastify/rate-limit's normalizeIPv6Subnet: a fraction inside 0–128 keeps its integer part.
    [{ ipv6Subnet: 1.5 }, 'ipv6Subnet', '1.5', 1]
  ]
  for (const [input, option, shown, value] of cases) {
    const warnings: string[] = []
    const { route } = resolveOptions(input, (_name, message) => { warnings.push(message) })
    const resolved = option === 'max' ? route.limits[0]!.max : option === 'timeWindow' ? route.limits[0]!.windowMs : route.ipv6Subnet
    t.equal(resolved, value, `${option} = ${shown}: ${value}`)
    const theirs = option === 'timeWindow' && Number(shown) >= 0 && Number(shown) < 1
      ? "@fastify/rate-limit's default (it would count in a window of 0 ms, which limits nothing)"
      : 'as @fastify/rate-limit does'
    t.strictSame(warnings, [`rate-guard: ${option} ${shown} is not valid; using ${value}, ${theirs}`], `${option} = ${shown}: one warning`)
  }
  const warnings: string[] = []
  resolveOptions({ max: 0, timeWindow: 1, ipv6Subnet: 0 }, (_name, message) => { warnings.push(message) })
  resolveOptions({ max: 5, timeWindow: '1 minute', ipv6Subnet: 128 }, (_name, message) => { warnings.push(message) })
  t.strictSame(warnings, [], 'valid values are not replaced and say nothing')
  t.equal(resolveOptions({ ipv6Subnet: 0 }, unexpected).route.ipv6Subnet, 0, 'ipv6Subnet 0 is valid')
})

t.test("@fastify/rate-limit's options given as null are their defaults, and a ban below 0 none (-1, their README's, says nothing)", async t => {
  const warnings: string[] = []
  const opts = resolveOptions({ max: null, timeWindow: null, allowList: null, onExceeded: null, ban: null, global: null, cache: null }, (_name, message) => { warnings.push(message) })
  t.match(opts, { global: true, cache: 10_000, route: { limits: [{ max: 1000, windowMs: 60_000 }], allowList: null, onExceeded: undefined, ban: null } })
  t.strictSame(warnings, ['global', 'max', 'timeWindow', 'allowList', 'ban', 'onExceeded', 'cache'].map(option =>
    `rate-guard: ${option} null is not valid; using its default, as @fastify/rate-limit does`), 'one warning each')
  const bans: Array<[number, number | null, string[]]> = [
    [-1, null, []],
    [-2, null, ['rate-guard: ban -2 is not valid; using no ban, as @fastify/rate-limit does']],
    [NaN, null, ['rate-guard: ban NaN is not valid; using no ban, as @fastify/rate-limit does']],
    [1.5, 1, ['rate-guard: ban 1.5 is not valid; using 1, as @fastify/rate-limit does']]
  ]
  for (const [ban, denials, said] of bans) {
    const seen: string[] = []
    const { route } = resolveOptions({ ban }, (_name, message) => { seen.push(message) })
    t.equal(route.banDenials, denials, `ban ${ban}: ${String(denials)}`)
    t.equal(route.ban === null, denials === null, `ban ${ban}: ${denials === null ? 'no ban' : 'a ban'}`)
    t.strictSame(seen, said, `ban ${ban}: ${said.length} warning`)
  }
})

t.test('store and redis: the store counts, redis is not used, and one warning says so (theirs take the store)', async t => {
  const warnings: string[] = []
  const opts = resolveOptions({ store: Store, redis: 'redis://127.0.0.1:1' }, (_name, message) => { warnings.push(message) })
  t.equal(opts.store, Store)
  t.equal(opts.redis, undefined)
  t.strictSame(warnings, ['rate-guard: redis is not used: the store given counts, as with @fastify/rate-limit'])
})

t.test('a groupId is any string, as theirs: the IETF policy name escapes it, or names it by a hash; the empty one is no group', async t => {
  const server = app(t)
  await server.register(rateGuard, { max: 5, timeWindow: '1 minute', standardHeaders: 'draft-10' })
  const ids = ['two words', 'a"b\\c', 'öffnen', 'x'.repeat(65), '']
  ids.forEach((groupId, i) => server.get(`/${i}`, { config: { rateLimit: { groupId } } }, async () => 'ok'))
  const policies = []
  for (let i = 0; i < ids.length; i++) policies.push((await server.inject(`/${i}`)).headers['ratelimit-policy'])
  t.equal(policies[0], '"two words";q=5;qu="requests";w=60')
  t.equal(policies[1], '"a\\"b\\\\c";q=5;qu="requests";w=60', 'quotes and backslashes escaped')
  t.match(policies[2], /^"group-[\w-]{12}";q=5/, 'outside printable ASCII: a hash')
  t.match(policies[3], /^"group-[\w-]{12}";q=5/, 'past 64 characters: a hash')
  t.not(policies[2], policies[3])
  t.equal(policies[4], '"default";q=5;qu="requests";w=60', "'': no group, the route's own budget")
  t.equal((await server.rateGuard.peek('127.0.0.1', { groupId: 'two words' })).count, 1, 'the operator names the group by its id')
})

t.test('a window past the longest duration (2^53 - 1024 ms) is the longest, with one warning', async t => {
  // @fastify/rate-limit takes such a window, and stops its waits at 2^53 - 1 ms.
  const cases: Array<[unknown, string]> = [['285421 years', '"285421 years"'], [2 ** 60, String(2 ** 60)], [LONGEST + 1, String(LONGEST + 1)]]
  for (const [timeWindow, shown] of cases) {
    const warnings: string[] = []
    const { route } = resolveOptions({ timeWindow }, (_name, message) => { warnings.push(message) })
    t.equal(route.limits[0]!.windowMs, LONGEST, `${shown}: the longest`)
    t.strictSame(warnings, [`rate-guard: timeWindow ${shown} is longer than the longest, 2^53 - 1024 ms (about 285,421 years); using ${LONGEST}`], `${shown}: one warning`)
  }
  t.throws(() => resolveOptions({ timeWindow: '1e20' }, unexpected), { code: INVALID }, 'a duration that does not read stays a coded error')
  t.equal(resolveOptions({ timeWindow: LONGEST }, unexpected).route.limits[0]!.windowMs, LONGEST, 'the longest itself says nothing')
  t.equal(formatDuration(LONGEST), '285421 years')
  t.throws(() => resolveOptions({ algorithm: 'token-bucket', timeWindow: '285421 years' }, () => {}), { code: INVALID, message: /"max".*up to 2\^50 with algorithm: 'token-bucket'/ },
    'the token bucket still bounds max × window')
})

t.test('a replaced value is warned once through fastify.log at register, and the running plugin uses the default', async t => {
  const lines: Array<{ level: number, msg: string }> = []
  const server = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  t.teardown(async () => { await server.close() })
  await server.register(rateGuard, { max: -1, timeWindow: -5, standardHeaders: 'draft-10' })
  server.get('/', async () => 'ok')
  // POST: a GET route's automatic HEAD route is declared with the same config, and warns again.
  server.post('/route', { config: { rateLimit: { max: 2.7 } } }, async () => 'ok')
  await server.ready()
  const replaced = lines.filter(line => line.msg.includes('@fastify/rate-limit does'))
  t.strictSame(replaced.map(line => [line.level, line.msg]), [
    [40, 'rate-guard: max -1 is not valid; using 1000, as @fastify/rate-limit does'],
    [40, 'rate-guard: timeWindow -5 is not valid; using 60000, as @fastify/rate-limit does'],
    [40, 'rate-guard: config.rateLimit.max 2.7 is not valid; using 2, as @fastify/rate-limit does']
  ], 'one warning per replaced value, the route\'s named under config.rateLimit')
  t.equal((await server.inject('/')).headers['ratelimit-policy'], '"default";q=1000;qu="requests";w=60')
  t.equal((await server.inject({ method: 'POST', url: '/route' })).headers['ratelimit-policy'], '"default";q=2;qu="requests";w=60')
  t.equal(lines.filter(line => line.msg.includes('@fastify/rate-limit does')).length, 3, 'requests warn nothing more')
})

t.test('ipv6Subnet 0: every IPv6 address is one client', async t => {
  const server = app(t)
  await server.register(rateGuard, { max: 1, ipv6Subnet: 0 })
  server.get('/', async () => 'ok')
  t.equal((await server.inject({ url: '/', remoteAddress: '2001:db8::1' })).statusCode, 200)
  t.equal((await server.inject({ url: '/', remoteAddress: 'fe80:1:2:3::9' })).statusCode, 429, 'another IPv6 address, the same client')
  t.equal((await server.rateGuard.peek('2a00::5')).count, 1, 'any IPv6 address names the one budget')
  t.equal((await server.inject({ url: '/', remoteAddress: '10.0.0.1' })).statusCode, 200, 'IPv4 addresses are not masked')
})

t.test('timeout: 1 ms to 60 s, the bounds included', async t => {
  t.equal(resolveOptions({ timeout: 1 }, unexpected).timeout, 1)
  t.equal(resolveOptions({ timeout: 60_000 }, unexpected).timeout, 60_000)
  t.equal(resolveOptions({}, unexpected).timeout, 100, 'default: 100 ms')
  t.throws(() => resolveOptions({ timeout: 60_001 }, unexpected), { code: INVALID, message: /"timeout": expected an integer number of milliseconds from 1 to 60000, got 60001$/ })
})

t.test('callbackTimeout: 1 ms to 60 s, 10 s by default (the app\'s own lookups, not Redis)', async t => {
  t.equal(resolveOptions({}, unexpected).callbackTimeout, 10_000)
  t.equal(resolveOptions({ callbackTimeout: 1 }, unexpected).callbackTimeout, 1)
  t.equal(resolveOptions({ callbackTimeout: 60_000, timeout: 50 }, unexpected).callbackTimeout, 60_000, 'apart from timeout')
  t.throws(() => resolveOptions({ callbackTimeout: 0 }, unexpected), { code: INVALID, message: /"callbackTimeout": expected an integer number of milliseconds from 1 to 60000, got 0$/ })
  t.throws(() => resolveOptions({ callbackTimeout: '1s' }, unexpected), { code: INVALID, message: /"callbackTimeout"/ })
})

t.test('the message never dumps a long value', async t => {
  const long = 'x'.repeat(500)
  const err = await app(t).register(rateGuard, { nameSpace: long }).then(() => undefined, (err: unknown) => err as Error & { code?: string })
  t.equal(err?.code, INVALID)
  t.ok(err !== undefined && err.message.length < 200, `message is short (${err?.message.length} characters)`)
  t.match(err?.message, /"nameSpace".*got "x{64}…"$/)
})

t.test('a bad route config is refused when the route is declared, naming the route option', async t => {
  const server = app(t)
  await server.register(rateGuard, { max: 5 })
  const declare = (rateLimit: unknown): void => {
    server.get(`/r${Math.random().toString(36).slice(2)}`, { config: { rateLimit: rateLimit as never } }, async () => 'ok')
  }
  t.throws(() => declare({ max: '2' }), { code: INVALID, message: /"config\.rateLimit\.max".*got "2"$/ })
  t.throws(() => declare({ timewindow: 10 }), { code: INVALID, message: /"config\.rateLimit\.timewindow"/ })
  t.throws(() => declare({ redis: 'redis://127.0.0.1' }), { code: INVALID, message: /"config\.rateLimit\.redis"/ }, 'plugin-only options are not route options')
  t.throws(() => declare({ store: Store }), { code: INVALID, message: /: Invalid rate-guard option "config\.rateLimit\.store": expected it at register only/ }, 'store is plugin-only')
  t.throws(() => declare({ groupId: 7 }), { code: INVALID, message: 'groupId must be a string' }, '@fastify/rate-limit\'s message, word for word')
  for (const config of ['x', 5, []]) {
    t.throws(() => declare(config), { code: 'FST_RATE_GUARD_INVALID_ROUTE_CONFIG', message: 'Unknown value for route rate-limit configuration' }, `config.rateLimit = ${JSON.stringify(config)}`)
  }
  // `true` is told what to write instead, after their words.
  t.throws(() => declare(true), { code: 'FST_RATE_GUARD_INVALID_ROUTE_CONFIG', message: /^Unknown value for route rate-limit configuration: GET \/r\w+ gives config: \{ rateLimit: true \}/ })
  t.doesNotThrow(() => declare({ max: 3, timeWindow: '10s', groupId: 'search' }))
  t.doesNotThrow(() => declare(false))
})

t.test('valid options register', async t => {
  const server = app(t)
  await server.register(rateGuard, {
    max: 10,
    timeWindow: '1 minute',
    ban: { threshold: 3, duration: '10 minutes' },
    hook: 'preHandler',
    skipOnError: false,
    nameSpace: 'my-app:v1:',
    timeout: 50,
    cache: 100,
    ipv6Subnet: 56,
    apiKeyHeader: 'X-Client-Key',
    verifyApiKey: async () => true,
    allowList: ['10.0.0.1'],
    groupId: 'api-v1',
    standardHeaders: 'draft-10',
    legacyHeaders: false
  })
  server.get('/', async () => 'ok')
  const res = await server.inject('/')
  t.equal(res.statusCode, 200)
  t.equal(res.headers.ratelimit, '"api-v1";r=9;t=60', 'the resolved max, window and group id are the ones given')
  t.equal(res.headers['ratelimit-policy'], '"api-v1";q=10;qu="requests";w=60')
  t.notOk('x-ratelimit-limit' in res.headers, 'legacyHeaders: false is honoured')
})

t.test('human durations resolve to the right milliseconds in the running plugin', async t => {
  const expected: Array<[number | string, number]> = [
    ['1 minute', 60_000],
    ['10s', 10_000],
    ['1.5h', 5_400_000],
    ['500', 500],
    [250, 250],
    ['2 days', 172_800_000]
  ]
  for (const [timeWindow, ms] of expected) {
    const server = app(t)
    await server.register(rateGuard, { max: 1, timeWindow, standardHeaders: 'draft-10' })
    server.get('/', async () => 'ok')
    const res = await server.inject('/')
    t.equal(res.statusCode, 200)
    t.equal(res.headers['ratelimit-policy'], `"default";q=1;qu="requests";w=${Math.ceil(ms / 1000)}`, `${JSON.stringify(timeWindow)}: w in seconds`)
    const peek = await server.rateGuard.peek('127.0.0.1')
    t.equal(peek.count, 1)
    // The oldest request leaves one window after it came: the window is ms, give or take the time since.
    t.ok(peek.resetMs <= ms && peek.resetMs > ms - 200, `${JSON.stringify(timeWindow)}: resets in ${peek.resetMs} ms of ${ms}`)
  }
})

t.test('toMilliseconds', async t => {
  const valid: Array<[unknown, number]> = [
    ['1 minute', 60_000],
    ['10s', 10_000],
    ['1.5h', 5_400_000],
    ['500', 500],
    [250, 250],
    [1, 1],
    ['1ms', 1],
    ['.5s', 500],
    ['2 Days', 172_800_000],
    ['  3 hours  ', 10_800_000],
    ['1w', 604_800_000],
    ['1 year', 31_557_600_000],
    ['10 MINUTES', 600_000],
    ['1.0005s', 1001],
    ['90 sec', 90_000],
    [LONGEST, LONGEST]
  ]
  for (const [input, ms] of valid) t.equal(toMilliseconds(input), ms, JSON.stringify(input))

  const invalid: unknown[] = [
    'abc', -5, 0, '0', '0s', '0.4', '1 fortnight', '', ' ', '-5s', '1e3', '1,5s', 'm', '5 minutes ago',
    '10s10', NaN, Infinity, -Infinity, LONGEST + 1, 2 ** 53, '300000 years', 1.5, 'x'.repeat(33), '1'.repeat(33),
    {}, [], [1000], null, undefined, true, () => 1000, 10n
  ]
  for (const input of invalid) {
    t.equal(toMilliseconds(input), undefined, typeof input === 'string' ? JSON.stringify(input) : String(input))
  }
})

t.test('formatDuration', async t => {
  const cases: Array<[number, string]> = [
    [0, '0 ms'],
    [1, '1 ms'],
    [999, '999 ms'],
    [1000, '1 second'],
    [7000, '7 seconds'],
    [59_000, '59 seconds'],
    [60_000, '1 minute'],
    [600_000, '10 minutes'],
    [3_600_000, '1 hour'],
    [7_200_000, '2 hours'],
    [86_400_000, '1 day'],
    [3 * 86_400_000, '3 days']
  ]
  for (const [ms, text] of cases) t.equal(formatDuration(ms), text, String(ms))
  // The largest whole unit that fits, rounded: the words are for people, Retry-After carries the exact wait.
  t.equal(formatDuration(1500), '2 seconds')
  t.equal(formatDuration(90_000), '2 minutes')
  t.equal(formatDuration(toMilliseconds('1.5h')!), '2 hours')
})

t.test('options that are not an object are refused', async t => {
  for (const input of [null, 'x', 42, [], undefined]) {
    t.throws(() => resolveOptions(input, unexpected), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"options": expected an object/ }, String(input))
  }
})

// ---- Several limits, the token bucket's burst, shared budgets, the size bound ---------------------------

const limitCases: Record<string, Case[]> = {
  limits: [
    [{ limits: [] }, 'limits', 'an array'],
    [{ limits: { max: 1, timeWindow: 1000 } }, 'limits', 'an object'],
    [{ limits: 'burst' }, 'limits', '"burst"'],
    [{ limits: Array.from({ length: 17 }, (_, i) => ({ max: 1, timeWindow: 1000 * (i + 1) })) }, 'limits', 'an array'],
    [{ limits: [5] }, 'limits[0]', '5'],
    [{ limits: [null] }, 'limits[0]', 'null'],
    [{ limits: [[5, 1000]] }, 'limits[0]', 'an array'],
    [{ limits: [{ timeWindow: 1000 }] }, 'limits[0]', 'an object'],
    [{ limits: [{ max: 5, timeWindow: 1000 }, { max: 10 }] }, 'limits[1]', 'an object'],
    [{ limits: [{ max: -1, timeWindow: 1000 }] }, 'limits[0].max', '-1'],
    [{ limits: [{ max: 5, timeWindow: 'soon' }] }, 'limits[0].timeWindow', '"soon"'],
    [{ limits: [{ max: 5, timeWindow: 1000, name: 'a b' }] }, 'limits[0].name', '"a b"'],
    [{ limits: [{ max: 5, timeWindow: 1000, name: 'a' }, { max: 9, timeWindow: 60_000, name: 'a' }] }, 'limits', 'an array'],
    [{ limits: [{ max: 5, timeWindow: 1000 }], max: 5 }, 'limits', 'an array'],
    [{ limits: [{ max: 5, timeWindow: 1000 }], timeWindow: 1000 }, 'limits', 'an array']
  ],
  burst: [
    [{ max: 5, burst: 10 }, 'burst', '10'],
    [{ algorithm: 'fixed-window', burst: 10 }, 'burst', '10'],
    [{ algorithm: 'token-bucket', burst: 0 }, 'burst', '0'],
    [{ algorithm: 'token-bucket', burst: 1.5 }, 'burst', '1.5'],
    [{ algorithm: 'token-bucket', limits: [{ max: 5, timeWindow: 1000, burst: '10' }] }, 'limits[0].burst', '"10"'],
  ],
  shared: [
    [{ shared: true }, 'shared', 'true'],
    [{ shared: null }, 'shared', 'null'],
    [{ shared: [] }, 'shared', 'an array'],
    [{ shared: 5 }, 'shared', '5'],
    [{ shared: {} }, 'shared', 'an object'],
    [{ shared: { max: 3 } }, 'shared', 'an object'],
    [{ shared: { timeWindow: 1000 } }, 'shared', 'an object'],
    [{ shared: { max: 0, timeWindow: 1000 } }, 'shared.max', '0'],
    [{ shared: { max: () => 3, timeWindow: 1000 } }, 'shared.max', 'a function'],
    [{ shared: { max: 3, timeWindow: () => 1000 } }, 'shared.timeWindow', 'a function'],
    [{ shared: { max: 3, timeWindow: 1000, per: 'ip' } }, 'shared.per', '"ip"'],
    [{ shared: { limits: [] } }, 'shared.limits', 'an array'],
    [{ shared: { limits: [{ max: 3 }] } }, 'shared.limits[0]', 'an object']
  ],
  'the size bound of the algorithms that multiply (max × window up to 2^50)': [
    [{ algorithm: 'token-bucket', max: 2 ** 30, timeWindow: 2 ** 21 }, 'max', `"${2 ** 30} per ${2 ** 21} ms"`],
    [{ algorithm: 'sliding-window', max: 2 ** 40, timeWindow: '1 day' }, 'max', `"${2 ** 40} per 86400000 ms"`],
    [{ algorithm: 'token-bucket', limits: [{ max: 5, timeWindow: 1000 }, { max: 2 ** 30, timeWindow: 2 ** 21 }] }, 'limits[1].max', `"${2 ** 30} per ${2 ** 21} ms"`],
    [{ algorithm: 'sliding-window', shared: { max: 2 ** 30, timeWindow: 2 ** 21 } }, 'shared.max', `"${2 ** 30} per ${2 ** 21} ms"`]
  ]
}

t.test('an unknown name is refused at register, named, with the nearest name taken there if one is near', async t => {
  // test/option-suggestions.test.ts has the suggestions themselves.
  const cases: Array<[Record<string, unknown>, string, string]> = [
    [{ timewindow: 1000 }, 'timewindow', '; did you mean `timeWindow`?'],
    [{ maxRequests: 5 }, 'maxRequests', '.'],
    [{ redisUrl: 'redis://127.0.0.1' }, 'redisUrl', '.'],
    [{ ban: { threshold: 2, duration: '1m', treshold: 3 } }, 'ban.treshold', '; did you mean `threshold`?'],
    [{ limits: [{ max: 5, timeWindow: 1000, nmae: 'x' }] }, 'limits[0].nmae', '; did you mean `name`?'],
    [{ shared: { limits: [{ max: 3, timeWindow: 1000 }], max: 3 } }, 'shared.max', '.']
  ]
  for (const [options, name, hint] of cases) {
    const message = new RegExp(`^Invalid rate-guard option "${escape(name)}": no such option${escape(hint)} Every option: https://`)
    await t.rejects(async () => { await app(t).register(rateGuard, options as never) }, { code: INVALID, message }, name)
  }
})

for (const [group, list] of Object.entries(limitCases)) {
  t.test(`invalid ${group} is refused at register`, async t => {
    for (const [options, name, shown] of list) await refuses(t, options, name, shown)
  })
}

t.test('a burst inside limits or shared, without the token bucket; a burst that breaks the size bound', async t => {
  // The option named is checked loosely: today it is `burst` (not `limits[0].burst`), and the bound's message
  // shows max and window, not the burst that broke it.
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ limits: [{ max: 5, timeWindow: 1000, burst: 10 }] }, /burst".*got 10$/],
    [{ shared: { max: 5, timeWindow: 1000, burst: 10 } }, /burst".*got 10$/],
    [{ algorithm: 'token-bucket', max: 1, timeWindow: 2 ** 21, burst: 2 ** 30 }, /"max": .*up to 2\^50/]
  ]
  for (const [options, message] of cases) {
    await t.rejects(async () => { await app(t).register(rateGuard, options as never) }, { code: INVALID, message }, JSON.stringify(options))
  }
})

t.test('limits, burst and shared on a route are checked when it is declared, named under config.rateLimit', async t => {
  const server = app(t)
  await server.register(rateGuard, { max: 5 })
  const declare = (rateLimit: unknown): void => {
    server.get(`/r${Math.random().toString(36).slice(2)}`, { config: { rateLimit: rateLimit as never } }, async () => 'ok')
  }
  t.throws(() => declare({ limits: [] }), { code: INVALID, message: /"config\.rateLimit\.limits".*got an array$/ })
  t.throws(() => declare({ limits: [{ max: 1, timeWindow: 1000 }], max: 2 }), { code: INVALID, message: /"config\.rateLimit\.limits": expected limits, or max \/ timeWindow \/ burst, not both/ })
  t.throws(() => declare({ limits: [{ max: 1, timeWindow: 1000, name: 'x' }, { max: 2, timeWindow: 2000, name: 'x' }] }), { code: INVALID, message: /"config\.rateLimit\.limits": expected limits with different names/ })
  t.throws(() => declare({ burst: 10 }), { code: INVALID, message: /"config\.rateLimit\.burst": expected no burst but with algorithm: 'token-bucket', got 10$/ })
  t.throws(() => declare({ limits: [{ max: 1, timeWindow: 1000, burst: 3 }] }), { code: INVALID, message: /"config\.rateLimit\..*burst".*got 3$/ }, 'burst inside limits')
  t.throws(() => declare({ shared: { max: 3 } }), { code: INVALID, message: /"config\.rateLimit\.shared": expected both max and timeWindow, or limits/ })
  t.throws(() => declare({ algorithm: 'token-bucket', max: 2 ** 30, timeWindow: 2 ** 21 }), { code: INVALID, message: /"config\.rateLimit\.max".*up to 2\^50/ })
  t.doesNotThrow(() => declare({ max: 2 ** 30, timeWindow: 2 ** 21 }), 'the sliding log only adds times: no product bound')
  t.doesNotThrow(() => declare({ algorithm: 'token-bucket', burst: 10 }), 'burst with the token bucket')
  t.doesNotThrow(() => declare({ limits: [{ max: 1, timeWindow: 1000 }, { max: 2, timeWindow: 2000 }], shared: { limits: [{ max: 3, timeWindow: 1000 }] } }))
  t.doesNotThrow(() => declare({ algorithm: 'sliding-window', max: 2 ** 25, timeWindow: 2 ** 25 }), 'max × window = 2^50 exactly is allowed')

  // A limit the plugin's algorithm counts exactly is checked again against a route's own algorithm.
  const big = app(t)
  await big.register(rateGuard, { max: 2 ** 30, timeWindow: 2 ** 21 })
  t.throws(() => big.get('/tb', { config: { rateLimit: { algorithm: 'token-bucket' } } }, async () => 'ok'),
    { code: INVALID, message: /"config\.rateLimit\.max": expected max \(and burst\) × timeWindow in ms up to 2\^50 with algorithm: 'token-bucket', got "1073741824 per 2097152 ms"$/ })
  t.doesNotThrow(() => big.get('/fw', { config: { rateLimit: { algorithm: 'fixed-window' } } }, async () => 'ok'))

  // A route's burst, given while the plugin counts with the token bucket, is refused once the route changes algorithm.
  const bucket = app(t)
  await bucket.register(rateGuard, { algorithm: 'token-bucket', burst: 10 })
  t.throws(() => bucket.get('/fw', { config: { rateLimit: { algorithm: 'fixed-window' } } }, async () => 'ok'),
    { code: INVALID, message: /"config\.rateLimit\..*burst".*got 10$/ }, 'the plugin\'s burst is inherited, and checked against the route\'s algorithm')
})

t.test('a route of one limit under a plugin of several gives both max and timeWindow: there is no one limit to take the other from', async t => {
  const server = app(t)
  await server.register(rateGuard, { algorithm: 'token-bucket', limits: [{ max: 5, timeWindow: '1s' }, { max: 50, timeWindow: '1 minute' }] })
  const declare = (rateLimit: Record<string, unknown>): void => {
    server.get(`/r${Math.random().toString(36).slice(2)}`, { config: { rateLimit } }, async () => 'ok')
  }
  const several = 'expected both max and timeWindow: the plugin has several limits to take the other from'
  t.throws(() => declare({ max: 2 }), { code: INVALID, message: `Invalid rate-guard option "config.rateLimit.max": ${several}, got 2` })
  t.throws(() => declare({ burst: 2 }), { code: INVALID, message: `Invalid rate-guard option "config.rateLimit.timeWindow": ${several}, got undefined` })
  t.doesNotThrow(() => declare({ max: 2, timeWindow: '1s', burst: 3 }), 'both: one limit of its own')
})

t.test('a max function whose answer breaks the size bound fails that request with the coded error', async t => {
  const server = app(t)
  await server.register(rateGuard, { algorithm: 'token-bucket', max: () => 2 ** 40, timeWindow: '1 day' })
  server.get('/', async () => 'ok')
  const res = await server.inject('/')
  t.equal(res.statusCode, 500)
  t.equal(res.json().code, INVALID)
  t.match(res.json().message, /"max".*up to 2\^50 with algorithm: 'token-bucket'/)
})

t.test('conflicts between options are declared on their descriptors, and one pass refuses each in its declared words', async t => {
  // No other file of lib/options/ makes the coded error: a value refused alone is a check's, a conflict the pass's.
  const folder = new URL('../lib/options/', import.meta.url)
  for (const file of readdirSync(folder).filter(name => !['checks.ts', 'conflicts.ts'].includes(name))) {
    t.notMatch(readFileSync(new URL(file, folder), 'utf8'), /new InvalidOptionError/, `${file} makes no refusal of its own`)
  }
  class Store {
    incr (): void {}
    child (): this { return this }
  }
  const one = { max: 1, timeWindow: 1000 }
  // Each declared conflict met: the options (at register, or `check` for createRateLimit's over none) and its option.
  const met: Array<[string, Record<string, unknown>, 'plugin' | 'check']> = [
    ['limits', { limits: [one], max: 2 }, 'plugin'],
    ['skipOnError', { failMode: 'open', skipOnError: true }, 'plugin'],
    ['countWhen', { countWhen: () => true, skipFailedRequests: true }, 'plugin'],
    ['maxQueue', { maxQueue: 2 }, 'plugin'],
    ['maxWait', { maxWait: 1000, continueExceeding: true }, 'plugin'],
    ['maxWait', { maxWait: 1000, shared: one }, 'plugin'],
    ['apiKeyHeader', { apiKeyHeader: 'x-key' }, 'plugin'],
    ['concurrency', { concurrency: { max: 1 } }, 'check'],
    ['maxWait', { maxWait: 1000 }, 'check'],
    ['limits', { store: Store, limits: [one, { max: 2, timeWindow: 2000 }] }, 'plugin'],
    ['limits', { store: Store, limits: [{ max: 1, per: 'day' }] }, 'plugin'],
    ['shared', { store: Store, shared: one }, 'plugin'],
    ['ban', { store: Store, ban: { threshold: 1, duration: 1000 } }, 'plugin'],
    ['cost', { store: Store, cost: 2 }, 'plugin'],
    ['concurrency', { store: Store, concurrency: { max: 1 } }, 'plugin'],
    ['maxWait', { store: Store, maxWait: 1000 }, 'plugin'],
    ['countWhen', { store: Store, refundAborted: true }, 'plugin']
  ]
  const said = new Set<string>()
  for (const [option, options, place] of met) {
    const refusal = (): unknown => place === 'plugin'
      ? resolveOptions(options, unexpected)
      : resolveLimiterOptions(options, resolveOptions({}, unexpected), 'createRateLimit', unexpected)
    const name = place === 'check' ? `createRateLimit.${option}` : option
    const error = t.throws(refusal, { code: INVALID }, `${name}: ${JSON.stringify(Object.keys(options))}`) as Error | undefined
    const message = error?.message ?? ''
    t.ok(message.startsWith(`Invalid rate-guard option "${name}": `), message)
    const conflict = OPTIONS[option as keyof typeof OPTIONS].conflicts.find(({ why }) => message.includes(why))
    t.ok(conflict, `${name}: in the words ${option}'s descriptor declares`)
    said.add(`${option}: ${conflict?.why}`)
  }
  const declared = Object.entries(OPTIONS).flatMap(([option, entry]) => entry.conflicts.map(({ why }) => `${option}: ${why}`))
  t.strictSame([...said].sort(), declared.sort(), 'every declared conflict met')
})
