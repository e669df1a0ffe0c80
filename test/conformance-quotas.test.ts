// Calendar quotas (lua/quota.lua and its twin, lib/algorithms/quota.ts) on both stores, every algorithm, on a
// clock the test moves: counted in the period that holds the store's clock (the one before the app's current
// one while the store has not reached it, the next one once it is over), beside the algorithm's own limits; two
// instances whose clocks are 18 minutes or 2 seconds either side of the store's, across a day's boundary, share
// one count, and a later period counted is never reset by an earlier one. A full quota refuses without the algorithm counting
// anything, and a refusal by the algorithm counts nothing on the quota; costs, peeks, settling (in its period
// only), an override of the other limits (the quota stays), maxWait (never waiting for a period) and a quota
// alone. Both stores answer each step alike, to the field.
import t from 'tap'
import type { Test } from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import type { Algorithm, Limit } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import { encodeLimits } from '../lib/stores/overrides.js'
import type { DecideInput, Decision } from '../lib/stores/store.js'
import { differential } from './helpers/differential.js'
import { memoryStore, redisStore } from './helpers/stores.js'
import type { StoreUnderTest } from './helpers/stores.js'
import { uniquePrefix } from './helpers/redis.js'

// CPU-bound (the seeded differentials): a limit of its own, as .taprc says of the conformance files.
t.setTimeout(180_000)

const T0 = 1_800_000_000_000
/**
 * A quota of `max` whose current period (on the app's clock) is [T0, T0 + 1000), the one before
 * [T0 - 500, T0) and the next [T0 + 1000, T0 + 3000).
 */
const quota = (max: number): Limit => ({ max, windowMs: 1000, burst: max, period: { previous: T0 - 500, start: T0, end: T0 + 1000, next: T0 + 3000 } })
const MINUTE: Limit = { max: 10, windowMs: 60_000, burst: 10 }

/** What a step says: its status, the algorithm's limits' counts, the quota's count, reset and window, and the retry. */
function said ({ status, limits, retryMs }: Decision): unknown[] {
  const { count, resetMs, windowMs } = limits.at(-1)!
  return [status, limits.slice(0, -1).map(l => l.count), [count, resetMs, windowMs], retryMs]
}

/** Runs `steps` on both stores for every algorithm: both must answer each step alike. */
async function bothStores (t: Test, steps: (at: (ms: number, over?: Partial<DecideInput>) => Promise<unknown[]>, algorithm: Algorithm, store: StoreUnderTest, input: DecideInput) => Promise<void>, limits = [MINUTE, quota(3)]): Promise<void> {
  const stores = [memoryStore(t), await redisStore(t)]
  for (const algorithm of ALGORITHMS) {
    const answers: Array<Array<Omit<Decision, 'member' | 'at'>>> = []
    for (const store of stores) {
      const got: Array<Omit<Decision, 'member' | 'at'>> = []
      answers.push(got)
      const input: DecideInput = { keys: identityKeys(uniquePrefix(), 'q', 'client', algorithm), limits, ban: null, peek: false, algorithm }
      await steps(async (ms, over = {}) => {
        const { member: _member, at: _at, ...decision } = await store.decide({ ...input, ...over }, T0 + ms)
        got.push(decision)
        return said(decision as Decision)
      }, algorithm, store, input)
    }
    t.same(answers[1], answers[0], `${algorithm}: Redis answers every step as the in-process store does`)
  }
}

t.test('beside the algorithm\'s limit: a full quota refuses, counting nothing; the next period counts anew', async t => {
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    t.same(await at(100), ['allowed', [1], [1, 900, 1000], 0], `${name}: counted on both`)
    await at(100)
    t.same(await at(200), ['allowed', [3], [3, 800, 1000], 0], `${name}: the third`)
    t.same(await at(300), ['limited', [3], [3, 700, 1000], 700], `${name}: the quota full: refused until its period ends, the minute limit not counting it`)
    t.same(await at(300, { peek: true }), ['limited', [3], [3, 700, 1000], 700], `${name}: a peek says as much`)
    t.same(await at(300, { cost: 2 }), ['limited', [3], [3, 700, 1000], 700], `${name}: so does a costlier one`)
    // The store's clock past the app's current period: the next one, 2000 ms long.
    t.same(await at(1000), ['allowed', [4], [1, 2000, 2000], 0], `${name}: the next period, counted anew`)
  })
})

