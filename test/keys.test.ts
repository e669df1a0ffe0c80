// Who a client is: the key hierarchy end to end (API key -> user -> IP) through fastify.inject against a
// real Redis, IP handling (trustProxy, IPv6 subnets, IPv4-mapped), and what reaches Redis key names.
import { createHash } from 'node:crypto'
import diagnostics from 'node:diagnostics_channel'
import { createRequire } from 'node:module'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest, FastifyServerOptions } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import rateGuard, { CHANNELS, keyHash, normalizeIP } from '../lib/index.js'
import type { DecisionMessage, RateGuardOptions } from '../lib/index.js'
import { hashIdentity, identityKeys, scopeOf } from '../lib/stores/key-names.js'
import { client, getRedis, scanKeys, uniquePrefix } from './helpers/redis.js'

interface Setup {
  app: FastifyInstance
  /** Every key the limiter decided on, in order (from a `max` function that records it). */
  keys: string[]
  nameSpace: string
  redis: Redis
}

async function setup (t: Test, opts: RateGuardOptions & { max?: number } = {}, server: FastifyServerOptions = {}, routes?: (app: FastifyInstance) => void): Promise<Setup> {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const keys: string[] = []
  const max = opts.max ?? 2
  const app = Fastify(server)
  t.teardown(() => app.close())
  await app.register(rateGuard, {
    redis: url,
    nameSpace,
    timeWindow: 10_000,
    // The API-key tier is on only where keys are verified: here every key is taken as valid.
    verifyApiKey: () => true,
    ...opts,
    max: (_request: FastifyRequest, key: string) => { keys.push(key); return max }
  })
  if (routes === undefined) app.get('/', async () => 'ok')
  else routes(app)
  await app.ready()
  return { app, keys, nameSpace, redis: client(t, url) }
}

interface Req { headers?: Record<string, string>, remoteAddress?: string, url?: string }

async function codes (app: FastifyInstance, n: number, req: Req = {}): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject({ url: '/', ...req })).statusCode)
  return out
}

t.test('x-api-key: the apikey tier, over user and IP', async t => {
  const s = await setup(t, {}, {}, app => {
    app.addHook('onRequest', async (request) => { Object.assign(request, { user: { id: 'u1' } }) })
    app.get('/', async () => 'ok')
  })
  await codes(s.app, 1, { headers: { 'x-api-key': 'k-1' } })
  await codes(s.app, 1, { headers: { 'X-API-KEY': 'k-2' } })
  await codes(s.app, 1)
  t.same(s.keys, ['apikey:k-1', 'apikey:k-2', 'user:u1'])

  t.same(await codes(s.app, 3, { headers: { 'x-api-key': 'k-3' } }), [200, 200, 429], 'one key, one budget')
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'k-4' } }), [200], 'another key, another budget, from the same IP and user')
})

t.test('apiKeyHeader: a custom header, or false to skip the tier', async t => {
  const custom = await setup(t, { apiKeyHeader: 'X-Client-Key' })
  await codes(custom.app, 1, { headers: { 'x-client-key': 'c-1' } })
  await codes(custom.app, 1, { headers: { 'x-api-key': 'ignored' } })
  t.same(custom.keys, ['apikey:c-1', '127.0.0.1'], 'only the configured header (matched case-insensitively) is read')

  const off = await setup(t, { apiKeyHeader: false })
  t.same(await codes(off.app, 3, { headers: { 'x-api-key': 'a' } }), [200, 200, 429])
  t.same(await codes(off.app, 1, { headers: { 'x-api-key': 'b' } }), [429], 'a new key does not help: the tier is off')
  t.same(off.keys, Array(4).fill('127.0.0.1'))
})

