// Hostile input, through the HTTP layer against a real Redis: identities of any bytes or length, values
// that try to get into response headers, rotating fake API keys, huge and duplicated headers, forged
// X-Forwarded-For under every trustProxy form, and raw-socket requests with CR/LF in a header.
import { once } from 'node:events'
import net from 'node:net'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest, FastifyServerOptions } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import type { Redis } from 'ioredis'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { hashIdentity, identityKeys } from '../lib/stores/key-names.js'
import { client, getRedis, scanKeys, uniquePrefix } from './helpers/redis.js'

const LOCAL = '127.0.0.1'
/** One key's name after the nameSpace: the identity's hash tag, then our own suffix. */
const KEY_SHAPE = /^\{[A-Za-z0-9_-]{22}\}:(log:all|strikes|banned)$/

interface Setup {
  app: FastifyInstance
  /** Every key the limiter decided on, in order (from a `max` function that records it). */
  keys: string[]
  nameSpace: string
  redis: Redis
  /** Lines the app logged at warn or above. */
  warnings: Array<{ level: number, msg: string }>
}

interface SetupOptions {
  plugin?: Omit<RateGuardOptions, 'max'> & { max?: number }
  server?: FastifyServerOptions
  routes?: (app: FastifyInstance) => void
}

async function setup (t: Test, { plugin = {}, server = {}, routes }: SetupOptions = {}): Promise<Setup> {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  const keys: string[] = []
  const warnings: Setup['warnings'] = []
  const max = plugin.max ?? 2
  const app = Fastify({
    ...server,
    logger: { level: 'warn', stream: { write: (line: string) => { warnings.push(JSON.parse(line) as Setup['warnings'][number]) } } }
  })
  t.teardown(() => app.close())
  await app.register(rateGuard, {
    redis: url,
    nameSpace,
    timeWindow: 10_000,
    // The API-key tier is on only where keys are verified: here every key is taken as valid (an unverified
    // key is no identity: see test/security/).
    verifyApiKey: () => true,
    ...plugin,
    max: (_request: FastifyRequest, key: string) => { keys.push(key); return max }
  })
  if (routes === undefined) app.get('/', async () => 'ok')
  else routes(app)
  await app.ready()
  return { app, keys, nameSpace, redis: client(t, url), warnings }
}

interface Req { headers?: Record<string, string>, remoteAddress?: string, url?: string }

async function codes (app: FastifyInstance, n: number, req: Req = {}): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await app.inject({ url: '/', ...req })).statusCode)
  return out
}

/**
 * Checks every key under the nameSpace: our shape, exactly one `{` and one `}`, a TTL of at most two windows
 * of `windowMs` (a log outlives its newest entry by at most one window).
 */
async function checkKeys (t: Test, s: Setup, windowMs: number): Promise<string[]> {
  const ms = 2 * windowMs
  const keys = await scanKeys(s.redis, s.nameSpace)
  const bad = keys.filter(key => {
    const rest = key.slice(s.nameSpace.length)
    return !KEY_SHAPE.test(rest) || rest.split('{').length !== 2 || rest.split('}').length !== 2
  })
  t.same(bad, [], 'every key is <nameSpace>{<22 characters>}:<our suffix>, with one hash tag')
  const ttls = await Promise.all(keys.map(async key => await s.redis.pttl(key)))
  t.same(ttls.filter(ttl => ttl <= 0 || ttl > ms), [], `every key expires within two windows (${ms} ms)`)
  return keys
}

// ---------------------------------------------------------------------------------------------------------
// Raw sockets: bytes no HTTP client library would send.

interface RawResponse {
  status: number
  /** Header lines as sent, in order, names lowercased. */
  headers: Array<[string, string]>
  /** Everything the server sent, as latin1. */
  text: string
}

async function listen (t: Test, app: FastifyInstance): Promise<number> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as AddressInfo).port
}