t.test('a refusal by the algorithm counts nothing on the quota; a cost counts on both', async t => {
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    t.same((await at(100, { cost: 2 })).slice(0, 3), ['allowed', [2], [2, 900, 1000]], `${name}: 2 units on each`)
    t.match(await at(100, { cost: 3 }), ['limited', [2], [2, 900, 1000]], `${name}: 3 more do not fit the quota of 3`)
    t.same((await at(100, { cost: 1 })).slice(0, 3), ['allowed', [3], [3, 900, 1000]], `${name}: 1 more does`)
    t.same(await at(200, { cost: 4 }), ['limited', [3], [3, 800, 1000], 0], `${name}: more than the quota holds never passes: a retry of 0`)
  }, [{ max: 3, windowMs: 60_000, burst: 3 }, quota(5)])
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    for (let i = 0; i < 2; i++) await at(100)
    const refused = await at(100)
    t.equal(refused[0], 'limited', `${name}: the algorithm's limit of 2 refuses the third`)
    t.same(refused[2], [2, 900, 1000], `${name}: which the quota did not count`)
  }, [{ max: 2, windowMs: 60_000, burst: 2 }, quota(5)])
})

t.test('a quota alone: no state of the algorithm\'s, and the lean path not taken', async t => {
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    t.same(await at(0), ['allowed', [], [1, 1000, 1000], 0], name)
    t.same(await at(999), ['allowed', [], [2, 1, 1000], 0], name)
    t.same(await at(999), ['limited', [], [2, 1, 1000], 1], name)
    t.same(await at(2999), ['allowed', [], [1, 1, 2000], 0], `${name}: the next period's last millisecond`)
  }, [quota(2)])
})

const DAY = 86_400_000
/** A day's quota of `max` as an app whose clock reads T0 + `appAt` sends it: its days begin at T0 (a midnight). */
function dayQuota (max: number, appAt: number): Limit {
  const start = T0 + Math.floor(appAt / DAY) * DAY
  return { max, windowMs: DAY, burst: max, period: { previous: start - DAY, start, end: start + DAY, next: start + 2 * DAY } }
}
const ROOMY: Limit = { max: 100, windowMs: 60_000, burst: 100 }
const SKEWS: Array<[string, number]> = [['18 minutes ahead', 18 * 60_000], ['18 minutes behind', -18 * 60_000], ['2 s ahead', 2000], ['2 s behind', -2000]]

t.test('two instances, one ahead of the store or behind it, alternate across a day\'s boundary: one count, 5 a day', async t => {
  for (const [skewed, skew] of SKEWS) {
    await bothStores(t, async (at, algorithm, store) => {
      // 40 requests, every other one from the skewed instance, the store's clock from two skews before the
      // boundary (T0) to two skews after it.
      const allowed = [0, 0]
      for (let i = 0; i < 40; i++) {
        const now = Math.floor((i - 20) * Math.abs(skew) / 10)
        const [status] = await at(now, { limits: [ROOMY, dayQuota(5, i % 2 === 0 ? now : now + skew)] })
        if (status === 'allowed') allowed[now < 0 ? 0 : 1]!++
      }
      t.strictSame(allowed, [5, 5], `${store.kind} ${algorithm}, ${skewed}: ${allowed.join(' + ')} allowed; 5 in the store's day before the boundary, 5 in the day after`)
    }, [ROOMY, dayQuota(5, 0)])
  }
})

t.test('a later period counted is never reset by a request that finds an earlier one (a clock set back, an app far off)', async t => {
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    // The store's clock in the next period (on the app's view too): 2 counted there.
    t.same(await at(1100, { limits: [ROOMY, quota(3)] }), ['allowed', [1], [1, 1900, 2000], 0], `${name}: the next period`)
    await at(1100, { limits: [ROOMY, quota(3)] })
    // The store's clock set back into the current period: the later count stands, and this request counts in it.
    // (The token bucket reads a clock set back its own way: the algorithm's count is not what this is about.)
    const back = await at(900, { limits: [ROOMY, quota(3)] })
    t.same([back[0], back[2]], ['allowed', [3, 100, 1000]], `${name}: counted on the later period's 2`)
    const later = await at(1200, { limits: [ROOMY, quota(3)] })
    t.same([later[0], later[2]], ['limited', [3, 1800, 2000]], `${name}: which is full`)
  }, [ROOMY, quota(3)])
})

