import { InvalidReplyError } from '../errors.js'
import type { Decision, LeaseInput } from './store.js'

// The one place a reply of lua/lease.lua (`concurrency`'s leases: the contract is lib/stores/store.ts's
// LeaseStore) becomes a result, and the statuses the script and its in-process twin,
// lib/stores/memory-leases.ts, answer with.

/** Statuses of lua/lease.lua's reply to acquire, which the twin gives too. */
export const TAKEN = 0
export const REFUSED = 1
export const BAN_STARTED = 2
export const FOUND_BANNED = 5
export const NEVER_FITS = 6
const STATUSES = new Set([TAKEN, REFUSED, BAN_STARTED, FOUND_BANNED, NEVER_FITS])

/** A refused request may try again in a second: one of the client's requests may have ended. */
export const IN_FLIGHT_RETRY_MS = 1000

/**
 * The reply to acquire (`{ status, inUse, retry, offence, at }`) as a decision on the one limit `concurrency`
 * is: its capacity `max`, its window the lease, its count the units in flight. A refusal waits a second
 * (`IN_FLIGHT_RETRY_MS`); one that never fits waits for nothing (0), as a request costing more than a rate
 * limit holds; a ban, its remaining length.
 */
export function toLeaseDecision (reply: unknown, input: LeaseInput): Decision {
  const [status, inUse, retry, offence, at] = Array.isArray(reply) ? reply.map(integer) : []
  if (!Array.isArray(reply) || reply.length !== 5 || !STATUSES.has(status!) || ![inUse, retry, offence, at].every(n => n! >= 0)) {
    throw new InvalidReplyError(JSON.stringify(reply).slice(0, 200))
  }
  const taken = status === TAKEN
  const banned = status === BAN_STARTED || status === FOUND_BANNED
  const retryMs = taken ? 0 : banned ? retry! : status === NEVER_FITS ? 0 : IN_FLIGHT_RETRY_MS
  const state = { limit: input.max, windowMs: input.leaseMs, count: inUse!, resetMs: taken ? 0 : retryMs }
  return {
    status: taken ? 'allowed' : banned ? 'banned' : 'limited',
    ...state,
    retryMs,
    banStarted: status === BAN_STARTED,
    offence: offence!,
    limits: [state],
    at: at!,
    member: input.id
  }
}

function integer (value: unknown): number {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  return typeof n === 'number' && Number.isSafeInteger(n) ? n : NaN
}
