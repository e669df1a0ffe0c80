// Attack (or a load balancer's default): a proxy that writes `ip:port` into X-Forwarded-For (Azure's
// Application Gateway and Front Door do; others write `[v6]:port`) makes request.ip a new string on every
// connection, so each connection of one client was a client with a fresh budget: 20 connections at max 3, 20
// allowed. `[::ffff:1.2.3.4]`, `001.002.003.004` and `1.2.3.4%eth0` were each a client of their own too.
// Defence: such an entry is its plain address (ipv6Subnet still masks it); one that is no address even so
// is the proxy's (the connection's address), never a fresh identity, with one warning naming the fix. Over
// real HTTP, a real Redis, trustProxy set to the proxy on 127.0.0.1.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { normalizeIP } from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { clientIP } from '../../lib/ip.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

/** Odd forms and the plain address each is; `clientIP` and `normalizeIP` agree on all of them. */
const FORMS: Array<[string, string]> = [
  ['1.2.3.4:5678', '1.2.3.4'],
  ['1.2.3.4:0', '1.2.3.4'],
  ['1.2.3.4:65535', '1.2.3.4'],
  ['[2001:db8::1]:443', '2001:db8::'],
  ['[2001:DB8:0:0:ABCD::1]', '2001:db8::'],
  ['[::ffff:1.2.3.4]', '1.2.3.4'],
  ['[::ffff:1.2.3.4]:80', '1.2.3.4'],
  ['[1.2.3.4]:80', '1.2.3.4'],
  ['001.002.003.004', '1.2.3.4'],
  ['010.000.000.001', '10.0.0.1'],
  ['0000000001.2.3.4', '1.2.3.4'],
  ['001.002.003.004:8080', '1.2.3.4'],
  ['::ffff:001.002.003.004', '1.2.3.4'],
  ['1.2.3.4%eth0', '1.2.3.4'],
  ['1.2.3.4%eth0:80', '1.2.3.4'],
  ['1.2.3.4%', '1.2.3.4'],
  ['[fe80::1%25eth0]:443', 'fe80::'],
  ['[fe80::1%eth0]', 'fe80::']
]

/** Entries that are no address however read: given back as they are (`normalizeIP`, lower case). */
const UNREADABLE = [
  '0x7f.1', '0177.0.0.1.1', '1.2.3', '127.1', '2130706433', '0x7f000001', '256.1.1.1', '1.2.3.4:', '1.2.3.4:99999',
  '1.2.3.4:123456', '1.2.3.4:8o', '[1.2.3.4', '[::1]x', '[::1]:', '[]', '[]:80', 'garbage', 'user:victim',
  '::ffff:256.1.1.1', 'zz::001.002.003.004', '2001:db8::1:80:1:2:3:4:5', `1.2.3.${'0'.repeat(200)}4`, `${'1'.repeat(400)}.2.3.4`
]

t.test('an address as a proxy writes it is the plain address; what is no address stays what normalizeIP gave', async t => {
  for (const [entry, plain] of FORMS) {
    t.equal(clientIP(entry), plain, entry)
    t.equal(normalizeIP(entry), plain, `${entry}: normalizeIP too`)
  }
  t.equal(clientIP('[2001:db8:1:2::1]:443', 48), '2001:db8:1::', 'ipv6Subnet masks it after')
  t.equal(clientIP('[2001:db8::1]:443', 128), '2001:db8::1', 'and keeps it whole at 128')
  t.equal(clientIP('[::192.0.2.1]:80'), '192.0.2.1', 'an IPv4-compatible address in brackets is its IPv4')
  for (const entry of UNREADABLE) t.equal(clientIP(entry), entry.toLowerCase(), `${entry.slice(0, 30)}: not read`)
})

interface Logged { msg: string, entry?: string, key?: string }

async function listen (t: Test, options: RateGuardOptions = {}): Promise<{ get: (forwarded: string, path?: string) => Promise<number>, keys: string[], warnings: Logged[] }> {
  const { url } = await getRedis(t)
  const warnings: Logged[] = []
  const app = Fastify({ trustProxy: '127.0.0.1', logger: { level: 'warn', stream: { write: (line: string) => { warnings.push(JSON.parse(line) as Logged) } } } })
  t.teardown(() => app.close())
  const keys: string[] = []
  await app.register(rateGuard, {
    redis: url,
    nameSpace: uniquePrefix(),
    timeout: 3000,
    timeWindow: '1 minute',
    ban: false,
    max: (_request, key) => { keys.push(key); return 3 },
    ...options
  })
  app.get('/', async () => 'ok')
  app.get('/whole', { config: { rateLimit: { ipv6Subnet: 128 } } }, async () => 'ok')
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  // A connection of its own for every request (agent: false), as a proxy without keep-alive upstream opens them.
  const get = async (forwarded: string, path = '/'): Promise<number> => await new Promise((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path, agent: false, headers: { 'x-forwarded-for': forwarded } }, res => {
      res.resume()
      res.on('end', () => resolve(res.statusCode!))
    }).on('error', reject)
  })
  return { get, keys, warnings }
}

