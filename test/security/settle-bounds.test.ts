// Attack: a request settles at what it used (`request.rateGuard.settle(amount)`), which the client may steer (an
// LLM answer's length). Were any whole number taken as it is, two settlements at 2^53 - 1 would push a count
// past 2^53, where the scripts' and the twin's arithmetic is no longer exact: the next decision failed
// (failMode let everything through, or answered 503) until the key expired, and a token bucket was reset.
// Defence: a settlement is charged at most what the largest limit of its budget holds (the client is left
// with nothing, and `request.rateGuard.charged` and a warning say so); and each limit, on both stores, ends a
// settlement at most full and owing the largest capacity once more, below the bounds where the arithmetic is
// exact, however many settlements come at once.
import Fastify from 'fastify'
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import type { Test } from 'tap'
import rateGuard from '../../lib/index.js'
import { ALGORITHMS } from '../../lib/algorithms/index.js'
import type { Algorithm } from '../../lib/algorithms/index.js'
import { identityKeys } from '../../lib/stores/key-names.js'
import type { Decision } from '../../lib/stores/store.js'
import { getRedis, uniquePrefix } from '../helpers/redis.js'
import { decideInput, memoryStore, redisStore } from '../helpers/stores.js'
import type { StoreUnderTest } from '../helpers/stores.js'

const HUGE = Number.MAX_SAFE_INTEGER
const MINUTE = 60_000
// A time on every window's boundary, so a window starts with the test.
const T0 = 1000 * MINUTE * 1024

const stores: Record<'redis' | 'memory', (t: Test) => Promise<StoreUnderTest>> = {
  redis: async t => await redisStore(t),
  memory: async t => memoryStore(t)
}

/** Whole numbers, as the reply reader wants them (a count past 2^53 is refused as a broken reply). */
function whole (decision: Decision): boolean {
  return [decision.count, decision.resetMs, decision.retryMs, ...decision.limits.flatMap(l => [l.count, l.resetMs])].every(Number.isSafeInteger)
}

for (const [kind, make] of Object.entries(stores)) {
  for (const algorithm of ALGORITHMS) {
    t.test(`${kind}, ${algorithm}: two requests settled at 2^53 - 1 leave the budget spent, not broken or reset`, async t => {
      const store = await make(t)
      const keys = identityKeys(uniquePrefix(), 'route:x', 'k', algorithm)
      const input = decideInput({ keys, max: 10, windowMs: MINUTE, algorithm })
      const counted = [await store.decide(input, T0), await store.decide(input, T0)]
      for (const d of counted) await store.settle({ keys, limits: input.limits, algorithm, member: d.member, at: d.at, final: HUGE }, T0 + 1)
      const next = await store.decide(input, T0 + 2)
      t.equal(next.status, 'limited', 'the next request is refused')
      t.ok(whole(next), 'its counts and times are whole numbers')
      t.ok(next.count >= 10 && next.count <= 20, `spent, owing at most one capacity more (count ${next.count})`)
      const later = await store.decide(input, T0 + MINUTE / 2)
      t.equal(later.status, 'limited', 'still refused half a window later: nothing was reset')
      t.ok(whole(later))
    })
  }

  // Near the bounds the options allow (max × window up to 2^50): eight requests in flight settled at the
  // budget's capacity each, the most the plugin sends; the algorithms that multiply stay exact.
  for (const algorithm of ['sliding-window', 'token-bucket'] as const) {
    t.test(`${kind}, ${algorithm}: eight requests settled at a capacity of 2^20 per 2^30 ms stay exact`, async t => {
      const store = await make(t)
      const keys = identityKeys(uniquePrefix(), 'route:x', 'k', algorithm)
      const windowMs = 2 ** 30
      const input = decideInput({ keys, max: 2 ** 20, windowMs, algorithm })
      const start = windowMs * 4
      const counted: Decision[] = []
      for (let i = 0; i < 8; i++) counted.push(await store.decide(input, start))
      for (const d of counted) await store.settle({ keys, limits: input.limits, algorithm, member: d.member, at: d.at, final: 2 ** 20 }, start + 1)
      // Spent and owing one capacity more: the window's count carries into the next one; the bucket refills one
      // capacity a window.
      for (const at of [start + 2, start + windowMs / 2, algorithm === 'sliding-window' ? start + windowMs * 1.5 : start + windowMs / 8 * 7]) {
        const next = await store.decide(input, at)
        t.equal(next.status, 'limited', `refused at start + ${at - start} ms`)
        t.ok(whole(next) && next.count <= 2 ** 21, `counts whole, at most two capacities (count ${next.count})`)
      }
    })
  }
}

async function makeApp (t: Test, kind: string, algorithm: Algorithm, warnings: string[]): Promise<FastifyInstance> {
  const app = Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { warnings.push((JSON.parse(line) as { msg: string }).msg) } } } })
  t.teardown(() => app.close())
  const store = kind === 'redis' ? { redis: (await getRedis(t)).url, nameSpace: uniquePrefix(), timeout: 3000 } : {}
  await app.register(rateGuard, { ...store, failMode: 'closed', verifyApiKey: () => true, max: 10, timeWindow: '1 minute', algorithm })
  app.get('/llm', async (request) => {
    await request.rateGuard.settle(HUGE)
    return { charged: request.rateGuard.charged }
  })
  await app.ready()
  return app
}

for (const kind of ['redis', 'memory']) {
  for (const algorithm of ALGORITHMS) {
    t.test(`${kind}, ${algorithm}: a handler that settles at 2^53 - 1 twice: charged what the limit holds, and the next request is refused`, async t => {
      const warnings: string[] = []
      const app = await makeApp(t, kind, algorithm, warnings)
      const ask = async (): Promise<{ status: number, body: string }> => {
        const res = await app.inject({ url: '/llm', headers: { 'x-api-key': 'k' } })
        return { status: res.statusCode, body: res.body }
      }
      t.strictSame(await ask(), { status: 200, body: '{"charged":10}' }, 'charged the 10 the limit holds')
      const second = await ask()
      t.ok(second.status === 200 || second.status === 429, `the second: counted or refused (${second.status})`)
      for (let i = 0; i < 3; i++) t.equal((await ask()).status, 429, 'then refused: not let through, not 503')
      t.ok(warnings.some(w => /more than its limits hold/.test(w)), 'and said in a warning')
    })
  }
}

t.test('memory: an override that raises a client\'s limit raises what a settlement can charge it', async t => {
  const warnings: string[] = []
  const app = await makeApp(t, 'memory', 'sliding-log', warnings)
  await app.rateGuard.setOverride('apikey:vip', { max: 1000, timeWindow: '1 minute', ttl: '1 minute' })
  const res = await app.inject({ url: '/llm', headers: { 'x-api-key': 'vip' } })
  t.strictSame(res.json(), { charged: 1000 }, 'the override\'s 1000, not the budget\'s 10')
  t.equal((await app.rateGuard.peek('apikey:vip')).count, 1000)
})
