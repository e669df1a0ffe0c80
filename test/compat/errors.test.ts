// @fastify/rate-limit compatibility, refusals: the default bodies (429 Too Many Requests, 403 Forbidden for a
// ban, "Rate limit exceeded, retry in 1 minute"), `errorResponseBuilder(request, context)` whose result is
// thrown, and the app's error handler seeing `statusCode`. Run beside @fastify/rate-limit: the same statuses
// and bodies (this plugin adds a `code` to its own errors).
import t from 'tap'
import type { FastifyError, FastifyInstance, FastifyRequest } from 'fastify'
import { appWith } from './helpers.js'
import type { Plugin } from './helpers.js'

const PLUGINS: readonly Plugin[] = ['theirs', 'ours']

/** The last of `n` responses: status and body, without this plugin's `code`. */
async function last (app: FastifyInstance, n: number): Promise<{ status: number, body: Record<string, unknown> }> {
  let res = await app.inject('/')
  for (let i = 1; i < n; i++) res = await app.inject('/')
  const { code: _code, ...body } = res.json() as Record<string, unknown>
  return { status: res.statusCode, body }
}

t.test('the default refusals: the same status and body', async t => {
  for (const [options, n, status, error] of [[{ max: 1 }, 2, 429, 'Too Many Requests'], [{ max: 1, ban: 0 }, 2, 403, 'Forbidden']] as const) {
    const seen: Record<Plugin, unknown> = { theirs: null, ours: null }
    for (const plugin of PLUGINS) seen[plugin] = await last(await appWith(t, plugin, { timeWindow: '1 minute', ...options }), n)
    t.strictSame(seen.ours, seen.theirs, JSON.stringify(options))
    t.strictSame(seen.ours, { status, body: { statusCode: status, error, message: 'Rate limit exceeded, retry in 1 minute' } })
  }
})

t.test('errorResponseBuilder: given the same context, its result is the response', async t => {
  const contexts: Record<Plugin, unknown[]> = { theirs: [], ours: [] }
  for (const plugin of PLUGINS) {
    const app = await appWith(t, plugin, {
      max: 1,
      timeWindow: '1 minute',
      ban: 1,
      errorResponseBuilder: (request: FastifyRequest, context: { statusCode: number, ban: boolean, max: number, ttl: number, after: string }) => {
        contexts[plugin].push({ ...context, ttl: context.ttl > 59_000 && context.ttl <= 60_000 })
        return { statusCode: context.statusCode, error: context.ban ? 'Banned' : 'Slow down', message: `${request.url}: wait ${context.after}` }
      }
    })
    const refused = await last(app, 2)
    t.strictSame(refused, { status: 429, body: { statusCode: 429, error: 'Slow down', message: '/: wait 1 minute' } }, `${plugin}: 429`)
    const banned = await last(app, 1)
    t.strictSame(banned, { status: 403, body: { statusCode: 403, error: 'Banned', message: '/: wait 1 minute' } }, `${plugin}: 403`)
  }
  t.strictSame(contexts.ours, contexts.theirs)
  t.strictSame(contexts.ours, [
    { statusCode: 429, ban: false, max: 1, ttl: true, after: '1 minute' },
    { statusCode: 403, ban: true, max: 1, ttl: true, after: '1 minute' }
  ], 'statusCode, ban, max, ttl in ms and after in words')
})

t.test('an Error from errorResponseBuilder reaches the app\'s error handler with its statusCode', async t => {
  for (const plugin of PLUGINS) {
    const handled: Array<number | undefined> = []
    const app = await appWith(t, plugin, {
      max: 1,
      errorResponseBuilder: (_request: FastifyRequest, context: { statusCode: number, after: string }) => Object.assign(new Error(`try again in ${context.after}`), { statusCode: context.statusCode })
    }, {}, app => {
      app.setErrorHandler(async (error: FastifyError, _request, reply) => {
        handled.push(error.statusCode)
        return await reply.code(error.statusCode ?? 500).send({ handled: true, message: error.message })
      })
    })
    await app.inject('/')
    const res = await app.inject('/')
    t.equal(res.statusCode, 429, plugin)
    t.strictSame(res.json(), { handled: true, message: 'try again in 1 minute' }, plugin)
    t.strictSame(handled, [429], `${plugin}: the handler saw the refusal once`)
  }
})

t.test('the default refusal reaches the app\'s error handler too, with statusCode and a message', async t => {
  for (const plugin of PLUGINS) {
    const seen: unknown[] = []
    const app = await appWith(t, plugin, { max: 1, timeWindow: 5000 }, {}, app => {
      app.setErrorHandler(async (error: FastifyError, _request, reply) => {
        seen.push([error.statusCode, error.message])
        return await reply.code(error.statusCode ?? 500).send('custom')
      })
    })
    await app.inject('/')
    const res = await app.inject('/')
    t.strictSame([res.statusCode, res.body], [429, 'custom'], plugin)
    t.strictSame(seen, [[429, 'Rate limit exceeded, retry in 5 seconds']], plugin)
  }
})

t.test('the default body goes out without its code whatever the refusal came to say: an app\'s error handler that changes its status and message, then hands it on', async t => {
  const app = await appWith(t, 'ours', { max: 1, timeWindow: '1 minute' }, {}, app => {
    app.setErrorHandler((error: FastifyError, request, reply) => {
      if (request.headers['x-teapot'] !== undefined) Object.assign(error, { statusCode: 418, message: 'brewing' })
      if (request.headers['x-code'] !== undefined) Object.assign(error, { code: request.headers['x-code'] })
      // To Fastify's default error handler, which writes the error's code into the body.
      reply.send(error)
    })
  })
  t.equal((await app.inject('/')).body, 'ok')
  const bodies: unknown[] = []
  for (const headers of [{}, { 'x-teapot': '1' }, {}, { 'x-teapot': '1' }]) bodies.push((await app.inject({ url: '/', headers })).json())
  const refused = { statusCode: 429, error: 'Too Many Requests', message: 'Rate limit exceeded, retry in 1 minute' }
  const brewing = { statusCode: 418, error: 'I\'m a Teapot', message: 'brewing' }
  t.strictSame(bodies, [refused, brewing, refused, brewing])
  // A code of its own on each refusal: each body still goes out without it (the bodies kept per code stay few).
  const recoded: unknown[] = []
  for (let i = 0; i < 12; i++) recoded.push((await app.inject({ url: '/', headers: { 'x-code': `E_APP_${i % 10}` } })).json())
  t.strictSame(recoded, Array(12).fill(refused), 'twelve refusals, ten codes: none in its body')
})
