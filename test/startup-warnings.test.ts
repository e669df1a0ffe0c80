// Mistakes that used to pass in silence, each said once, naming the fix: `rateLimit` beside a route's
// `config` instead of inside it, X-Forwarded-For while Fastify's trustProxy is off, an API key header
// while its tier is off, routes declared before the plugin (never limited), and Redis not ready at start
// with what failMode will do to traffic.
import diagnostics from 'node:diagnostics_channel'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import { recordRoutes } from '../lib/declared.js'
import type { RateGuardOptions } from '../lib/index.js'
import { freePort } from './helpers/redis.js'

interface Line { level: number, msg: string }

interface Logged { app: FastifyInstance, warnings: (pattern: RegExp) => Line[] }

/** An app whose log lines are kept, the plugin not yet registered. */
function logged (t: Test, fastifyOptions: object = {}): Logged {
  const lines: Line[] = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as Line) } }
  const made = Fastify({ ...fastifyOptions, logger: { level: 'info', stream } })
  t.teardown(() => made.close())
  return { app: made, warnings: pattern => lines.filter(line => line.level === 40 && pattern.test(line.msg)) }
}

async function app (t: Test, options: RateGuardOptions, fastifyOptions: object = {}): Promise<Logged> {
  const made = logged(t, fastifyOptions)
  await made.app.register(rateGuard, options)
  return made
}

