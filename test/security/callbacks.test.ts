// Attack: make the app's own callbacks fail (a key lookup that throws or hangs while its database is down, a
// limit function that errors) to get requests through uncounted, hang them, or read internals from the error
// message. Defence: every callback that decides who a client is or what it may do runs under the decision's
// deadline; a throw, a rejection, a miss or a value of the wrong kind is replaced by its fallback (a key tier
// by the next tier, a key generator by the default key, an allow list by "not allowed", a cost by 1, a limit
// by a static one: never failMode, which is Redis's), the request is still counted, the client is told
// nothing of it, and the app's log says what was used once a minute per kind. Against a real Redis, and in
// process.
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import type { RateGuardOptions } from '../../lib/index.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'
import { matchList } from '../helpers/match-list.js'
import { allowing, inTime } from '../helpers/lag.js'

/** callbackTimeout: what a callback that hangs costs a request, plus the lag measured meanwhile (lag.ts). */
const TIMEOUT = 200
const SECRET = 'db down: select * from api_keys where key = $1'

interface Made { app: FastifyInstance, errors: () => Array<{ msg: string, err?: { message: string } }> }

async function make (t: Test, options: RateGuardOptions, routes?: (app: FastifyInstance) => void): Promise<Made> {
  const { url } = await getRedis(t)
  const lines: Array<{ level: number, msg: string, err?: { message: string } }> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line) as typeof lines[number]) } } } })
  t.teardown(() => app.close())
  await app.register(rateGuard, { redis: url, nameSpace: uniquePrefix(), callbackTimeout: TIMEOUT, max: 2, timeWindow: '1 minute', ...options })
  app.get('/', async () => 'ok')
  routes?.(app)
  await app.ready()
  return { app, errors: () => lines.filter(line => line.level === 50 && /rate-guard/.test(line.msg)) }
}

async function ask (app: FastifyInstance, n: number, headers: Record<string, string> = {}): Promise<Array<{ status: number, body: string, at: number, ms: number }>> {
  const out = []
  for (let i = 0; i < n; i++) {
    const at = performance.now()
    const res = await app.inject({ url: '/', headers })
    out.push({ status: res.statusCode, body: res.body, at, ms: performance.now() - at })
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
    if (how === 'hangs') t.ok(answers.every(a => inTime(TIMEOUT, a)), `hangs: answered within the deadline (${answers.map(a => Math.round(a.ms)).join(', ')} ms)`)
    t.equal(errors().length, 1, `${how}: logged once, not once per request`)
    t.match(errors()[0], { msg: /verifyApiKey failed/ })
  }
})

