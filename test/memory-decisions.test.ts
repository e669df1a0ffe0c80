// The in-process twin gives its decisions' facts typed (lib/stores/memory-decisions.ts) where the scripts' reply is
// parsed into them (lib/stores/replies.ts), and both have them built by lib/stores/decisions.ts: they must give
// one decision for one answer, so the twin's limits, entries, clock and wait must be the facts the reader parses.
// Every answer of up to three limits, each count and reset drawn from a small grid, under every status, is made
// both ways here, with no Redis.
import t from 'tap'
import { decision, exceeded, wait } from '../lib/stores/memory-decisions.js'
import type { Outcome } from '../lib/stores/decisions.js'
import { WAITS, toDecision } from '../lib/stores/replies.js'
import type { Entry, Limit } from '../lib/algorithms/index.js'
import { LONGEST } from '../lib/duration.js'

const LIMITS: Limit[] = [{ max: 2, windowMs: 1000, burst: 2 }, { max: 3, windowMs: 60_000, burst: 4 }, { max: 2, windowMs: 500, burst: 2 }]
const CODES: Record<Outcome, number> = { allowed: 0, limited: 1, banned: 2, waits: WAITS }
const NOW = 1_000_000

/** Every list of `n` entries whose counts and resets come from the grid. */
function * entryLists (limits: readonly Limit[], n: number): Generator<Entry[]> {
  if (n === 0) return yield []
  for (const rest of entryLists(limits, n - 1)) {
    for (let count = 0; count <= limits[n - 1]!.burst + 1; count++) {
      for (const reset of [0, 300, 500]) yield [...rest, { count, reset, retry: 0 }]
    }
  }
}

t.test('the twin\'s decision is the one the reader makes of the same answer', async t => {
  let compared = 0
  let differ = 0
  for (let n = 1; n <= LIMITS.length; n++) {
    const limits = LIMITS.slice(0, n)
    for (const entries of entryLists(limits, n)) {
      for (const [outcome, retry, offence] of [['allowed', 0, 0], ['limited', 700, 0], ['banned', 60_000, 2], ['waits', 250, 0]] as const) {
        const reply = [CODES[outcome], retry, offence, outcome === 'waits' ? NOW + retry : NOW, n]
        limits.forEach((limit, i) => reply.push(limit.burst, limit.windowMs, entries[i]!.count, entries[i]!.reset))
        const built = decision(outcome, retry, offence, NOW, limits, entries)
        const read = toDecision(reply, '', limits)
        // The first that differs is shown in full; the rest only counted.
        if (JSON.stringify(built) !== JSON.stringify(read) && differ++ === 0) t.strictSame(built, read, JSON.stringify(reply))
        compared++
      }
    }
  }
  t.equal(differ, 0, 'no answer built otherwise than read')
  t.equal(compared, 4 * (12 + 12 * 18 + 12 * 18 * 12), 'every answer of the grid compared, field by field in order')
})

t.test('a request that waits: allowed, counted at its wait\'s end, its wait apart from any retry', async t => {
  t.match(decision('waits', 250, 0, NOW, LIMITS.slice(0, 1), [{ count: 2, reset: 250, retry: 0 }]), {
    status: 'allowed', retryMs: 0, waitMs: 250, at: NOW + 250, banStarted: false
  })
  t.notOk('waitMs' in decision('allowed', 0, 0, NOW, LIMITS.slice(0, 1), [{ count: 1, reset: 900, retry: 0 }]), 'no waitMs but for a wait')
})

t.test('over the limit: every limit past its capacity; the wait doubles under backoff, at most the longest duration', async t => {
  t.strictSame(exceeded(LIMITS.slice(0, 2), 800, 1), [{ count: 3, reset: 800, retry: 0 }, { count: 5, reset: 800, retry: 0 }])
  t.equal(wait(1000, 3, false), 1000)
  t.equal(wait(1000, 3, true), 4000)
  t.equal(wait(1000, 2000, true), LONGEST)
})
