// maxWait on both stores, one table: the Lua script on a real Redis (time injected, see helpers/stores.ts) and
// the in-process twin. A request the limits deny, which every one of them would allow within maxWait, is
// allowed after that wait, counted at its end (an entry ahead of the clock), so the requests waiting never pass
// a limit; at most maxQueue wait at once; a request given back frees its place; a peek never waits. Then the
// seeded differential under maxWait, and a replayed call (Redis only) that answers a waiting request as it was.
import t from 'tap'
import type { Algorithm } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { SCRIPTS, scriptArgs } from '../lib/stores/scripts.js'
import { members } from '../lib/stores/member-ids.js'
import { toDecision } from '../lib/stores/replies.js'
import type { DecideInput, Decision, WaitPolicy } from '../lib/stores/store.js'
import { differential } from './helpers/differential.js'
import { client, getRedis, uniquePrefix } from './helpers/redis.js'
import { decideInput, memoryStore, redisStore } from './helpers/stores.js'
import type { StoreUnderTest } from './helpers/stores.js'

// The seeded differentials (one per algorithm) are CPU-bound: up to 35 s beside a CPU-bound process. A hang
// still fails within three minutes.
t.setTimeout(180_000)

const T0 = 1_700_000_000_000

/** What a step states: the decision's status, count, reset, retry, and, for a request that waits, its wait and when it is counted. */
interface Seen {
  status: Decision['status']
  count: number
  resetMs: number
  retryMs: number
  waitMs?: number
  at?: number
}

const seen = ({ status, count, resetMs, retryMs, waitMs, at }: Decision): Seen =>
  waitMs === undefined ? { status, count, resetMs, retryMs } : { status, count, resetMs, retryMs, waitMs, at: at - T0 }
const allowed = (count: number, resetMs: number): Seen => ({ status: 'allowed', count, resetMs, retryMs: 0 })
const waits = (count: number, resetMs: number, waitMs: number, at: number): Seen => ({ status: 'allowed', count, resetMs, retryMs: 0, waitMs, at })
const limited = (count: number, resetMs: number, retryMs: number): Seen => ({ status: 'limited', count, resetMs, retryMs })

type Step =
  | { at: number, expect: Seen, cost?: number, peek?: boolean }
  /** Gives back the request decided at step `step` (its index). */
  | { at: number, giveBack: number }

interface Case {
  name: string
  /** The sliding log unless said. */
  algorithm?: Algorithm
  max: number
  windowMs: number
  limits?: Array<{ max: number, windowMs: number }>
  wait: WaitPolicy
  steps: Step[]
}

