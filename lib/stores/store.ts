import type { Algorithm, Limit } from '../algorithms/index.js'
import { InvalidReplyError } from '../errors.js'
import type { IdentityKeys } from '../keys.js'

/** What every store (Redis, in process) takes and answers, and the one place a raw reply becomes a result. */

/** When denials start a ban, and how long each ban in a row lasts. */
export interface BanPolicy {
  /** Denials within one window of the limit hit that start a ban. */
  readonly threshold: number
  /** The nth ban in a row lasts `ladder[n - 1]` ms, the last step repeating; one step: every ban is as long. */
  readonly ladder: readonly number[]
  /** How long after a ban ends it still counts toward the next one's length (ms). */
  readonly forgetMs: number
}

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
}

/** Gives back a request a decision counted (`member` and `at` are the decision's). */
export interface UndoInput {
  readonly keys: IdentityKeys
  readonly limits: readonly Limit[]
  readonly algorithm: Algorithm
  readonly member: string
  readonly at: number
}

export type DecisionStatus = 'allowed' | 'limited' | 'banned'

/** One limit after a decision. */
export interface LimitState {
  /** Requests the limit lets through at once: its `max` (its `burst` for the token bucket). */
  readonly limit: number
  readonly windowMs: number
  /** Requests counted after this decision (tokens in use for the token bucket). */
  readonly count: number
  /** Milliseconds until the count starts falling to zero: the oldest request leaves, the window ends, the bucket refills (0: none counted). */
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
  /** The store's time of the decision (ms): with `member`, what `undo` needs. */
  readonly at: number
  /** The id of this request in the store (`''` from the in-process store, which needs none). */
  readonly member: string
}

export interface Store {
  /** Decides (or, with `peek`, reports) one request. The in-process store answers synchronously. */
  decide (input: DecideInput): Decision | Promise<Decision>
  /** Gives back a request `decide` allowed. */
  undo (input: UndoInput): void | Promise<void>
  /** Marks `bannedKey` as banned for `ms` milliseconds. */
  setBan (bannedKey: string, ms: number): Promise<void>
  /** Sets `key` to `value` for `ms` milliseconds (`null`: until deleted). */
  setValue (key: string, value: string, ms: number | null): Promise<void>
  /** Deletes keys (all of one identity, so one Redis Cluster slot). */
  delete (keys: readonly string[]): Promise<void>
  close (): Promise<void>
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
export type RawDecision = readonly number[]

const STATUSES: readonly DecisionStatus[] = ['allowed', 'limited', 'banned']

function integer (value: unknown): number {
  // RESP2 and RESP3 give numbers; a client with `stringNumbers` gives numeric strings.
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : NaN
}

/** Checks a raw reply at run time and turns it into a `Decision`, or throws a coded error. */
export function toDecision (reply: unknown, member: string): Decision {
  if (Array.isArray(reply) && reply.length >= 9) {
    const values = reply.map(integer)
    const [status, retryMs, offence, at, n] = values as [number, number, number, number, number]
    const name = STATUSES[status]
    if (name !== undefined && !values.some(Number.isNaN) && n >= 1 && reply.length === 5 + 4 * n) {
      const limits: LimitState[] = []
      let binding = 0
      for (let i = 0; i < n; i++) {
        const [limit, windowMs, count, resetMs] = values.slice(5 + 4 * i, 9 + 4 * i) as [number, number, number, number]
        limits.push({ limit, windowMs, count, resetMs })
        const best = limits[binding]!
        const fewer = limit - count - (best.limit - best.count)
        if (fewer < 0 || (fewer === 0 && resetMs > best.resetMs)) binding = i
      }
      const { limit, windowMs, count, resetMs } = limits[binding]!
      return { status: name, limit, windowMs, count, resetMs, retryMs, banStarted: offence > 0, offence, limits, at, member }
    }
  }
  throw new InvalidReplyError(JSON.stringify(reply)?.slice(0, 200) ?? String(reply))
}
