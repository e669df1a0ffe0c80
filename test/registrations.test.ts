// Several registrations in one app: a registration inside another cannot decorate the app again (Fastify
// decorators are inherited), so the outer `fastify.rateGuard` takes it in and reaches both; nothing is
// skipped without a word. Hooks are inherited too, as Fastify means them (and as @fastify/rate-limit does):
// a route inside the inner context is limited by both registrations. Against a real Redis.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import fastifyRateLimit from '@fastify/rate-limit'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { getRedis, uniquePrefix } from './helpers/redis.js'

const ok = async (): Promise<string> => 'ok'
const ME = '127.0.0.1'

interface Nested { app: FastifyInstance, outer: string, inner: string, warnings: string[] }

/**
 * An app with one registration (max 4; `/a` on its default budget, `/d` with a budget of its own) and another
 * inside a child context (max 2; `/b` on its default budget, `/c` with a budget of its own in each).
 */
async function nested (t: Test): Promise<Nested> {
  const { url } = await getRedis(t)
  const warnings: string[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  const [outer, inner] = [uniquePrefix(), uniquePrefix()]
  await app.register(rateGuard, { redis: url, nameSpace: outer, max: 4, timeWindow: '1 minute', timeout: 3000 })
  app.get('/a', ok)
  app.get('/d', { config: { rateLimit: { max: 3, timeWindow: '1 minute' } } }, ok)
  await app.register(async child => {
    await child.register(rateGuard, { redis: url, nameSpace: inner, max: 2, timeWindow: '1 minute', timeout: 3000 })
    child.get('/b', ok)
    child.get('/c', { config: { rateLimit: { max: 5, timeWindow: '1 minute' } } }, ok)
  })
  await app.ready()
  return { app, outer, inner, warnings }
}

async function statuses (app: FastifyInstance, ...urls: string[]): Promise<number[]> {
  const out: number[] = []
  for (const url of urls) out.push((await app.inject(url)).statusCode)
  return out
}

t.test('a registration inside another: a route of the inner context is limited by both, and the inner one says how to reach it', async t => {
  const { app, inner, warnings } = await nested(t)
  // The outer hook runs first: it counts each /b (three of its four), the inner one refuses the third.
  t.same(await statuses(app, '/b', '/b', '/b', '/a', '/a'), [200, 200, 429, 200, 429], 'the inner limit binds on /b, and the outer counts /b with /a')
  t.same(warnings, ['rate-guard: registered inside another registration: fastify.rateGuard reaches both, fastify.rateLimit and createRateLimit are the outer one\'s; this one\'s are fastify.rateGuard.of(nameSpace)'], 'warned once, saying where its own are')
  t.equal(app.rateGuard.of(inner).nameSpace, inner)
  t.type(app.rateGuard.of(inner).rateLimit, 'function', 'its rateLimit')
  t.type(app.rateGuard.of(inner).createRateLimit, 'function', 'and createRateLimit')
  t.throws(() => app.rateGuard.of('nope:'), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /no registration with nameSpace "nope:"/ })
})

t.test('ban, unban and reset reach every registration', async t => {
  const { app } = await nested(t)
  await app.rateGuard.ban(ME, '1 minute')
  t.same(await statuses(app, '/a', '/b', '/c', '/d'), [403, 403, 403, 403], 'banned on the routes of both')
  await app.rateGuard.unban(ME)
  t.same(await statuses(app, '/a', '/b', '/b', '/b'), [200, 200, 200, 429], 'unbanned on both')
  await app.rateGuard.reset(ME)
  t.same(await statuses(app, '/b', '/b', '/a', '/a'), [200, 200, 200, 200], 'reset on both')
})