const CASES: Case[] = [
  {
    name: 'max 2 per second, maxWait 1 s, maxQueue 2: two wait for the first two to leave, in the order they came; the fifth would wait past maxWait',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 0, expect: allowed(2, 1000) },
      // Its limit as it will be when it is let through: the first two gone, itself counted.
      { at: 10, expect: waits(1, 1000, 990, 1000) },
      { at: 20, expect: waits(2, 1000, 980, 1000) },
      // Its place is after the two waiting, one window on: 1970 ms away. Past the limit, one more unit is free
      // then too (reset: the count one below the limit).
      { at: 30, expect: limited(4, 1970, 1970) },
      // A peek reports, and never waits.
      { at: 40, peek: true, expect: limited(4, 1960, 1960) },
      // At 1000 the first two have left and the two waiting count: the next one waits a window.
      { at: 1000, expect: waits(1, 1000, 1000, 2000) }
    ]
  },
  {
    name: 'a full queue refuses, though the wait would be short; a request given back frees its place',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 5000, maxQueue: 1 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 500, expect: allowed(2, 500) },
      { at: 600, expect: waits(2, 500, 400, 1000) },
      { at: 700, expect: limited(3, 800, 800) },
      // Its client left while it waited.
      { at: 800, giveBack: 2 },
      { at: 800, expect: waits(2, 500, 200, 1000) }
    ]
  },
  {
    name: 'a request of several units waits until they fit; one costing more than a limit holds never waits',
    max: 3,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 3 },
    steps: [
      { at: 0, cost: 2, expect: allowed(2, 1000) },
      { at: 100, cost: 2, expect: waits(2, 1000, 900, 1000) },
      { at: 200, cost: 4, expect: limited(4, 800, 0) }
    ]
  },
  {
    name: 'the first request of several units on a log of single ones waits as one',
    max: 3,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 3 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 100, expect: allowed(2, 900) },
      { at: 200, cost: 2, expect: waits(3, 100, 800, 1000) }
    ]
  },
  {
    name: 'every limit must allow it within maxWait: 2 per second would in 980 ms, 3 per 10 s not for 9980 ms',
    max: 2,
    windowMs: 1000,
    limits: [{ max: 2, windowMs: 1000 }, { max: 3, windowMs: 10_000 }],
    wait: { maxMs: 1000, maxQueue: 5 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 0, expect: allowed(2, 1000) },
      // The binding limit when it is let through: the longer one, full.
      { at: 10, expect: waits(3, 9000, 990, 1000) },
      { at: 20, expect: limited(3, 980, 9980) }
    ]
  },
  {
    name: 'token bucket, 2 a second: a request over the bucket takes its tokens now and waits for the drip to pay them off; two owed fill a queue of 2',
    algorithm: 'token-bucket',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 500) },
      { at: 0, expect: allowed(2, 500) },
      // A token back every 500 ms: the third waits 500, the fourth 1000 (each let through with the bucket full).
      { at: 0, expect: waits(2, 500, 500, 500) },
      { at: 0, expect: waits(2, 500, 1000, 1000) },
      // The fifth would wait 1500 ms, past maxWait.
      { at: 0, expect: limited(4, 1500, 1500) },
      // The fourth's client left: its tokens back.
      { at: 100, giveBack: 3 },
      { at: 100, expect: waits(2, 500, 900, 1000) }
    ]
  },
  {
    name: 'token bucket: a full queue refuses, though the wait would be short',
    algorithm: 'token-bucket',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 5000, maxQueue: 1 },
    steps: [
      { at: 0, expect: allowed(1, 500) },
      { at: 0, expect: allowed(2, 500) },
      { at: 0, expect: waits(2, 500, 500, 500) },
      { at: 0, expect: limited(3, 1000, 1000) },
      // Once the first owed token is paid off, the queue has room again.
      { at: 500, expect: waits(2, 500, 500, 1000) }
    ]
  },
  {
    name: 'fixed window, 2 a second: the requests over the limit wait for the next window, counted in it as they come; one that finds it full is refused',
    algorithm: 'fixed-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 0, expect: allowed(2, 1000) },
      // Its limit as it will be when it is let through: the next window, counting those that waited for it.
      { at: 10, expect: waits(1, 1000, 990, 1000) },
      { at: 20, expect: waits(2, 1000, 980, 1000) },
      // The next window is full of requests waiting: its place would be in the one after, 1970 ms away.
      { at: 30, expect: limited(2, 970, 1970) },
      { at: 40, peek: true, expect: limited(2, 960, 1960) },
      // At 1000 the two that waited are the window's count: the next one waits for the window after.
      { at: 1000, expect: waits(1, 1000, 1000, 2000) }
    ]
  },
  {
    name: 'fixed window: a full queue refuses, though the wait would be short; a request given back frees its place in the next window',
    algorithm: 'fixed-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 5000, maxQueue: 1 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 500, expect: allowed(2, 500) },
      { at: 600, expect: waits(1, 1000, 400, 1000) },
      { at: 700, expect: limited(2, 300, 300) },
      { at: 800, giveBack: 2 },
      { at: 800, expect: waits(1, 1000, 200, 1000) }
    ]
  },
  {
    name: 'fixed window: a place freed in this window lets a request through now, while one waits for the next, which still counts it',
    algorithm: 'fixed-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 100, expect: allowed(2, 900) },
      { at: 200, expect: waits(1, 1000, 800, 1000) },
      { at: 300, giveBack: 1 },
      { at: 400, expect: allowed(2, 600) },
      // The next window has begun with the one that waited for it.
      { at: 1000, expect: allowed(2, 1000) },
      { at: 1000, expect: waits(1, 1000, 1000, 2000) }
    ]
  },
  {
    name: 'fixed window, 2 per second and 3 per 10 s: counted in the next second and in the 10 s window it is in',
    algorithm: 'fixed-window',
    max: 2,
    windowMs: 1000,
    limits: [{ max: 2, windowMs: 1000 }, { max: 3, windowMs: 10_000 }],
    wait: { maxMs: 1000, maxQueue: 5 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 0, expect: allowed(2, 1000) },
      { at: 10, expect: waits(3, 9000, 990, 1000) },
      { at: 20, expect: limited(3, 9980, 9980) }
    ]
  },
  {
    name: 'fixed window, one window ahead at most: a wait that ends past a shorter limit\'s next window is refused',
    algorithm: 'fixed-window',
    max: 5,
    windowMs: 1000,
    limits: [{ max: 5, windowMs: 1000 }, { max: 2, windowMs: 4000 }],
    wait: { maxMs: 5000, maxQueue: 5 },
    steps: [
      { at: 0, expect: allowed(1, 4000) },
      { at: 0, expect: allowed(2, 4000) },
      // 2 per 4 s lets it through at 4000, four windows of the 1 s limit on.
      { at: 100, expect: limited(2, 3900, 3900) }
    ]
  },
  {
    name: 'sliding window, 2 a second: a full window weighs on the next, so the third waits until half of it has slid by; the fourth would wait into the window after',
    algorithm: 'sliding-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 2000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 2000) },
      { at: 0, expect: allowed(2, 1500) },
      // At 1500 the previous window weighs 1: with the one counted in its window, 2.
      { at: 10, expect: waits(2, 500, 1490, 1500) },
      // It would fit at 2000 only, in the window after the next.
      { at: 20, expect: limited(3, 1980, 1980) },
      { at: 1500, expect: waits(2, 1000, 500, 2000) }
    ]
  },
  {
    name: 'sliding window: later in this window, as the previous one fades, or in the next; a request given back frees its place',
    algorithm: 'sliding-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 1 },
    steps: [
      { at: 0, expect: allowed(1, 2000) },
      { at: 0, expect: allowed(2, 1500) },
      // Counted in this window: it goes at 1500, when the previous window weighs 1.
      { at: 1100, expect: waits(2, 500, 400, 1500) },
      // Counted in the next: the previous window's weight gone, the one before it in this window's place.
      { at: 1200, expect: waits(2, 1000, 800, 2000) },
      // Both count now (the estimate 4 of 2): it would fit at 3000, past maxWait.
      { at: 1300, expect: limited(4, 1700, 1700) },
      { at: 1400, giveBack: 3 },
      { at: 1400, expect: waits(2, 1000, 600, 2000) }
    ]
  },
  {
    name: 'sliding window: places freed in this window let a request through now, while one waits for the next',
    algorithm: 'sliding-window',
    max: 3,
    windowMs: 1000,
    wait: { maxMs: 2000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 2000) },
      { at: 0, expect: allowed(2, 1500) },
      { at: 0, expect: allowed(3, 1334) },
      { at: 10, expect: waits(3, 333, 1324, 1334) },
      { at: 20, giveBack: 0 },
      { at: 20, giveBack: 1 },
      // One in this window, one given back, one waiting for the next: 3 of 3 with it.
      { at: 30, expect: allowed(3, 1470) },
      // The next goes at 1500, when this window's two weigh 1 and the two waiting make 3.
      { at: 40, expect: waits(3, 500, 1460, 1500) }
    ]
  },
  {
    name: 'sliding window: a request of the previous window given back while one waits for the next still weighs less',
    algorithm: 'sliding-window',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 2000) },
      { at: 0, expect: allowed(2, 1500) },
      { at: 1200, expect: waits(2, 500, 300, 1500) },
      { at: 1300, expect: waits(2, 1000, 700, 2000) },
      { at: 1400, giveBack: 0 },
      // The previous window weighs 0.6 of its 1 left, this window's one and the one waiting: 3 (4 had it kept both).
      { at: 1400, peek: true, expect: limited(3, 1600, 1600) }
    ]
  },
  {
    name: 'sliding window: a request waiting for the next window counts in this one\'s estimate too, so what this window lets through never leaves the next past max',
    algorithm: 'sliding-window',
    max: 4,
    windowMs: 1000,
    wait: { maxMs: 2000, maxQueue: 5 },
    steps: [
      { at: 0, cost: 2, expect: allowed(2, 1500) },
      { at: 1000, cost: 2, expect: allowed(4, 500) },
      { at: 1000, cost: 3, expect: waits(4, 500, 1500, 2500) },
      // 0.2 of the previous window's 2 and this window's 2, with one more: 3.2 of 4, but the 3 waiting count too.
      { at: 1900, expect: limited(6, 1100, 1100) }
    ]
  },
  {
    name: 'a request that fits is never held: the wait is for requests over the limit',
    max: 2,
    windowMs: 1000,
    wait: { maxMs: 1000, maxQueue: 2 },
    steps: [
      { at: 0, expect: allowed(1, 1000) },
      { at: 999, expect: allowed(2, 1) },
      { at: 1000, expect: allowed(2, 999) }
    ]
  }
]

