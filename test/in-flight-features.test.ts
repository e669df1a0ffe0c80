// `concurrency: { max, lease }` as it meets the other features, over real Fastify (inject, or real HTTP where a
// client must leave) on a real Redis and in process: the basic limit and its answer, what a refusal gives back,
// costs, bans, shadow mode, failMode, an acquire answered past the deadline, releases on failure and abort,
// options refused at register, and the renewal of a request's leases while it runs. Handlers are held open on
// promises the tests resolve; what is awaited is an event (a handler entered, a response closed) or state
// Redis holds, never a sleep.
import diagnostics from 'node:diagnostics_channel'
import { once } from 'node:events'
import Fastify from 'fastify'
import type { FastifyInstance, FastifyReply, FastifyRequest, LightMyRequestResponse } from 'fastify'
import type { Redis } from 'ioredis'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard, { CHANNELS } from '../lib/index.js'
import type { DecisionMessage, RateGuardOptions, RedisCallContext } from '../lib/index.js'
import { GLOBAL_SCOPE, identityKeys } from '../lib/stores/key-names.js'
import type { IdentityKeys } from '../lib/stores/key-names.js'
import { client, commandCalls, getRedis, startRedisServer, uniquePrefix, until } from './helpers/redis.js'
import { lend } from './helpers/faults.js'
import { allowing, inTime } from './helpers/lag.js'

/** What inject's clients are: their address is their key. */
const CLIENT = '127.0.0.1'
const IN_FLIGHT_BODY = { statusCode: 429, error: 'Too Many Requests', message: 'Too many requests in flight: retry when one of yours has ended' }

/** A promise and what resolves it. */
function deferred (): { promise: Promise<void>, resolve: () => void } {
  let settle: () => void = () => {}
  const promise = new Promise<void>(resolve => { settle = resolve })
  return { promise, resolve: settle }
}

interface Running {
  /** Ends the handler (it returns, or throws when the handler fails). */
  readonly end: () => void
  /** Its response is over (the `close` of `reply.raw`, after the plugin's own listener: its slots were let go). */
  readonly closed: Promise<void>
}

/** A handler that holds every request open until the test ends it. */
class Held {
  readonly running: Running[] = []
  /** Whether a request ended throws (a 500). */
  fails = false
  readonly #waiting: Array<{ n: number, resolve: () => void }> = []

  readonly handle = async (_request: FastifyRequest, reply: FastifyReply): Promise<string> => {
    const ending = deferred()
    this.running.push({ end: ending.resolve, closed: once(reply.raw, 'close').then(() => {}) })
    for (const waiter of this.#waiting.filter(w => this.running.length >= w.n)) waiter.resolve()
    await ending.promise
    if (this.fails) throw new Error('the handler failed')
    return 'done'
  }

  /** Resolves once `n` requests have entered the handler. */
  async entered (n: number): Promise<void> {
    if (this.running.length >= n) return
    const waiter = deferred()
    this.#waiting.push({ n, resolve: waiter.resolve })
    await waiter.promise
  }

  /** Ends every request running, and resolves once their responses are over. */
  async endAll (): Promise<void> {
    const running = this.running.splice(0)
    for (const { end } of running) end()
    await Promise.all(running.map(async ({ closed }) => await closed))
  }
}

/** The first `n` of `promises` to settle, in the order they did. */
async function first<T> (promises: ReadonlyArray<Promise<T>>, n: number): Promise<T[]> {
  const settled: T[] = []
  return await new Promise((resolve, reject) => {
    for (const promise of promises) {
      promise.then(value => {
        settled.push(value)
        if (settled.length === n) resolve(settled)
      }, reject)
    }
  })
}

/** Decision messages of the registration named `nameSpace`, while the test runs. */
function decisions (t: Test, nameSpace: string): DecisionMessage[] {
  const seen: DecisionMessage[] = []
  const onMessage = (message: unknown): void => {
    if ((message as DecisionMessage).nameSpace === nameSpace) seen.push(message as DecisionMessage)
  }
  diagnostics.subscribe(CHANNELS.decision, onMessage)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, onMessage) })
  return seen
}

/** The next decision message of the registration named `nameSpace`. */
async function nextDecision (t: Test, nameSpace: string): Promise<DecisionMessage> {
  return await new Promise(resolve => {
    const onMessage = (message: unknown): void => {
      if ((message as DecisionMessage).nameSpace !== nameSpace) return
      diagnostics.unsubscribe(CHANNELS.decision, onMessage)
      resolve(message as DecisionMessage)
    }
    diagnostics.subscribe(CHANNELS.decision, onMessage)
    t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, onMessage) })
  })
}

