import type { Limit } from '../algorithms/index.js'
import { InvalidReplyError } from '../errors.js'
import { bannedDecision, decided } from './decisions.js'
import type { Outcome } from './decisions.js'
import type { Decision, DecisionStatus, LimitState } from './store.js'

// The one place a raw reply is read: the general scripts' answers (lua/decide.lua's header) and the lean scripts'
// (lua/lean.lua's), checked at run time and parsed into a decision's facts, which ./decisions.ts builds into a
// `Decision` (as it does the in-process twin's).

/** The general script's reply (see the header of `lua/decide.lua`). */
export type RawDecision = ReadonlyArray<number | string>

const STATUSES: readonly DecisionStatus[] = ['allowed', 'limited', 'banned']

function integer (value: unknown): number {
  // RESP2 and RESP3 give numbers; a client with `stringNumbers` gives numeric strings.
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 ? n : NaN
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
  const outcome: Outcome | undefined = code === WAITS ? 'waits' : STATUSES[code]
  const retry = integer(reply[offset + 1])
  const offence = integer(reply[offset + 2])
  const at = integer(reply[offset + 3])
  const n = integer(reply[offset + 4])
  const end = offset + 5 + 4 * n
  if (outcome !== undefined && retry >= 0 && offence >= 0 && at >= 0 && end <= reply.length && n <= 16) {
    if (n === 0 && outcome === 'banned' && limits.length > 0) return [bannedDecision(limits, retry), end]
    const states: LimitState[] = []
    for (let i = offset + 5; i < end; i += 4) {
      const state = {
        limit: integer(reply[i]), windowMs: integer(reply[i + 1]), count: integer(reply[i + 2]), resetMs: integer(reply[i + 3])
      }
      if (!(state.limit >= 0 && state.windowMs >= 0 && state.count >= 0 && state.resetMs >= 0)) break
      states.push(state)
    }
    if (states.length === n && n >= 1) return [decided({ outcome, retry, offence, at, limits: states, member }), end]
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
export function toDecisions (
  reply: unknown, members: readonly string[], inputs: ReadonlyArray<{ readonly limits: readonly Limit[] }>
): Array<Decision | Error> {
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
/** The least allowed answer packed in one integer: `PACKED + count + (limit + 1) x reset`. */
const PACKED = 7

/**
 * A lean script's reply (`lua/lean.lua`: the time, then each request's answer in the fewest integers) as a
 * decision per request of `inputs` (each of one limit), or `HANDED_BACK` for one it left to the general
 * script; or a coded error when the reply is not one it gives.
 */
export function toLeanDecisions (
  reply: unknown, members: readonly string[], inputs: ReadonlyArray<{ readonly limits: readonly Limit[] }>
): Array<Decision | typeof HANDED_BACK> {
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
function readLeanAnswer (
  reply: readonly unknown[], offset: number, at: number, member: string, limits: readonly Limit[]
): [Decision | typeof HANDED_BACK, number] | null {
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
  if (code >= PACKED) {
    const packed = code - PACKED
    const count = packed % (limit + 1)
    const resetMs = (packed - count) / (limit + 1)
    // Exact by the script's bounds (lua/lean.lua's header): a count past the limit or a reset past the window is
    // not a packed answer.
    if (!(limit >= 0 && resetMs <= windowMs)) return null
    return [decided({ outcome: 'allowed', retry: 0, offence: 0, at, limits: [{ limit, windowMs, count, resetMs }], member }), offset + 1]
  }
  // After the code: the retry (but when allowed), the offence (when this denial started a ban), count, reset.
  const status = STATUSES[code]
  let next = offset + 1
  const retry = code === 0 ? 0 : integer(reply[next++])
  const offence = code === 2 ? integer(reply[next++]) : 0
  const count = integer(reply[next++])
  const resetMs = integer(reply[next++])
  if (status === undefined || !(limit >= 0 && windowMs >= 0 && retry >= 0 && offence >= 0 && count >= 0 && resetMs >= 0)) return null
  return [decided({ outcome: status, retry, offence, at, limits: [{ limit, windowMs, count, resetMs }], member }), next]
}