/** Writes one request, header lines as given (each ending in CRLF, or not), and reads until the server closes. */
async function rawRequest (port: number, headerLines: string): Promise<RawResponse> {
  const socket = net.connect(port, '127.0.0.1')
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.on('error', () => {}) // A reset after the answer is the server's right; the answer is what we check.
  socket.setTimeout(5000, () => socket.destroy())
  socket.write(Buffer.from(`GET / HTTP/1.1\r\nHost: localhost\r\n${headerLines}Connection: close\r\n\r\n`, 'latin1'))
  await once(socket, 'close')
  const text = Buffer.concat(chunks).toString('latin1')
  const [head = ''] = text.split('\r\n\r\n', 1)
  const [statusLine = '', ...lines] = head.split('\r\n')
  const headers = lines.map(line => {
    const colon = line.indexOf(':')
    return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()] as [string, string]
  })
  return { status: Number(/^HTTP\/1\.1 (\d{3}) /.exec(statusLine)?.[1] ?? NaN), headers, text }
}

// ---------------------------------------------------------------------------------------------------------
// 1. Identities of any bytes or length.

const IDENTITIES: Record<string, string> = {
  empty: '',
  'close brace': '}',
  braces: '{}',
  'open brace': '{',
  'braces reversed': '}{',
  NUL: '\u0000',
  'NUL inside': 'a\u0000b',
  'CR LF': '\r\n',
  'header injection': 'k\r\nSet-Cookie: x=1',
  '16 KB': 'x'.repeat(16 * 1024),
  emoji: '😀🔥👍',
  'lone high surrogate': '\uD800',
  'lone low surrogate': '\uDFFF',
  'replacement character': '\uFFFD',
  'emoji cut after its high surrogate': 'a\uD83D',
  'emoji cut before its low surrogate': 'a\uDE00',
  'surrogates reversed': '\uDE00\uD83D',
  'whole emoji (the same two units in order)': '\uD83D\uDE00'
}

t.test('identities of any bytes or length from a keyGenerator: constant-length keys, one hash tag, limited exactly', async t => {
  const names = Object.keys(IDENTITIES)
  const s = await setup(t, {
    plugin: { keyGenerator: (request) => IDENTITIES[String(request.headers['x-name'])]! }
  })
  for (const name of names) {
    t.same(await codes(s.app, 3, { headers: { 'x-name': name } }), [200, 200, 429], `${name}: max + 1 requests, exactly one 429`)
  }
  t.same(s.keys, names.flatMap(name => Array(3).fill(IDENTITIES[name])), 'each identity reached the limiter as it was made')

  const keys = await checkKeys(t, s, 10_000)
  t.equal(keys.length, names.length, 'one log per identity, nothing else')
  t.equal(new Set(keys.map(key => key.length)).size, 1, 'every key has the same length, whatever the identity')
  // Distinct identities must never share a budget: UTF-8 turns every lone surrogate into U+FFFD, so a hash
  // of the UTF-8 bytes alone would give '\uD800', '\uDFFF' and '\uFFFD' one budget.
  t.same(keys.sort(), names.map(name => identityKeys(s.nameSpace, 'all', IDENTITIES[name]!).log).sort(), 'the keys of exactly these identities')
  t.equal(new Set(names.map(name => hashIdentity(IDENTITIES[name]!))).size, names.length, 'no two of them share a hash tag')
})

t.test('the same hostile identities as API keys: an identity each, limited exactly', async t => {
  // inject carries any string in a header (a real socket carries latin1 only, see the raw-socket tests).
  // '' and the 16 KB value are no API key: they fall through to the IP (see the huge-header test).
  const names = Object.keys(IDENTITIES).filter(name => IDENTITIES[name]!.length > 0 && IDENTITIES[name]!.length <= 4096)
  const s = await setup(t)
  for (const name of names) {
    t.same(await codes(s.app, 3, { headers: { 'x-api-key': IDENTITIES[name]! } }), [200, 200, 429], `${name}: max + 1 requests, exactly one 429`)
  }
  t.same(s.keys, names.flatMap(name => Array(3).fill(`apikey:${IDENTITIES[name]!}`)))
  const keys = await checkKeys(t, s, 10_000)
  t.same(keys.sort(), names.map(name => identityKeys(s.nameSpace, 'all', `apikey:${IDENTITIES[name]!}`).log).sort(),
    'one log per API key, under its own hash tag')
})

// ---------------------------------------------------------------------------------------------------------
// 2 and 7. Nothing a client sends reaches a response header, and nothing it sends makes rate-guard answer 500.

const MARK = 'pwn'
/** Every value carries MARK, so finding MARK anywhere in a response means something was echoed. */
const ECHO_BAIT = [
  MARK,
  `${MARK}\r\nSet-Cookie: ${MARK}=1`,
  `"${MARK}";q=999999;w=1`,
  `99999, ${MARK}`,
  `${MARK}\u0000\u007f😀\uD800`
]

