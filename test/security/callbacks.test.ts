// Attack: make the app's own callbacks fail (a key lookup that throws or hangs while its database is down, a
// limit function that errors) to get requests through uncounted, hang them, or read internals from the error
// message. Defence: every callback that decides who a client is or what it may do runs under the decision's
// deadline; a throw, a rejection, a miss or a value of the wrong kind is replaced by its fallback (a key tier
// by the next tier, a key generator by the default key, an allow list by "not allowed", a limit by
// failMode), the request is still counted, the client is told nothing of it, and the app's log says so once
// a minute per kind. Against a real Redis.
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'

const TIMEOUT = 200
const SECRET = 'db down: select * from api_keys where key = $1'

interface Made { app: FastifyInstance, errors: () => Array<{ msg: string, err?: { message: string } }> }

async function make (t: Test, options: RateGuardOptions): Promise<Made> {
  const { url } = await getRedis(t)
  const lines: Array<{ level: number, msg: string, err?: { message: string } }> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line) as typeof lines[number]) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), callbackTimeout: TIMEOUT, max: 2, timeWindow: '1 minute', ...options })
  app.get('/', async () => 'ok')
  await app.ready()
  return { app, errors: () => lines.filter(line => line.level === 50 && /rate-guard/.test(line.msg)) }
}

async function ask (app: FastifyInstance, n: number, headers: Record<string, string> = {}): Promise<Array<{ status: number, body: string, ms: number }>> {
  const out = []
  for (let i = 0; i < n; i++) {
    const started = performance.now()
    const res = await app.inject({ url: '/', headers })
    out.push({ status: res.statusCode, body: res.body, ms: performance.now() - started })
  }
  return out
}

const fails = {
  throws: () => { throw new Error(SECRET) },
  rejects: async () => { throw new Error(SECRET) },
  hangs: async () => await new Promise<never>(() => {})
}

t.test('a verifyApiKey that throws, rejects or never settles: the request is counted under the next tier, and the client sees nothing of it', async t => {
  for (const [how, verifyApiKey] of Object.entries(fails)) {
    const { app, errors } = await make(t, { verifyApiKey })
    const answers = await ask(app, 3, { 'x-api-key': 'k' })
    t.same(answers.map(a => a.status), [200, 200, 429], `${how}: counted by IP, max 2`)
    t.ok(answers.every(a => !a.body.includes('db down')), `${how}: no word of it to the client`)
    if (how === 'hangs') t.ok(answers.every(a => a.ms < TIMEOUT + 500), `hangs: answered within the deadline (${answers.map(a => Math.round(a.ms)).join(', ')} ms)`)
    t.equal(errors().length, 1, `${how}: logged once, not once per request`)
    t.match(errors()[0], { msg: /verifyApiKey failed/ })
  }
})

t.test('a userId that throws counts the request by IP', async t => {
  const { app, errors } = await make(t, { userId: fails.throws })
  t.same((await ask(app, 3)).map(a => a.status), [200, 200, 429])
  t.match(errors(), [{ msg: /userId failed/, err: { message: SECRET } }], 'the app\'s log has the error')
})

t.test('a keyGenerator that throws, rejects, hangs or gives no key: the default key counts the request', async t => {
  for (const [how, keyGenerator] of Object.entries({ ...fails, 'gives an object': () => ({}) as unknown as string })) {
    const { app, errors } = await make(t, { keyGenerator })
    const answers = await ask(app, 3)
    t.same(answers.map(a => a.status), [200, 200, 429], `${how}: counted by IP`)
    t.ok(answers.every(a => !a.body.includes('db down') && !a.body.includes('keyGenerator')), `${how}: no word of it to the client`)
    t.equal(errors().length, 1, `${how}: logged once`)
  }
})

t.test('an allowList function that fails lets nobody through unlimited', async t => {
  for (const [how, allowList] of Object.entries(fails)) {
    const { app, errors } = await make(t, { allowList })
    t.same((await ask(app, 3)).map(a => a.status), [200, 200, 429], `${how}: limited`)
    t.equal(errors().length, 1)
  }
})

