// @fastify/rate-limit compatibility, route config: `config.rateLimit` is an object (over the plugin's options)
// or false; null is no configuration; anything else fails at register. Routes without config share the
// plugin's counter per client; a configured route counts on its own. A route may set what theirs lets it
// set: its `hook`, `skipOnError`, `ipv6Subnet`. Each case runs @fastify/rate-limit beside this plugin.
import t from 'tap'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import { Redis } from 'ioredis'
import rateGuard from '../../lib/index.js'
import { appWith, statuses, theirPlugin } from './helpers.js'
import type { Plugin } from './helpers.js'
import { freePort } from '../helpers/redis.js'

const PLUGINS: readonly Plugin[] = ['theirs', 'ours']
const HEAD = (url: string): { method: 'HEAD', url: string } => ({ method: 'HEAD', url })

/** Both plugins' status codes for the same app and requests. */
async function side (t: Parameters<typeof appWith>[0], options: Record<string, unknown>, more: (app: FastifyInstance) => void, requests: Parameters<typeof statuses>[1]): Promise<Record<Plugin, number[]>> {
  const out = { theirs: [] as number[], ours: [] as number[] }
  for (const plugin of PLUGINS) out[plugin] = await statuses(await appWith(t, plugin, options, {}, more), requests)
  return out
}

t.test('routes without config share the plugin\'s counter per client; a configured route counts on its own', async t => {
  const seen = await side(t, { max: 2, timeWindow: '1 minute' }, app => {
    app.get('/a', async () => 'a')
    app.get('/null', { config: { rateLimit: null as never } }, async () => 'null')
    app.get('/own', { config: { rateLimit: { max: 3 } } }, async () => 'own')
    app.get('/off', { config: { rateLimit: false } }, async () => 'off')
  }, ['/', '/a', '/null', '/own', '/own', '/own', '/own', '/off', '/off', '/off'])
  t.strictSame(seen.ours, seen.theirs)
  t.strictSame(seen.ours, [200, 200, 429, 200, 200, 200, 429, 200, 200, 200], 'null is the plugin\'s budget; false is none')
})

t.test('anything but an object, null or false fails registration, with their message', async t => {
  // Theirs merges an array as an object of options (recorded); here an array is the same error.
  for (const config of [true, 'yes', 1, []]) {
    for (const plugin of Array.isArray(config) ? ['ours'] : PLUGINS) {
      const app = Fastify()
      t.teardown(() => app.close())
      await app.register((plugin === 'theirs' ? theirPlugin : rateGuard) as FastifyPluginAsync)
      const declared = (async () => { app.get('/', { config: { rateLimit: config as never } }, async () => 'ok') })()
      await t.rejects(declared, { message: /^Unknown value for route rate-limit configuration/ }, `${plugin}: ${JSON.stringify(config)}`)
    }
  }
})

t.test('HEAD: an unconfigured route\'s HEAD shares the GET budget, as theirs; a configured one\'s too (theirs: a budget of its own, recorded)', async t => {
  const requests = ['/plain', HEAD('/plain'), '/plain', '/conf', HEAD('/conf'), '/conf', HEAD('/conf')]
  const seen = await side(t, { max: 2, timeWindow: '1 minute' }, app => {
    app.get('/plain', async () => 'ok')
    app.get('/conf', { config: { rateLimit: { max: 2 } } }, async () => 'ok')
  }, requests)
  t.strictSame(seen.ours.slice(0, 3), seen.theirs.slice(0, 3), 'unconfigured: the same')
  t.strictSame(seen.theirs.slice(3), [200, 200, 200, 200], 'theirs: GET and HEAD of a configured route count apart, so alternating them doubles the budget')
  t.strictSame(seen.ours.slice(3), [200, 200, 429, 429], 'ours: HEAD asks for the GET\'s resource, on its budget')
})