t.test('verifyApiKey: only verified keys identify; rotating fake keys share the IP budget', async t => {
  const valid = new Set(['good'])
  const verifiers = {
    sync: (apiKey: string) => valid.has(apiKey),
    async: async (apiKey: string) => valid.has(apiKey)
  }
  for (const [variant, verify] of Object.entries(verifiers)) {
    const asked: Array<[string, string]> = []
    const s = await setup(t, {
      verifyApiKey: (apiKey: string, request: FastifyRequest) => {
        asked.push([apiKey, request.url])
        return verify(apiKey)
      }
    })
    t.same(await codes(s.app, 2, { headers: { 'x-api-key': 'good' } }), [200, 200], `${variant}: a verified key`)
    t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'good' } }), [429], `${variant}: has its own budget`)
    // Fresh fake keys from one IP: each falls through to the IP, so they share its budget.
    const fakes = []
    for (let i = 0; i < 3; i++) fakes.push((await s.app.inject({ url: '/', headers: { 'x-api-key': `fake-${i}` } })).statusCode)
    t.same(fakes, [200, 200, 429], `${variant}: rotating fake keys do not buy a fresh budget`)
    t.same(await codes(s.app, 1), [429], `${variant}: and spend the IP's budget`)
    t.same(s.keys.slice(-4), ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.1'])
    t.same(asked[0], ['good', '/'], 'verifyApiKey is given the key and the request')

    // An unverified key with a user: the user tier.
    const user = await setup(t, { verifyApiKey: verify, userId: (request) => request.headers['x-user'] })
    await codes(user.app, 1, { headers: { 'x-api-key': 'fake', 'x-user': 'ann' } })
    await codes(user.app, 1, { headers: { 'x-api-key': 'good', 'x-user': 'ann' } })
    t.same(user.keys, ['user:ann', 'apikey:good'], `${variant}: unverified falls through to user`)
  }

  // Only `true` verifies: a truthy non-boolean is not a yes.
  const loose = await setup(t, { verifyApiKey: (() => 'yes') as unknown as () => boolean })
  await codes(loose.app, 1, { headers: { 'x-api-key': 'k' } })
  t.same(loose.keys, ['127.0.0.1'])
})

t.test('user tier: request.user.id from an auth hook, or the userId option', async t => {
  const s = await setup(t, {}, {}, app => {
    app.addHook('onRequest', async (request) => {
      const id = request.headers['x-user-id']
      if (id !== undefined) Object.assign(request, { user: { id: id === 'num' ? 42 : id } })
      if (request.headers['x-user-object'] === 'no-id') Object.assign(request, { user: { name: 'x' } })
    })
    app.get('/', async () => 'ok')
  })
  await codes(s.app, 1, { headers: { 'x-user-id': 'alice' } })
  await codes(s.app, 1, { headers: { 'x-user-id': 'num' } })
  await codes(s.app, 1, { headers: { 'x-user-object': 'no-id' } })
  t.same(s.keys, ['user:alice', 'user:42', '127.0.0.1'], 'string and number ids; a user without id is the IP')

  t.same(await codes(s.app, 2, { headers: { 'x-user-id': 'bob' } }), [200, 200])
  t.same(await codes(s.app, 1, { headers: { 'x-user-id': 'bob' }, remoteAddress: '10.1.1.1' }), [429], 'a user is one client from any IP')
  t.same(await codes(s.app, 1, { headers: { 'x-user-id': 'carol' } }), [200], 'another user from the same IP is another client')

  const getter = await setup(t, { userId: (request) => request.headers['x-account'] })
  await codes(getter.app, 1, { headers: { 'x-account': 'acct-7' } })
  await codes(getter.app, 1)
  t.same(getter.keys, ['user:acct-7', '127.0.0.1'], 'the userId getter, and the IP when it has nothing')

  const odd = await setup(t, { userId: (request) => ({ '': '', big: 'u'.repeat(5000), nan: Number.NaN, obj: {} } as Record<string, unknown>)[String(request.headers['x-kind'])] })
  for (const kind of ['', 'big', 'nan', 'obj']) await codes(odd.app, 1, { headers: { 'x-kind': kind } })
  t.same(odd.keys, Array(4).fill('127.0.0.1'), 'empty, oversized, NaN and object ids are no identity')
})

t.test('client IP: trustProxy false ignores X-Forwarded-For', async t => {
  const s = await setup(t, {}, { trustProxy: false })
  t.same(await codes(s.app, 2, { headers: { 'x-forwarded-for': '203.0.113.1' } }), [200, 200])
  t.same(await codes(s.app, 1, { headers: { 'x-forwarded-for': '203.0.113.2' } }), [429], 'a forged X-Forwarded-For buys nothing')
  t.same(s.keys, Array(3).fill('127.0.0.1'))
})

