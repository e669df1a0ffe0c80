// The one place a script reply becomes a decision: what it accepts (RESP2, RESP3, stringNumbers), which
// limit it reports as binding, and what it refuses with a coded error instead of a wrong decision.
import t from 'tap'
import { HANDED_BACK, toDecision, toDecisions, toLeanDecisions } from '../lib/stores/replies.js'
import { matchList } from './helpers/match-list.js'

const LIMITS = [{ max: 5, windowMs: 1000, burst: 5 }]

t.test('integers, or numeric strings from a client with stringNumbers', async t => {
  t.strictSame(toDecision([0, 0, 0, 1000, 1, 5, 1000, 3, 900], 'm', LIMITS), {
    status: 'allowed',
    limit: 5,
    windowMs: 1000,
    count: 3,
    resetMs: 900,
    retryMs: 0,
    banStarted: false,
    offence: 0,
    limits: [{ limit: 5, windowMs: 1000, count: 3, resetMs: 900 }],
    at: 1000,
    member: 'm'
  })
  t.match(toDecision(['1', '800', '0', '7', '1', '5', '1000', '5', '800'], 'm', LIMITS), { status: 'limited', count: 5, resetMs: 800, retryMs: 800, banStarted: false })
  t.match(toDecision([2, 60000, 3, 7, 1, 5, 1000, 5, 800], 'm', LIMITS), { status: 'banned', count: 5, resetMs: 800, retryMs: 60000, banStarted: true, offence: 3 })
})

t.test('several limits: the binding one has the fewest remaining; on a tie, the later reset', async t => {
  const reply = [0, 0, 0, 7, 3, 10, 1000, 4, 500, 100, 60_000, 95, 30_000, 8, 2000, 2, 1500]
  const decision = toDecision(reply, 'm', LIMITS)
  t.match(decision, { limit: 100, windowMs: 60_000, count: 95, resetMs: 30_000 }, '5 remaining of 100 binds before 6 of 10 and 6 of 8')
  t.equal(decision.limits.length, 3)
  const tie = toDecision([0, 0, 0, 7, 2, 10, 1000, 5, 500, 10, 60_000, 5, 30_000], 'm', LIMITS)
  t.match(tie, { windowMs: 60_000 }, 'equal remaining: the one that resets later')
})

t.test('a client found banned is answered without limits: the budget\'s own, nothing counted', async t => {
  t.strictSame(toDecision([2, 60_000, 0, 0, 0], 'm', [{ max: 5, windowMs: 1000, burst: 5 }, { max: 50, windowMs: 60_000, burst: 50 }]), {
    status: 'banned',
    limit: 5,
    windowMs: 1000,
    count: 0,
    resetMs: 0,
    retryMs: 60_000,
    banStarted: false,
    offence: 0,
    limits: [{ limit: 5, windowMs: 1000, count: 0, resetMs: 0 }, { limit: 50, windowMs: 60_000, count: 0, resetMs: 0 }],
    at: 0,
    member: ''
  })
})

t.test('a batch: each request\'s answer in turn, each with its own member and limits', async t => {
  const decisions = toDecisions([0, 0, 0, 7, 1, 5, 1000, 1, 1000, 2, 500, 0, 0, 0, 1, 300, 0, 7, 1, 5, 1000, 5, 300], ['a', 'b', 'c'], [{ limits: LIMITS }, { limits: LIMITS }, { limits: LIMITS }])
  matchList(t, decisions, [{ status: 'allowed', count: 1, member: 'a', at: 7 }, { status: 'banned', retryMs: 500, count: 0, limit: 5 }, { status: 'limited', retryMs: 300, member: 'c' }])
  t.throws(() => toDecisions([0, 0, 0, 7, 1, 5, 1000, 1, 1000], ['a', 'b'], [{ limits: LIMITS }, { limits: LIMITS }]), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, 'fewer answers than requests')
  t.throws(() => toDecisions([0, 0, 0, 7, 1, 5, 1000, 1, 1000, 2, 500, 0, 0, 0], ['a'], [{ limits: LIMITS }]), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, 'more answers than requests')
})