const HEADER_SHAPES: Record<string, RegExp> = {
  'x-ratelimit-limit': /^2$/,
  'x-ratelimit-remaining': /^[0-2]$/,
  'x-ratelimit-reset': /^\d{1,2}$/,
  'retry-after': /^\d+$/,
  'ratelimit-policy': /^"(default|grp)";q=2;qu="requests";w=10$/,
  ratelimit: /^"(default|grp)";r=[0-2];t=\d{1,2}$/
}

interface Seen { statusCode: number, headers: Record<string, unknown>, body: string }

/** What is wrong with one response: a header or body holding MARK, a rate-limit header of the wrong shape. */
function echoProblems (res: Seen): string[] {
  const problems: string[] = []
  if (res.body.includes(MARK)) problems.push(`body: ${res.body.slice(0, 80)}`)
  for (const [name, raw] of Object.entries(res.headers)) {
    const value = Array.isArray(raw) ? raw.join('\n') : String(raw)
    if (name.includes(MARK) || value.includes(MARK)) problems.push(`${name}: ${value.slice(0, 80)}`)
    if (name === 'set-cookie') problems.push('a Set-Cookie header')
    const shape = HEADER_SHAPES[name]
    if (shape !== undefined && !shape.test(value)) problems.push(`${name} is ${JSON.stringify(value)}`)
  }
  const written = Object.keys(HEADER_SHAPES).filter(name => res.headers[name] !== undefined).sort()
  const expected = Object.keys(HEADER_SHAPES).filter(name => name !== 'retry-after' || res.statusCode !== 200).sort()
  if (written.join() !== expected.join()) problems.push(`${res.statusCode} has ${written.join()}`)
  return problems
}

t.test('no client-supplied value is echoed into a response header or body (allowed, 429, 403)', async t => {
  const s = await setup(t, {
    plugin: { standardHeaders: 'draft-10', ban: { threshold: 2, duration: '1 minute' } },
    server: { trustProxy: true },
    routes: app => {
      // An auth hook that takes the user id from the request, as one that trusts a token's claim would.
      app.addHook('onRequest', async request => {
        const user = request.headers['x-user']
        if (user !== undefined) Object.assign(request, { user: { id: user } })
      })
      app.get('/', async () => 'ok')
      app.get('/g', { config: { rateLimit: { groupId: 'grp' } } }, async () => 'ok')
    }
  })
  const tiers: Record<string, (value: string) => Record<string, string>> = {
    'x-api-key': value => ({ 'x-api-key': value }),
    'user id': value => ({ 'x-user': value }),
    'X-Forwarded-For': value => ({ 'x-forwarded-for': `${value}, 203.0.113.1` })
  }
  const seen = new Map<number, number>()
  for (const [tier, headers] of Object.entries(tiers)) {
    for (const [i, value] of ECHO_BAIT.entries()) {
      const statuses: number[] = []
      // Each forged entry from a connection of its own: what is no address is counted as the connection's.
      const from = tier === 'X-Forwarded-For' ? { remoteAddress: `192.0.2.${i + 1}` } : {}
      for (const url of ['/', '/', '/', '/', '/g']) {
        const res = await s.app.inject({ url, headers: headers(value), ...from })
        statuses.push(res.statusCode)
        seen.set(res.statusCode, (seen.get(res.statusCode) ?? 0) + 1)
        t.same(echoProblems({ statusCode: res.statusCode, headers: res.headers, body: res.body }), [], `${tier} #${i} ${url}: ${res.statusCode}`)
      }
      // Under trustProxy: true a forged X-Forwarded-For entry that is no address is its connection's address
      // (apart from the user and API-key tiers): limited, then banned, like any other.
      t.same(statuses, [200, 200, 429, 403, 403], `${tier} #${i}: limited, then banned on every route`)
    }
  }
  t.same([...seen.keys()].sort(), [200, 403, 429], 'allowed, limited and banned answers were all checked')
  const forged = ECHO_BAIT.map((_value, i) => `192.0.2.${i + 1}`)
  t.same(s.keys.filter(key => forged.includes(key)).length, ECHO_BAIT.length * 5, 'garbage X-Forwarded-For is its connection\'s address')
  t.same(s.keys.filter(key => key.startsWith('ip:')), [], 'never a key the entry spells')
})

