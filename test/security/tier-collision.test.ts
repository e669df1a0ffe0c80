// The IP tier is the bare address, as @fastify/rate-limit writes it: a request.ip that is no address (a
// forged X-Forwarded-For entry, under a trustProxy that trusts it) must not land on another tier's key: it
// is the connection's address (lib/forwarded.ts).
// Attack: `X-Forwarded-For: USER:victim` would otherwise spend (or ban) the budget of user `victim`.
import Fastify from 'fastify'
import t from 'tap'
import rateGuard from '../../lib/index.js'

t.test('a forged X-Forwarded-For that spells a user key spends a budget of its own, not the user\'s', async t => {
  const app = Fastify({ trustProxy: true })
  t.teardown(() => app.close())
  await app.register(rateGuard, { max: 2, timeWindow: 60_000, userId: (request) => request.headers['x-user'] })
  app.get('/', async () => 'ok')
  const forged = []
  for (let i = 0; i < 3; i++) forged.push((await app.inject({ url: '/', headers: { 'x-forwarded-for': 'USER:victim' } })).statusCode)
  t.same(forged, [200, 200, 429], 'the forger is limited on its own key')
  const victim = await app.inject({ url: '/', headers: { 'x-forwarded-for': '10.9.9.9', 'x-user': 'victim' } })
  t.equal(victim.statusCode, 200, 'the user it spells keeps a whole budget')
  t.equal(victim.headers['x-ratelimit-remaining'], '1')
  t.equal((await app.rateGuard.peek('127.0.0.1')).count, 2, 'the forged entry is counted as the connection\'s address')
})
