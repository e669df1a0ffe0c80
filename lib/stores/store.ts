import type { Algorithm, Limit } from '../algorithms/index.js'
import type { IdentityKeys } from './key-names.js'
import type { Ban } from './ban-index.js'
import type { BanPolicy, FailMode } from '../types.js'

// What every store (Redis, in process) takes and answers. How a raw reply becomes a result: ./replies.ts.

export interface DecideInput {
  readonly keys: IdentityKeys
  /** Every limit must allow the request; an override stored for the identity replaces them. */
  readonly limits: readonly Limit[]
  /** `null`: denials never ban. */
  readonly ban: BanPolicy | null
  /** Report what the store knows without counting the request or a strike. */
  readonly peek: boolean
  /** How the budget counts; default `'sliding-log'`. `keys` must be made for the same algorithm. */
  readonly algorithm?: Algorithm
  /**
   * What happens over the limit; absent: the algorithm alone decides, and a denial counts nothing. Otherwise
   * a denial holds the client off (the identity's over-limit key, `keys.backoff`): `'continue'`
   * (continueExceeding) for the longest window of its limits from each denial, so a client that keeps sending
   * stays limited; `'backoff'` (exponentialBackoff) for that window, then twice as long with each denial in a
   * row. A peek reports the client as one over its limit for what is left of one such window since the last
   * denial. See `lua/decide.lua`.
   */
  readonly overLimit?: 'continue' | 'backoff'
  /**
   * The request's units on every limit (1 when absent): it is allowed when each limit's count plus its cost
   * fits the limit's capacity, and counts that much. One costing more than a limit's capacity never passes:
   * limited, with a retry of 0, counting nothing and no strike.
   */
  readonly cost?: number
  /**
   * `maxWait`: a request the limits deny, which every one of them would allow within `maxMs`, is allowed
   * after that wait instead (`Decision.waitMs`), counted at the end of it, so the requests waiting never pass
   * a limit; at most `maxQueue` requests of one client's budget wait at once, and one more is denied. Not with
   * `overLimit`, and only on an algorithm that can reserve (the sliding log, the token bucket). See `lua/decide.lua`.
   */
  readonly wait?: WaitPolicy
}

/** `maxWait` and `maxQueue`, as a budget's decisions take them (`DecideInput.wait`). */
export interface WaitPolicy {
  readonly maxMs: number
  readonly maxQueue: number
}

/**
 * A request of a budget, which always says its algorithm (batches are per algorithm), whether only time
 * can change its denials (see `HeldAnswers`), and what decides when Redis cannot.
 */
export type Decidable = DecideInput & { readonly algorithm: Algorithm, readonly holdDenials: boolean, readonly failMode: FailMode }

/** A decision, or what `failMode` said instead: `error` is what kept the store from deciding, when it said. */
export type Verdict = Decision | { readonly status: 'unenforced' | 'unavailable', readonly error?: Error }

/** Changes what a decision counted (`member` and `at` are the decision's): to `final` units, 0 giving it all back. */
export interface SettleInput {
  readonly keys: IdentityKeys
  readonly limits: readonly Limit[]
  readonly algorithm: Algorithm
  readonly member: string
  readonly at: number
  /** The units the decision counted (1 when absent). */
  readonly cost?: number
  /** What it counts from now on. */
  readonly final: number
}

export type DecisionStatus = 'allowed' | 'limited' | 'banned'

/** One limit after a decision. */
export interface LimitState {
  /** Requests the limit lets through at once: its `max` (its `burst` for the token bucket). */
  readonly limit: number
  readonly windowMs: number
  /** Requests counted after this decision (tokens in use for the token bucket). */
  readonly count: number
  /**
   * Milliseconds until one more unit is free than now (the IETF draft's `t`): the oldest request leaves, the
   * window ends, a token is back, the estimate falls by one (0: none counted). Past the limit (a settle charged
   * more than the cost), until the count is one below it: the wait of a request of one unit.
   */
  readonly resetMs: number
}