t.test('peek and overrides go to the registration that has the budget; an ambiguous one is refused, naming the way out', async t => {
  const { app, outer, inner } = await nested(t)
  await statuses(app, '/d', '/d')
  t.match(await app.rateGuard.peek(ME, { route: 'GET /d' }), { count: 2, max: 3 }, 'GET /d is the outer registration\'s only')
  await app.rateGuard.setOverride(ME, { route: 'GET /d', max: 2, timeWindow: '1 minute', ttl: '1 minute' })
  t.same(await statuses(app, '/d'), [429], 'its override holds there')
  await app.rateGuard.clearOverride(ME, { route: 'GET /d' })
  t.same(await statuses(app, '/d'), [200])
  await t.rejects(app.rateGuard.peek(ME), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: new RegExp(`budget "default" is in 2 registrations \\(nameSpaces "${outer}", "${inner}"\\): choose one with fastify.rateGuard.of\\(nameSpace\\)`) })
  await t.rejects(app.rateGuard.setOverride(ME, { route: 'GET /c', max: 1, timeWindow: '1 minute', ttl: '1 minute' }), { message: /budget "GET \/c" is in 2 registrations/ }, 'a route of the inner context has a budget in both')
  await t.rejects(app.rateGuard.peek(ME, { route: 'GET /nowhere' }), { message: /no budget named "GET \/nowhere"/ })
  t.ok(app.rateGuard.has('GET /c') && app.rateGuard.has('GET /d') && app.rateGuard.has('default') && !app.rateGuard.has('GET /nowhere'), 'has() answers for them all')
  await statuses(app, '/c')
  t.match(await app.rateGuard.of(outer).peek(ME, { route: 'GET /c' }), { count: 1, max: 5 }, 'of(nameSpace) picks one')
  t.match(await app.rateGuard.of(inner).peek(ME), { count: 0, max: 2 })
})

t.test('beside another plugin\'s decorators: theirs are kept, and ours are reached through rateGuard, with a warning', async t => {
  const { url } = await getRedis(t)
  const warnings: string[] = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  await app.register(fastifyRateLimit, { global: false })
  const theirs = app.rateLimit
  const nameSpace = uniquePrefix()
  await app.register(rateGuard, { redis: url, nameSpace, global: false, timeout: 3000 })
  t.equal(app.rateLimit, theirs, 'their rateLimit is left as it was')
  t.same(warnings, [
    'rate-guard: fastify.rateLimit is another plugin\'s; this registration\'s is fastify.rateGuard.of(nameSpace).rateLimit',
    'rate-guard: fastify.createRateLimit is another plugin\'s; this registration\'s is fastify.rateGuard.of(nameSpace).createRateLimit'
  ])
  app.get('/x', { onRequest: app.rateGuard.of(nameSpace).rateLimit({ max: 1, timeWindow: '1 minute' }) }, ok)
  t.same(await statuses(app, '/x', '/x'), [200, 429], 'ours, through of()')
})

t.test('a rateGuard decorator that is not ours fails registration with a coded error', async t => {
  const app = Fastify()
  t.teardown(() => app.close())
  app.decorate('rateGuard', {} as never)
  await t.rejects(async () => { await app.register(rateGuard, {}) }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /expected no other plugin to decorate fastify.rateGuard/ })
})

t.test('a registration inside another with its nameSpace is refused before it connects: both would count each request on the same keys', async t => {
  const { url } = await getRedis(t)
  const app = Fastify()
  t.teardown(() => app.close())
  const nameSpace = uniquePrefix()
  await app.register(rateGuard, { redis: url, nameSpace, timeout: 3000 })
  await t.rejects(async () => {
    await app.register(async child => { await child.register(rateGuard, { redis: url, nameSpace, timeout: 3000 }) })
  }, { code: 'FST_RATE_GUARD_INVALID_OPTION', message: new RegExp(`"nameSpace": "${nameSpace}" is the nameSpace of the registration this one is inside`) })
})

t.test('a nameSpace is refused twice only when both registrations count in Redis; of() it is then refused, as ambiguous', async t => {
  const { url } = await getRedis(t)
  const nameSpace = uniquePrefix()
  // In process, each registration counts in a store of its own: the same nameSpace shares no key.
  const app = Fastify()
  t.teardown(() => app.close())
  await app.register(rateGuard, { nameSpace, max: 3, timeWindow: '1 minute' })
  app.get('/a', ok)
  await app.register(async child => {
    await child.register(rateGuard, { nameSpace, max: 1, timeWindow: '1 minute' })
    child.get('/b', ok)
  })
  await app.ready()
  // The outer hook counts each /b too (two of its three); the inner refuses the second /b.
  t.same(await statuses(app, '/b', '/b', '/a', '/a'), [200, 429, 200, 429], 'both limit, each on its own store')
  t.throws(() => app.rateGuard.of(nameSpace), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: new RegExp(`"of": .*2 registrations have nameSpace "${nameSpace}"`) })

  // One in Redis, one in process: no key in common either.
  const mixed = Fastify()
  t.teardown(() => mixed.close())
  await mixed.register(rateGuard, { redis: url, nameSpace, timeout: 3000 })
  await t.resolves(async () => { await mixed.register(async child => { await child.register(rateGuard, { nameSpace }) }).ready() }, 'Redis outside, in process inside')
  t.throws(() => mixed.rateGuard.of(nameSpace), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /2 registrations have nameSpace/ })
})