t.test('settling: an app ahead of the store gives back in the store\'s period; one behind, never in the next', async t => {
  for (const store of [memoryStore(t), await redisStore(t)]) {
    const keys = identityKeys(uniquePrefix(), 'q', 'client', 'sliding-log')
    const ahead = [dayQuota(3, 0)]
    const input: DecideInput = { keys, limits: ahead, ban: null, peek: false, algorithm: 'sliding-log' }
    // The store's clock a second before the boundary, the app's past it.
    const first = await store.decide(input, T0 - 1000)
    const second = await store.decide(input, T0 - 900)
    await store.settle({ keys, limits: ahead, algorithm: 'sliding-log', member: second.member, at: second.at, final: 0 }, T0 - 800)
    t.same(said(await store.decide(input, T0 - 700)).slice(0, 3), ['allowed', [], [2, 700, DAY]], `${store.kind}: given back in the store's day`)
    // Past the boundary, the app's clock behind it: its request of the day before gives nothing back.
    const behind = [dayQuota(3, -1)]
    await store.decide({ ...input, limits: behind }, T0 + 100)
    await store.settle({ keys, limits: behind, algorithm: 'sliding-log', member: first.member, at: first.at, final: 0 }, T0 + 200)
    t.same(said(await store.decide({ ...input, limits: behind }, T0 + 300)).slice(0, 3), ['allowed', [], [2, DAY - 300, DAY]], `${store.kind}: a request of the day before: nothing given back`)
  }
})

t.test('settling gives back in the period counted, never in the next', async t => {
  const stores = [memoryStore(t), await redisStore(t)]
  for (const store of stores) {
    for (const algorithm of ALGORITHMS) {
      const keys = identityKeys(uniquePrefix(), 'q', 'client', algorithm)
      const limits = [MINUTE, quota(3)]
      const input: DecideInput = { keys, limits, ban: null, peek: false, algorithm }
      const name = `${store.kind} ${algorithm}`
      const first = await store.decide(input, T0 + 100)
      const second = await store.decide(input, T0 + 200)
      await store.settle({ keys, limits, algorithm, member: second.member, at: second.at, final: 0 }, T0 + 300)
      t.same(said(await store.decide(input, T0 + 400)).slice(0, 3), ['allowed', [2], [2, 600, 1000]], `${name}: given back on both`)
      await store.decide(input, T0 + 1100)
      await store.settle({ keys, limits, algorithm, member: first.member, at: first.at, final: 0 }, T0 + 1200)
      t.same(said(await store.decide(input, T0 + 1300)).slice(0, 3), ['allowed', [3], [2, 1700, 2000]], `${name}: a request of the period before: nothing given back on the quota`)
    }
  }
})

t.test('settling a quota given back already changes nothing; nor does settling where nothing was counted', async t => {
  for (const store of [memoryStore(t), await redisStore(t)]) {
    const keys = identityKeys(uniquePrefix(), 'q', 'client', 'sliding-log')
    const limits = [quota(3)]
    const input: DecideInput = { keys, limits, ban: null, peek: false, algorithm: 'sliding-log' }
    await store.settle({ keys, limits, algorithm: 'sliding-log', member: 'm0.1', at: T0 + 50, final: 0 }, T0 + 60)
    const first = await store.decide(input, T0 + 100)
    await store.settle({ keys, limits, algorithm: 'sliding-log', member: first.member, at: first.at, final: 0 }, T0 + 200)
    await store.settle({ keys, limits, algorithm: 'sliding-log', member: first.member, at: first.at, final: 3 }, T0 + 300)
    t.same(said(await store.decide(input, T0 + 400)), ['allowed', [], [1, 600, 1000], 0], `${store.kind}: the quota counts only the last request`)
    // An override that names no limit: a decision is refused with its error; settling gives nothing back.
    await store.setValue(keys.override, 'none', null, T0 + 500)
    await store.settle({ keys, limits, algorithm: 'sliding-log', member: first.member, at: T0 + 400, final: 0 }, T0 + 500)
    await store.delete([keys.override], T0 + 500)
    t.same(said(await store.decide(input, T0 + 500)).slice(2), [[2, 500, 1000], 0], `${store.kind}: nothing given back under it`)
    t.same(said(await store.decide(input, T0 + 500)).slice(0, 1), ['allowed'])
    t.same(said(await store.decide({ ...input, cost: 4 }, T0 + 500)), ['limited', [], [3, 500, 1000], 0], `${store.kind}: more than the quota holds, alone: a retry of 0`)
  }
})

