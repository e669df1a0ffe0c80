import type { FastifyReply } from 'fastify'
import type { Decision } from './stores/store.js'

/**
 * Every rate-limit header, written in one place: `X-RateLimit-*` (legacy, default) for the limit that binds
 * first, the IETF draft-10 `RateLimit` / `RateLimit-Policy` fields for every limit, and `Retry-After` on a
 * refusal: the wait until every limit allows. Whole seconds, rounded up.
 */

export interface HeaderStyle {
  readonly legacy: boolean
  readonly standard: boolean
  /** The IETF policy name of each limit (structured-field strings); a limit past the list is `<first>-<n>`. */
  readonly policies: readonly string[]
}

export function seconds (ms: number): number {
  return Math.ceil(ms / 1000)
}

/** Whole seconds a client must wait: rounded up, never 0, so a client that obeys is not refused again. */
export function retryAfterSeconds (ms: number): number {
  return Math.max(1, seconds(ms))
}

export function writeHeaders (reply: FastifyReply, style: HeaderStyle, decision: Decision): void {
  const banned = decision.status === 'banned'
  // A ban resets when it ends; otherwise when the binding limit's count starts falling.
  const resetOf = (resetMs: number): number => seconds(banned ? decision.retryMs : resetMs)
  const remainingOf = (limit: number, count: number): number => banned ? 0 : Math.max(0, limit - count)
  if (style.legacy) {
    reply.header('x-ratelimit-limit', decision.limit)
    reply.header('x-ratelimit-remaining', remainingOf(decision.limit, decision.count))
    reply.header('x-ratelimit-reset', resetOf(decision.resetMs))
  }
  if (style.standard) {
    const name = (i: number): string => style.policies[i] ?? `${style.policies[0]!}-${i + 1}`
    reply.header('ratelimit-policy', decision.limits.map((l, i) => `"${name(i)}";q=${l.limit};w=${seconds(l.windowMs)}`).join(', '))
    reply.header('ratelimit', decision.limits.map((l, i) => `"${name(i)}";r=${remainingOf(l.limit, l.count)};t=${resetOf(l.resetMs)}`).join(', '))
  }
  if (decision.status !== 'allowed') reply.header('retry-after', retryAfterSeconds(decision.retryMs))
}
