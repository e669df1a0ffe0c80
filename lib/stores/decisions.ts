import type { Limit } from '../algorithms/index.js'
import type { Decision, LeaseInput, LimitState } from './store.js'

// The one place a decision's facts become a `Decision`, and so the one rule that picks the binding limit (the one
// a decision reports: its remaining, reset and retry). Redis's replies are parsed into these facts (./replies.ts,
// ./leases.ts); the in-process twins (./memory.ts through ./memory-decisions.ts, ./memory-leases.ts) and the held
// answers (../held-answers.ts) give them typed.

/** How a decision ended: lua/decide.lua's statuses 0 to 2, and `'waits'` (4): allowed once it has waited (`maxWait`). */
export type Outcome = 'allowed' | 'limited' | 'banned' | 'waits'

/** What a decision is made of, as lua/decide.lua's reply gives it (see its header). */
export interface Facts {
  readonly outcome: Outcome
  /** The ms until the request would pass: the ban's length when it started one, the wait when it waits. */
  readonly retry: number
  /** The ban this denial started, counted in a row (0: none). */
  readonly offence: number
  /** When the request was counted: one that waits, at its wait's end. */
  readonly at: number
  /** Every limit the request was decided by, in the reply's order (at least one). */
  readonly limits: readonly LimitState[]
  /** The request's id. */
  readonly member: string
}

/** The decision of `facts`, reporting its binding limit; a request that waits has its wait in `waitMs`, apart from any retry. */
export function decided ({ outcome, retry, offence, at, limits, member }: Facts): Decision {
  const { limit, windowMs, count, resetMs } = binding(limits)
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
    limits,
    at,
    member
  }
  return waits ? { ...made, waitMs: retry } : made
}

/** The limit with the fewest units left, of two alike the later to reset, the first of those. */
function binding (states: readonly LimitState[]): LimitState {
  let best = states[0]!
  for (const state of states) {
    const fewer = state.limit - state.count - (best.limit - best.count)
    if (fewer < 0 || (fewer === 0 && state.resetMs > best.resetMs)) best = state
  }
  return best
}

/**
 * A client found banned, `retryMs` more: the budget's own `limits`, nothing counted (none binds: it reports the
 * first), no time.
 */
export function bannedDecision (limits: readonly Limit[], retryMs: number): Decision {
  const states = limits.map(({ burst, windowMs }) => ({ limit: burst, windowMs, count: 0, resetMs: 0 }))
  const { limit, windowMs } = states[0]!
  return {
    status: 'banned', limit, windowMs, count: 0, resetMs: 0, retryMs, banStarted: false, offence: 0, limits: states, at: 0, member: ''
  }
}

/** How a request for `concurrency`'s leases ended (lua/lease.lua's statuses 0, 1, 2, 5 and 6). */
export type LeaseOutcome = 'taken' | 'refused' | 'ban-started' | 'found-banned' | 'never-fits'

/** What a lease decision is made of, as lua/lease.lua's reply to acquire gives it. */
export interface LeaseFacts {
  readonly outcome: LeaseOutcome
  /** The units in flight: with the request's when taken. */
  readonly inUse: number
  /** The ban's length, when banned (else 0). */
  readonly retry: number
  /** The ban this refusal started, counted in a row (0: none). */
  readonly offence: number
  readonly at: number
}

/** A refused request may try again in a second: one of the client's requests may have ended. */
export const IN_FLIGHT_RETRY_MS = 1000

/**
 * A lease decision on the one limit `concurrency` is: its capacity `max`, its window the lease, its count the
 * units in flight. A refusal waits a second (`IN_FLIGHT_RETRY_MS`); one that never fits waits for nothing (0), as
 * a request costing more than a rate limit holds; a ban, its remaining length.
 */
export function leaseDecision ({ outcome, inUse, retry, offence, at }: LeaseFacts, input: LeaseInput): Decision {
  const taken = outcome === 'taken'
  const banned = outcome === 'ban-started' || outcome === 'found-banned'
  const retryMs = taken ? 0 : banned ? retry : outcome === 'never-fits' ? 0 : IN_FLIGHT_RETRY_MS
  const state = { limit: input.max, windowMs: input.leaseMs, count: inUse, resetMs: taken ? 0 : retryMs }
  const made: Outcome = taken ? 'allowed' : banned ? 'banned' : 'limited'
  return decided({ outcome: made, retry: retryMs, offence, at, limits: [state], member: input.id })
}