t.test('a limit function that fails: failMode decides, open lets through unenforced, closed (the default) refuses', async t => {
  for (const [how, max] of Object.entries(fails)) {
    const open = await make(t, { max, failMode: 'open' })
    const answers = await open.app.inject('/')
    t.strictSame([answers.statusCode, answers.headers['x-ratelimit-enforced']], [200, 'false'], `${how}: open`)
    const closed = await make(t, { max, failMode: 'closed' })
    const refused = await closed.app.inject('/')
    t.equal(refused.statusCode, 503, `${how}: closed`)
    t.notMatch(refused.body, /db down/)
    t.equal(closed.errors().length, 1)
    const byDefault = await make(t, { max })
    t.equal((await byDefault.app.inject('/')).statusCode, 503, `${how}: refused by default`)
  }
  const late = await make(t, { timeWindow: fails.hangs, failMode: 'open' })
  const started = performance.now()
  t.equal((await late.app.inject('/')).headers['x-ratelimit-enforced'], 'false', 'a timeWindow that hangs: the same')
  t.ok(performance.now() - started < TIMEOUT + 500, 'within the deadline')
})

t.test('createRateLimit with a limit function that fails: failMode\'s answer, with no limit known; closed throws', async t => {
  const { app, errors } = await make(t, { global: false })
  const open = app.createRateLimit({ max: fails.throws, failMode: 'open' })
  const closed = app.createRateLimit({ max: fails.rejects, failMode: 'closed' })
  const byDefault = app.createRateLimit({ max: fails.throws })
  const request = { ip: '127.0.0.1', headers: {}, log: app.log } as never
  t.match(await open(request), { isAllowed: false, max: 0, isExceeded: false }, 'open: not exceeded')
  const unavailable = { code: 'FST_RATE_GUARD_UNAVAILABLE', statusCode: 503, message: 'Rate limiter unavailable, retry in 1 second' }
  await t.rejects(closed(request), unavailable, 'closed: the check throws, for the app to answer')
  await t.rejects(byDefault(request), unavailable, 'closed is the default')
  for (const check of [closed, byDefault]) {
    const err = await check(request).then(() => undefined, (err: Error) => err)
    t.notMatch(err?.message, /db down/, 'the error says nothing of the callback\'s')
  }
  t.equal(errors().length, 1, 'logged once for the kind')
})

t.test('a key generator returning a number: every callback, and createRateLimit, get the number itself', async t => {
  const seen: Array<[string, unknown]> = []
  const { app } = await make(t, {
    keyGenerator: () => 7 as unknown as string,
    max: (_request, key) => { seen.push(['max', key]); return 1 },
    timeWindow: (_request, key) => { seen.push(['timeWindow', key]); return 60_000 },
    allowList: (_request, key) => { seen.push(['allowList', key]); return false },
    onExceeding: (_request, key) => { seen.push(['onExceeding', key]) },
    onExceeded: (_request, key) => { seen.push(['onExceeded', key]) },
    onBanReach: (_request, key) => { seen.push(['onBanReach', key]) },
    ban: { threshold: 1, duration: '1 minute' }
  })
  t.same((await ask(app, 2)).map(a => a.status), [200, 403], 'counted under the number, banned at the first denial')
  t.strictSame(new Set(seen.map(([name]) => name)), new Set(['max', 'timeWindow', 'allowList', 'onExceeding', 'onExceeded', 'onBanReach']), 'every callback was called')
  t.ok(seen.every(([, key]) => key === 7), `each with the number 7: ${JSON.stringify(seen)}`)

  const check = app.createRateLimit({ keyGenerator: () => 8 as unknown as string, max: 5 })
  const result = await check({ ip: '127.0.0.1', headers: {}, log: app.log } as never)
  t.equal(result.key as unknown, 8, 'createRateLimit\'s result: the number')
  const allowed = app.createRateLimit({ keyGenerator: () => 9 as unknown as string, allowList: () => true })
  t.equal((await allowed({ ip: '127.0.0.1', headers: {}, log: app.log } as never)).key as unknown, 9, 'an allow-listed result too')
})

t.test('a callback that answers the request (onExceeded) and throws: the error goes to Fastify\'s error handling, as the app\'s own', async t => {
  const { app } = await make(t, { max: 1, onExceeded: () => { throw new Error('app bug') } })
  t.equal((await app.inject('/')).statusCode, 200)
  t.match((await app.inject('/')).json(), { statusCode: 500, message: 'app bug' })
  // In process the answer comes at once, and so does the throw.
  const local = Fastify()
  t.teardown(() => local.close())
  await local.register(rateGuard, { max: 1, onExceeded: () => { throw new Error('app bug') } })
  local.get('/', async () => 'ok')
  t.equal((await local.inject('/')).statusCode, 200)
  t.match((await local.inject('/')).json(), { statusCode: 500, message: 'app bug' }, 'in process too')
})