/** Script calls of the registration named `nameSpace` as they start, by mode (`acquire`, `release`, `renew`...). */
function scriptCalls (t: Test, nameSpace: string): RedisCallContext[] {
  const seen: RedisCallContext[] = []
  const handlers = {
    start: (context: unknown) => { if ((context as RedisCallContext).nameSpace === nameSpace) seen.push({ ...(context as RedisCallContext) }) },
    end: () => {},
    asyncStart: () => {},
    asyncEnd: () => {},
    error: () => {}
  }
  const tracing = diagnostics.tracingChannel(CHANNELS.redis)
  tracing.subscribe(handlers)
  t.teardown(() => { tracing.unsubscribe(handlers) })
  return seen
}

interface App {
  readonly app: FastifyInstance
  readonly nameSpace: string
  readonly held: Held
  /** The inject client's keys on the plugin-wide budget. */
  readonly keys: IdentityKeys
}

/**
 * An app whose `GET /` is held open (`held`) and `GET /quick` answers at once, both on the plugin-wide budget
 * (100 a minute unless `options` say); `setup` runs before they are added (an error handler, hooks, routes).
 */
async function makeApp (t: Test, options: RateGuardOptions, setup?: (app: FastifyInstance, held: Held) => void): Promise<App> {
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  const nameSpace = options.nameSpace ?? uniquePrefix()
  await app.register(rateGuard, { max: 100, timeWindow: '1 minute', ...options, nameSpace })
  const held = new Held()
  setup?.(app, held)
  app.get('/', held.handle)
  app.get('/quick', async () => 'quick')
  await app.ready()
  return { app, nameSpace, held, keys: identityKeys(nameSpace, GLOBAL_SCOPE, CLIENT) }
}

type Where = 'redis' | 'memory'

/** Where requests are counted: a real Redis (with a deadline a busy machine keeps, and failMode 'closed' so a missed one shows), or in process. */
async function storeFor (t: Test, where: Where): Promise<RateGuardOptions> {
  return where === 'redis' ? { redis: (await getRedis(t)).url, timeout: 5000, failMode: 'closed' } : {}
}

/** Units in flight at a lease key, as Redis holds them. */
async function inFlight (redis: Redis, key: string): Promise<number> {
  return await redis.zcard(key)
}

/**
 * Waits until Redis holds `units` at a lease key. A release is sent when a response closes, on the plugin's
 * connection: a test's own connection may be answered before it lands.
 */
async function holding (redis: Redis, key: string, units: number): Promise<void> {
  await until(async () => await inFlight(redis, key) === units, `${units} units in flight at ${key}`)
}

function injectAll (app: FastifyInstance, n: number, url = '/', headers: Record<string, string> = {}): Array<Promise<LightMyRequestResponse>> {
  return Array.from({ length: n }, async () => await app.inject({ url, headers }))
}

