// Clocks apart (issue 41), every algorithm on both stores: under `clock: 'app'` each instance's clock is the
// script's, so two instances a few windows apart send times windows apart (as Redis's clock set back would). A
// window counted by the clock ahead is never reset by the one behind: the fixed window and the sliding window
// count a request that finds a later window of their length in that window (before, the two reset each other:
// 396 of 400 allowed at 5 a second, clocks 2 s apart). Both stores answer each step alike, to the field.
import t from 'tap'
import type { Test } from 'tap'
import { ALGORITHMS } from '../lib/algorithms/index.js'
import type { Algorithm, Limit } from '../lib/algorithms/index.js'
import { identityKeys } from '../lib/stores/key-names.js'
import type { DecideInput, Decision } from '../lib/stores/store.js'
import { memoryStore, redisStore } from './helpers/stores.js'
import { uniquePrefix } from './helpers/redis.js'

t.setTimeout(180_000)

const T0 = 1_700_000_000_000
const SECOND: Limit = { max: 5, windowMs: 1000, burst: 5 }

/** Decides `times` (offsets from T0) in turn on a fresh key of both stores: each store's answers. */
async function run (t: Test, algorithm: Algorithm, limits: Limit[], times: number[]): Promise<Array<Array<Omit<Decision, 'member' | 'at'>>>> {
  const answers: Array<Array<Omit<Decision, 'member' | 'at'>>> = []
  for (const store of [memoryStore(t), await redisStore(t)]) {
    const input: DecideInput = { keys: identityKeys(uniquePrefix(), 'r', 'client', algorithm), limits, ban: null, peek: false, algorithm }
    const got: Array<Omit<Decision, 'member' | 'at'>> = []
    for (const at of times) {
      const { member: _member, at: _at, ...decision } = await store.decide(input, T0 + at)
      got.push(decision)
    }
    answers.push(got)
  }
  return answers
}

t.test('a window counted by a clock two windows ahead: the clock behind counts in it, never resets it', async t => {
  for (const algorithm of ['fixed-window', 'sliding-window'] as const) {
    // Ahead at 2100, behind at 100, and so on: max 3 a second.
    const [memory, redis] = await run(t, algorithm, [{ max: 3, windowMs: 1000, burst: 3 }], [2100, 100, 2200, 200, 300])
    t.same(redis, memory, `${algorithm}: Redis answers every step as the in-process store does`)
    t.strictSame(memory!.map(({ status, count }) => [status, count]), [['allowed', 1], ['allowed', 2], ['allowed', 3], ['limited', 3], ['limited', 3]],
      `${algorithm}: the clock behind counts on the window ahead: 3 in all`)
  }
})

t.test('two clocks 300 ms or 2 s apart alternate on 5 a second for 10 s: each algorithm holds to what both clocks\' windows allow', async t => {
  for (const skew of [300, 2000]) {
    for (const algorithm of ALGORITHMS) {
      // 400 requests 25 ms apart on the clock behind, every other one on the clock ahead.
      const times = Array.from({ length: 400 }, (_, i) => i * 25 + (i % 2 === 0 ? 0 : skew))
      const [memory, redis] = await run(t, algorithm, [SECOND], times)
      t.same(redis, memory, `${algorithm}, ${skew} ms apart: Redis answers every step as the in-process store does`)
      const allowed = memory!.filter(({ status }) => status === 'allowed').length
      // 5 in each second either clock was in (of the clock ahead: the one behind counts in its windows). Less than
      // a window apart, the fixed window's count, which expires at its window's end on the clock ahead, is
      // counted anew by the clock behind for the rest of its window: up to 5 more once a window (docs/reliability.md).
      const most = 5 * Math.ceil((10_000 + skew) / 1000) * (algorithm === 'fixed-window' && skew < 1000 ? 2 : 1)
      t.ok(allowed <= most, `${algorithm}, ${skew} ms apart: ${allowed} of 400 allowed (at most ${most})`)
    }
  }
})
