// What an in-process twin of one `lua/<algorithm>.lua` is: its `count` and `settle`, on the same state, with
// the same arithmetic. The ban, strike and override rules around them are the store's (`lua/decide.lua`).

/** One limit of a budget: `max` requests per `windowMs`; `burst` is the capacity (equal to `max` but for the token bucket). */
export interface Limit {
  readonly max: number
  readonly windowMs: number
  readonly burst: number
  /**
   * A calendar quota's periods (`per`: lib/calendar.ts), as the app's clock found them: the one before's start,
   * the current one's start and end, and the next one's end (ms). The store counts such a limit in the one that
   * holds its own clock, beside the algorithm, which counts the others (lua/quota.lua); `windowMs` is the
   * current period's length.
   */
  readonly period?: CalendarPeriods
}

/**
 * A calendar quota's periods as an app's clock finds them, in ms since the epoch: the one before
 * (`previous` to `start`), the current one (`start` to `end`) and the next (`end` to `next`).
 */
export interface CalendarPeriods {
  readonly previous: number
  readonly start: number
  readonly end: number
  readonly next: number
}

/**
 * One limit's answer: the count (units) after the decision; `reset`, the ms until one more unit is free than
 * now (the count falls by one, or below the limit when it is past it; 0: nothing counted); `retry`, the ms
 * until the request would pass (0: allows).
 */
export interface Entry {
  count: number
  reset: number
  retry: number
}

/** A budget's state in the in-process store; it is forgotten at `expiresAt` (the script's key TTL). */
export interface State {
  expiresAt: number
}

export interface Counted {
  /** Every limit allows the request (for a peek: would allow it). */
  readonly allowed: boolean
  readonly entries: Entry[]
  /** The state to store under the budget's key, when the step made a new one; otherwise nothing new is written. */
  readonly state?: State
}

export interface Step {
  /**
   * One decision on the budget's live state (`undefined`: none, or expired) at `now` for a request of `cost`
   * units (at most every limit's capacity); a peek or a denial counts nothing.
   */
  count (state: State | undefined, limits: readonly Limit[], now: number, peek: boolean, cost: number): Counted
  /**
   * A request of `cost` units counted at `at` counts `final` instead: 0 gives it back (a decision allowed here
   * but refused by another budget, a response that does not count), more charges what it really cost.
   */
  settle (state: State | undefined, limits: readonly Limit[], at: number, now: number, cost: number, final: number): State | undefined
  /**
   * `maxWait`: a request `count` denied, which every limit allows `wait` ms from now, is counted at now + wait
   * (ahead of the clock; `entries` then say what its limits will be when the wait ends), unless `maxQueue`
   * requests of the state wait already (false).
   */
  reserve: (
    state: State | undefined, limits: readonly Limit[], now: number, cost: number, wait: number, maxQueue: number, entries: Entry[]
  ) => boolean
}

/**
 * Settling, as in `lua/prelude.lua`: a limit ends a settlement at most at a ceiling (full, and owing at most the
 * largest capacity of its budget once more, below where the arithmetic is exact), or where it already was.
 * The largest capacity (burst: max but for the token bucket) of `limits`.
 */
export function largest (limits: readonly Limit[]): number {
  let most = 0
  for (const limit of limits) most = Math.max(most, limit.burst)
  return most
}

/** The longest window of `limits` (ms): how long a state that counts them all must last. */
export function longest (limits: readonly Limit[]): number {
  let most = 0
  for (const limit of limits) most = Math.max(most, limit.windowMs)
  return most
}

/** What a settlement moves a count `n` by, for `delta` asked: to at most `ceiling` (or not up, above it), never below 0. */
export function moved (n: number, delta: number, ceiling: number): number {
  return Math.max(-n, Math.min(delta, Math.max(ceiling - n, 0)))
}

/** A HASH as the counting scripts keep it: `<field><limit index, from 1>` → integer. */
export interface Fields extends State {
  readonly fields: Map<string, number>
}

/** The fields of a live hash, or a new empty one (not stored until a step returns it). */
export function fieldsOf (state: State | undefined): Fields {
  return (state as Fields | undefined) ?? { fields: new Map(), expiresAt: 0 }
}

/**
 * Keeps a hash at least `ttl` ms more, as the scripts do: a TTL already that long stays; a shorter one (or a new
 * hash's) is set past it by up to a second (at most `ttl`), the slack the scripts give for their clock and PTTL.
 */
export function keep (hash: Fields, now: number, ttl: number): void {
  if (hash.expiresAt - now < ttl) hash.expiresAt = now + ttl + Math.min(ttl, 1000)
}