for (const where of ['redis', 'memory'] as const) {
  t.test(`${where}: max 2, 5 at once: 2 run, 3 are refused 429 with Retry-After: 1; slots come back when they end`, async t => {
    const { app, nameSpace, held, keys } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 2 } })
    const seen = decisions(t, nameSpace)
    const answers = injectAll(app, 5)
    const refused = await first(answers, 3)
    await held.entered(2)
    t.equal(held.running.length, 2, 'exactly 2 handlers run')
    for (const res of refused) {
      t.equal(res.statusCode, 429)
      t.strictSame(res.json(), IN_FLIGHT_BODY, 'the body as the other refusals: no code')
      t.equal(res.headers['retry-after'], '1')
      t.equal(res.headers['x-ratelimit-limit'], '2', 'the limit: concurrency\'s max')
      t.equal(res.headers['x-ratelimit-remaining'], '0')
    }
    t.equal(app.rateGuard.stats().decisions['in-flight'], 3, 'stats() counts them')
    t.strictSame(seen.map(m => m.outcome).sort(), ['allowed', 'allowed', 'in-flight', 'in-flight', 'in-flight'], 'the channel says in-flight')
    if (where === 'redis') t.equal(await inFlight(client(t, (await getRedis(t)).url), keys.leases), 2, 'Redis holds their 2 leases')

    await held.endAll()
    t.strictSame((await Promise.all(answers)).map(res => res.statusCode).sort(), [200, 200, 429, 429, 429])
    if (where === 'redis') await holding(client(t, (await getRedis(t)).url), keys.leases, 0)
    const again = injectAll(app, 3)
    const [third] = await first(again, 1)
    await held.entered(2)
    t.equal(third!.statusCode, 429, 'the slots came back: 2 run again, the third is refused')
    await held.endAll()
    t.strictSame((await Promise.all(again)).map(res => res.statusCode).sort(), [200, 200, 429])
  })

  t.test(`${where}: an app's error handler sees FST_RATE_GUARD_TOO_MANY_IN_FLIGHT`, async t => {
    const codes: unknown[] = []
    const { app, held } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 1 } }, app => {
      app.setErrorHandler(async (err: Error & { code?: string, statusCode?: number }, _request, reply) => {
        codes.push(err.code)
        return await reply.code(err.statusCode ?? 500).send({ mine: err.code })
      })
    })
    const running = app.inject('/')
    await held.entered(1)
    const res = await app.inject('/')
    t.equal(res.statusCode, 429)
    t.equal(res.headers['retry-after'], '1')
    t.strictSame(res.json(), { mine: 'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT' }, 'the app shapes the body')
    t.strictSame(codes, ['FST_RATE_GUARD_TOO_MANY_IN_FLIGHT'])
    await held.endAll()
    t.equal((await running).statusCode, 200)
  })

  t.test(`${where}: a request refused for its requests in flight gives back what its rate limits counted`, async t => {
    const { app, held } = await makeApp(t, { ...await storeFor(t, where), max: 10, timeWindow: '1 minute', concurrency: { max: 1 } })
    const answers = injectAll(app, 3)
    const refused = await first(answers, 2)
    await held.entered(1)
    t.strictSame(refused.map(res => res.statusCode), [429, 429])
    await held.endAll()
    t.equal((await Promise.all(answers)).filter(res => res.statusCode === 200).length, 1, 'one ran')
    const res = await app.inject('/quick')
    t.equal(res.statusCode, 200)
    t.equal(res.headers['x-ratelimit-remaining'], '8', 'counted: the one that ran and this one, not the two refused')
  })

  t.test(`${where}: a request its rate limit refuses takes no slot`, async t => {
    const refusals = deferred()
    const refusing = deferred()
    const { app, held } = await makeApp(t, {
      ...await storeFor(t, where),
      // A request marked tight has a limit of 1: the one running fills it.
      max: (request) => request.headers['x-tight'] === undefined ? 100 : 1,
      concurrency: { max: 2 }
    }, app => {
      // The rate limit's refusal is held open: were it holding a slot, the slot would stay taken meanwhile.
      app.setErrorHandler(async (err: Error & { code?: string, statusCode?: number }, _request, reply) => {
        if (err.code === 'FST_RATE_GUARD_TOO_MANY_REQUESTS') {
          refusing.resolve()
          await refusals.promise
        }
        return await reply.code(err.statusCode ?? 500).send({ code: err.code })
      })
    })
    const a = app.inject('/')
    await held.entered(1)
    const tight = app.inject({ url: '/', headers: { 'x-tight': '1' } })
    await refusing.promise
    const c = app.inject('/')
    await held.entered(2)
    t.pass('a second request runs beside the first while the rate limit\'s refusal is still being answered')
    const d = await app.inject('/')
    t.strictSame([d.statusCode, d.json()], [429, { code: 'FST_RATE_GUARD_TOO_MANY_IN_FLIGHT' }], 'a third finds the 2 slots taken')
    refusals.resolve()
    const refused = await tight
    t.strictSame([refused.statusCode, refused.json()], [429, { code: 'FST_RATE_GUARD_TOO_MANY_REQUESTS' }], 'refused by its rate limit')
    await held.endAll()
    t.strictSame([(await a).statusCode, (await c).statusCode], [200, 200])
  })

  t.test(`${where}: cost: a request takes its units; one costing more than max never fits (no Retry-After)`, async t => {
    const { app, nameSpace, held } = await makeApp(t, {
      ...await storeFor(t, where),
      cost: (request) => Number(request.headers['x-cost'] ?? 1),
      concurrency: { max: 3 }
    })
    const seen = decisions(t, nameSpace)
    const two = app.inject({ url: '/', headers: { 'x-cost': '2' } })
    await held.entered(1)
    const second = await app.inject({ url: '/', headers: { 'x-cost': '2' } })
    t.equal(second.statusCode, 429, 'a second of cost 2 does not fit beside the first (2 + 2 > 3)')
    t.equal(second.headers['retry-after'], '1')
    t.equal(second.headers['x-ratelimit-remaining'], '1', 'one unit left')
    const four = await app.inject({ url: '/', headers: { 'x-cost': '4' } })
    t.equal(four.statusCode, 429, 'cost 4 with max 3: refused at once')
    t.notOk('retry-after' in four.headers, 'no Retry-After: it never passes')
    t.equal(four.json().message, (await app.inject({ url: '/quick', headers: { 'x-cost': '101' } })).json().message, 'the answer of a rate limit that a cost never fits')
    t.strictSame(seen.map(m => m.outcome), ['allowed', 'in-flight', 'too-costly', 'too-costly'])
    const one = app.inject('/')
    await held.entered(2)
    t.pass('cost 1 fits beside cost 2')
    await held.endAll()
    t.strictSame([(await two).statusCode, (await one).statusCode], [200, 200])
    t.equal((await app.inject('/quick')).headers['x-ratelimit-remaining'], '96', 'the rate limit counted what ran (2 + 1) and this one')
  })

  t.test(`${where}: refusals strike toward a ban: the threshold's is a 403, which holds after the slots free up`, async t => {
    const { app, nameSpace, held } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 1 }, ban: { threshold: 2, duration: '1 minute' } })
    const seen = decisions(t, nameSpace)
    const running = app.inject('/')
    await held.entered(1)
    const strike = await app.inject('/')
    t.equal(strike.statusCode, 429, 'the first refusal: a strike')
    const banning = await app.inject('/')
    t.equal(banning.statusCode, 403, 'the second starts a ban')
    t.equal(banning.headers['retry-after'], '60')
    await held.endAll()
    t.equal((await running).statusCode, 200)
    const after = await app.inject('/quick')
    t.equal(after.statusCode, 403, 'banned on the route, its slot free')
    t.strictSame(seen.map(m => m.outcome), ['allowed', 'in-flight', 'ban-started', 'banned'])
  })

  t.test(`${where}: shadow mode: nothing is refused, the channel says shadow-limited, its slots are its own`, async t => {
    const { app, nameSpace, held, keys } = await makeApp(t, { ...await storeFor(t, where), mode: 'shadow', concurrency: { max: 1 } })
    const seen = decisions(t, nameSpace)
    const answers = injectAll(app, 3)
    await held.entered(3)
    t.pass('all 3 run')
    t.strictSame(seen.map(m => m.outcome).sort(), ['allowed', 'shadow-limited', 'shadow-limited'])
    if (where === 'redis') {
      const redis = client(t, (await getRedis(t)).url)
      const shadowKeys = identityKeys(nameSpace, GLOBAL_SCOPE, CLIENT, 'sliding-log', 'shadow')
      t.match(shadowKeys.leases, /:shadow:leases:/)
      t.equal(await inFlight(redis, shadowKeys.leases), 1, 'the one shadow mode let through holding a slot holds it under :shadow:')
      t.equal(await redis.exists(keys.leases), 0, 'nothing on the enforcing family\'s key')
      // An enforcing registration on the same budget: its slots are not shadow mode's.
      const enforcing = await makeApp(t, { ...await storeFor(t, where), nameSpace, concurrency: { max: 1 } })
      const theirs = enforcing.app.inject('/')
      await enforcing.held.entered(1)
      t.equal(await inFlight(redis, keys.leases), 1, 'an enforcing request takes its slot beside shadow mode\'s')
      await enforcing.held.endAll()
      t.equal((await theirs).statusCode, 200)
    }
    await held.endAll()
    t.strictSame((await Promise.all(answers)).map(res => res.statusCode), [200, 200, 200])
  })

  t.test(`${where}: a response that fails (500) frees its slots`, async t => {
    const { app, held, keys } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 1 } })
    held.fails = true
    const failing = app.inject('/')
    await held.entered(1)
    t.equal((await app.inject('/quick')).statusCode, 429, 'its slot taken while it runs')
    await held.endAll()
    t.equal((await failing).statusCode, 500)
    if (where === 'redis') await holding(client(t, (await getRedis(t)).url), keys.leases, 0)
    t.equal((await app.inject('/quick')).statusCode, 200, 'its slot is free again')
  })

  t.test(`${where}: a client that leaves keeps its slot while the handler still runs, freed when it ends (real HTTP)`, async t => {
    const { app, held, keys } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 1 } })
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    const leaving = new AbortController()
    const gone = fetch(url, { signal: leaving.signal }).then(() => 'answered', (err: Error) => err.name)
    await held.entered(1)
    t.equal((await fetch(`${url}/quick`)).status, 429, 'its slot is taken')
    const running = held.running[0]!
    leaving.abort()
    t.equal(await gone, 'AbortError')
    await running.closed
    t.equal((await fetch(`${url}/quick`)).status, 429, 'its slot is still taken: the handler still runs')
    t.equal(held.running.length, 1, 'still running')
    await held.endAll()
    if (where === 'redis') await holding(client(t, (await getRedis(t)).url), keys.leases, 0)
    t.equal((await fetch(`${url}/quick`)).status, 200, 'its slot is free once the handler ended')
  })

  t.test(`${where}: a client that left while its slots were taken gives them back at once (real HTTP)`, async t => {
    const arrived = deferred()
    const { app, nameSpace } = await makeApp(t, {
      ...await storeFor(t, where),
      concurrency: { max: 1 },
      callbackTimeout: 10_000,
      // The key of a request marked to leave is given once its client has gone.
      keyGenerator: async (request) => {
        if (request.headers['x-leave'] !== undefined) {
          arrived.resolve()
          await once(request.raw.socket, 'close')
        }
        return 'one client'
      }
    })
    const decided = nextDecision(t, nameSpace)
    const url = await app.listen({ port: 0, host: '127.0.0.1' })
    const leaving = new AbortController()
    const gone = fetch(`${url}/quick`, { headers: { 'x-leave': '1' }, signal: leaving.signal }).then(() => 'answered', (err: Error) => err.name)
    await arrived.promise
    leaving.abort()
    t.equal(await gone, 'AbortError')
    // Its request goes on without its client: its slot taken, then its answer made (the decision message).
    t.equal((await decided).outcome, 'allowed')
    if (where === 'redis') {
      const redis = client(t, (await getRedis(t)).url)
      const leases = identityKeys(nameSpace, GLOBAL_SCOPE, 'one client').leases
      await holding(redis, leases, 0)
    }
    t.equal((await fetch(`${url}/quick`)).status, 200, 'its slot was given back: the client\'s next request passes')
  })

  t.test(`${where}: a limiter the app places (fastify.rateLimit()) holds slots as a route does; createRateLimit's check takes no concurrency`, async t => {
    const placed = new Held()
    const { app } = await makeApp(t, { ...await storeFor(t, where), global: false }, app => {
      app.get('/placed', { onRequest: app.rateLimit({ concurrency: { max: 1 } }) }, async (request, reply) => await placed.handle(request, reply))
    })
    const running = app.inject('/placed')
    await placed.entered(1)
    t.equal((await app.inject('/placed')).statusCode, 429, 'its slot taken while it runs')
    await placed.endAll()
    t.equal((await running).statusCode, 200)
    t.throws(() => app.createRateLimit({ concurrency: { max: 1 } }), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /^Invalid rate-guard option "createRateLimit\.concurrency": expected false: a check holds no slot/ })
    t.doesNotThrow(() => app.createRateLimit({ concurrency: false }))
  })

  t.test(`${where}: concurrency false on a route turns the plugin's off there; a route may have its own`, async t => {
    const own = new Held()
    const { app, held } = await makeApp(t, { ...await storeFor(t, where), concurrency: { max: 1 } }, app => {
      app.get('/free', { config: { rateLimit: { concurrency: false } } }, async (request, reply) => await own.handle(request, reply))
    })
    const free = injectAll(app, 3, '/free')
    await own.entered(3)
    t.pass('3 at once on the route that turned it off')
    const running = app.inject('/')
    await held.entered(1)
    t.equal((await app.inject('/quick')).statusCode, 429, 'the plugin-wide budget keeps it')
    await own.endAll()
    await held.endAll()
    t.strictSame((await Promise.all([...free, running])).map(res => res.statusCode), [200, 200, 200, 200])

    const only = new Held()
    const routed = await makeApp(t, await storeFor(t, where), app => {
      app.get('/one', { config: { rateLimit: { concurrency: { max: 1 } } } }, async (request, reply) => await only.handle(request, reply))
    })
    const one = routed.app.inject('/one')
    await only.entered(1)
    t.equal((await routed.app.inject('/one')).statusCode, 429, 'a route\'s own concurrency')
    const plain = injectAll(routed.app, 2)
    await routed.held.entered(2)
    t.pass('the plugin-wide budget has none')
    await only.endAll()
    await routed.held.endAll()
    t.strictSame((await Promise.all([one, ...plain])).map(res => res.statusCode), [200, 200, 200])
  })
}

