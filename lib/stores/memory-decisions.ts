import type { Entry, Limit } from '../algorithms/index.js'
import { LONGEST } from '../duration.js'
import type { Decision, LimitState } from './store.js'

// A decision of the in-process twin (./memory.ts), built typed: what lua/decide.lua's `reply`, `exceeded` and
// `wait` make of a request, as the `Decision` ./replies.ts reads from the scripts' reply (the same fields, the
// same binding limit), with no wire format between.

/** How a decision ended: lua/decide.lua's statuses 0 to 2, and `'waits'` (4): allowed once it has waited (`maxWait`). */
export type Outcome = 'allowed' | 'limited' | 'banned' | 'waits'

/**
 * The wait over the limit after `k` denials in a row (`doubles`: twice as long each time), as in
 * `lua/decide.lua`: at most the longest duration (`@fastify/rate-limit` stops it at 2^53 - 1).
 */
export function wait (longest: number, k: number, doubles: boolean): number {
  return Math.min(doubles ? longest * 2 ** (k - 1) : longest, LONGEST)
}

/** Every limit at `count` past its capacity (0: at it, none left), counting down from `reset`. */
export function exceeded (limits: readonly Limit[], reset: number, count: number): Entry[] {
  return limits.map(limit => ({ count: limit.burst + count, reset, retry: 0 }))
}

/**
 * The decision made `now` on `limits`, each with its entry: `retry`, the ms until the request would pass (the
 * ban's length when it started one, the wait when it waits); `offence`, the ban it started (0: none). A request
 * that waits is counted at its wait's end (`at`), its wait in `waitMs`.
 */
export function decision (outcome: Outcome, retry: number, offence: number, now: number, limits: readonly Limit[],
  entries: readonly Entry[]): Decision {
  const states = limits.map((limit, i): LimitState => {
    const { count, reset } = entries[i]!
    return { limit: limit.burst, windowMs: limit.windowMs, count, resetMs: reset }
  })
  const { limit, windowMs, count, resetMs } = binding(states)
  const waits = outcome === 'waits'
  const made: Decision = {
    status: waits ? 'allowed' : outcome,
    limit,
    windowMs,
    count,
    resetMs,
    retryMs: waits ? 0 : retry,
    banStarted: offence > 0,
    offence,
    limits: states,
    at: waits ? now + retry : now,
    member: ''
  }
  return waits ? { ...made, waitMs: retry } : made
}

/** The limit with the fewest units left, of two alike the later to reset, the first of those: as ./replies.ts picks it. */
function binding (states: readonly LimitState[]): LimitState {
  let best = states[0]!
  for (const state of states) {
    const fewer = state.limit - state.count - (best.limit - best.count)
    if (fewer < 0 || (fewer === 0 && state.resetMs > best.resetMs)) best = state
  }
  return best
}