t.test('routes of one method and URL told apart by constraints (version, host) each count on their own, as theirs', async t => {
  const as = (version: string, host = 'localhost'): { url: string, headers: Record<string, string> } => ({ url: '/v', headers: { 'accept-version': version, host } })
  const requests = [as('1.0.0'), as('2.0.0'), as('1.0.0'), as('2.0.0'), as('2.0.0'), as('3.0.0', 'api.example.com'), as('3.0.0', 'api.example.com')]
  const seen = await side(t, { max: 5, timeWindow: '1 minute' }, app => {
    app.get('/v', { constraints: { version: '1.0.0' }, config: { rateLimit: { max: 1 } } }, async () => 'v1')
    app.get('/v', { constraints: { version: '2.0.0' }, config: { rateLimit: { max: 2 } } }, async () => 'v2')
    app.get('/v', { constraints: { version: '3.0.0', host: /^api\./ }, config: { rateLimit: { max: 1 } } }, async () => 'v3')
  }, requests)
  t.strictSame(seen.ours, seen.theirs)
  t.strictSame(seen.ours, [200, 200, 429, 200, 429, 200, 429], 'different limits register, and each route has its own count')
})

t.test('a route\'s hook: the limiter runs where the route says, as theirs', async t => {
  // A preValidation hook names the user: only a limiter running later (preHandler) sees who it is.
  const more = (app: FastifyInstance): void => {
    app.addHook('preValidation', async request => { (request as { user?: string }).user = request.headers['x-user'] as string })
    const keyGenerator = (request: { user?: string }): string => request.user ?? 'nobody'
    app.get('/late', { config: { rateLimit: { hook: 'preHandler', keyGenerator } } }, async () => 'late')
    app.get('/early', { config: { rateLimit: { keyGenerator } } }, async () => 'early')
  }
  const as = (url: string, user: string): { url: string, headers: Record<string, string> } => ({ url, headers: { 'x-user': user } })
  const requests = [as('/late', 'alice'), as('/late', 'bob'), as('/late', 'alice'), as('/early', 'alice'), as('/early', 'bob')]
  const seen = await side(t, { max: 1, timeWindow: '1 minute' }, more, requests)
  t.strictSame(seen.ours, seen.theirs)
  t.strictSame(seen.ours, [200, 200, 429, 200, 429], 'preHandler: one budget per user; onRequest: nobody yet, one budget')
})

t.test('a route\'s ipv6Subnet: how much of an IPv6 address is one client there, as theirs', async t => {
  const from = (url: string, address: string): { url: string, remoteAddress: string } => ({ url, remoteAddress: address })
  const requests = [from('/', '2001:db8::1'), from('/', '2001:db8::2'), from('/fine', '2001:db8::1'), from('/fine', '2001:db8::2'), from('/fine', '2001:db8::1')]
  const seen = await side(t, { max: 1, timeWindow: '1 minute' }, app => {
    app.get('/fine', { config: { rateLimit: { ipv6Subnet: 128 } } }, async () => 'ok')
  }, requests)
  t.strictSame(seen.ours, seen.theirs)
  t.strictSame(seen.ours, [200, 429, 200, 200, 429], 'one /64 is one client by default; each address on /fine')
})

t.test('a route\'s skipOnError over the plugin\'s, when Redis is down', async t => {
  // A client whose server is gone: every command fails at once.
  const port = await freePort()
  const seen = { theirs: [] as number[], ours: [] as number[] }
  for (const plugin of PLUGINS) {
    const redis = new Redis({ port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 1000, lazyConnect: true })
    redis.on('error', () => {})
    t.teardown(() => redis.disconnect())
    const app = await appWith(t, plugin, { redis, max: 5, timeWindow: '1 minute', skipOnError: false, ...plugin === 'ours' ? { breaker: false } : {} }, {}, app => {
      app.get('/lenient', { config: { rateLimit: { skipOnError: true } } }, async () => 'ok')
    })
    seen[plugin] = await statuses(app, ['/', '/lenient', '/lenient'])
  }
  t.strictSame(seen.theirs, [500, 200, 200], 'theirs: the plugin\'s route fails, the route that skips errors answers')
  t.strictSame(seen.ours, [503, 200, 200], 'ours: the same, the refusal a 503 with Retry-After (failMode: \'closed\')')
})