t.test('a CR/LF (or NUL, DEL, emoji, lone surrogate) in any input never makes rate-guard answer 500', async t => {
  const values = ['a\r\nSet-Cookie: x=1', '\r', '\n', 'a\u0000b', 'a\u007fb', '😀', 'a\uD800', 'é']
  const s = await setup(t, {
    plugin: { standardHeaders: 'draft-10', ban: { threshold: 2, duration: '1 minute' } },
    server: { trustProxy: true },
    routes: app => {
      app.addHook('onRequest', async request => {
        const user = request.headers['x-user']
        if (user !== undefined) Object.assign(request, { user: { id: user } })
      })
      app.get('/', async () => 'ok')
      app.get('/kg', { config: { rateLimit: { groupId: 'grp', keyGenerator: request => `kg:${String(request.headers['x-id'])}` } } }, async () => 'ok')
      // The control: a route that does echo a header value. Fastify answers it 500, so 500s are detectable here.
      app.get('/echo', { config: { rateLimit: false } }, async (request, reply) => {
        reply.header('x-echo', request.headers['x-api-key'])
        return 'ok'
      })
    }
  })
  for (const value of values.slice(0, -1)) {
    const echo = await s.app.inject({ url: '/echo', headers: { 'x-api-key': value } })
    t.equal(echo.statusCode, 500, `control: echoing ${JSON.stringify(value)} into a header is a 500`)
    t.equal(echo.json().code, 'ERR_INVALID_CHAR')
  }
  t.equal((await s.app.inject({ url: '/echo', headers: { 'x-api-key': 'é' } })).statusCode, 200, 'control: latin1 is a valid header value')

  for (const value of values) {
    t.same(await codes(s.app, 4, { headers: { 'x-api-key': value } }), [200, 200, 429, 403], `x-api-key ${JSON.stringify(value)}`)
    t.same(await codes(s.app, 4, { headers: { 'x-user': value } }), [200, 200, 429, 403], `user id ${JSON.stringify(value)}`)
    t.same(await codes(s.app, 4, { url: '/kg', headers: { 'x-id': value } }), [200, 200, 429, 403], `keyGenerator ${JSON.stringify(value)}`)
  }
  // Under trustProxy: true a forged entry that is no address is its connection's address (each value here from
  // a connection of its own), and a blank one (CR, LF) is skipped, leaving the socket's address, exhausted and
  // banned by the first to use it.
  const xff: Record<string, string> = {}
  for (const [i, value] of values.entries()) {
    const remoteAddress = value === '\n' ? '198.51.100.2' : `198.51.100.${i + 1}`
    const statuses = await codes(s.app, 4, { headers: { 'x-forwarded-for': value }, remoteAddress })
    xff[JSON.stringify(value)] = `${s.keys.at(-1)!} ${statuses.join()}`
  }
  t.same(xff, {
    '"a\\r\\nSet-Cookie: x=1"': '198.51.100.1 200,200,429,403',
    '"\\r"': '198.51.100.2 200,200,429,403',
    '"\\n"': '198.51.100.2 403,403,403,403',
    '"a\\u0000b"': '198.51.100.4 200,200,429,403',
    '"a\u007fb"': '198.51.100.5 200,200,429,403',
    '"😀"': '198.51.100.6 200,200,429,403',
    '"a\\ud800"': '198.51.100.7 200,200,429,403',
    '"é"': '198.51.100.8 200,200,429,403'
  }, 'X-Forwarded-For: the identity and statuses for each value, never a 500')
})

// ---------------------------------------------------------------------------------------------------------
// 3. Rotating fake API keys from one IP.

