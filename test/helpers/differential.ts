// The seeded differential test of test/conformance-log-table.test.ts (and test/over-limit.test.ts): the Lua script
// (time injected) and the in-process twin, on the same random traffic, must decide every step alike.
import type { Redis } from 'ioredis'
import type { Test } from 'tap'
import type { Algorithm } from '../../lib/algorithms/index.js'
import { identityKeys } from '../../lib/stores/key-names.js'
import type { IdentityKeys } from '../../lib/stores/key-names.js'
import type { DecideInput, Decision } from '../../lib/stores/store.js'
import { uniquePrefix } from './redis.js'
import { decideInput, memoryStore, redisStore } from './stores.js'
import { draws } from './random.js'
import { stepsFor } from './thorough.js'

/** Step times are offsets from a realistic epoch millisecond. */
const T0 = 1_700_000_000_000

type KeyName = keyof IdentityKeys

/**
 * What a differential run decides under: an over-limit policy, `maxWait` (each budget its own, drawn), calendar
 * quotas (each budget one, beside its limit), how many steps, whether the lean path may take them, and the
 * Redis the scripts run on (the file's shared one without it).
 */
export interface Traffic {
  readonly overLimit?: DecideInput['overLimit']
  readonly waits?: boolean
  readonly quotas?: boolean
  readonly steps?: number
  readonly lean?: boolean
  readonly redis?: Redis
}

/**
 * Random traffic (three identities, two budgets each, bans, admin calls, peeks, clock steps back; under
 * `waits`, requests that wait and places given back) decided by both stores, step by step: every decision must
 * be identical. With `requireEveryKind`, the traffic must also have reached every kind of answer (so agreement
 * means something).
 */