t.test('invalid concurrency options are refused at register, each naming the option', async t => {
  const cases: Array<[unknown, string]> = [
    [{ max: 0 }, 'concurrency.max'],
    [{ max: 1.5 }, 'concurrency.max'],
    [{ max: 2, lease: 500 }, 'concurrency.lease'],
    [{ max: 2, lease: 'soon' }, 'concurrency.lease'],
    [{ max: 2, extra: 1 }, 'concurrency.extra'],
    [3, 'concurrency'],
    [null, 'concurrency'],
    [[1], 'concurrency']
  ]
  for (const [concurrency, name] of cases) {
    const app = Fastify()
    const register = async (): Promise<void> => { await app.register(rateGuard, { concurrency } as unknown as RateGuardOptions) }
    await t.rejects(register(), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: new RegExp(`^Invalid rate-guard option "${name.replace('.', '\\.')}"`) }, `${JSON.stringify(concurrency)}: ${name}`)
    await app.close()
  }
  // On a route, as config.rateLimit.
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateGuard)
  t.throws(() => app.get('/', { config: { rateLimit: { concurrency: { max: 0 } } } }, async () => 'ok'), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"config\.rateLimit\.concurrency\.max"/ })

  class Store {
    incr (_key: string, callback: (err: Error | null, result?: { current: number, ttl: number }) => void): void { callback(null, { current: 1, ttl: 1000 }) }
    child (): Store { return new Store() }
  }
  const theirs = Fastify()
  t.teardown(async () => { await theirs.close() })
  await t.rejects((async () => { await theirs.register(rateGuard, { store: Store, concurrency: { max: 2 } }) })(), { code: 'FST_RATE_GUARD_INVALID_OPTION', message: /"concurrency": .*false with store/ }, 'not with the app\'s store')
})

