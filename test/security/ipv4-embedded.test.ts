// Attack (or accident): an IPv4 client written in one of IPv6's older IPv4-carrying forms, IPv4-compatible
// (`::a.b.c.d`, RFC 4291 §2.5.5.1) or SIIT's IPv4-translated (`::ffff:0:a.b.c.d`, RFC 2765), sits in the
// /64 `::`: masked, every such client would be one client, so one abuser spends (and bans) the budget of
// all of them. Defence: as IPv4-mapped (`::ffff:a.b.c.d`) and NAT64 addresses already are, such an address
// is keyed by the IPv4 address it carries, the same client as that address seen natively. `::` and `::1`
// (unspecified, loopback) carry no client's IPv4 and stay what `normalizeIP` makes of them. Against a
// real Redis.
import Fastify from 'fastify'
import t from 'tap'
import rateGuard, { normalizeIP } from '../../lib/index.js'
import { clientIP } from '../../lib/ip.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

t.test('clientIP: an IPv4-compatible or SIIT address is the IPv4 address it carries', async t => {
  t.equal(clientIP('::192.0.2.1'), '192.0.2.1', 'IPv4-compatible')
  t.equal(clientIP('::c000:202'), '192.0.2.2', 'written in hex')
  t.equal(clientIP('0:0:0:0:0:0:C000:203'), '192.0.2.3', 'written in full, in capitals')
  t.equal(clientIP('::192.0.2.4%eth0'), '192.0.2.4', 'with a zone')
  t.equal(clientIP('::ffff:0:198.51.100.7'), '198.51.100.7', 'SIIT')
  t.equal(clientIP('::FFFF:0:C633:6408'), '198.51.100.8', 'SIIT in hex, in capitals')
  t.equal(clientIP('0:0:0:0:ffff:0:198.51.100.9', 128), '198.51.100.9', 'under any ipv6Subnet')
  t.equal(clientIP('::192.0.2.1', 128), '192.0.2.1')
  t.not(clientIP('::192.0.2.1'), clientIP('::192.0.2.2'), 'two IPv4-compatible clients are two clients')
  t.not(clientIP('::ffff:0:192.0.2.1'), clientIP('::ffff:0:192.0.2.2'), 'two SIIT clients too')
  t.equal(clientIP('::'), '::', 'the unspecified address stays itself')
  t.equal(clientIP('::1'), '::', 'loopback stays itself (its /64)')
  t.equal(clientIP('::1', 128), '::1')
  t.equal(clientIP('::ffff:1:192.0.2.1'), '::', 'bits 64–79 set but not SIIT\'s: an ordinary IPv6 address, masked')
  t.equal(clientIP('1::192.0.2.1'), '1::', 'nor with a leading group')
})

t.test('normalizeIP stays @fastify/rate-limit\'s string for these forms (an app keying with it keeps theirs)', async t => {
  t.equal(normalizeIP('::192.0.2.1'), '::')
  t.equal(normalizeIP('::ffff:0:192.0.2.1'), '::')
})

t.test('IPv4 clients in IPv4-compatible or SIIT form have a budget each, shared with their native address, and its ban', async t => {
  const { url } = await getRedis(t)
  const app = Fastify()
  t.teardown(() => app.close())
  const keys: string[] = []
  await app.register(rateGuard, {
    redis: url,
    nameSpace: uniquePrefix(),
    timeout: 3000,
    timeWindow: '1 minute',
    allowList: ['::203.0.113.50'],
    max: (_request, key) => { keys.push(key); return 2 }
  })
  app.get('/', async () => 'ok')
  await app.ready()
  const ask = async (remoteAddress: string): Promise<number> => (await app.inject({ url: '/', remoteAddress })).statusCode
  t.same([await ask('::1.2.3.4'), await ask('1.2.3.4'), await ask('::ffff:1.2.3.4')], [200, 200, 429], '::1.2.3.4 and 1.2.3.4 are one client')
  t.same([await ask('::5.6.7.8'), await ask('::5.6.7.8'), await ask('::5.6.7.8')], [200, 200, 429], '::5.6.7.8 is another')
  t.same([await ask('::ffff:0:9.9.9.9'), await ask('9.9.9.9'), await ask('::9.9.9.9')], [200, 200, 429], 'SIIT, native and compatible: one client')
  t.same([await ask('::ffff:0:8.8.8.8')], [200], 'another SIIT client has its own budget')
  t.same([...new Set(keys)].slice(0, 4), ['1.2.3.4', '5.6.7.8', '9.9.9.9', '8.8.8.8'], 'keyed by the bare IPv4 address')
  t.same([await ask('203.0.113.50'), await ask('203.0.113.50'), await ask('203.0.113.50'), await ask('::ffff:0:203.0.113.50')], [200, 200, 200, 200], 'an allow-list entry in one form covers the others')
  t.same([await ask('::203.0.113.51'), await ask('::203.0.113.51'), await ask('::203.0.113.51')], [200, 200, 429], 'and no other client')
  await app.rateGuard.ban('::ffff:0:198.51.100.7', '1 minute')
  t.same([await ask('198.51.100.7'), await ask('::198.51.100.7'), await ask('::198.51.100.8')], [403, 403, 200], 'an operator\'s ban may spell it any way, and bans that client alone')
  t.equal((await app.rateGuard.peek('::c633:6407', { max: 2 })).status, 'banned', 'peek finds it in hex')
})
