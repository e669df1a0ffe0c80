import type { Algorithm, Limit } from '../algorithms/index.js'
import { InvalidReplyError } from '../errors.js'
import type { IdentityKeys } from './key-names.js'
import type { Ban } from './ban-index.js'
import type { BanPolicy, FailMode } from '../types.js'

// What every store (Redis, in process) takes and answers, and the one place a raw reply becomes a result.

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
   * `overLimit`, and only on an algorithm that can reserve (the sliding log). See `lua/decide.lua`.
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
  /** Set only while someone subscribes to `rate-guard:decision`, for a decision Redis made in a batch: ms from sending the batch to its answer, and its size. */
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
  /** Renews the leases of `held` (all at one key) for `leaseMs` from now; resolves the units still held. */
  renew (key: string, held: readonly Held[], leaseMs: number): number | Promise<number>
  /** The units held at `key` now (leases that have not ended), changing nothing. */
  inUse (key: string): number | Promise<number>
}

/** A store across the network (Redis): it also decides several requests of one algorithm in one call. */
export interface RemoteStore extends Store {
  /** A decision per request, in order, or the error that kept Redis from deciding that request alone. */
  decideMany (inputs: readonly DecideInput[], algorithm: Algorithm): Promise<Array<Decision | Error>>
}

/** Limits as the scripts take them (ARGV and the override key): `'max window burst;...'`. */
export function encodeLimits (limits: readonly Limit[]): string {
  return limits.map(({ max, windowMs, burst }) => `${max} ${windowMs} ${burst}`).join(';')
}

/** The twin of the scripts' `parse`. */
export function parseLimits (text: string): Limit[] {
  return [...text.matchAll(/(\d+) (\d+) (\d+)/g)].map(([, max, windowMs, burst]) => ({ max: Number(max), windowMs: Number(windowMs), burst: Number(burst) }))
}

/** The script's reply as the in-process twin builds it too (see the header of `lua/decide.lua`). */
export type RawDecision = ReadonlyArray<number | string>

const STATUSES: readonly DecisionStatus[] = ['allowed', 'limited', 'banned']

function integer (value: unknown): number {
  // RESP2 and RESP3 give numbers; a client with `stringNumbers` gives numeric strings.
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : NaN
}

/** A client found banned, `retryMs` more: the budget's own `limits`, nothing counted. */
export function bannedDecision (limits: readonly Limit[], retryMs: number): Decision {
  const states = limits.map(({ burst, windowMs }) => ({ limit: burst, windowMs, count: 0, resetMs: 0 }))
  const { limit, windowMs } = states[0]!
  return { status: 'banned', limit, windowMs, count: 0, resetMs: 0, retryMs, banStarted: false, offence: 0, limits: states, at: 0, member: '' }
}

/** Status of an answer saying Redis could not decide that request (followed by Redis's error text). */
export const FAILED = 3
/** Status of a request allowed once it has waited its `retry` (`maxWait`), counted at its wait's end (`at`). */
export const WAITS = 4
/** What `toLeanDecisions` gives for a request a lean script handed back: decide it with the general script. */
export const HANDED_BACK = Symbol('handed back')

/**
 * Checks one answer of a raw reply at run time, from `offset`, and turns it into a `Decision` (or, for a
 * request Redis could not decide, its error); returns it with the offset of the next answer, or throws a coded
 * error. `limits` are the ones the request was decided by (an answer with none is a client found banned).
 */
function readDecision (reply: readonly unknown[], offset: number, member: string, limits: readonly Limit[]): [Decision | Error, number] {
  const code = integer(reply[offset])
  const text = reply[offset + 1]
  if (code === FAILED && (typeof text === 'string' || Buffer.isBuffer(text))) return [new Error(String(text)), offset + 2]
  const waits = code === WAITS
  const status = waits ? 'allowed' : STATUSES[code]
  const retryMs = integer(reply[offset + 1])
  const offence = integer(reply[offset + 2])
  const at = integer(reply[offset + 3])
  const n = integer(reply[offset + 4])
  const end = offset + 5 + 4 * n
  if (status !== undefined && retryMs >= 0 && offence >= 0 && at >= 0 && end <= reply.length && n <= 16) {
    if (n === 0 && status === 'banned' && limits.length > 0) return [bannedDecision(limits, retryMs), end]
    const states: LimitState[] = []
    let binding = 0
    for (let i = offset + 5; i < end; i += 4) {
      const state = { limit: integer(reply[i]), windowMs: integer(reply[i + 1]), count: integer(reply[i + 2]), resetMs: integer(reply[i + 3]) }
      if (!(state.limit >= 0 && state.windowMs >= 0 && state.count >= 0 && state.resetMs >= 0)) break
      states.push(state)
      const best = states[binding]!
      const fewer = state.limit - state.count - (best.limit - best.count)
      if (fewer < 0 || (fewer === 0 && state.resetMs > best.resetMs)) binding = states.length - 1
    }
    if (states.length === n && n >= 1) {
      const { limit, windowMs, count, resetMs } = states[binding]!
      const decision: Decision = { status, limit, windowMs, count, resetMs, retryMs: waits ? 0 : retryMs, banStarted: offence > 0, offence, limits: states, at, member }
      return [waits ? { ...decision, waitMs: retryMs } : decision, end]
    }
  }
  throw new InvalidReplyError(JSON.stringify(reply.slice(offset)).slice(0, 200))
}