t.test('redis: failMode while Redis is unreachable: open lets all through, closed answers 503, local limits in process', async t => {
  const server = await startRedisServer(t)
  const apps: Record<string, App> = {}
  for (const failMode of ['open', 'closed', 'local'] as const) {
    apps[failMode] = await makeApp(t, { redis: server.url, timeout: 200, failMode, concurrency: { max: 2 } })
  }
  await server.kill()
  const calls = [...Object.values(apps)].map(({ nameSpace }) => scriptCalls(t, nameSpace))

  const { open, closed, local } = apps as Record<'open' | 'closed' | 'local', App>
  const through = injectAll(open.app, 4)
  await open.held.entered(4)
  t.pass('open: 4 run at once, none holding a slot')
  await open.held.endAll()
  for (const res of await Promise.all(through)) t.strictSame([res.statusCode, res.headers['x-ratelimit-enforced']], [200, 'false'])

  for (const res of await Promise.all(injectAll(closed.app, 2))) t.equal(res.statusCode, 503, 'closed: 503')
  t.equal(closed.held.running.length, 0)

  const limited = injectAll(local.app, 4)
  const refused = await first(limited, 2)
  await local.held.entered(2)
  t.strictSame(refused.map(res => [res.statusCode, res.headers['x-ratelimit-limit']]), [[429, '2'], [429, '2']], 'local: 2 run, 2 are refused in process')
  await local.held.endAll()
  const again = injectAll(local.app, 3)
  const [third] = await first(again, 1)
  await local.held.entered(2)
  t.equal(third!.statusCode, 429, 'local: the slots taken in process were released in process: 2 run again')
  await local.held.endAll()
  await Promise.all([...limited, ...again])
  t.strictSame(calls.map(made => made.filter(call => call.mode !== 'decide')), [[], [], []], 'Redis, which did not decide, was not asked for slots')
})