t.test('with verifyApiKey, rotating fake API keys share the IP budget and make one Redis key in all', async t => {
  let verified = 0
  const s = await setup(t, {
    plugin: { max: 3, verifyApiKey: async apiKey => { verified++; return apiKey === 'real' } }
  })
  const fake = async (from: number, n: number, remoteAddress?: string): Promise<number[]> => {
    const out: number[] = []
    for (let i = from; i < from + n; i++) {
      out.push((await s.app.inject({ url: '/', headers: { 'x-api-key': `fake-${i}` }, ...(remoteAddress === undefined ? {} : { remoteAddress }) })).statusCode)
    }
    return out
  }
  t.same(await fake(0, 4), [200, 200, 200, 429], 'max + 1 fake keys: exactly one 429')
  t.same(await checkKeys(t, s, 10_000), [identityKeys(s.nameSpace, 'all', LOCAL).log], 'one key: the IP\'s log')
  t.same(await fake(4, 40), Array(40).fill(429), '40 more fake keys: all refused')
  t.same(await codes(s.app, 1), [429], 'and the IP without a key is refused too: it is the same budget')
  t.equal((await checkKeys(t, s, 10_000)).length, 1, 'still one key after 44 fake keys')
  t.same(new Set(s.keys), new Set([LOCAL]), 'every fake key was decided as the IP')
  t.equal(verified, 44, 'verifyApiKey was asked once per request with a key, refused or not: keep it cheap or cached')

  t.same(await fake(100, 4, '198.51.100.7'), [200, 200, 200, 429], 'another IP has its own budget, the same way')
  t.same(await codes(s.app, 4, { headers: { 'x-api-key': 'real' } }), [200, 200, 200, 429], 'a verified key has its own budget')
  t.equal((await checkKeys(t, s, 10_000)).length, 3, 'keys grow with IPs and real API keys, not with fake keys')
})

// ---------------------------------------------------------------------------------------------------------
// 4. Huge and duplicated header values.

t.test('an empty or over-long x-api-key is no identity: the client is limited by IP', async t => {
  const s = await setup(t)
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'k'.repeat(4096) } }), [200], 'a 4096-character key is an identity')
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'k'.repeat(4097) } }), [200])
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'k'.repeat(16 * 1024) } }), [200])
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': '' } }), [429], 'the third request from the IP, whatever the key')
  t.same(await codes(s.app, 1, { headers: { 'x-api-key': 'k'.repeat(1024 * 1024) } }), [429], 'a 1 MB key too')
  t.same(s.keys, [`apikey:${'k'.repeat(4096)}`, LOCAL, LOCAL, LOCAL, LOCAL])
  t.equal((await checkKeys(t, s, 10_000)).length, 2)
})

t.test('huge and duplicated x-api-key headers over a real socket', async t => {
  const s = await setup(t)
  const port = await listen(t, s.app)

  const big = await rawRequest(port, `x-api-key: ${'k'.repeat(16 * 1024)}\r\n`)
  t.equal(big.status, 431, 'a 16 KB header is over Node\'s limit: 431 before any hook')
  t.same(s.keys, [], 'the limiter never saw it')

  const long = `x-api-key: ${'k'.repeat(8000)}\r\n`
  const longStatuses = []
  for (let i = 0; i < 3; i++) longStatuses.push((await rawRequest(port, long)).status)
  t.same(longStatuses, [200, 200, 429], 'an 8000-character key fits the header limit, is no identity, and is limited by IP')
  t.same(s.keys, [LOCAL, LOCAL, LOCAL])

  // Node joins repeated x-api-key headers with ', ': the joined value is the identity while it is short enough.
  const s2 = await setup(t)
  const port2 = await listen(t, s2.app)
  const many = 'x-api-key:k\r\n'.repeat(500)
  const manyStatuses = []
  for (let i = 0; i < 3; i++) manyStatuses.push((await rawRequest(port2, many)).status)
  t.same(manyStatuses, [200, 200, 429], '500 x-api-key headers: one identity, limited exactly')
  const joined = `apikey:${Array(500).fill('k').join(', ')}`
  t.same(s2.keys.map(key => key === joined ? 'joined' : key.slice(0, 40)), ['joined', 'joined', 'joined'], 'the identity is the joined value')

  const longer = 'x-api-key: abcdefgh\r\n'.repeat(600)
  t.equal((await rawRequest(port2, longer)).status, 200)
  t.equal((await rawRequest(port2, longer)).status, 200)
  t.equal((await rawRequest(port2, 'x-api-key: abcdefgh\r\n'.repeat(601))).status, 429, 'joined past 4096 characters: the IP, limited')
  t.same(s2.keys.slice(3), [LOCAL, LOCAL, LOCAL])
  t.equal((await checkKeys(t, s2, 10_000)).length, 2)
})

// ---------------------------------------------------------------------------------------------------------
// 5. trustProxy: which identity a forged X-Forwarded-For gets, and the warning for `true`.