t.test('client IP: trustProxy with proxy addresses honours X-Forwarded-For only from them', async t => {
  const cases: Array<[string[], string, string]> = [
    [['127.0.0.1'], '127.0.0.1', '10.2.3.4'],
    [['10.0.0.0/8'], '10.9.8.7', '192.168.1.1']
  ]
  for (const [trustProxy, proxy, stranger] of cases) {
    const s = await setup(t, {}, { trustProxy })
    await codes(s.app, 1, { remoteAddress: proxy, headers: { 'x-forwarded-for': '203.0.113.7' } })
    await codes(s.app, 1, { remoteAddress: stranger, headers: { 'x-forwarded-for': '203.0.113.7' } })
    await codes(s.app, 1, { remoteAddress: proxy })
    t.same(s.keys, ['203.0.113.7', stranger, proxy], `trustProxy ${JSON.stringify(trustProxy)}`)

    // Two clients behind the proxy are two budgets; a stranger cannot pose as one of them.
    t.same(await codes(s.app, 2, { remoteAddress: proxy, headers: { 'x-forwarded-for': '203.0.113.8' } }), [200, 200])
    t.same(await codes(s.app, 1, { remoteAddress: proxy, headers: { 'x-forwarded-for': '203.0.113.9' } }), [200])
    t.same(await codes(s.app, 1, { remoteAddress: proxy, headers: { 'x-forwarded-for': '203.0.113.8' } }), [429])
  }

  // A chain: the right-most address that is not a trusted proxy is the client; the forged left part is not.
  const chain = await setup(t, {}, { trustProxy: ['10.0.0.0/8'] })
  await codes(chain.app, 1, { remoteAddress: '10.0.0.1', headers: { 'x-forwarded-for': '1.1.1.1, 198.51.100.4, 10.0.0.2' } })
  t.same(chain.keys, ['198.51.100.4'])
})