t.test('redis: an acquire Redis answers after the deadline: failMode answered, and the slot Redis took is given back at once', async t => {
  const server = await startRedisServer(t)
  const redis = client(t, server.url)
  // The app's connection, lent: a pause sent on it just before an acquire holds that acquire (and what follows),
  // never the decision already answered.
  const lent = lend(t, server.url)
  // Both requests go on together once both have arrived: decided in one batch, before either asks for a slot.
  const together = deferred()
  let arrived = 0
  // Fixed windows: its decisions write no sorted set, so every ZADD is a lease's.
  const { app, held, keys, nameSpace } = await makeApp(t, { redis: lent, timeout: 200, failMode: 'open', algorithm: 'fixed-window', concurrency: { max: 1 } }, app => {
    app.addHook('onRequest', async (request) => {
      if (request.url !== '/') return
      if (++arrived === 2) together.resolve()
      await together.promise
    })
  })
  const calls = scriptCalls(t, nameSpace)
  // The lease script loaded, and a slot taken and released, before the pause.
  t.equal((await app.inject('/quick')).statusCode, 200)
  await holding(redis, keys.leases, 0)
  await redis.config('RESETSTAT')

  let paused = false
  const onStart = (context: unknown): void => {
    const { nameSpace: theirs, mode } = context as RedisCallContext
    if (theirs !== nameSpace || mode !== 'acquire' || paused) return
    paused = true
    // Three seconds: both requests' acquires wait, past their deadline.
    lent.call('CLIENT', 'PAUSE', '3000', 'WRITE').catch(() => {})
  }
  const tracing = diagnostics.tracingChannel(CHANNELS.redis)
  const handlers = { start: onStart, end: () => {}, asyncStart: () => {}, asyncEnd: () => {}, error: () => {} }
  tracing.subscribe(handlers)
  t.teardown(() => { tracing.unsubscribe(handlers) })
  const answers = injectAll(app, 2)
  await held.entered(2)
  t.pass('failMode open let both through, their acquires unanswered')
  t.strictSame(calls.map(call => call.mode), ['decide', 'acquire', 'release', 'decide', 'acquire', 'acquire'], 'both were decided, then asked Redis for a slot')
  await until(async () => (await commandCalls(redis, 'zrem')) >= 1, 'Redis to take the slot, late, and be told to give it back', 10_000)
  t.equal(await commandCalls(redis, 'zadd'), 1, 'Redis took one slot, late (the other found it taken)')
  t.equal(await commandCalls(redis, 'zrem'), 1, 'and gave it back: one ZREM')
  t.equal(await redis.exists(keys.leases), 0, 'the lease key is empty')
  t.equal(held.running.length, 2, 'while both requests still run')
  await held.endAll()
  for (const res of await Promise.all(answers)) {
    t.equal(res.statusCode, 200)
    t.equal(res.headers['x-ratelimit-enforced'], 'false', 'its rate limits decided, its slots not: it says it was not all enforced')
  }
  t.equal(await commandCalls(redis, 'zrem'), 1, 'requests holding nothing release nothing')
})

