// The one place a script reply becomes a decision: what it accepts (RESP2, RESP3, stringNumbers) and what
// it refuses with a coded error instead of a wrong decision.
import t from 'tap'
import { toDecision } from '../lib/stores/store.js'

t.test('integers, or numeric strings from a client with stringNumbers', async t => {
  t.strictSame(toDecision([0, 3, 900, 0, 0]), { status: 'allowed', count: 3, resetMs: 900, retryMs: 0, banStarted: false })
  t.strictSame(toDecision(['1', '5', '800', '800', '0']), { status: 'limited', count: 5, resetMs: 800, retryMs: 800, banStarted: false })
  t.strictSame(toDecision([2, 5, 800, 60000, 1]), { status: 'banned', count: 5, resetMs: 800, retryMs: 60000, banStarted: true })
})

t.test('anything else is refused with FST_RATE_GUARD_INVALID_REPLY', async t => {
  const bad: unknown[] = [
    undefined, null, 'OK', 42, {}, [], [0, 1, 2, 3], [0, 1, 2, 3, 0, 5],
    [3, 0, 0, 0, 0], [-1, 0, 0, 0, 0], [0, -1, 0, 0, 0], [0, 1.5, 0, 0, 0], [0, 1, 0, 0, 2],
    [0, '1e3', 0, 0, 0], [0, ' 1', 0, 0, 0], [0, null, 0, 0, 0], [0, 1, 0, 0, true], [0, 2 ** 53, 0, 0, 0]
  ]
  for (const reply of bad) {
    t.throws(() => toDecision(reply), { code: 'FST_RATE_GUARD_INVALID_REPLY' }, JSON.stringify(reply) ?? String(reply))
  }
})