t.test('an override replaces what it names: the algorithm\'s limits, a quota\'s max', async t => {
  await bothStores(t, async (at, algorithm, store, input) => {
    const name = `${store.kind} ${algorithm}`
    await store.setValue(input.keys.override, encodeLimits([{ max: 1, windowMs: 60_000, burst: 1 }]), null, T0)
    t.same(await at(100), ['allowed', [1], [1, 900, 1000], 0], `${name}: under the override of the minute's limit`)
    t.equal((await at(100))[0], 'limited', `${name}: its max of 1`)
    await store.delete([input.keys.override], T0 + 200)
    // The algorithm's state, counted under the override, is its own to read (the token bucket may refuse).
    const after = await at(200)
    t.same(after[2], [after[0] === 'allowed' ? 2 : 1, 800, 1000], `${name}: the quota counted through it, and what is allowed after it`)
  })
  await bothStores(t, async (at, algorithm, store, input) => {
    const name = `${store.kind} ${algorithm}`
    await store.setValue(input.keys.override, '5 q1', null, T0)
    for (let i = 1; i <= 5; i++) t.same(await at(100), ['allowed', [i], [i, 900, 1000], 0], `${name}: the quota's max made 5, the minute's limit the policy's`)
    t.same(await at(100), ['limited', [5], [5, 900, 1000], 900], `${name}: the sixth`)
    await store.setValue(input.keys.override, `${encodeLimits([{ max: 7, windowMs: 60_000, burst: 7 }])};7 q1`, null, T0 + 200)
    const both = await at(200)
    t.same([both[0], both[2]], ['allowed', [6, 800, 1000]], `${name}: both named`)
    await store.setValue(input.keys.override, '5 q2', null, T0 + 300)
    await t.rejects(at(300), /names no limit/, `${name}: a quota the budget does not have is no limit: the request's error, as an override naming none`)
  }, [MINUTE, quota(3)])
})

t.test('maxWait: a request the algorithm lets through later waits, counted on the quota now; never for a full quota', async t => {
  await bothStores(t, async (at, algorithm, store) => {
    const name = `${store.kind} ${algorithm}`
    const wait = { wait: { maxMs: 60_000, maxQueue: 10 } }
    let allowed = 0
    for (let i = 0; i < 3; i++) {
      const step = await at(100, wait)
      if (step[0] === 'allowed') allowed++
      t.same(step[2], [allowed, 900, 1000], `${name}: the quota counts each request let through, one that waits included, at once`)
    }
    t.equal(allowed, 3, `${name}: the algorithm's limit of 2 lets two through now and one after a wait`)
    const full = await at(150, wait)
    t.equal(full[0], 'limited', `${name}: the quota full: no wait`)
    t.ok((full[3] as number) >= 850, `${name}: until its period ends at least (${String(full[3])} ms)`)
  }, [{ max: 2, windowMs: 500, burst: 2 }, quota(3)])
})

// A fixed seed and a fresh one each run (CONFORMANCE_SEED=<n> replays one): random traffic, each budget with a
// quota beside its limit, the app's view of the period sometimes one behind, clock steps back, bans, peeks.
const FIXED_SEED = 1
const seeds = process.env.CONFORMANCE_SEED !== undefined ? [Number(process.env.CONFORMANCE_SEED)] : [FIXED_SEED, Math.floor(Math.random() * 2 ** 32)]
for (const seed of seeds) {
  for (const algorithm of ALGORITHMS) {
    t.test(`differential (${algorithm}, calendar quotas): both stores decide random traffic alike (seed ${seed})`, async t => {
      await differential(t, algorithm, seed, seed === FIXED_SEED || seeds.length === 1, { quotas: true, steps: 800 })
    })
  }
}