t.test('a userId that throws counts the request by IP', async t => {
  const { app, errors } = await make(t, { userId: fails.throws })
  t.same((await ask(app, 3)).map(a => a.status), [200, 200, 429])
  matchList(t, errors(), [{ msg: /userId failed/, err: { message: SECRET } }], 'the app\'s log has the error')
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

t.test('a limit function that fails: a static limit decides, whatever the failMode; the client sees nothing of it', async t => {
  for (const [how, max] of Object.entries(fails)) {
    for (const failMode of ['open', 'closed', undefined] as const) {
      // The plugin's own max is the function: @fastify/rate-limit's default, 1000 a minute.
      const { app, errors } = await make(t, { max, ...(failMode === undefined ? {} : { failMode }) })
      const res = await app.inject('/')
      t.strictSame([res.statusCode, res.headers['x-ratelimit-limit'], res.headers['x-ratelimit-enforced']], [200, '1000', undefined], `${how}, failMode ${failMode ?? 'by default'}: limited at 1000`)
      t.notMatch(res.body, /db down/)
      t.equal(errors().length, 1)
    }
  }
  // The plugin has several limits, so no one max of its own: @fastify/rate-limit's default.
  const several = await make(t, { max: undefined, timeWindow: undefined, limits: [{ max: 3, timeWindow: '1 minute' }, { max: 10, timeWindow: '1 hour' }] }, app => {
    app.get('/computed', { config: { rateLimit: { max: fails.throws, timeWindow: '1 second' } } }, async () => 'ok')
  })
  const computed = await several.app.inject('/computed')
  t.strictSame([computed.statusCode, computed.headers['x-ratelimit-limit'], computed.headers['x-ratelimit-reset']], [200, '1000', '1'], 'with several plugin limits: 1000, in the route\'s own window')
  matchList(t, several.errors(), [{ msg: /max function failed; limited at 1000 per 1 s/ }])
  const late = await make(t, { timeWindow: fails.hangs, failMode: 'open' })
  const started = performance.now()
  const statuses = [(await late.app.inject('/')).statusCode, (await late.app.inject('/')).statusCode, (await late.app.inject('/')).statusCode]
  t.strictSame(statuses, [200, 200, 429], 'a timeWindow that hangs: the plugin\'s max in a minute')
  const took = performance.now() - started
  t.ok(took <= allowing(3 * TIMEOUT, started, started + took), `each within the deadline (the three in ${Math.round(took)} ms)`)
})

t.test('createRateLimit with a limit function that fails: decided at the static limit, with every failMode', async t => {
  const { app, errors } = await make(t, { global: false })
  const request = { ip: '127.0.0.1', headers: {}, log: app.log } as never
  for (const [name, failMode] of [['open', 'open'], ['closed', 'closed'], ['by default', undefined]] as const) {
    const check = app.createRateLimit({ max: failMode === 'closed' ? fails.rejects : fails.throws, ...(failMode === undefined ? {} : { failMode }) })
    t.match(await check(request), { isAllowed: false, max: 2, remaining: 1, isExceeded: false }, `${name}: the plugin's max 2, counted`)
    t.match(await check(request), { isAllowed: false, max: 2, remaining: 0, isExceeded: false })
    t.match(await check(request), { isAllowed: false, max: 2, isExceeded: true }, `${name}: exceeded at the third`)
  }
  t.equal(errors().length, 1, 'logged once for the kind and its fallback')
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

// A limit or a cost the app computes that fails is replaced, never skipped: the attacker controls the body a
// cost function reads (the README's `/bulk` with `{}`, or any body before it is parsed), so a failing cost that
// let `failMode` decide let every request through with `'open'` (and `'local'`). `failMode` is for Redis, not
// for the app's own code: with each of them, and on both stores, the request is decided by the store with the
// fallback (a cost of 1; a static limit). Over real HTTP.
const STORES = ['redis', 'memory'] as const
const FAIL_MODES = ['open', 'closed', 'local'] as const

interface Served { post: (path: string, body?: unknown) => Promise<Response>, errors: () => string[] }

async function serve (t: Test, where: typeof STORES[number], options: RateGuardOptions, routes: (app: FastifyInstance) => void): Promise<Served> {
  const lines: Array<{ level: number, msg: string }> = []
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line) as typeof lines[number]) } } } })
  t.teardown(() => app.close())
  // Correctness, not latency: a deadline no loaded machine misses (a miss with 'open' would show as one too many).
  const store = where === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000 } : {}
  await app.register(rateGuard, { ...store, callbackTimeout: TIMEOUT, timeWindow: '1 minute', ...options })
  routes(app)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as AddressInfo
  const post = async (path: string, body: unknown = {}): Promise<Response> =>
    await fetch(`http://127.0.0.1:${port}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  return { post, errors: () => lines.filter(line => line.level === 50 && /rate-guard/.test(line.msg)).map(line => line.msg) }
}

/** `n` requests at once, as a client racing its own limit would send them: their statuses, sorted. */
async function flood (t: Test, n: number, send: () => Promise<Response>): Promise<number[]> {
  const answers = await Promise.all(Array.from({ length: n }, async () => { const res = await send(); await res.arrayBuffer(); return res }))
  t.ok(answers.every(res => res.headers.get('x-ratelimit-enforced') === null), 'every answer enforced')
  return answers.map(res => res.status).sort()
}

const costFails = { ...fails, 'gives 0': () => 0, 'gives NaN': () => Number.NaN }

for (const where of STORES) {
  t.test(`${where}: a cost function that fails counts the request at 1, whatever the failMode`, async t => {
    for (const failMode of FAIL_MODES) {
      for (const [how, cost] of Object.entries(costFails)) {
        const { post, errors } = await serve(t, where, { failMode, max: 3 }, app => {
          app.post('/', { config: { rateLimit: { cost } } }, async () => 'ok')
        })
        t.strictSame(await flood(t, 5, async () => await post('/')), [200, 200, 200, 429, 429], `${failMode}, ${how}: 3 admitted at max 3`)
        matchList(t, errors(), [/cost function failed; counted at 1/], `${failMode}, ${how}: the log says what was used, once`)
      }
    }
  })

  t.test(`${where}: the README's /bulk: a body without items (or not parsed yet) costs 1, not everything`, async t => {
    for (const failMode of FAIL_MODES) {
      const { post } = await serve(t, where, { failMode }, app => {
        const bulk = { max: 5, timeWindow: '1 minute', cost: (request: FastifyRequest) => (request.body as { items: unknown[] }).items.length }
        app.post('/as-written', { config: { rateLimit: bulk } }, async () => 'ok')
        // As the README writes it.
        app.post('/bulk', { config: { rateLimit: { ...bulk, hook: 'preValidation' } } }, async () => 'ok')
        app.post('/items', { config: { rateLimit: { ...bulk, hook: 'preHandler' } } }, async () => 'ok')
      })
      t.strictSame(await flood(t, 8, async () => await post('/as-written', { items: [1] })), [200, 200, 200, 200, 200, 429, 429, 429], `${failMode}, onRequest (no body yet): 5 of 8`)
      t.strictSame(await flood(t, 8, async () => await post('/bulk', {})), [200, 200, 200, 200, 200, 429, 429, 429], `${failMode}, preValidation, {}: 5 of 8`)
      t.strictSame([(await post('/items', { items: [1, 2, 3] })).status, (await post('/items', { items: [1, 2, 3] })).status], [200, 429], `${failMode}, preHandler, 3 items: costs 3`)
    }
  })

  t.test(`${where}: a max or timeWindow function that fails limits at a static limit, whatever the failMode`, async t => {
    for (const failMode of FAIL_MODES) {
      for (const [how, fail] of Object.entries(fails)) {
        // The route's limit computed, the plugin's static: the plugin's.
        const own = await serve(t, where, { failMode, max: 3 }, app => {
          app.post('/max', { config: { rateLimit: { max: fail } } }, async () => 'ok')
          app.post('/window', { config: { rateLimit: { timeWindow: fail } } }, async () => 'ok')
        })
        t.strictSame(await flood(t, 5, async () => await own.post('/max')), [200, 200, 200, 429, 429], `${failMode}, max ${how}: the plugin's max 3`)
        t.strictSame(await flood(t, 5, async () => await own.post('/window')), [200, 200, 200, 429, 429], `${failMode}, timeWindow ${how}: the plugin's window`)
        const window = await own.post('/window')
        t.equal(window.headers.get('retry-after'), '60', `${failMode}, timeWindow ${how}: the plugin's minute`)
        matchList(t, own.errors(), [/max function failed; limited at 3 per 60 s/, /timeWindow function failed; limited at 3 per 60 s/])
        // The plugin's computed too: @fastify/rate-limit's default, 1000 a minute.
        const none = await serve(t, where, { failMode, max: fail, timeWindow: fail }, app => { app.post('/', async () => 'ok') })
        const first = await none.post('/')
        t.strictSame([first.status, first.headers.get('x-ratelimit-limit'), first.headers.get('x-ratelimit-remaining'), first.headers.get('x-ratelimit-reset'), first.headers.get('x-ratelimit-enforced')], [200, '1000', '999', '60', null], `${failMode}, max and timeWindow ${how}: 1000 a minute`)
        t.equal((await none.post('/')).headers.get('x-ratelimit-remaining'), '998', 'counted')
        matchList(t, none.errors(), [
          /max function failed; limited at 1000 per the timeWindow function's window \(60 s when it fails\)/,
          /timeWindow function failed; limited at the max function's max \(1000 when it fails\) per 60 s/
        ])
      }
    }
  })
}

for (const where of STORES) {
  t.test(`${where}: a countWhen or settle that fails after the response gives nothing back`, async t => {
    for (const failMode of FAIL_MODES) {
      for (const [how, fail] of Object.entries(fails)) {
        const { post } = await serve(t, where, { failMode, max: 3 }, app => {
          app.post('/count', { config: { rateLimit: { countWhen: fail } } }, async () => 'ok')
          app.post('/settle', { config: { rateLimit: { settle: fail } } }, async () => 'ok')
        })
        for (const path of ['/count', '/settle']) {
          const statuses: number[] = []
          for (let i = 0; i < 5; i++) statuses.push((await post(path)).status)
          t.strictSame(statuses, [200, 200, 200, 429, 429], `${failMode}, ${path.slice(1)} ${how}: each request keeps its charge`)
        }
      }
    }
  })
}
