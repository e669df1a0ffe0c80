// Attack (or accident): behind a NAT64 / SIIT translator, IPv4 clients reach an IPv6 server as
// 64:ff9b::a.b.c.d; masked to its /64, every IPv4 client of the internet would be one client, so one abuser
// spends (and bans) everyone's budget. Defence: an address in the well-known prefix (64:ff9b::/96) or the
// local-use one (64:ff9b:1::/48, read with the /96 layout) is keyed by the IPv4 address it carries, the same
// client as that address seen natively. Against a real Redis.
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'
import { clientIP } from '../../lib/ip.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

t.test('clientIP: a translated IPv4 client is that IPv4 address; other IPv6 addresses are masked', async t => {
  t.equal(clientIP('64:ff9b::192.0.2.1'), '192.0.2.1')
  t.equal(clientIP('64:ff9b::c000:202'), '192.0.2.2', 'written in hex')
  t.equal(clientIP('64:FF9B::C000:203'), '192.0.2.3', 'in capitals')
  t.equal(clientIP('64:ff9b:1::198.51.100.7'), '198.51.100.7', 'the local-use prefix')
  t.equal(clientIP('64:ff9b:1:abcd::198.51.100.8'), '198.51.100.8', 'a /96 inside it')
  t.equal(clientIP('64:ff9b:0:0:1::1.2.3.4'), '64:ff9b::', 'not the well-known /96 (bits 64–95 set): an ordinary IPv6 address, masked')
  t.equal(clientIP('64:ff9b:2::1.2.3.4'), '64:ff9b:2::', 'nor outside 64:ff9b:1::/48')
  t.equal(clientIP('2001:db8::1'), '2001:db8::')
  t.equal(clientIP('192.0.2.9'), '192.0.2.9')
  t.equal(clientIP(undefined), 'unknown')
})

t.test('two IPv4 clients behind NAT64 have a budget each; a translated client shares its native address\'s budget and ban', async t => {
  const { url } = await getRedis(t)
  const app = Fastify()
  t.teardown(() => app.close())
  const keys: string[] = []
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), timeout: 3000, timeWindow: '1 minute', max: (_request, key) => { keys.push(key); return 2 } })
  app.get('/', async () => 'ok')
  await app.ready()
  const ask = async (remoteAddress: string): Promise<number> => (await app.inject({ url: '/', remoteAddress })).statusCode
  t.same([await ask('64:ff9b::192.0.2.1'), await ask('64:ff9b::192.0.2.1'), await ask('64:ff9b::192.0.2.1')], [200, 200, 429], 'one translated client: max 2')
  t.same([await ask('64:ff9b::192.0.2.2'), await ask('192.0.2.2'), await ask('64:ff9b::c000:202')], [200, 200, 429], 'another: a budget of its own, shared with its native address')
  t.same([...new Set(keys)], ['192.0.2.1', '192.0.2.2'], 'keyed by the bare IPv4 address, as @fastify/rate-limit')
  await app.rateGuard.ban('64:ff9b::198.51.100.7', '1 minute')
  t.same([await ask('198.51.100.7'), await ask('64:ff9b::198.51.100.7')], [403, 403], 'an operator\'s ban may spell it either way')
})