t.test('trustProxy table: forged X-Forwarded-For is honoured only from trusted proxies', async t => {
  const rows: Array<[string, string, string]> = [
    // [what, socket address, X-Forwarded-For]
    ['one hop', '127.0.0.1', '203.0.113.1'],
    ['many hops', '127.0.0.1', '198.51.100.1, 198.51.100.2, 203.0.113.2'],
    ['garbage', '127.0.0.1', 'not-an-address'],
    ['IPv6', '127.0.0.1', '2001:db8:aa:bb::1'],
    ['empty', '127.0.0.1', ''],
    ['from 10.1.2.3', '10.1.2.3', '203.0.113.3'],
    ['from 10.1.2.3 via 10.9.9.9', '10.1.2.3', '203.0.113.4, 10.9.9.9']
  ]
  const v6 = '2001:db8:aa:bb::'
  const socket = ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.1', '10.1.2.3', '10.1.2.3']
  // An entry that is no address is the proxy's: the socket's address (lib/forwarded.ts).
  const loopback = ['203.0.113.1', '203.0.113.2', '127.0.0.1', v6, '127.0.0.1', '10.1.2.3', '10.1.2.3']
  const table: Array<[string, FastifyServerOptions['trustProxy'], string[]]> = [
    ['false', false, socket],
    // Every proxy trusted: the left-most entry, whatever the client wrote there.
    ['true', true, ['203.0.113.1', '198.51.100.1', '127.0.0.1', v6, '127.0.0.1', '203.0.113.3', '203.0.113.4']],
    ["['127.0.0.1']", ['127.0.0.1'], loopback],
    ["'10.0.0.0/8'", '10.0.0.0/8', [...socket.slice(0, 5), '203.0.113.3', '203.0.113.4']],
    ['a function', (address: string) => address === '127.0.0.1', loopback],
    // A hop count is no longer in Fastify's types, and Fastify 5.12 fails closed on one at run time (it cannot
    // tell a proxy from a client that sends enough hops): the socket's address, and no warning.
    ['2 (a hop count)', 2 as unknown as FastifyServerOptions['trustProxy'], socket]
  ]
  for (const [name, trustProxy, identities] of table) {
    const s = await setup(t, { plugin: { max: 100 }, server: { trustProxy } })
    for (const [, remoteAddress, xff] of rows) await codes(s.app, 1, { remoteAddress, headers: { 'x-forwarded-for': xff } })
    t.same(s.keys, identities, `trustProxy ${name}: the address as theirs writes it (an entry that is no address, the socket's)`)
    // At register, the warning about a trustProxy that trusts everyone; at the first request with X-Forwarded-For
    // while trustProxy is off, the one about a proxy's clients sharing its budget (lib/identity.ts). (The one
    // about an entry that is no address is once per process: forwarded-ports.test.ts.)
    const warned = s.warnings.filter(line => line.msg.includes('X-Forwarded-For') && !line.msg.includes('does not trust its sender') && !line.msg.includes('that is no address'))
    t.equal(warned.length, trustProxy === true ? 1 : 0, `trustProxy ${name}: ${trustProxy === true ? 'one warning' : 'no warning'} about X-Forwarded-For at register`)
    const untrusted = s.warnings.filter(line => line.msg.includes('does not trust its sender'))
    t.equal(untrusted.length, trustProxy === false ? 1 : 0, `trustProxy ${name}: ${trustProxy === false ? 'one warning that X-Forwarded-For came while trustProxy is off' : 'no warning that trustProxy is off'}`)
    if (trustProxy === true) t.match(warned[0], { level: 40, msg: /trustProxy trusts every address/ }, 'a warning, at register, naming the option')
  }
})

t.test('a client that forges X-Forwarded-For gets a fresh budget only under trustProxy: true', async t => {
  const table: Array<[string, FastifyServerOptions['trustProxy'], number[]]> = [
    ['false', false, [200, 200, 429]],
    ['true', true, [200, 200, 200]],
    ["['10.0.0.0/8']", ['10.0.0.0/8'], [200, 200, 429]],
    ['a function', (address: string) => address.startsWith('10.'), [200, 200, 429]]
  ]
  for (const [name, trustProxy, expected] of table) {
    const s = await setup(t, { server: { trustProxy } })
    const statuses = []
    for (let i = 1; i <= 3; i++) {
      statuses.push((await s.app.inject({ url: '/', remoteAddress: '192.0.2.50', headers: { 'x-forwarded-for': `203.0.113.${i}` } })).statusCode)
    }
    t.same(statuses, expected, `trustProxy ${name}: three forged addresses from one client`)
    // Garbage buys nothing, even under `true` (where theirs gives each a budget of its own): an entry that is
    // no address is the connection's (lib/forwarded.ts).
    const garbage = await setup(t, { server: { trustProxy } })
    const garbageStatuses = []
    for (const xff of ['x', 'y', 'z']) garbageStatuses.push((await garbage.app.inject({ url: '/', headers: { 'x-forwarded-for': xff } })).statusCode)
    t.same(garbageStatuses, [200, 200, 429], `trustProxy ${name}: three garbage X-Forwarded-For, one client`)
  }
})