t.test('redis: a frozen Redis costs a request one deadline, not one for its rate limits and another for its slots', async t => {
  const TIMEOUT = 300
  const server = await startRedisServer(t)
  const apps: Array<[string, App]> = []
  for (const failMode of ['open', 'local'] as const) {
    const made = await makeApp(t, { redis: server.url, timeout: TIMEOUT, failMode, breaker: false, concurrency: { max: 2 } })
    t.equal((await made.app.inject('/quick')).headers['x-ratelimit-remaining'], '99', `${failMode}: Redis decides while it answers`)
    apps.push([failMode, made])
  }
  server.freeze()
  t.teardown(() => { server.thaw() })
  for (const [failMode, { app }] of apps) {
    for (let i = 0; i < 2; i++) {
      const at = performance.now()
      const res = await app.inject('/quick')
      const span = { at, ms: performance.now() - at }
      t.equal(res.statusCode, 200, `${failMode}: let through`)
      t.ok(inTime(TIMEOUT, span), `${failMode}: answered in ${span.ms.toFixed(0)} ms (bound ${allowing(TIMEOUT, span.at, span.at + span.ms).toFixed(0)} ms)`)
    }
  }
  server.thaw()
})

t.test('redis: a response destroyed as its slots are taken, before it says so (close), gives them back once', async t => {
  const url = (await getRedis(t)).url
  const redis = client(t, url)
  let last: FastifyReply | undefined
  const { app, keys, nameSpace } = await makeApp(t, { redis: url, timeout: 5000, concurrency: { max: 1 } }, app => {
    app.addHook('onRequest', async (_request, reply) => { last = reply })
  })
  const calls = scriptCalls(t, nameSpace)
  // Redis's answer to the acquire is in: the response is destroyed then, and its `close` follows on the next tick.
  const onEnd = (context: unknown): void => {
    if ((context as RedisCallContext).nameSpace === nameSpace && (context as RedisCallContext).mode === 'acquire') last?.raw.destroy()
  }
  const tracing = diagnostics.tracingChannel(CHANNELS.redis)
  const handlers = { start: () => {}, end: () => {}, asyncStart: () => {}, asyncEnd: onEnd, error: () => {} }
  tracing.subscribe(handlers)
  t.teardown(() => { tracing.unsubscribe(handlers) })
  // Whether inject hears of the destroyed response depends on which comes first, its close or its end.
  await app.inject('/quick').catch(() => {})
  tracing.unsubscribe(handlers)
  await holding(redis, keys.leases, 0)
  t.equal((await app.inject('/quick')).statusCode, 200, 'its slot is free')
  t.strictSame(calls.map(call => call.mode), ['decide', 'acquire', 'release', 'decide', 'acquire', 'release'], 'released once, though both the check and its close said it was over')
})

