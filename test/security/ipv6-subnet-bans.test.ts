// The rule for bans across routes with different ipv6Subnet: a ban is on the client as the route that earned
// it names it. An IPv6 client banned on a route keyed at /48 has its whole /48 banned on the routes keyed at
// /48; on the plugin's routes (/64) it is another identity, and is not banned there; and the other way round.
// The operator's calls name a client at the plugin's subnet; a /48 key is banned by spelling its address.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'

async function ask (app: FastifyInstance, url: string, remoteAddress: string): Promise<number> {
  return (await app.inject({ url, remoteAddress })).statusCode
}

t.test('a ban earned at /48 holds for the /48 on the /48 routes; the plugin\'s /64 routes key the client apart', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { max: 1, timeWindow: '1 minute', ban: { threshold: 1, duration: '10 minutes' } })
  app.get('/wide', { config: { rateLimit: { ipv6Subnet: 48 } } }, async () => 'ok')
  app.get('/wide-too', { config: { rateLimit: { ipv6Subnet: 48, groupId: 'wide' } } }, async () => 'ok')
  app.get('/', async () => 'ok')
  await app.ready()
  const [a, b] = ['2001:db8:1:2::5', '2001:db8:1:3::5']
  t.same([await ask(app, '/wide', a), await ask(app, '/wide', a)], [200, 403], 'banned on a /48 route')
  t.equal(await ask(app, '/wide', b), 403, 'another /64 of the same /48: banned there too')
  t.equal(await ask(app, '/wide-too', b), 403, 'and on every route keyed at /48')
  t.equal(await ask(app, '/', a), 200, 'the plugin\'s /64 route: another identity, not banned')
  t.same([await ask(app, '/', b), await ask(app, '/', b)], [200, 403], 'banned at /64 on the plugin\'s route')
  t.equal(await ask(app, '/', '2001:db8:1:4::5'), 200, 'which bans no other /64')

  await app.rateGuard.ban('2001:db8:9::', '1 minute')
  t.equal(await ask(app, '/wide', '2001:db8:9:7::1'), 403, 'an operator bans a /48 key by spelling its address')
})
