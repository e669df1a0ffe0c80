// A limit's reset is the IETF draft's `t` (draft-ietf-httpapi-ratelimit-headers-10 §4.1.2: "the number of
// seconds until additional quota ... is made available"): the first millisecond at which one more unit is free
// than now, on every algorithm. Checked here against the algorithm's own count, peeked forward: at now + reset
// the count is one lower (below the capacity, when a settle left it past it), and a millisecond earlier it is
// not; and a refused request's wait is no earlier than that (§6: Retry-After not before the reset). Counts never
// rise without a request, so those two peeks settle it. On the in-process twins, over seeded random traffic
// with several limits, costs and settling; the scripts give the same resets, step by step (the differential
// test in conformance-algorithm-tables.test.ts).
import t from 'tap'
import type { Test } from 'tap'
import { ALGORITHMS, STEPS } from '../lib/algorithms/index.js'
import type { Algorithm, Limit, State } from '../lib/algorithms/index.js'
import { draws } from './helpers/random.js'

const T0 = 1_700_000_000_000

function run (t: Test, algorithm: Algorithm, seed: number): void {
  const step = STEPS[algorithm]
  const { random, int, ms } = draws(seed, 0.3)
  let limits: Limit[] = []
  let state: State | undefined
  let now = T0
  const counted: Array<{ at: number, cost: number }> = []
  const fresh = (): void => {
    limits = Array.from({ length: int(1, 2) }, () => {
      const max = int(1, 5)
      return { max, windowMs: ms(10, 500), burst: algorithm === 'token-bucket' ? int(1, 2 * max) : max }
    })
    state = undefined
    counted.length = 0
  }
  const peekCounts = (at: number): number[] => step.count(state, limits, at, true, 1).entries.map(entry => entry.count)
  fresh()
  let checked = 0
  let pastCapacity = 0
  for (let i = 0; i < 600; i++) {
    now += random() < 0.8 ? ms(0, 60) : ms(60, 600)
    if (random() < 0.02) fresh()
    if (random() < 0.1 && counted.length > 0) {
      // Settle one request counted earlier: given back, or charged more than any limit holds.
      const [one] = counted.splice(int(0, counted.length - 1), 1)
      state = step.settle(state, limits, one!.at, now, one!.cost, random() < 0.3 ? 0 : int(1, 12)) ?? state
      continue
    }
    const cost = int(1, Math.min(3, ...limits.map(limit => limit.burst)))
    const peek = random() < 0.1
    const decided = step.count(state, limits, now, peek, cost)
    state = decided.state ?? state
    if (decided.allowed && !peek) counted.push({ at: now, cost })
    decided.entries.forEach((entry, l) => {
      const what = `seed ${seed}, step ${i} at T0+${now - T0}, limit ${l} (${JSON.stringify(limits[l])}), count ${entry.count}`
      if (entry.count === 0) {
        if (entry.reset !== 0) t.fail(`${what}: nothing counted, reset ${entry.reset}`)
        return
      }
      const target = Math.min(entry.count, limits[l]!.burst) - 1
      if (entry.count > limits[l]!.burst) pastCapacity++
      const at = peekCounts(now + entry.reset)[l]!
      const before = peekCounts(now + entry.reset - 1)[l]!
      if (!(entry.reset > 0 && at <= target && before > target)) {
        t.fail(`${what}: reset ${entry.reset} is not the first ms the count is at most ${target} (${before} a ms earlier, ${at} then)`)
      }
      if (entry.retry > 0 && entry.retry < entry.reset) t.fail(`${what}: the wait ${entry.retry} is earlier than the reset ${entry.reset}`)
      checked++
    })
  }
  t.ok(checked > 300, `seed ${seed}: ${checked} resets checked, ${pastCapacity} of them past the capacity`)
  if (seed === FIXED_SEED) t.ok(pastCapacity > 0, 'some past the capacity (a settle charged more)')
}

// A fixed seed that reaches counts past the capacity, and a fresh one each run. NEXT_UNIT_SEED=<n> replays one.
const FIXED_SEED = 7
const seeds = process.env.NEXT_UNIT_SEED !== undefined
  ? [Number(process.env.NEXT_UNIT_SEED)]
  : [FIXED_SEED, Math.floor(Math.random() * 2 ** 32)]

for (const algorithm of ALGORITHMS) {
  t.test(`${algorithm}: the reset is the first millisecond one more unit is free`, async t => {
    for (const seed of seeds) run(t, algorithm, seed)
  })
}