t.test('IPv6 clients are counted per /64 (ipv6Subnet), IPv4-mapped IPv6 as IPv4', async t => {
  const s = await setup(t)
  t.same(await codes(s.app, 1, { remoteAddress: '2001:db8:1:2::1' }), [200])
  t.same(await codes(s.app, 1, { remoteAddress: '2001:db8:1:2:ffff:eeee:dddd:cccc' }), [200])
  t.same(await codes(s.app, 1, { remoteAddress: '2001:DB8:1:2::99' }), [429], 'three addresses in one /64 share a budget')
  t.same(await codes(s.app, 1, { remoteAddress: '2001:db8:1:3::1' }), [200], 'the next /64 is another client')
  t.same(s.keys.slice(0, 4), [
    '2001:db8:1:2::', '2001:db8:1:2::', '2001:db8:1:2::', '2001:db8:1:3::'
  ])

  t.same(await codes(s.app, 1, { remoteAddress: '192.0.2.5' }), [200])
  t.same(await codes(s.app, 2, { remoteAddress: '::ffff:192.0.2.5' }), [200, 429], 'IPv4-mapped IPv6 is the IPv4 client')
  t.equal(s.keys.at(-1), '192.0.2.5')

  const wide = await setup(t, { ipv6Subnet: 56 })
  t.same(await codes(wide.app, 1, { remoteAddress: '2001:db8:1:2::1' }), [200])
  t.same(await codes(wide.app, 1, { remoteAddress: '2001:db8:1:ff::1' }), [200])
  t.same(await codes(wide.app, 1, { remoteAddress: '2001:db8:1:22::1' }), [429], 'ipv6Subnet 56: one /56, one budget')
  t.same(await codes(wide.app, 1, { remoteAddress: '2001:db8:1:100::1' }), [200], 'the next /56 is another client')
  t.equal(wide.keys[0], '2001:db8:1::')

  // ipv6Subnet 0: every IPv6 address is one client, as theirs.
  const all = await setup(t, { ipv6Subnet: 0 })
  t.same(await codes(all.app, 2, { remoteAddress: '2001:db8:1:2::1' }), [200, 200])
  t.same(await codes(all.app, 1, { remoteAddress: 'fe80::1' }), [429], 'ipv6Subnet 0: one budget for every IPv6 address')
  t.equal(all.keys[0], '::')

  // Prefix lengths that make no sense get theirs (64, or the integer part), with one warning each, as theirs.
  for (const ipv6Subnet of [129, -1, 64.5, '64', Number.NaN]) {
    const warnings: string[] = []
    const s = await setup(t, { ipv6Subnet: ipv6Subnet as number }, { logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
    const name = `ipv6Subnet ${String(ipv6Subnet)}`
    t.same(warnings.filter(msg => msg.includes('ipv6Subnet')).length, 1, `${name}: one warning`)
    t.match(warnings.find(msg => msg.includes('ipv6Subnet')), /ipv6Subnet .* is not valid; using 64/, name)
    await codes(s.app, 1, { remoteAddress: '2001:db8:1:2:ffff::1' })
    t.same(s.keys, ['2001:db8:1:2::'], `${name}: counted per /64`)
  }
})

t.test('allow lists and operator calls take an address in any spelling', async t => {
  const s = await setup(t, { allowList: ['2001:db8:5:6::1', '::ffff:192.0.2.77', 'user:2001:db8::1'], ban: { threshold: 1, duration: 60_000 } })
  t.same(await codes(s.app, 3, { remoteAddress: '2001:db8:5:6::abcd' }), [200, 200, 200], 'an allow-listed IPv6 address covers its /64')
  t.same(await codes(s.app, 3, { remoteAddress: '192.0.2.77' }), [200, 200, 200], 'an IPv4-mapped entry matches the IPv4 client')
  t.same(await codes(s.app, 3, { remoteAddress: '2001:db8:5:7::1' }), [200, 200, 403], 'the next /64 is not allow-listed')

  await s.app.rateGuard.ban('2001:DB8:9:9::1', '1 minute')
  t.same(await codes(s.app, 1, { remoteAddress: '2001:db8:9:9:1:2:3:4' }), [403], 'a ban given in any spelling holds for the /64')
  t.equal((await s.app.rateGuard.peek('2001:db8:9:9::ffff', { max: 2 })).status, 'banned', 'peek finds it in another spelling')
  t.equal((await s.app.rateGuard.peek('2001:db8:9:9::', { max: 2 })).status, 'banned', 'and in the canonical one')
  const prefixed = await s.app.rateGuard.peek('ip:2001:db8:9:9::', { max: 2 })
  t.same([prefixed.key, prefixed.status], ['ip:2001:db8:9:9::', 'allowed'], 'an ip: prefix is no longer special: just another key, not the address')
  await s.app.rateGuard.unban('2001:db8:9:9::2')
  t.same(await codes(s.app, 1, { remoteAddress: '2001:db8:9:9::3' }), [200], 'unban in yet another spelling lifts it')
  t.equal((await s.app.rateGuard.peek('user:2001:db8::1', { max: 2 })).key, 'user:2001:db8::1', 'keys of other tiers are taken as they are')
})

t.test('normalizeIP', async t => {
  const cases: Array<[string | undefined, number | undefined, string]> = [
    ['192.0.2.1', undefined, '192.0.2.1'],
    ['::ffff:192.0.2.1', undefined, '192.0.2.1'],
    ['::FFFF:192.0.2.1', undefined, '192.0.2.1'],
    ['::ffff:c000:201', undefined, '192.0.2.1'],
    ['0:0:0:0:0:ffff:c000:0201', undefined, '192.0.2.1'],
    ['::ffff:192.0.2.1%eth0', undefined, '192.0.2.1'],
    ['::ffff:192.0.2.1', 128, '192.0.2.1'],
    ['2001:db8::1', undefined, '2001:db8::'],
    ['2001:DB8:0:0:ABCD::1', undefined, '2001:db8::'],
    ['2001:0db8:0000:0000:ffff:ffff:ffff:ffff', undefined, '2001:db8::'],
    ['2001:db8:a:b::', undefined, '2001:db8:a:b::'],
    ['fe80::1%eth0', undefined, 'fe80::'],
    ['fe80::1%25', undefined, 'fe80::'],
    ['::1', undefined, '::'],
    ['::', undefined, '::'],
    ['::192.0.2.1', undefined, '::'],
    ['::ffff:0:192.0.2.1', 128, '::ffff:0:c000:201'],
    ['64:ff9b::192.0.2.1', 128, '64:ff9b::c000:201'],
    ['2001:db8::1', 128, '2001:db8::1'],
    ['2001:db8:1:2ff::', 56, '2001:db8:1:200::'],
    ['2001:db8:ffff:ffff::', 48, '2001:db8:ffff::'],
    ['ffff:ffff::', 17, 'ffff:8000::'],
    ['ffff::', 1, '8000::'],
    ['7fff::', 1, '::'],
    ['1:2:3:4:5:6:7:8', 112, '1:2:3:4:5:6:7:0'],
    // RFC 5952: one zero group stays; the longest run of zeros is the `::`, the first of two as long.
    ['1:0:2:0:0:3:0:0', 128, '1:0:2::3:0:0'],
    ['1:0:0:2:0:0:0:3', 128, '1:0:0:2::3'],
    ['0:0:1:0:0:0:0:2', 128, '0:0:1::2'],
    ['0:0:1:2:3:4:5:0', 128, '::1:2:3:4:5:0'],
    ['1:2:3:4:5:6:0:0', 128, '1:2:3:4:5:6::'],
    [undefined, undefined, 'unknown'],
    ['', undefined, 'unknown'],
    ['not an ip', undefined, 'not an ip'],
    ['Not-An-IP', undefined, 'not-an-ip'],
    ['1.2.3', undefined, '1.2.3'],
    ['1.2.3.4.5', undefined, '1.2.3.4.5'],
    ['256.1.1.1', undefined, '256.1.1.1'],
    ['::ffff:999.1.1.1', undefined, '::ffff:999.1.1.1'],
    ['1:2:3:4:5:6:7:8:9', undefined, '1:2:3:4:5:6:7:8:9'],
    ['2001:DB8::G', undefined, '2001:db8::g'],
    ['%eth0', undefined, '%eth0']
  ]
  // @fastify/rate-limit's normalizeIP gives the same string for every input but undefined (on which theirs
  // throws) and '' (theirs gives it back): here both are 'unknown'. Anything not an address comes back in lower case.
  const theirs = createRequire(import.meta.url)('@fastify/rate-limit') as { normalizeIP: (ip: string, subnet?: number) => string }
  for (const [ip, subnet, expected] of cases) {
    const name = `${String(ip)}${subnet === undefined ? '' : ` /${subnet}`}`
    t.equal(subnet === undefined ? normalizeIP(ip) : normalizeIP(ip, subnet), expected, name)
    if (ip !== undefined && ip !== '') t.equal(expected, theirs.normalizeIP(ip, subnet), `${name}: as @fastify/rate-limit writes it`)
  }
  // On purpose not theirs: an address as a proxy writes it into X-Forwarded-For is the address (theirs gives
  // it back, a fresh client per port; test/security/forwarded-ports.test.ts).
  for (const [ip, expected] of [['[2001:DB8::1]', '2001:db8::'], ['1.2.3.4:80', '1.2.3.4'], ['001.002.003.004', '1.2.3.4']]) {
    t.equal(normalizeIP(ip), expected, `${ip}: the address`)
    t.not(theirs.normalizeIP(ip!), expected, `${ip}: where theirs is not`)
  }
})

t.test('keyHash: the hash the decision channel and bans() name a client by, from its key', async t => {
  const s = await setup(t, {}, {}, app => {
    app.addHook('onRequest', async (request) => {
      const user = request.headers['x-user']
      if (user !== undefined) Object.assign(request, { user: { id: user } })
    })
    app.get('/', async () => 'ok')
  })
  const hashes: Array<string | undefined> = []
  const onDecision = (message: unknown): void => { hashes.push((message as DecisionMessage).keyHash) }
  diagnostics.subscribe(CHANNELS.decision, onDecision)
  t.teardown(() => diagnostics.unsubscribe(CHANNELS.decision, onDecision))
  await codes(s.app, 1, { headers: { 'x-api-key': 'k-9' } })
  await codes(s.app, 1, { headers: { 'x-user': 'u9' } })
  await codes(s.app, 1, { remoteAddress: '2001:db8:5:6::7' })
  t.same(s.keys, ['apikey:k-9', 'user:u9', '2001:db8:5:6::'])
  t.same(hashes, s.keys.map(key => keyHash(key)), 'each decision\'s keyHash is its key\'s')
  t.equal(keyHash(normalizeIP('2001:db8:5:6::7')), hashes[2], 'an address: as normalizeIP writes it')

  await s.app.rateGuard.ban('user:u10', '1 minute')
  t.same((await s.app.rateGuard.bans()).map(ban => ban.keyHash), [keyHash('user:u10')], 'the hash bans() lists')
  t.equal(keyHash(42), keyHash('42'), 'a number: as a key generator\'s number is counted, its string')
  for (const bad of [undefined, null, {}, Number.NaN, Infinity]) {
    t.throws(() => keyHash(bad as unknown as string), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"keyHash": expected a key/ }, `${String(bad)}: a coded error`)
  }
})

t.test('hashIdentity: 22 base64url characters of SHA-256, for any input', async t => {
  const inputs = ['', '}', '{}', '{', 'x'.repeat(16 * 1024), '😀🔥', 'a\u0000b', '\u0000', 'apikey:secret', 'ip:127.0.0.1']
  const hashes = inputs.map(hashIdentity)
  for (const [i, hash] of hashes.entries()) {
    t.match(hash, /^[A-Za-z0-9_-]{22}$/, `input ${i}: 22 base64url characters`)
    t.equal(hash, createHash('sha256').update(inputs[i]!).digest('base64url').slice(0, 22), `input ${i}: the SHA-256 prefix`)
    t.equal(hashIdentity(inputs[i]!), hash, 'deterministic')
  }
  t.equal(new Set(hashes).size, inputs.length, 'distinct inputs, distinct hashes (NUL and empty included)')
  t.not(hashIdentity('a\u0000b'), hashIdentity('a'), 'a NUL does not end the identity')
})

t.test('hashIdentity: hashes held for returning identities are the ones SHA-256 gives, past the bound too', async t => {
  const sha = (key: string): string => createHash('sha256').update(key).digest('base64url').slice(0, 22)
  // More identities than are held: the first ones are pushed out, and hashed afresh when they return.
  const keys = Array.from({ length: 10_050 }, (_, i) => `apikey:returning-${i}`)
  for (const key of keys) hashIdentity(key)
  for (const key of [keys[0]!, keys[49]!, keys[50]!, keys[10_049]!]) t.equal(hashIdentity(key), sha(key), key)
  const long = 'x'.repeat(300)
  t.equal(hashIdentity(long), sha(long), 'a long identity (not held)')
  t.equal(hashIdentity(long), sha(long), 'and again')
})

t.test('API keys never appear in Redis key names', async t => {
  const secret = 'sk_live_Zq9PLAINTEXT'
  const s = await setup(t, { max: 1, ban: { threshold: 2, duration: '1 minute' } }, {}, app => {
    app.get('/', async () => 'ok')
    app.get('/own', { config: { rateLimit: { max: 5 } } }, async () => 'ok')
    app.get('/g', { config: { rateLimit: { groupId: 'grp', max: 5 } } }, async () => 'ok')
  })
  const withKey = { headers: { 'x-api-key': secret } }
  t.same(await codes(s.app, 2, withKey), [200, 429], 'a log and a strike')
  await codes(s.app, 1, { ...withKey, url: '/own' })
  await codes(s.app, 1, { ...withKey, url: '/g' })
  let keys = await scanKeys(s.redis, s.nameSpace)
  const identity = `apikey:${secret}`
  const tag = `{${hashIdentity(identity)}}`
  t.same(keys, [
    identityKeys(s.nameSpace, 'all', identity).log,
    identityKeys(s.nameSpace, scopeOf('route', 'GET /own'), identity).log,
    identityKeys(s.nameSpace, scopeOf('group', 'grp'), identity).log,
    identityKeys(s.nameSpace, 'all', identity).strikes
  ].sort(), 'one log per budget and the strikes')

  t.same(await codes(s.app, 1, withKey), [403], 'banned')
  keys = await scanKeys(s.redis, s.nameSpace)
  t.ok(keys.includes(identityKeys(s.nameSpace, 'all', `apikey:${secret}`).banned), 'a ban key')
  // The ban index (lib/stores/ban-index.ts), the one key outside every identity's hash tag: it names the ban key.
  const index = `${s.nameSpace}bans`
  t.ok(keys.includes(index), 'and the ban index')
  t.strictSame(await s.redis.zrange(index, '0', '-1'), [identityKeys(s.nameSpace, 'all', `apikey:${secret}`).banned], 'which holds the ban key\'s name, no API key')
  for (const key of keys.filter(key => key !== index)) {
    t.notOk(key.includes(secret), `${key} holds no API key`)
    t.notOk(key.includes(secret.slice(0, 8)), 'not even part of it')
    t.notOk(key.toLowerCase().includes('apikey'), 'nor the tier')
    t.ok(key.startsWith(`${s.nameSpace}${tag}:`), 'under the identity\'s hash tag')
  }
})

t.test('hostile identities give constant-length keys with exactly one hash tag each', async t => {
  const hostile = ['', '}', '{}', '{', '}{', '{{a}}', 'x'.repeat(16 * 1024), '😀🔥👍', 'a\u0000b', '\u0000', ':log:all', `${'{'.repeat(100)}`, 'ip:127.0.0.1']
  const { url } = await getRedis(t)
  const redis = client(t, url)
  const nameSpace = uniquePrefix()
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, {
    redis: url,
    nameSpace,
    max: 1,
    ban: { threshold: 1, duration: '1 minute' },
    keyGenerator: (request) => hostile[Number(request.headers['x-i'])]!
  })
  app.get('/', async () => 'ok')
  await app.ready()

  for (const i of hostile.keys()) {
    const results = await codes(app, 2, { headers: { 'x-i': String(i) } })
    t.same(results, [200, 403], `identity ${i} is limited on its own`)
  }
  const index = `${nameSpace}bans`
  t.equal(await redis.zcard(index), hostile.length, 'the ban index (the one key outside every hash tag) holds each ban')
  const keys = (await scanKeys(redis, nameSpace)).filter(key => key !== index)
  t.equal(keys.length, hostile.length * 2, 'a log and a ban key per identity: no two identities collide')
  const lengths = new Set<string>()
  for (const key of keys) {
    const rest = key.slice(nameSpace.length)
    t.ok(key.startsWith(nameSpace), 'under the nameSpace')
    t.equal(rest.split('{').length - 1, 1, `one { in ${rest}`)
    t.equal(rest.split('}').length - 1, 1, `one } in ${rest}`)
    t.match(rest, /^\{[A-Za-z0-9_-]{22}\}:(log:all|banned)$/, 'the hash tag opens the key, the suffix is ours')
    lengths.add(`${key.endsWith(':banned') ? 'banned' : 'log'} ${key.length}`)
  }
  t.same([...lengths].sort(), [`banned ${nameSpace.length + 31}`, `log ${nameSpace.length + 32}`], 'one key length per kind, whatever the identity')
  const tags = new Set(keys.map(k => k.slice(nameSpace.length, nameSpace.length + 24)))
  t.equal(tags.size, hostile.length, 'one hash tag per identity')

  // The same identities through the header tiers.
  const s = await setup(t, { max: 1 })
  for (const value of ['}', '{}', '{', 'k'.repeat(4096)]) await codes(s.app, 1, { headers: { 'x-api-key': value } })
  await codes(s.app, 1, { headers: { 'x-api-key': 'k'.repeat(16 * 1024) } })
  t.same(s.keys, ['apikey:}', 'apikey:{}', 'apikey:{', `apikey:${'k'.repeat(4096)}`, '127.0.0.1'], 'a 16 KB header is no identity: the IP')
  const headerKeys = await scanKeys(s.redis, s.nameSpace)
  t.equal(headerKeys.length, 5)
  t.ok(headerKeys.every(key => /^\{[A-Za-z0-9_-]{22}\}:log:all$/.test(key.slice(s.nameSpace.length))), 'all well-formed')
})
