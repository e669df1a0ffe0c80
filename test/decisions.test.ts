// lib/stores/decisions.ts, the one builder of a decision from its facts (the reply reader's, the twins', the held
// answers'): the binding limit it reports, a client found banned, and a lease decision of each outcome. No Redis.
import t from 'tap'
import { IN_FLIGHT_RETRY_MS, bannedDecision, decided, leaseDecision } from '../lib/stores/decisions.js'
import type { LeaseOutcome } from '../lib/stores/decisions.js'
import type { LeaseInput, LimitState } from '../lib/stores/store.js'

const state = (limit: number, count: number, resetMs: number, windowMs = 1000): LimitState => ({ limit, windowMs, count, resetMs })
/** The index, in `limits`, of the limit the decision on them reports. */
const bound = (...limits: LimitState[]): number => {
  const made = decided({ outcome: 'limited', retry: 5, offence: 0, at: 7, limits, member: 'm' })
  return limits.findIndex(limit => limit.limit === made.limit && limit.windowMs === made.windowMs &&
    limit.count === made.count && limit.resetMs === made.resetMs)
}

t.test('the binding limit: the fewest units left; of two alike the later to reset; of those the first', async t => {
  t.equal(bound(state(10, 2, 100, 1), state(5, 1, 50, 2)), 1, '4 left beats 8 left, though it resets sooner')
  t.equal(bound(state(5, 1, 50, 1), state(10, 2, 100, 2)), 0, 'in either order')
  t.equal(bound(state(5, 1, 50, 1), state(6, 2, 80, 2), state(4, 0, 60, 3)), 1, 'of those with 4 left, the later to reset')
  t.equal(bound(state(5, 1, 80, 1), state(6, 2, 80, 2)), 0, 'alike in both: the first')
  t.equal(bound(state(2, 5, 10, 1), state(100, 0, 10, 2)), 0, 'past its capacity (less than none left) binds')
})

t.test('the facts carried as given; a wait apart from any retry', async t => {
  const limits = [state(3, 3, 400)]
  const banned = { status: 'banned', limit: 3, windowMs: 1000, count: 3, resetMs: 400, retryMs: 60_000, banStarted: true, offence: 2 }
  const made = decided({ outcome: 'banned', retry: 60_000, offence: 2, at: 9, limits, member: 'm' })
  t.strictSame(made, { ...banned, limits, at: 9, member: 'm' })
  t.match(decided({ outcome: 'waits', retry: 250, offence: 0, at: 9, limits, member: 'm' }), { status: 'allowed', retryMs: 0, waitMs: 250 })
  t.notOk('waitMs' in decided({ outcome: 'allowed', retry: 0, offence: 0, at: 9, limits, member: 'm' }), 'no waitMs but for a wait')
})

t.test('a client found banned: the budget\'s first limit, nothing counted, no time', async t => {
  const limits = [{ max: 5, windowMs: 1000, burst: 6 }, { max: 1, windowMs: 60_000, burst: 1 }]
  t.strictSame(bannedDecision(limits, 3000), {
    status: 'banned',
    limit: 6,
    windowMs: 1000,
    count: 0,
    resetMs: 0,
    retryMs: 3000,
    banStarted: false,
    offence: 0,
    limits: [{ limit: 6, windowMs: 1000, count: 0, resetMs: 0 }, { limit: 1, windowMs: 60_000, count: 0, resetMs: 0 }],
    at: 0,
    member: ''
  })
})

t.test('a lease decision: concurrency\'s one limit, and the retry each outcome gives', async t => {
  const input = { id: 'r1', max: 4, leaseMs: 30_000 } as LeaseInput
  const expected: Record<LeaseOutcome, [string, number, boolean]> = {
    taken: ['allowed', 0, false],
    refused: ['limited', IN_FLIGHT_RETRY_MS, false],
    'never-fits': ['limited', 0, false],
    'found-banned': ['banned', 9000, false],
    'ban-started': ['banned', 9000, true]
  }
  for (const [outcome, [status, retryMs, banStarted]] of Object.entries(expected) as Array<[LeaseOutcome, [string, number, boolean]]>) {
    const offence = banStarted ? 1 : 0
    const made = leaseDecision({ outcome, inUse: 3, retry: outcome.includes('ban') ? 9000 : 0, offence, at: 11 }, input)
    const limit = { limit: 4, windowMs: 30_000, count: 3, resetMs: outcome === 'taken' ? 0 : retryMs }
    t.strictSame(made, { status, ...limit, retryMs, banStarted, offence, limits: [limit], at: 11, member: 'r1' }, outcome)
  }
})
