import type { FastifyReply } from 'fastify'
import type { FieldNames } from './types.js'
import type { ResolvedRoute } from './options/resolved.js'
import type { Decision } from './stores/store.js'

// Every rate-limit header, written in one place: `X-RateLimit-*` (legacy, default) for the limit that binds
// first, the IETF draft-10 `RateLimit` / `RateLimit-Policy` fields for every limit, and `Retry-After` on a
// refusal: the wait until every limit allows. Whole seconds, rounded up. A reset (`X-RateLimit-Reset`, a
// policy's `t`) is one value by design: the time until one more unit is free than now (the draft's "additional
// quota", §4.1.2), so a refused request of one unit waits exactly its binding policy's `t`, and one of more
// units no less (§6: `Retry-After` never points earlier than the reset). The options that choose them are
// lib/options/headers.ts's.

/** Per field of the binding limit, the header name it is sent under, or null when it is not sent. */
type Sent = Readonly<Record<keyof FieldNames, string | null>>

export interface HeaderStyle {
  /** The binding limit's fields on an allowed request, and on a refusal. */
  readonly allowed: Sent
  readonly refused: Sent
  /** `Retry-After` on a refusal. */
  readonly retryAfter: boolean
  readonly standard: boolean
  /** The IETF policy name of each limit (structured-field strings); a limit past the list is `<first>-<n>`. */
  readonly policies: readonly string[]
  /** `;qu="requests"` when a request is one unit (no `cost`); nothing when units are the app's own. */
  readonly unit: string
}

/** A budget's headers: `legacyHeaders`, the names (`enableDraftSpec`), the per-header switches, `standardHeaders`. */
export function headerStyle (route: ResolvedRoute, policies: readonly string[]): HeaderStyle {
  const { fieldNames: names, headerSwitches: { allowed, refused } } = route
  const sent = (on: Readonly<Record<keyof FieldNames, boolean>>): Sent => Object.freeze({
    limit: route.legacyHeaders && on.limit ? names.limit : null,
    remaining: route.legacyHeaders && on.remaining ? names.remaining : null,
    reset: route.legacyHeaders && on.reset ? names.reset : null
  })
  const unit = route.cost === 1 ? ';qu="requests"' : ''
  return Object.freeze({
    allowed: sent(allowed), refused: sent(refused), retryAfter: refused.retryAfter, standard: route.standardHeaders, policies, unit
  })
}

/** Requests a limit has left: none while banned, never below zero. */
export function remainingOf (limit: number, count: number, banned: boolean): number {
  return banned ? 0 : Math.max(0, limit - count)
}

export function seconds (ms: number): number {
  return Math.ceil(ms / 1000)
}

/** Whole seconds a client must wait: rounded up, never 0, so a client that obeys is not refused again. */
export function retryAfterSeconds (ms: number): number {
  return Math.max(1, seconds(ms))
}

/** The IETF name of a decision's limit `i`: the style's, or, past its list (an override's more limits), `<first>-<i + 1>`. */
export function policyName (style: HeaderStyle, i: number): string {
  return style.policies[i] ?? `${style.policies[0]!}-${i + 1}`
}

export function writeHeaders (reply: FastifyReply, style: HeaderStyle, decision: Decision): void {
  const banned = decision.status === 'banned'
  // A ban resets when it ends; otherwise when one more unit is free (see LimitState.resetMs).
  const resetOf = (resetMs: number): number => seconds(banned ? decision.retryMs : resetMs)
  const fields = decision.status === 'allowed' ? style.allowed : style.refused
  if (fields.limit !== null) reply.header(fields.limit, decision.limit)
  if (fields.remaining !== null) reply.header(fields.remaining, remainingOf(decision.limit, decision.count, banned))
  if (fields.reset !== null) reply.header(fields.reset, resetOf(decision.resetMs))
  if (style.standard) {
    reply.header('ratelimit-policy', decision.limits.map((l, i) =>
      `"${policyName(style, i)}";q=${l.limit}${style.unit};w=${seconds(l.windowMs)}`).join(', '))
    reply.header('ratelimit', decision.limits.map((l, i) =>
      `"${policyName(style, i)}";r=${remainingOf(l.limit, l.count, banned)};t=${resetOf(l.resetMs)}`).join(', '))
  }
  // A refusal with no wait (a request costing more than a limit holds) never passes: no time to retry after.
  if (decision.status !== 'allowed' && style.retryAfter && decision.retryMs > 0) {
    reply.header('retry-after', retryAfterSeconds(decision.retryMs))
  }
}