/** A reply of exactly one answer (one request decided), as a `Decision`; else the error it gives, or a coded one. */
export function toDecision (reply: unknown, member: string, limits: readonly Limit[]): Decision {
  const decision = toDecisions(reply, [member], [{ limits }])[0]!
  if (decision instanceof Error) throw decision
  return decision
}

/**
 * A reply answering each of `inputs` in turn (`members[i]` the id of `inputs[i]`), as decisions, or for a
 * request Redis could not decide, its error; or a coded error when the reply is not one the scripts give.
 */
export function toDecisions (reply: unknown, members: readonly string[], inputs: ReadonlyArray<{ readonly limits: readonly Limit[] }>): Array<Decision | Error> {
  if (Array.isArray(reply)) {
    const decisions: Array<Decision | Error> = []
    let offset = 0
    for (let i = 0; i < inputs.length; i++) {
      const [decision, end] = readDecision(reply, offset, members[i]!, inputs[i]!.limits)
      decisions.push(decision)
      offset = end
    }
    if (offset === reply.length) return decisions
  }
  throw new InvalidReplyError(JSON.stringify(reply)?.slice(0, 200) ?? String(reply))
}

/** Codes of a lean script's answers (the header of `lua/lean.lua`) beside the statuses 0 to 2. */
const HAND_BACK = 4
const FOUND_BANNED = 5
const OVERRIDDEN = 6

/**
 * A lean script's reply (`lua/lean.lua`: the time, then each request's answer in the fewest integers) as a
 * decision per request of `inputs` (each of one limit), or `HANDED_BACK` for one it left to the general
 * script; or a coded error when the reply is not one it gives.
 */
export function toLeanDecisions (reply: unknown, members: readonly string[], inputs: ReadonlyArray<{ readonly limits: readonly Limit[] }>): Array<Decision | typeof HANDED_BACK> {
  const at = Array.isArray(reply) ? integer(reply[0]) : NaN
  if (at >= 0) {
    const answers = reply as unknown[]
    const decisions: Array<Decision | typeof HANDED_BACK> = []
    let offset = 1
    for (let i = 0; i < inputs.length; i++) {
      const answer = readLeanAnswer(answers, offset, at, members[i]!, inputs[i]!.limits)
      if (answer === null) break
      decisions.push(answer[0])
      offset = answer[1]
    }
    if (decisions.length === inputs.length && offset === answers.length) return decisions
  }
  throw new InvalidReplyError(JSON.stringify(reply)?.slice(0, 200) ?? String(reply))
}

/** One lean answer from `offset` and the offset of the next, or null when it is not one. */
function readLeanAnswer (reply: readonly unknown[], offset: number, at: number, member: string, limits: readonly Limit[]): [Decision | typeof HANDED_BACK, number] | null {
  let code = integer(reply[offset])
  if (code === HAND_BACK) return [HANDED_BACK, offset + 1]
  if (code === FOUND_BANNED) {
    const retryMs = integer(reply[offset + 1])
    return retryMs >= 0 ? [bannedDecision(limits, retryMs), offset + 2] : null
  }
  let { burst: limit, windowMs } = limits[0]!
  if (code === OVERRIDDEN) {
    limit = integer(reply[offset + 1])
    windowMs = integer(reply[offset + 2])
    offset += 3
    code = integer(reply[offset])
  }
  // After the code: the retry (but when allowed), the offence (when this denial started a ban), count, reset.
  const status = STATUSES[code]
  let next = offset + 1
  const retryMs = code === 0 ? 0 : integer(reply[next++])
  const offence = code === 2 ? integer(reply[next++]) : 0
  const count = integer(reply[next++])
  const resetMs = integer(reply[next++])
  if (status === undefined || !(limit >= 0 && windowMs >= 0 && retryMs >= 0 && offence >= 0 && count >= 0 && resetMs >= 0)) return null
  const state = { limit, windowMs, count, resetMs }
  return [{ status, limit, windowMs, count, resetMs, retryMs, banStarted: offence > 0, offence, limits: [state], at, member }, next]
}
