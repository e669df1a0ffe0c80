// The seeded differential of test/conformance-algorithm-tables.test.ts (and test/servers/): what the one in
// differential.ts does not reach (several limits per budget, costs, overrides set and cleared, escalating bans,
// and settling: a request given back or charged another amount), decided by the Lua script (time injected) and
// the in-process twin on the same random traffic, step by step alike.
import type { Redis } from 'ioredis'
import type { Test } from 'tap'
import type { Algorithm, Limit } from '../../lib/algorithms/index.js'
import { identityKeys } from '../../lib/stores/key-names.js'
import { encodeLimits } from '../../lib/stores/overrides.js'
import type { Decision } from '../../lib/stores/store.js'
import { agreement } from './differential.js'
import { draws } from './random.js'
import { uniquePrefix } from './redis.js'
import { decideInput, memoryStore, redisStore } from './stores.js'
import { stepsFor } from './thorough.js'

/** Step times are offsets from a realistic epoch millisecond. */
const T0 = 1_700_000_000_000

/** How long a run is (1,000 steps without it), whether the lean path may take its requests, and its Redis. */
export interface CostsTraffic {
  readonly steps?: number
  readonly lean?: boolean
  /** The Redis the scripts run on (the file's shared one without it). */
  readonly redis?: Redis
}

interface Allowed { readonly decisions: readonly Decision[], readonly limits: readonly Limit[], readonly cost: number }

/**
 * Random traffic (three identities, two budgets each of one or two limits; bans with escalating ladders,
 * overrides, settlements, costs) decided by both stores, step by step: every decision must be identical. With
 * `requireEveryKind`, the traffic must also have reached every kind of answer (so agreement means something).
 */
export async function costsDifferential (t: Test, algorithm: Algorithm, seed: number, requireEveryKind: boolean, { steps = 1000, lean = true, redis: server }: CostsTraffic = {}): Promise<void> {
  t.comment(`seed ${seed} (rerun with CONFORMANCE_SEED=${seed})`)
  // A fixed (or replayed) seed in full; a fresh one a quarter as long, unless FULL=1 (./thorough.ts).
  const STEPS = stepsFor(steps, requireEveryKind)
  // On a 10 ms grid (rarely off it), so steps land where windows, tokens, bans and overrides end.
  const { random, int, pick, ms } = draws(seed, 0.05)
  const randomLimits = (): Limit[] => Array.from({ length: int(1, 2) }, () => {
    const max = int(1, 5)
    return { max, windowMs: ms(10, 800), burst: algorithm === 'token-bucket' ? int(1, 2 * max) : max }
  })

  const prefix = uniquePrefix()
  const identities = Array.from({ length: 3 }, (_, i) => {
    const threshold = [0, int(1, 2), int(2, 4)][i]!
    const first = ms(10, 800)
    const ladder = random() < 0.3 ? [first] : [first, first + ms(10, 800), first + ms(800, 1600)]
    return {
      name: `ip:198.51.100.${i}`,
      threshold,
      ladder,
      forgetMs: ms(0, 1500),
      budgets: ['s0', 's1'].map(scope => ({ scope, limits: randomLimits(), counted: [] as Allowed[] }))
    }
  })
  const redis = await redisStore(t, server, { lean })
  const stores = [redis, memoryStore(t)] as const
  let now = T0
  const record = agreement(t, seed)
  const seen = new Set<string>()

  for (let step = 0; step < STEPS; step++) {
    const roll = random()
    now += roll < 0.75 ? ms(0, 40) : roll < 0.95 ? ms(40, 300) : ms(300, 2000)
    const who = pick(identities)
    const budget = pick(who.budgets)
    const keys = identityKeys(prefix, budget.scope, who.name, algorithm)
    const action = random()
    let results: string[]
    let text: string
    if (action < 0.05) {
      const value = encodeLimits(randomLimits())
      const ttl = random() < 0.25 ? null : ms(10, 3000)
      text = `setOverride(${who.name}/${budget.scope}, '${value}', ${ttl})`
      for (const store of stores) {
        await store.setValue(keys.override, value, ttl, now)
      }
      results = ['', '']
    } else if (action < 0.08) {
      text = `clearOverride(${who.name}/${budget.scope})`
      for (const store of stores) await store.delete([keys.override], now)
      results = ['', '']
    } else if (action < 0.09) {
      const banMs = ms(1, 1500)
      text = `setBan(${who.name}, ${banMs})`
      for (const store of stores) await store.setBan(keys.banned, banMs, now)
      results = ['', '']
    } else if (action < 0.2 && budget.counted.length > 0) {
      // Settle a request counted earlier (each once): give it back, or charge it another amount; then look,
      // with a peek both stores must agree on.
      const [given] = budget.counted.splice(int(0, budget.counted.length - 1), 1)
      const final = random() < 0.5 ? 0 : int(1, 6)
      text = `settle(${who.name}/${budget.scope}, at T0+${given!.decisions[0]!.at - T0}, cost ${given!.cost}, final ${final}) then peek`
      const peek = decideInput({ keys, limits: [...budget.limits], peek: true, algorithm })
      results = []
      for (const [i, store] of stores.entries()) {
        const d = given!.decisions[i]!
        await store.settle({ keys, limits: given!.limits, algorithm, member: d.member, at: d.at, cost: given!.cost, final }, now)
        const { member, ...rest } = await store.decide(peek, now)
        results.push(JSON.stringify(rest))
      }
      seen.add(final === 0 ? 'undo' : 'settle')
    } else {
      const input = decideInput({
        keys,
        limits: [...budget.limits],
        banThreshold: who.threshold,
        ladder: who.ladder,
        forgetMs: who.forgetMs,
        peek: random() < 0.1,
        algorithm,
        // Some requests cost more than one unit, a few more than a limit holds.
        cost: random() < 0.3 ? int(2, 6) : 1
      })
      const cost = input.cost!
      text = `decide(${who.name}/${budget.scope}, ${encodeLimits(input.limits)}, threshold ${who.threshold}, ladder ${who.ladder.join(' ')}, forget ${who.forgetMs}${input.peek ? ', peek' : ''}, cost ${cost})`
      const decisions = [await stores[0].decide(input, now), await stores[1].decide(input, now)]
      results = decisions.map(({ member, ...d }) => JSON.stringify(d))
      const d = decisions[1]!
      if (d.status === 'allowed' && !input.peek) {
        budget.counted.push({ decisions, limits: input.limits, cost })
        if (budget.counted.length > 20) budget.counted.shift()
      }
      seen.add(d.status + (d.banStarted ? '+start' : ''))
      if (cost > 1) seen.add(d.status === 'allowed' ? 'costly, allowed' : d.retryMs === 0 ? 'too costly' : 'costly, limited')
      if (d.offence > 1) seen.add('escalated')
      if (d.limits.length > 1) seen.add('two limits')
      if (encodeLimits(d.limits.map(l => ({ max: l.limit, windowMs: l.windowMs, burst: l.limit }))) !==
        encodeLimits(input.limits.map(l => ({ ...l, max: l.burst })))) seen.add('overridden')
    }
    if (!record.step(step, now - T0, text, results)) break
  }
  record.done(STEPS)
  if (!requireEveryKind) return
  for (const kind of ['allowed', 'limited', 'banned', 'banned+start', 'escalated', 'two limits', 'overridden', 'undo', 'settle', 'costly, allowed', 'costly, limited', 'too costly']) {
    t.ok(seen.has(kind), `the random traffic produced: ${kind}`)
  }
}
