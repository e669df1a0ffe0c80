import type { Algorithm } from '../algorithms/index.js'
import { InvalidReplyError } from '../errors.js'
import type { IdentityKeys } from '../keys.js'

/** What every store (Redis, in process) takes and answers, and the one place a raw reply becomes a result. */

export interface DecideInput {
  readonly keys: IdentityKeys
  readonly max: number
  readonly windowMs: number
  /** Denials within one window that start a ban; 0 turns bans off. */
  readonly banThreshold: number
  readonly banMs: number
  /** Report what the store knows without counting the request or a strike. */
  readonly peek: boolean
  /** How the budget counts; default `'sliding-log'`. `keys` must be made for the same algorithm. */
  readonly algorithm?: Algorithm
}

export type DecisionStatus = 'allowed' | 'limited' | 'banned'

export interface Decision {
  readonly status: DecisionStatus
  /** Requests counted in the window after this decision. */
  readonly count: number
  /**
   * Milliseconds until the oldest counted request leaves the window (0: none counted); for the counting
   * algorithms, until the counted requests stop counting (the fixed window ends, or both windows pass).
   */
  readonly resetMs: number
  /** Milliseconds until this request would be allowed: 0 when allowed, the remaining ban when banned. */
  readonly retryMs: number
  /** This request started a ban. */
  readonly banStarted: boolean
}

export interface Store {
  /** Decides (or, with `peek`, reports) one request. The in-process store answers synchronously. */
  decide (input: DecideInput): Decision | Promise<Decision>
  /** Marks `bannedKey` as banned for `ms` milliseconds. */
  setBan (bannedKey: string, ms: number): Promise<void>
  /** Deletes keys (all of one identity, so one Redis Cluster slot). */
  delete (keys: readonly string[]): Promise<void>
  close (): Promise<void>
}

/** The script's reply as the in-process twin builds it too: `[status, count, reset, retry, banStarted]`. */
export type RawDecision = readonly [number, number, number, number, number]

const STATUSES: readonly DecisionStatus[] = ['allowed', 'limited', 'banned']

function integer (value: unknown): number {
  // RESP2 and RESP3 give numbers; a client with `stringNumbers` gives numeric strings.
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : NaN
}

/** Checks a raw reply at run time and turns it into a `Decision`, or throws a coded error. */
export function toDecision (reply: unknown): Decision {
  if (Array.isArray(reply) && reply.length === 5) {
    const [status, count, resetMs, retryMs, banStarted] = reply.map(integer) as unknown as RawDecision
    const name = STATUSES[status]
    if (name !== undefined && !Number.isNaN(count + resetMs + retryMs) && (banStarted === 0 || banStarted === 1)) {
      return { status: name, count, resetMs, retryMs, banStarted: banStarted === 1 }
    }
  }
  throw new InvalidReplyError(JSON.stringify(reply)?.slice(0, 200) ?? String(reply))
}
