import { InvalidReplyError } from '../errors.js'
import { leaseDecision } from './decisions.js'
import type { LeaseOutcome } from './decisions.js'
import type { Decision, LeaseInput } from './store.js'

// The one place a reply of lua/lease.lua (`concurrency`'s leases: the contract is lib/stores/store.ts's
// LeaseStore) is read: checked at run time and parsed into a lease decision's facts, which ./decisions.ts builds
// into a `Decision` (as it does those of the in-process twin, lib/stores/memory-leases.ts).

/** Statuses of lua/lease.lua's reply to acquire, by code. */
const OUTCOMES = new Map<number, LeaseOutcome>([[0, 'taken'], [1, 'refused'], [2, 'ban-started'], [5, 'found-banned'], [6, 'never-fits']])

/** The reply to acquire (`{ status, inUse, retry, offence, at }`) as a decision (`leaseDecision`), or a coded error. */
export function toLeaseDecision (reply: unknown, input: LeaseInput): Decision {
  const [status, inUse, retry, offence, at] = Array.isArray(reply) ? reply.map(integer) : []
  const outcome = OUTCOMES.get(status!)
  if (!Array.isArray(reply) || reply.length !== 5 || outcome === undefined || ![inUse, retry, offence, at].every(n => n! >= 0)) {
    throw new InvalidReplyError(JSON.stringify(reply).slice(0, 200))
  }
  return leaseDecision({ outcome, inUse: inUse!, retry: retry!, offence: offence!, at: at! }, input)
}

function integer (value: unknown): number {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) ? n : NaN
}