t.test('the trustProxy warning: once at register, also from an encapsulated context, never per request', async t => {
  const s = await setup(t, {
    server: { trustProxy: true },
    routes: app => { app.get('/', async () => 'ok') }
  })
  await codes(s.app, 5, { headers: { 'x-forwarded-for': '203.0.113.9' } })
  t.equal(s.warnings.filter(line => line.msg.includes('X-Forwarded-For')).length, 1, 'one warning after five requests')

  const lines: Array<{ level: number, msg: string }> = []
  const app = Fastify({ trustProxy: true, logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line) as { level: number, msg: string }) } } } })
  t.teardown(() => app.close())
  const { url } = await getRedis(t)
  await app.register(async child => {
    await child.register(rateGuard, { redis: url, nameSpace: uniquePrefix() })
    child.get('/', async () => 'ok')
  })
  await app.ready()
  t.equal(lines.filter(line => line.msg.includes('X-Forwarded-For')).length, 1, 'registered inside a plugin: the same one warning')
})

// ---------------------------------------------------------------------------------------------------------
// 6. CR/LF in a header over a raw socket.

t.test('raw socket: an x-api-key carrying \\r\\nSet-Cookie, bare CR, bare LF, obs-fold and NUL', async t => {
  const s = await setup(t)
  const port = await listen(t, s.app)

  // CRLF ends the header line: the rest is a second request header named Set-Cookie. Nothing more.
  const split = await rawRequest(port, 'x-api-key: k\r\nSet-Cookie: x=1\r\n')
  t.equal(split.status, 200, 'CRLF: two request headers, a normal request')
  t.same(split.headers.filter(([name]) => name === 'set-cookie'), [], 'no Set-Cookie in the response')
  t.notOk(split.text.includes('x=1'), 'the cookie value is nowhere in the response')
  t.same(s.keys, ['apikey:k'], 'the API key is the bytes before the CRLF')
  t.same(split.headers.filter(([name]) => name.startsWith('x-ratelimit-')), [['x-ratelimit-limit', '2'], ['x-ratelimit-remaining', '1'], ['x-ratelimit-reset', '10']])

  const rejected: Record<string, string> = {
    'bare CR': 'x-api-key: k\rSet-Cookie: x=1\r\n',
    'bare LF': 'x-api-key: k\nSet-Cookie: x=1\r\n',
    'obs-fold': 'x-api-key: k\r\n Set-Cookie: x=1\r\n',
    'obs-fold with a tab': 'x-api-key: k\r\n\tSet-Cookie: x=1\r\n',
    NUL: 'x-api-key: k\u0000Set-Cookie: x=1\r\n'
  }
  for (const [name, lines] of Object.entries(rejected)) {
    const res = await rawRequest(port, lines)
    t.equal(res.status, 400, `${name}: Node's parser answers 400 before any hook`)
    t.same(res.headers.filter(([header]) => header === 'set-cookie'), [], `${name}: no Set-Cookie`)
    t.notOk(res.text.includes('x=1'), `${name}: no echo`)
  }
  t.same(s.keys, ['apikey:k'], 'none of the rejected requests reached the limiter')
  t.ok(s.app.server.listening, 'the server is still up')

  // And limiting is exact afterwards, over the same socket server.
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await rawRequest(port, '')).status)
  t.same(statuses, [200, 200, 429], 'a normal client: max + 1 requests, exactly one 429')
  const again = []
  for (let i = 0; i < 2; i++) again.push((await rawRequest(port, 'x-api-key: k\r\n')).status)
  t.same(again, [200, 429], 'the API key from the CRLF request kept its one counted request')
})