for (const kind of ['redis', 'memory'] as const) {
  t.test(`maxWait, step by step (${kind})`, async t => {
    const store: StoreUnderTest = kind === 'redis' ? await redisStore(t) : memoryStore(t)
    for (const { name, algorithm = 'sliding-log', max, windowMs, limits, wait, steps } of CASES) {
      const keys = identityKeys(uniquePrefix(), 'all', 'user:waits', algorithm)
      const decisions: Array<{ decision: Decision, input: DecideInput }> = []
      for (const [i, step] of steps.entries()) {
        if ('giveBack' in step) {
          const { decision, input } = decisions[step.giveBack]!
          await store.settle({ keys, limits: input.limits, algorithm, member: decision.member, at: decision.at, cost: input.cost ?? 1, final: 0 }, T0 + step.at)
          continue
        }
        const input = { ...decideInput({ keys, max, windowMs, limits, peek: step.peek, cost: step.cost, algorithm }), wait }
        const decision = await store.decide(input, T0 + step.at)
        decisions[i] = { decision, input }
        t.strictSame(seen(decision), step.expect, `${name}: step ${i} at ${step.at} ms`)
      }
    }
  })
}

// A fixed seed whose traffic reaches every kind of answer, waits and places given back among them, and a fresh
// one each run. CONFORMANCE_SEED=<n> replays one.
const FIXED_SEED = 1
const seeds = process.env.CONFORMANCE_SEED !== undefined ? [Number(process.env.CONFORMANCE_SEED)] : [FIXED_SEED, Math.floor(Math.random() * 2 ** 32)]
for (const seed of seeds) {
  t.test(`differential (token bucket, maxWait): random traffic with waits, places given back and clock steps back gets identical decisions from both stores (seed ${seed})`, async t => {
    await differential(t, 'token-bucket', seed, seed === FIXED_SEED || seeds.length === 1, { waits: true, steps: 1500 })
  })
  t.test(`differential (fixed window, maxWait): random traffic with waits, places given back and clock steps back gets identical decisions from both stores (seed ${seed})`, async t => {
    await differential(t, 'fixed-window', seed, seed === FIXED_SEED || seeds.length === 1, { waits: true, steps: 1500 })
  })
  t.test(`differential (sliding window, maxWait): random traffic with waits, places given back and clock steps back gets identical decisions from both stores (seed ${seed})`, async t => {
    await differential(t, 'sliding-window', seed, seed === FIXED_SEED || seeds.length === 1, { waits: true, steps: 1500 })
  })
  t.test(`differential (sliding log, maxWait): random traffic with waits, places given back and clock steps back gets identical decisions from both stores (seed ${seed})`, async t => {
    await differential(t, 'sliding-log', seed, seed === FIXED_SEED || seeds.length === 1, { waits: true, steps: 1500 })
  })
}