export async function differential (t: Test, algorithm: Algorithm, seed: number, requireEveryKind: boolean, { overLimit, waits = false, quotas = false, steps = 2000, lean = true, redis: server }: Traffic = {}): Promise<void> {
  t.comment(`seed ${seed} (rerun with CONFORMANCE_SEED=${seed})`)
  // A fixed (or replayed) seed in full; a fresh one a quarter as long, unless FULL=1 (./thorough.ts).
  const STEPS = stepsFor(steps, requireEveryKind)
  // Times, windows and bans on a 10 ms grid (and rarely off it), so requests often land exactly where an
  // entry, a strike or a ban ends: the edges are where two implementations part.
  const { random, int, pick, ms } = draws(seed, 0.02)
  const prefix = uniquePrefix()
  const identities = Array.from({ length: 3 }, (_, i) => ({
    name: `ip:198.51.100.${i}`,
    threshold: [0, pick([1, 2]), pick([2, 3, 4])][i % 3]!,
    banMs: ms(10, 1500, 0.2),
    budgets: Array.from({ length: 2 }, (_, j) => {
      const windowMs = ms(10, 800, 0.2)
      const wait = waits ? { maxMs: ms(0, 2 * windowMs, 0.2), maxQueue: int(1, 3) } : undefined
      // A calendar quota's periods, of one length from T0: as lib/calendar.ts gives them, on a test's scale.
      const quota = quotas ? { max: int(1, 10), periodMs: ms(50, 2000, 0.2) } : undefined
      return { scope: `s${j}`, max: int(1, 6), windowMs, varyMax: random() < 0.3, wait, quota }
    })
  }))
  // The last request of each budget that waits: a later step may give its place back (its client left).
  const waiting = new Map<string, { decision: Decision, input: DecideInput }>()
  const redis = await redisStore(t, server, { lean })
  const stores = [redis, memoryStore(t)] as const
  let now = T0
  let highWater = T0
  const record = agreement(t, seed)
  let lastDecisions: string[] = []
  const seen = new Set<string>()

  for (let step = 0; step < STEPS; step++) {
    const roll = random()
    if (roll < 0.1) {
      // A step back, but not to before an expiry already passed (see lastExpiry).
      now = Math.max(now - ms(1, 40), redis.lastExpiry(highWater))
    } else {
      now = highWater + (roll < 0.75 ? ms(0, 40) : roll < 0.95 ? ms(40, 300) : ms(300, 2000))
      highWater = now
    }
    const who = pick(identities)
    const budget = pick(who.budgets)
    const keys = identityKeys(prefix, budget.scope, who.name, algorithm)
    const admin = random()
    let action: string
    let results: string[]
    if (admin < 0.01) {
      const banMs = ms(1, 2000)
      action = `setBan(${who.name}, ${banMs})`
      for (const store of stores) await store.setBan(keys.banned, banMs, now)
      results = ['', '']
    } else if (admin < 0.05 && waiting.has(keys.log)) {
      const { decision, input } = waiting.get(keys.log)!
      waiting.delete(keys.log)
      action = `giveBack(${who.name}/${budget.scope}, counted at T0+${decision.at - T0})`
      for (const store of stores) await store.settle({ keys, limits: input.limits, algorithm, member: decision.member, at: decision.at, final: 0 }, now)
      results = ['', '']
      seen.add('given back')
    } else if (admin < 0.02) {
      const names = pick<KeyName[]>(overLimit !== undefined
        ? [['log', 'backoff'], ['strikes'], ['banned', 'strikes'], ['backoff']]
        : quotas ? [['log'], ['quota'], ['banned', 'strikes'], ['log', 'quota', 'strikes']] : [['log'], ['strikes'], ['banned', 'strikes'], ['log', 'strikes']])
      action = `delete(${who.name}/${budget.scope}: ${names.join(', ')})`
      for (const store of stores) await store.delete(names.map(name => keys[name]), now)
      results = ['', '']
    } else {
      const simple = {
        keys,
        max: budget.varyMax && random() < 0.3 ? int(1, budget.max) : budget.max,
        windowMs: budget.windowMs,
        banThreshold: who.threshold,
        banMs: who.banMs,
        peek: random() < 0.1,
        algorithm,
        overLimit
      }
      let input = budget.wait === undefined ? decideInput(simple) : { ...decideInput(simple), wait: budget.wait }
      if (budget.quota !== undefined) {
        // The app's view: the period that holds now, or (a slow or skewed instance) the one before or the next.
        const { max, periodMs } = budget.quota
        const skewed = random()
        const start = T0 + (Math.floor((now - T0) / periodMs) + (skewed < 0.1 ? 1 : skewed < 0.2 ? -1 : 0)) * periodMs
        const period = { previous: start - periodMs, start, end: start + periodMs, next: start + 2 * periodMs }
        input = { ...input, limits: [...input.limits, { max, windowMs: periodMs, burst: max, period }] }
      }
      action = `decide(${who.name}/${budget.scope}, max ${simple.max}, window ${simple.windowMs}, threshold ${simple.banThreshold}, ban ${simple.banMs}${simple.peek ? ', peek' : ''})`
      const decisions = [await stores[0].decide(input, now), await stores[1].decide(input, now)]
      results = decisions.map(({ member, ...d }) => JSON.stringify(d))
      seen.add(decisions[1]!.status + (decisions[1]!.banStarted ? '+start' : '') + (input.peek ? ' peek' : ''))
      // Backing off: a wait of at least twice the window.
      if (decisions[1]!.status === 'limited' && decisions[1]!.retryMs >= 2 * budget.windowMs) seen.add('backoff doubled')
      // Refused with a calendar quota spent.
      if (budget.quota !== undefined && decisions[1]!.status === 'limited' && decisions[1]!.limits.at(-1)!.count >= budget.quota.max) seen.add('quota full')
      // A peek under the over-limit key: the client one over its limit.
      if (input.peek && decisions[1]!.count > decisions[1]!.limit) seen.add('exceeded peek')
      if (decisions[1]!.waitMs !== undefined) {
        seen.add('waits')
        // Redis's decision names its member, which settling there needs; the twin settles by time.
        waiting.set(keys.log, { decision: decisions[0]!, input })
      }
    }
    if (!record.step(step, now - T0, action, results)) {
      lastDecisions = results
      break
    }
  }
  record.done(STEPS, { lastDecisions })
  // The traffic reached every kind of answer, so agreement means something.
  if (!requireEveryKind) return
  const over = overLimit === undefined ? [] : ['exceeded peek', ...(overLimit === 'backoff' ? ['backoff doubled'] : [])]
  for (const kind of ['allowed', 'limited', 'banned', 'banned+start', 'limited peek', ...over, ...(waits ? ['waits', 'given back'] : []), ...(quotas ? ['quota full'] : [])]) {
    t.ok(seen.has(kind), `the random traffic produced ${kind}`)
  }
}

/**
 * The record of a differential run, step by step: the first step on which the two stores (Redis first) answer
 * apart fails `t`, with the last 25 steps; `done` checks that every step agreed.
 */
export function agreement (t: Test, seed: number): {
  step: (step: number, at: number, action: string, results: readonly string[]) => boolean
  done: (steps: number, extra?: Record<string, unknown>) => void
} {
  const history: string[] = []
  let agreed = 0
  return {
    step (step, at, action, results) {
      history.push(`#${step} at T0+${at}: ${action} -> ${results[1]}`)
      if (results[0] !== results[1]) {
        t.fail(`the stores disagree at step ${step} (seed ${seed})`, { redis: results[0], memory: results[1], history: history.slice(-25).join('\n') })
        return false
      }
      agreed++
      return true
    },
    done (steps, extra) {
      t.equal(agreed, steps, `all ${steps} steps agree`, extra ?? {})
    }
  }
}