export interface Decision {
  readonly status: DecisionStatus
  /** The binding limit's (the one with fewest requests remaining): its capacity, window, count and reset. */
  readonly limit: number
  readonly windowMs: number
  readonly count: number
  readonly resetMs: number
  /** Milliseconds until this request would pass every limit: 0 when allowed, the remaining ban when banned. */
  readonly retryMs: number
  /** This request started a ban. */
  readonly banStarted: boolean
  /** Which ban in a row it started (1, 2, ...), 0 when it started none. */
  readonly offence: number
  /** Every limit, in order (an override's when one is set for the identity). */
  readonly limits: readonly LimitState[]
  /**
   * Allowed once this many ms have passed (`maxWait`): the request was counted at the end of its wait. Absent
   * for every other decision.
   */
  readonly waitMs?: number
  /** The store's time of the decision (ms), or of its wait's end (`waitMs`): with `member`, what `settle` needs. */
  readonly at: number
  /** The id of this request in the store (`''` from the in-process store, which needs none). */
  readonly member: string
  /**
   * Set only while someone subscribes to `rate-guard:decision`, for a decision Redis made in a batch: ms from sending
   * the batch to its answer, and its size.
   */
  readonly redisMs?: number
  readonly batchSize?: number
}

export interface Store {
  /** Decides (or, with `peek`, reports) one request. The in-process store answers synchronously. */
  decide (input: DecideInput): Decision | Promise<Decision>
  /** Changes what a request `decide` allowed counts (0: gives it back). */
  settle (input: SettleInput): void | Promise<void>
  /** Marks `bannedKey` as banned for `ms` milliseconds. */
  setBan (bannedKey: string, ms: number): Promise<void>
  /** Sets `key` to `value` for `ms` milliseconds (`null`: until deleted). */
  setValue (key: string, value: string, ms: number | null): Promise<void>
  /** Deletes keys (all of one identity, so one Redis Cluster slot). */
  delete (keys: readonly string[]): Promise<void>
  /** Deletes keys of one identity, its ban (`…:banned`) among them, and takes the ban out of the ban index. */
  unban (keys: readonly string[]): Promise<void>
  /**
   * The `limit` longest bans under `nameSpace` now, longest first: each one's key (`…:banned`, or a shadow
   * ban's `…:shadow:banned`) and the ms it has left. Stops once `signal` aborts.
   */
  bans (nameSpace: string, limit: number, signal: AbortSignal): Promise<Ban[]>
  /** `concurrency`'s leases, kept where this store counts. */
  readonly leases: LeaseStore
  close (): Promise<void>
}

// `concurrency`: at most `max` units of a client's requests in flight on a budget. A request in flight holds a
// lease per unit, which ends `leaseMs` after it was taken or last renewed: a process that dies holding leases
// frees them then, on the store's clock (Redis's `TIME`). See lua/lease.lua.

export interface LeaseInput {
  readonly keys: IdentityKeys
  /** The budget's (what the Redis tracing channel names). */
  readonly algorithm: Algorithm
  /** The request's id among the client's leases (unique across instances). */
  readonly id: string
  /** Its units: its cost. */
  readonly units: number
  readonly max: number
  readonly leaseMs: number
  /** Under a ban policy, a refusal strikes toward a ban within `strikeWindowMs`; `null`: refusals never ban. */
  readonly ban: BanPolicy | null
  readonly strikeWindowMs: number
}

/** A request's leases on a client's budget: what releasing and renewing them name. */
export interface Held {
  readonly key: string
  readonly algorithm: Algorithm
  readonly id: string
  readonly units: number
}

export interface LeaseStore {
  /** Takes the request's units when they fit beside those in flight; else refuses (and strikes, under a ban policy). */
  acquire (input: LeaseInput): Decision | Promise<Decision>
  /** Ends a request's leases; resolves the units given back (0: they had ended). */
  release (held: Held): number | Promise<number>
  /**
   * Renews the leases of `held` (all at one key) for `leaseMs` from now, writing back those found gone (their
   * requests still run: they count against max again, past it if they must); resolves the units written back.
   */
  renew (key: string, held: readonly Held[], leaseMs: number): number | Promise<number>
  /** The units held at `key` now (leases that have not ended), changing nothing. */
  inUse (key: string): number | Promise<number>
}

/** A store across the network (Redis): it also decides several requests of one algorithm in one call. */
export interface RemoteStore extends Store {
  /** A decision per request, in order, or the error that kept Redis from deciding that request alone. */
  decideMany (inputs: readonly DecideInput[], algorithm: Algorithm): Promise<Array<Decision | Error>>
  /** Which shard `input` is decided on: on a Cluster the master that serves its keys (`''` when unknown), else `''`. */
  shardOf (input: DecideInput): string
}