t.test('a replayed call (the same members, re-sent) answers a waiting request as it was: the same wait, counted once', async t => {
  const redis = client(t, (await getRedis(t)).url)
  const lua = SCRIPTS['sliding-log']
  redis.defineCommand('rateGuardWaitReplay', { lua: lua.lua })
  const keys = identityKeys(uniquePrefix(), 'all', 'user:replayed')
  const input: DecideInput = { ...decideInput({ keys, max: 1, windowMs: 60_000 }), wait: { maxMs: 60_000, maxQueue: 5 } }
  const call = async (base: string): Promise<Decision> => toDecision(await (redis as unknown as Record<string, (...args: Array<string | number>) => Promise<unknown>>).rateGuardWaitReplay!(...scriptArgs([input], 'decide', base)), members(base, 1)[0]!, input.limits)
  t.equal((await call('first.')).status, 'allowed')
  const waiting = await call('second.')
  t.ok(waiting.waitMs! > 59_000 && waiting.waitMs! <= 60_000, `the second waits about a window (${waiting.waitMs} ms)`)
  const replayed = await call('second.')
  t.ok(replayed.waitMs! <= waiting.waitMs! && replayed.waitMs! > waiting.waitMs! - 1000, `its replay waits what is left of it (${replayed.waitMs} ms)`)
  t.equal(replayed.at, waiting.at, 'counted at the same moment')
  t.equal(await redis.zcard(keys.log), 2, 'and once')
})