t.test('redis: an acquire that fails is failMode\'s, and gives back what the rate limit counted; a release that fails is reported', async t => {
  const url = (await getRedis(t)).url
  const redis = client(t, url)
  const { app, held, keys } = await makeApp(t, { redis: url, timeout: 5000, failMode: 'closed', max: 10, concurrency: { max: 1 } })
  // A lease key that is not a sorted set: the lease script fails on it, and the rate limit's does not.
  await redis.set(keys.leases, 'not leases')
  t.equal((await app.inject('/quick')).statusCode, 503, 'failMode closed: 503')
  await redis.del(keys.leases)
  const running = app.inject('/')
  await held.entered(1)
  t.equal(await inFlight(redis, keys.leases), 1)
  await redis.set(keys.leases, 'not leases')
  await held.endAll()
  t.equal((await running).statusCode, 200, 'a release that fails costs the response nothing')
  await redis.del(keys.leases)
  t.equal((await app.inject('/quick')).headers['x-ratelimit-remaining'], '8', 'counted: the one that ran, and this one, not the 503')

  // failMode 'local': the slots are taken in process, and released there.
  const local = await makeApp(t, { redis: url, timeout: 5000, failMode: 'local', concurrency: { max: 1 } })
  await redis.set(local.keys.leases, 'not leases')
  const first = local.app.inject('/')
  await local.held.entered(1)
  t.equal((await local.app.inject('/quick')).statusCode, 429, 'local: the in-process twin holds its slot')
  await local.held.endAll()
  t.equal((await first).statusCode, 200)
  t.equal((await local.app.inject('/quick')).statusCode, 200, 'local: released in process')
  t.equal(await redis.get(local.keys.leases), 'not leases', 'Redis\'s key untouched')
})

t.test('redis: a running request\'s lease is renewed; renewal stops with the last request holding leases of that length', async t => {
  // A server of its own: its ZADDs are this app's alone.
  const server = await startRedisServer(t)
  const redis = client(t, server.url)
  const other = new Held()
  const { app, held, keys, nameSpace } = await makeApp(t, { redis: server.url, timeout: 5000, algorithm: 'fixed-window', concurrency: { max: 5, lease: '1 second' } }, app => {
    // Leases of another length on another budget, renewed on a timer of their own (every 200 s: never while
    // this test runs), and passed over by the one-second timer.
    app.get('/long', { config: { rateLimit: { concurrency: { max: 5, lease: '10 minutes' } } } }, async (request, reply) => await other.handle(request, reply))
  })
  const calls = scriptCalls(t, nameSpace)
  const renewals = (): number => calls.filter(call => call.mode === 'renew').length
  const scores = async (): Promise<Map<string, number>> => {
    const flat = await redis.zrange(keys.leases, '0', '-1', 'WITHSCORES')
    const byMember = new Map<string, number>()
    for (let i = 0; i < flat.length; i += 2) byMember.set(flat[i]!, Number(flat[i + 1]))
    return byMember
  }
  const long = app.inject('/long')
  await other.entered(1)
  const answers = injectAll(app, 2)
  await held.entered(2)
  const taken = await scores()
  t.equal(taken.size, 2, 'two leases of a second')
  await until(async () => [...(await scores())].every(([member, score]) => score > taken.get(member)!), 'both leases to be renewed', 5000)
  t.pass('both leases end later than they did when taken')

  // The first ends: the other is renewed still.
  const [first, second] = held.running.splice(0, 2)
  first!.end()
  await first!.closed
  await holding(redis, keys.leases, 1)
  const left = [...await scores()]
  t.equal(left.length, 1, 'one lease left')
  const [member, score] = left[0]!
  await until(async () => ((await scores()).get(member) ?? 0) > score, 'the lease left to be renewed', 5000)
  t.pass('the lease left is renewed')

  second!.end()
  await second!.closed
  await holding(redis, keys.leases, 0)
  // A clock: another registration's one-second leases (on the shared Redis), renewed every third of a second.
  const clock = await makeApp(t, { redis: (await getRedis(t)).url, timeout: 5000, concurrency: { max: 1, lease: '1 second' } })
  const ticks = scriptCalls(t, clock.nameSpace)
  const ticked = (): number => ticks.filter(call => call.mode === 'renew').length
  const ticking = clock.app.inject('/')
  await clock.held.entered(1)
  // Two ticks for a renewal that may have been on its way when the last lease ended.
  await until(async () => ticked() >= 2, 'two ticks of the clock', 10_000)
  const zadds = await commandCalls(redis, 'zadd')
  const renewed = renewals()
  await until(async () => ticked() >= 5, 'three more ticks of the clock', 10_000)
  t.equal(renewals(), renewed, 'no renewal since the last one-second lease ended')
  t.equal(await commandCalls(redis, 'zadd'), zadds, 'no ZADD either')
  await clock.held.endAll()
  await ticking

  // Closed while a request holds leases: its timer stops; its release, to a client that quit, is reported.
  await app.close()
  await other.endAll()
  t.strictSame((await Promise.all([long, ...answers])).map(res => res.statusCode), [200, 200, 200])
})
