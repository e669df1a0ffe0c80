// Mistakes that used to pass in silence, each said once, naming the fix: `rateLimit` beside a route's
// `config` instead of inside it, X-Forwarded-For while Fastify's trustProxy is off, an API key header
// while its tier is off, and Redis not ready at start with what failMode will do to traffic.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../lib/index.js'
import type { RateGuardOptions } from '../lib/index.js'
import { freePort } from './helpers/redis.js'

interface Line { level: number, msg: string }

async function app (t: Test, options: RateGuardOptions, fastifyOptions: object = {}): Promise<{ app: FastifyInstance, warnings: (pattern: RegExp) => Line[] }> {
  const lines: Line[] = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as Line) } }
  const made = Fastify({ ...fastifyOptions, logger: { level: 'info', stream } })
  t.teardown(() => made.close())
  await made.register(rateGuard, options)
  return { app: made, warnings: pattern => lines.filter(line => line.level === 40 && pattern.test(line.msg)) }
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

t.test('Redis not ready at start: the warning says what each failMode does to traffic meanwhile', async t => {
  const port = await freePort()
  for (const [failMode, says] of [['closed', /answered 503/], ['open', /through unenforced/], ['local', /limits on its own/]] as const) {
    const { warnings } = await app(t, { redis: `redis://127.0.0.1:${port}`, failMode })
    t.match(warnings(/Redis is not ready/)[0]?.msg, says, failMode)
  }
})