const allowed = (statuses: number[]): number => statuses.filter(status => status === 200).length

t.test('one client on 20 connections, each entry with its own port: max 3 allowed in all, no warning', async t => {
  const server = await listen(t)
  const v4: number[] = []
  for (let i = 0; i < 20; i++) v4.push(await server.get(`198.51.100.7:${40000 + i}`))
  t.equal(allowed(v4), 3, `ip:port: ${allowed(v4)} of 20 allowed`)
  const v6: number[] = []
  for (let i = 0; i < 20; i++) v6.push(await server.get(`[2001:db8:7::${i + 1}]:${40000 + i}`))
  t.equal(allowed(v6), 3, `[v6]:port, one /64: ${allowed(v6)} of 20 allowed`)
  t.same([...new Set(server.keys)], ['198.51.100.7', '2001:db8:7::'], 'keyed by the plain address')
  t.same(server.warnings, [], 'no warning: these are read')
})

t.test('each odd form is the same client as its plain form, and ipv6Subnet still masks it', async t => {
  const server = await listen(t)
  const pairs: Array<[string, string]> = [
    ['203.0.113.1:5678', '203.0.113.1'],
    ['[::ffff:203.0.113.2]', '203.0.113.2'],
    ['[::ffff:203.0.113.3]:80', '::ffff:203.0.113.3'],
    ['203.000.113.004', '203.0.113.4'],
    ['203.0.113.5%eth0', '203.0.113.5'],
    ['[2001:db8:5::1]:443', '2001:db8:5::ffff'],
    ['[2001:db8:6::1]', '2001:db8:6::2'],
    ['[fe80::1%25eth0]:443', 'fe80::9']
  ]
  for (const [odd, plain] of pairs) {
    t.same([await server.get(plain), await server.get(odd), await server.get(odd), await server.get(plain)], [200, 200, 200, 429], `${odd} is ${plain}`)
  }
  t.same([await server.get('[2001:db8:8::1]:1', '/whole'), await server.get('[2001:db8:8::2]:1', '/whole')], [200, 200], 'ipv6Subnet 128: two addresses of one /64 are two clients')
  t.same(server.keys.slice(-2), ['2001:db8:8::1', '2001:db8:8::2'], 'each its whole address')
  t.same(server.warnings, [])
})

t.test('an entry that is no address is the proxy\'s, with one warning naming the fix; hostile ones never crash', async t => {
  const server = await listen(t, { max: (_request, key) => { server.keys.push(key); return 1000 } })
  const processWarnings: Error[] = []
  const onWarning = (warning: Error): void => { processWarnings.push(warning) }
  process.on('warning', onWarning)
  t.teardown(() => process.off('warning', onWarning))
  const statuses: number[] = []
  for (const entry of UNREADABLE) statuses.push(await server.get(entry))
  statuses.push(await server.get('x'.repeat(12_000)))
  statuses.push(await server.get('\u00e9\u00ff!"#$%&\'()*+/;<=>?@\\^`{|}~'))
  // (Not `0x7f.1` last: proxy-addr reads it as 127.0.0.1, so trustProxy trusts it as the proxy itself.)
  statuses.push(await server.get(`${'1.1.1.1, '.repeat(1400)}1.2.3.4:80:80`))
  t.same(statuses, new Array(UNREADABLE.length + 3).fill(200), 'every request answered')
  t.same([...new Set(server.keys)], ['127.0.0.1'], 'all of them keyed as the proxy on the socket, never as the entry')
  t.equal(server.warnings.length, 1, 'one warning for them all')
  t.match(server.warnings[0], { entry: UNREADABLE[0], key: '127.0.0.1' }, 'saying what came and what it was counted as')
  t.match(server.warnings[0]?.msg, /trustProxy/, 'naming Fastify\'s trustProxy')
  t.match(server.warnings[0]?.msg, /make the proxy write plain addresses/, 'and the proxy\'s own setting')
  t.same(processWarnings.filter(w => /rate-guard/.test(w.message)), [], 'to the app\'s log alone (forwarded-warning.test.ts: without a logger)')
  t.equal(await server.get(`${'1.1.1.1, '.repeat(1400)}192.0.2.200:80`), 200, 'thousands of entries: the nearest one read')
  t.equal(server.keys.at(-1), '192.0.2.200')
})