t.test('rateLimit beside config (where nothing reads it) is said once, naming config: { rateLimit }', async t => {
  const { app: made, warnings } = await app(t, { max: 5 })
  made.get('/beside', { rateLimit: { max: 1 } } as object, async () => 'ok')
  made.get('/inside', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
  await made.ready()
  const said = warnings(/gives rateLimit beside config/)
  t.equal(said.length, 1, 'once for the route (its HEAD twin included)')
  t.match(said[0]!.msg, /route \/beside .*move it into config: \{ rateLimit/)
})

t.test('X-Forwarded-For while trustProxy is off: said once, naming trustProxy', async t => {
  const { app: made, warnings } = await app(t, { max: 100 })
  made.get('/', async () => 'ok')
  for (let i = 0; i < 3; i++) await made.inject({ url: '/', headers: { 'x-forwarded-for': `203.0.113.${i}` } })
  const said = warnings(/X-Forwarded-For/)
  t.equal(said.length, 1, 'said once, however many requests show it')
  t.match(said[0]!.msg, /Give trustProxy the proxy's addresses/)

  const trusted = await app(t, { max: 100 }, { trustProxy: ['127.0.0.1'] })
  trusted.app.get('/', async () => 'ok')
  await trusted.app.inject({ url: '/', headers: { 'x-forwarded-for': '203.0.113.9' } })
  t.equal(trusted.warnings(/X-Forwarded-For/).length, 0, 'nothing to say when trustProxy is on')

  const direct = await app(t, { max: 100 })
  direct.app.get('/', async () => 'ok')
  await direct.app.inject({ url: '/' })
  t.equal(direct.warnings(/X-Forwarded-For/).length, 0, 'nor without the header')
})

t.test('an x-api-key header while no verifyApiKey turns its tier on: said once, naming verifyApiKey', async t => {
  const { app: made, warnings } = await app(t, { max: 100 })
  made.get('/', async () => 'ok')
  for (let i = 0; i < 3; i++) await made.inject({ url: '/', headers: { 'x-api-key': `k${i}` } })
  const said = warnings(/x-api-key/)
  t.equal(said.length, 1)
  t.match(said[0]!.msg, /Give verifyApiKey/)

  const verified = await app(t, { max: 100, verifyApiKey: () => true })
  verified.app.get('/', async () => 'ok')
  await verified.app.inject({ url: '/', headers: { 'x-api-key': 'k' } })
  t.equal(verified.warnings(/x-api-key/).length, 0, 'nothing to say when keys are verified')

  const off = await app(t, { max: 100, apiKeyHeader: false })
  off.app.get('/', async () => 'ok')
  await off.app.inject({ url: '/', headers: { 'x-api-key': 'k' } })
  t.equal(off.warnings(/x-api-key/).length, 0, 'nor when the app said the header is not an identity (apiKeyHeader: false)')
})

t.test('routes declared before the plugin: named once at start-up, with the fix; those after, or left out, are not', async t => {
  const { app: made, warnings } = logged(t)
  made.get('/early', async () => 'ok')
  made.post('/early2', async () => 'ok')
  made.get('/early-off', { config: { rateLimit: false } }, async () => 'ok')
  await made.register(rateGuard, { max: 1 })
  made.get('/late', async () => 'ok')
  made.get('/late-off', { config: { rateLimit: false } }, async () => 'ok')
  await made.ready()
  t.equal(warnings(/declared before/).length, 1, 'said at ready, before any request')
  for (let i = 0; i < 3; i++) t.equal((await made.inject({ url: '/early' })).statusCode, 200, 'and true: the early route is not limited')
  t.equal((await made.inject({ url: '/late' })).statusCode, 200)
  t.equal((await made.inject({ url: '/late' })).statusCode, 429, 'while a route declared after is')
  const said = warnings(/declared before/)
  t.equal(said.length, 1, 'said once, however many requests reach the route')
  t.match(said[0]!.msg, /: 2 route\(s\) declared before the plugin was registered, never seen by it and so not limited: GET \/early, POST \/early2\. Register the plugin first, with await/)
  t.notMatch(said[0]!.msg, /HEAD|\/late|\/early-off/, 'a HEAD twin is named with its GET; routes declared after, and routes left out with rateLimit: false (early or not), are not named')
})

t.test('routes declared before the plugin: a long list is cut to five names and a count', async t => {
  const { app: made, warnings } = logged(t)
  for (let i = 1; i <= 7; i++) made.put(`/r${i}`, async () => 'ok')
  await made.register(rateGuard, { max: 5 })
  await made.ready()
  t.match(warnings(/declared before/)[0]?.msg, /7 route\(s\) .*: PUT \/r1, PUT \/r2, PUT \/r3, PUT \/r4, PUT \/r5 and 2 more\. Register/)
})

t.test('routes declared before the plugin: the scopes inside its scope are its, other scopes are not', async t => {
  const { app: made, warnings } = logged(t)
  // A plugin of routes registered (without await) before the rate limiter loads first: inside its scope, unlimited.
  made.register(async child => { child.get('/inside', async () => 'ok') }, { prefix: '/child' })
  await made.register(rateGuard, { max: 1 })
  await made.ready()
  t.match(warnings(/declared before/)[0]?.msg, /: 1 route\(s\) .*: GET \/child\/inside\. Register/)
  t.equal((await made.inject({ url: '/child/inside' })).statusCode, 200)
  t.equal((await made.inject({ url: '/child/inside' })).statusCode, 200, 'and true: the route is not limited')

  const siblings = logged(t)
  siblings.app.get('/root', async () => 'ok')
  siblings.app.register(async other => { other.get('/other', async () => 'ok') })
  siblings.app.register(async limited => {
    await limited.register(rateGuard, { max: 1 })
    limited.get('/limited', async () => 'ok')
  })
  await siblings.app.ready()
  t.equal(siblings.warnings(/declared before/).length, 0, 'a registration inside a scope does not speak for its parent\'s or a sibling\'s routes')
})

t.test('routes declared before the plugin while global is false: named only when they ask for a limit', async t => {
  const { app: made, warnings } = logged(t)
  made.get('/plain', async () => 'ok')
  made.get('/asks', { config: { rateLimit: { max: 1 } } }, async () => 'ok')
  await made.register(rateGuard, { max: 5, global: false })
  await made.ready()
  const said = warnings(/declared before/)
  t.equal(said.length, 1)
  t.match(said[0]!.msg, /: 1 route\(s\) .*: GET \/asks\. Register/, 'a route with no config would not be limited declared after either')
})

t.test('routes declared before the plugin, in an app made before the plugin was imported: nothing to say, nothing known', async t => {
  // The app's routes are recorded from its making, on Fastify's 'fastify.initialization' channel.
  diagnostics.unsubscribe('fastify.initialization', recordRoutes as (message: unknown) => void)
  let made: Logged
  try {
    made = logged(t)
  } finally {
    diagnostics.subscribe('fastify.initialization', recordRoutes as (message: unknown) => void)
  }
  made.app.get('/early', async () => 'ok')
  await made.app.register(rateGuard, { max: 1 })
  await made.app.ready()
  t.equal(made.warnings(/declared before/).length, 0)
})

t.test('Redis not ready at start: the warning says what each failMode does to traffic meanwhile', async t => {
  const port = await freePort()
  for (const [failMode, says] of [['closed', /answered 503/], ['open', /through unenforced/], ['local', /limits on its own/]] as const) {
    const { warnings } = await app(t, { redis: `redis://127.0.0.1:${port}`, failMode })
    t.match(warnings(/Redis is not ready/)[0]?.msg, says, failMode)
  }
})
