import type { Entry, Limit } from '../algorithms/index.js'
import { LONGEST } from '../duration.js'
import { decided } from './decisions.js'
import type { Outcome } from './decisions.js'
import type { Decision } from './store.js'

// The in-process twin's (./memory.ts) side of a decision: what lua/decide.lua's `exceeded` and `wait` make of a
// request over the limit, and its limits and their entries as the facts ./decisions.ts builds every decision from.

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
  const states = limits.map(({ burst, windowMs }, i) => ({ limit: burst, windowMs, count: entries[i]!.count, resetMs: entries[i]!.reset }))
  return decided({ outcome, retry, offence, at: outcome === 'waits' ? now + retry : now, limits: states, member: '' })
}
