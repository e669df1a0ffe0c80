// @fastify/rate-limit compatibility, a whole app: their example/example.js (Redis, global: false, route limits,
// allow lists, callbacks, a custom error body), built once with each plugin and only the plugin changed, then
// sent the same requests from three clients. Every answer is the same (status, body and limit headers) but
// one, recorded: their example's errorResponseBuilder returns no statusCode, and theirs answers 500; here
// the refusal's status is filled in (429), and shows in the body the app built.
import Fastify from 'fastify'
import type { FastifyInstance, FastifyPluginAsync } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { rateLimitHeaders, theirPlugin } from './helpers.js'
import type { Plugin } from './helpers.js'
import { client, getRedis, ready, uniquePrefix } from '../helpers/redis.js'

async function exampleApp (t: Test, plugin: Plugin, callbacks: string[]): Promise<FastifyInstance> {
  const { url } = await getRedis(t)
  // Theirs: `new Redis({ ..., connectTimeout: 500, maxRetriesPerRequest: 1 })`.
  const redis = await ready(client(t, url, { connectTimeout: 500, maxRetriesPerRequest: 1 }))
  const fastify = Fastify()
  t.teardown(() => fastify.close())
  await fastify.register((plugin === 'theirs' ? theirPlugin : rateGuard) as FastifyPluginAsync<Record<string, unknown>>, {
    global: false,
    max: 3000,
    allowList: ['127.0.0.2'],
    redis,
    nameSpace: uniquePrefix(),
    skipOnError: false
  })
  fastify.get('/', { config: { rateLimit: { max: 3, timeWindow: '1 minute' } } }, (_req, reply) => { reply.send({ hello: 'from ... root' }) })
  fastify.get('/private', { config: { rateLimit: { max: 3, allowList: ['127.0.2.1', '127.0.3.1'], timeWindow: '1 minute' } } }, (_req, reply) => {
    reply.send({ hello: 'from ... private' })
  })
  fastify.get('/public', (_req, reply) => { reply.send({ hello: 'from ... public' }) })
  const onExceeding = (): void => { callbacks.push('exceeding') }
  const onExceeded = (): void => { callbacks.push('exceeded') }
  fastify.get('/public/sub-rated-1', { config: { rateLimit: { timeWindow: '1 minute', allowList: ['127.0.2.1'], onExceeding, onExceeded } } }, (_req, reply) => {
    reply.send({ hello: 'from sub-rated-1 ... using default max value ... ' })
  })
  fastify.get('/public/sub-rated-2', { config: { rateLimit: { max: 3, timeWindow: '1 minute', onExceeding, onExceeded } } }, (_req, reply) => {
    reply.send({ hello: 'from ... sub-rated-2' })
  })
  fastify.get('/home', { config: { rateLimit: { max: 200, timeWindow: '1 minute' } } }, (_req, reply) => { reply.send({ hello: 'toto' }) })
  fastify.get('/customerrormessage', {
    config: {
      rateLimit: {
        max: 2,
        timeWindow: '1 minute',
        errorResponseBuilder: (_req: unknown, context: { after: string, max: number }) => ({ code: 429, timeWindow: context.after, limit: context.max })
      }
    }
  }, (_req, reply) => { reply.send({ hello: 'toto' }) })
  await fastify.ready()
  return fastify
}

interface Seen { remoteAddress: string, url: string, status: number, body: Record<string, unknown>, headers: Record<string, string> }

const CLIENTS = ['127.0.0.1', '127.0.0.2', '127.0.2.1']
const URLS = ['/', '/private', '/public', '/public/sub-rated-1', '/public/sub-rated-2', '/home', '/customerrormessage']

t.test('their example app answers the same with either plugin', async t => {
  const seen: Record<Plugin, Seen[]> = { theirs: [], ours: [] }
  const callbacks: Record<Plugin, string[]> = { theirs: [], ours: [] }
  for (const plugin of ['theirs', 'ours'] as const) {
    const app = await exampleApp(t, plugin, callbacks[plugin])
    for (let round = 0; round < 4; round++) {
      for (const remoteAddress of CLIENTS) {
        for (const url of URLS) {
          const res = await app.inject({ url, remoteAddress })
          const { code, ...body } = res.json() as Record<string, unknown>
          // This plugin's own refusals carry a `code` of their own; a body the app built keeps its code.
          if (code !== undefined && !String(code).startsWith('FST_RATE_GUARD_')) body.code = code
          const headers = rateLimitHeaders(res.headers)
          // The reset is when the window ends (theirs) or when the oldest request leaves (ours): both about a minute.
          for (const name of ['x-ratelimit-reset', 'retry-after']) if (name in headers) headers[name] = Number(headers[name]) >= 59 ? '~60' : headers[name]!
          seen[plugin].push({ remoteAddress, url, status: res.statusCode, body, headers })
        }
      }
    }
  }
  let filledIn = 0
  for (const [i, theirs] of seen.theirs.entries()) {
    if (theirs.status !== 500) continue
    const ours = seen.ours[i]!
    t.strictSame([ours.url, ours.status, ours.body, ours.headers], [theirs.url, 429, { ...theirs.body, statusCode: 429 }, theirs.headers], `${theirs.remoteAddress} ${theirs.url}: 429, not 500`)
    seen.ours[i] = theirs
    filledIn++
  }
  t.equal(filledIn, 4, 'the custom refusals of the two limited clients, twice each')
  t.strictSame(seen.ours, seen.theirs, 'status, body and headers of the other 80 requests')
  t.strictSame(callbacks.ours, callbacks.theirs, 'onExceeding and onExceeded called alike')
  t.match(seen.ours, [{ url: '/', status: 200 }], 'sanity: the first request passes')
  t.ok(seen.ours.some(r => r.status === 429), 'and some are refused')
})
