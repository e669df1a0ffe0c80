import type { Entry, Limit } from '../algorithms/index.js'
import { LONGEST } from '../duration.js'
import { WAITS } from './replies.js'
import type { RawDecision } from './replies.js'

// A decision's reply as the in-process twin (./memory.ts) builds it: what lua/decide.lua's `reply`, `exceeded`
// and `wait` give, the same array, which ./replies.ts reads as it reads the scripts'.

/**
 * The wait over the limit after `k` denials in a row (`doubles`: twice as long each time), as in
 * `lua/decide.lua`: at most the longest duration (`@fastify/rate-limit` stops it at 2^53 - 1).
 */
export function wait (longest: number, k: number, doubles: boolean): number {
  return Math.min(doubles ? longest * 2 ** (k - 1) : longest, LONGEST)
}

/** The reply of a decision made `now`, as the scripts give it (see the header of `lua/decide.lua`), in one array. */
export function raw (status: number, retry: number, offence: number, now: number, limits: readonly Limit[], entries: readonly Entry[]): RawDecision {
  // A request that waits is counted at the end of its wait.
  const reply: Array<number | string> = [status, retry, offence, status === WAITS ? now + retry : now, limits.length]
  for (let i = 0; i < limits.length; i++) reply.push(limits[i]!.burst, limits[i]!.windowMs, entries[i]!.count, entries[i]!.reset)
  return reply
}

/** Every limit at `count` past its capacity (0: at it, none left), counting down from `reset`. */
export function exceeded (limits: readonly Limit[], reset: number, count: number): Entry[] {
  return limits.map(limit => ({ count: limit.burst + count, reset, retry: 0 }))
}
