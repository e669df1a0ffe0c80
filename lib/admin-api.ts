import type { FastifyRequest } from 'fastify'
import type { BudgetOptions } from './budgets.js'
import type { StatsSnapshot } from './stats.js'

// What `fastify.rateGuard` offers an operator, and what each call gives back: the types of the calls
// lib/admin.ts makes.

export interface PeekOptions extends BudgetOptions {
  /** When that budget's `max` / `timeWindow` are functions of the request: the client's, standing in for the functions. */
  max?: number
  timeWindow?: number | string
  /**
   * Or a request of the client (`request` in its handler, say): the budget's `max` / `timeWindow` functions
   * are called with it and the key, as for its requests (one that fails gives its fallback, as there).
   */
  request?: FastifyRequest
}

/** New limits for one client on one budget, and how long they hold. */
export interface OverrideOptions extends BudgetOptions {
  max?: number
  timeWindow?: number | string
  burst?: number
  /** A calendar quota's max (`max` with `per` and `timeZone` instead of `timeWindow`): see `limits`. */
  per?: 'day' | 'week' | 'month'
  timeZone?: string
  /**
   * The limits the budget's algorithm counts for this client instead of its own (all of them, when one is
   * given), and a calendar quota's max: `{ max, per, timeZone }` changes the budget's quota of that period and
   * zone (its other limits stay, unless given too).
   */
  limits?: ReadonlyArray<
  { max: number, timeWindow: number | string, burst?: number } | { max: number, per: 'day' | 'week' | 'month', timeZone?: string }
  >
  /** How long the override holds (ms or `'30 days'`); or `permanent: true`. One of the two is required. */
  ttl?: number | string
  permanent?: true
}

export interface PeekLimit {
  max: number
  windowMs: number
  count: number
  remaining: number
  resetMs: number
}

export interface PeekResult {
  key: string
  /** What the next request would get: allowed, limited (429) or banned (403). */
  status: 'allowed' | 'limited' | 'banned'
  /** The binding limit's (fewest remaining): its capacity, requests counted now, what remains, ms until its count falls. */
  max: number
  count: number
  remaining: number
  resetMs: number
  /** Milliseconds until a request would be allowed (the remaining ban when banned; 0 when allowed). */
  retryMs: number
  /** Every limit (an override's, when one is set). */
  limits: PeekLimit[]
  /**
   * Whether the budget is in shadow mode: the above is what it would answer, from the counts and bans shadow
   * mode keeps apart (never the enforcing ones), and it refuses nothing.
   */
  shadow: boolean
  /** Milliseconds left of a ban shadow mode recorded on this client (`shadow: { ban: true }`), never enforced; 0 when none. */
  shadowBanMs: number
  /** Under the budget's `concurrency`: its `max`, and the units of the client's requests in flight now; null without it. */
  inFlight: { max: number, count: number } | null
}

/** A ban as `bans()` lists it. */
export interface BanEntry {
  /** The client's hash: what `unban({ keyHash })` takes. */
  keyHash: string
  /** Milliseconds until the ban ends. */
  retryMs: number
  /** A shadow ban: recorded by a route in shadow mode, reported but never enforced. */
  shadow: boolean
}

/** One registration's operator calls (`fastify.rateGuard` reaches every registration's: see `lib/registrations.ts`). */
export interface RateGuardAdmin {
  /** Whether a budget of this name exists (`default`, `GET /search`, `group:<id>`). */
  has (budget: string): boolean
  /** Bans `key` on every route of this registration for `duration` (ms or `'10 minutes'`). */
  ban (key: string, duration: number | string): Promise<void>
  /**
   * Lifts a ban, and forgets the denials counted toward the next one and the bans before it (escalation);
   * shadow mode's too. `{ keyHash }`: the client `bans()` listed, by its hash.
   */
  unban (key: string | { keyHash: string }): Promise<void>
  /**
   * Up to `limit` (default 100, at most 10,000) of the bans active now, the longest first: each client's hash
   * (never its key), the ms left, and `shadow: true` for a ban shadow mode recorded (never enforced). On Redis
   * it reads the ban index (one sorted set; on a Cluster one per slot, pipelined by master), never the key
   * space; it stops at the operator calls' deadline.
   */
  bans (options?: { limit?: number }): Promise<BanEntry[]>
  /**
   * Forgets every request counted for `key` on every budget (by any algorithm, in shadow mode too), its
   * denials and its over-limit waits; a ban stays (see `unban`).
   */
  reset (key: string): Promise<void>
  /** What the limiter knows about `key`, without counting a request. */
  peek (key: string, options?: PeekOptions): Promise<PeekResult>
  /** Gives `key` its own limits on one budget, on every instance from its next request. */
  setOverride (key: string, options: OverrideOptions): Promise<void>
  /** Puts `key` back on the budget's own limits. */
  clearOverride (key: string, options?: BudgetOptions): Promise<void>
  /** This instance's decisions by outcome since the registration started (in process: no Redis call). */
  stats (): StatsSnapshot
}
