// Attack: a banned client scans unmatched URLs, which no route's hook limits, for free. Defence: with
// `global: true`, a client known to be banned (held in process, or in the in-process store) is refused on
// unmatched URLs too, with the ban's 403 and Retry-After, at no Redis call; every other request to an
// unmatched URL is let by uncounted, costing nothing, unless the app limits its not-found handler itself.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { client, getRedis, ready, scriptCalls, subscribed, uniquePrefix } from '../helpers/redis.js'

async function make (t: Test, options: RateGuardOptions, notFound?: (app: FastifyInstance) => void): Promise<FastifyInstance> {
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { max: 1, timeWindow: '1 minute', ban: { threshold: 1, duration: '10 minutes' }, timeout: 3000, ...options })
  app.get('/', async () => 'ok')
  notFound?.(app)
  await app.ready()
  return app
}

t.test('with Redis: a banned client is refused on unmatched URLs from what is held, at no Redis call; others get their 404', async t => {
  const { url } = await getRedis(t)
  const observer = await ready(client(t, url))
  const nameSpace = uniquePrefix()
  const app = await make(t, { redis: url, nameSpace })
  await subscribed(observer, nameSpace, 1)
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 403], 'banned on a route')
  const before = await scriptCalls(observer)
  const scan = await Promise.all(['/admin', '/.env', '/wp-login.php'].map(async path => await app.inject(path)))
  t.same(scan.map(res => res.statusCode), [403, 403, 403], 'refused on unmatched URLs')
  t.ok(scan.every(res => Number(res.headers['retry-after']) >= 599), 'with the ban\'s Retry-After')
  t.equal(await scriptCalls(observer) - before, 0, 'no Redis call')
  const other = await app.inject({ url: '/admin', remoteAddress: '10.0.0.9' })
  t.equal(other.statusCode, 404, 'another client: the app\'s 404')
  t.equal(await scriptCalls(observer) - before, 0, 'still no Redis call: unmatched URLs are not counted')
})

t.test('in process: the same from the store', async t => {
  const app = await make(t, {})
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode, (await app.inject('/nope')).statusCode], [200, 403, 403])
  t.equal((await app.inject({ url: '/nope', remoteAddress: '10.0.0.9' })).statusCode, 404)
})

t.test('global: false leaves unmatched URLs alone; an app that limits its not-found handler counts them', async t => {
  const off = await make(t, { global: false }, app => {
    app.get('/limited', { config: { rateLimit: { max: 1, timeWindow: '1 minute', ban: { threshold: 1, duration: '1 minute' } } } }, async () => 'ok')
  })
  t.same([(await off.inject('/limited')).statusCode, (await off.inject('/limited')).statusCode, (await off.inject('/nope')).statusCode], [200, 403, 404])
  const counted = await make(t, {}, app => { app.setNotFoundHandler({ preHandler: app.rateLimit() }, async (_request, reply) => await reply.code(404).send('none')) })
  t.same([(await counted.inject('/nope')).statusCode, (await counted.inject('/nope')).statusCode, (await counted.inject('/')).statusCode], [404, 403, 403], 'the not-found handler\'s own limiter counts and bans')
})

t.test('on unmatched URLs, an allow-listed client and one whose limits cannot be computed are let by', async t => {
  const listed = await make(t, { allowList: ['10.0.0.5'] })
  await listed.rateGuard.ban('ip:10.0.0.5', '1 minute')
  t.equal((await listed.inject({ url: '/nope', remoteAddress: '10.0.0.5' })).statusCode, 404, 'allow-listed: never limited')
  const failing = await make(t, { max: () => { throw new Error('no plan') } })
  t.equal((await failing.inject('/nope')).statusCode, 404, 'a limit function that fails: nothing known, the app\'s 404')
})