t.test('anything else is refused with FST_RATE_GUARD_INVALID_REPLY', async t => {
  const ok = [0, 0, 0, 7, 1, 5, 1000, 3, 900]
  const bad: unknown[] = [
    undefined, null, 'OK', 42, {}, [], [0, 1, 2, 3], ok.slice(0, 8), [...ok, 0],
    [0, 0, 0, 7, 0], [1, 100, 0, 7, 0], [0, 0, 0, 7, 2, 5, 1000, 3, 900], [0, 0, 0, 7, 17, ...Array<number>(68).fill(1)],
    [0, 0, 0, 7, 1, 5, 1000, -3, 900], [0, 0, 0, 7, 1, 5, 1000, 3, '9 00'],
    [3, ...ok.slice(1)], [-1, ...ok.slice(1)], [0, -1, ...ok.slice(2)], [0, 1.5, ...ok.slice(2)],
    [0, '1e3', ...ok.slice(2)], [0, ' 1', ...ok.slice(2)], [0, null, ...ok.slice(2)], [0, true, ...ok.slice(2)], [0, 2 ** 53, ...ok.slice(2)]
  ]
  for (const reply of bad) {
    t.throws(() => toDecision(reply, 'm', LIMITS), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, JSON.stringify(reply) ?? String(reply))
  }
})

t.test('a lean script\'s reply (lua/lean.lua): the time once, each answer in the fewest integers, the same decisions as the general reply\'s', async t => {
  const lean = (reply: unknown, n = 1): ReturnType<typeof toLeanDecisions> => toLeanDecisions(reply, Array.from({ length: n }, (_, i) => `m${i}`), Array.from({ length: n }, () => ({ limits: LIMITS })))
  t.strictSame(lean([1000, 0, 3, 900]), [toDecision([0, 0, 0, 1000, 1, 5, 1000, 3, 900], 'm0', LIMITS)], 'allowed: count and reset, the limit the request\'s own')
  t.strictSame(lean([1000, 7 + 3 + 6 * 900]), [toDecision([0, 0, 0, 1000, 1, 5, 1000, 3, 900], 'm0', LIMITS)], 'allowed, packed: 7 + count + (limit + 1) x reset')
  t.strictSame(lean([1000, 7]), [toDecision([0, 0, 0, 1000, 1, 5, 1000, 0, 0], 'm0', LIMITS)], 'allowed, packed: the least, 7')
  t.strictSame(lean([1000, String(7 + 5 + 6 * 1000)]), [toDecision([0, 0, 0, 1000, 1, 5, 1000, 5, 1000], 'm0', LIMITS)], 'allowed, packed: the greatest, a full window (numeric strings too)')
  t.strictSame(lean(['7', '1', '800', '5', '800']), [toDecision([1, 800, 0, 7, 1, 5, 1000, 5, 800], 'm0', LIMITS)], 'limited: the retry first (numeric strings too)')
  t.strictSame(lean([7, 2, 60_000, 3, 5, 800]), [toDecision([2, 60_000, 3, 7, 1, 5, 1000, 5, 800], 'm0', LIMITS)], 'banned by this denial: the ban\'s length, which in a row')
  t.strictSame(lean([0, 5, 60_000]), [toDecision([2, 60_000, 0, 0, 0], 'm0', LIMITS)], 'found banned: the budget\'s own limit, nothing counted')
  t.strictSame(lean([7, 6, 50, 60_000, 0, 3, 900]), [toDecision([0, 0, 0, 7, 1, 50, 60_000, 3, 900], 'm0', LIMITS)], 'under an override of one limit: its capacity and window')
  t.strictSame(lean([7, 6, 50, 60_000, 7 + 3 + 51 * 900]), [toDecision([0, 0, 0, 7, 1, 50, 60_000, 3, 900], 'm0', LIMITS)], 'packed under an override: by its capacity')
  t.strictSame(lean([7, 4]), [HANDED_BACK], 'handed back to the general script')
  matchList(t, lean([7, 0, 1, 1000, 4, 5, 500, 1, 300, 5, 300], 4), [
    { status: 'allowed', count: 1, member: 'm0', at: 7 }, HANDED_BACK, { status: 'banned', retryMs: 500, count: 0, at: 0, member: '' }, { status: 'limited', retryMs: 300, count: 5, member: 'm3', at: 7 }
  ])
  const bad: unknown[] = [
    undefined, null, 'OK', {}, [], [7], [-1, 4], [1.5, 4], [7, 0, 3], [7, 0, 3, 900, 0], [7, 3, 'x'], [7, 7 + 6 * 1001], [7, 6, 50, 60_000, 4], [7, 6, -50, 60_000, 10], [7, 6, 50, -1, 10], [7, 2 ** 53],
    [7, 6, 50, 60_000, 5, 1], [7, 6, -50, 60_000, 0, 3, 900], [7, 5], [7, 5, -1], [7, 1, 800, 5], [7, 2, 60_000, 3, 5], [7, 0, '3 ', 900], [7, 0, 3, 2 ** 53]
  ]
  for (const reply of bad) t.throws(() => lean(reply), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, JSON.stringify(reply) ?? String(reply))
  t.throws(() => lean([7, 0, 1, 1000], 2), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, 'fewer answers than requests')
})
