import type { FastifyReply } from 'fastify'
import type { Decision } from './stores/store.js'

/**
 * Every rate-limit header, written in one place: `X-RateLimit-*` (legacy, default), the IETF draft-10
 * `RateLimit` / `RateLimit-Policy` fields, and `Retry-After` on a refusal. Whole seconds, rounded up.
 */

export interface HeaderStyle {
  readonly legacy: boolean
  readonly standard: boolean
  /** The IETF policy name, a structured-field string. */
  readonly policy: string
}

export function seconds (ms: number): number {
  return Math.ceil(ms / 1000)
}

/** Whole seconds a client must wait: rounded up, never 0, so a client that obeys is not refused again. */
export function retryAfterSeconds (ms: number): number {
  return Math.max(1, seconds(ms))
}

export function writeHeaders (reply: FastifyReply, style: HeaderStyle, max: number, windowMs: number, decision: Decision): void {
  const banned = decision.status === 'banned'
  const remaining = banned ? 0 : Math.max(0, max - decision.count)
  // A ban resets when it ends; otherwise when the oldest counted request leaves the window.
  const reset = seconds(banned ? decision.retryMs : decision.resetMs)
  if (style.legacy) {
    reply.header('x-ratelimit-limit', max)
    reply.header('x-ratelimit-remaining', remaining)
    reply.header('x-ratelimit-reset', reset)
  }
  if (style.standard) {
    reply.header('ratelimit-policy', `"${style.policy}";q=${max};w=${seconds(windowMs)}`)
    reply.header('ratelimit', `"${style.policy}";r=${remaining};t=${reset}`)
  }
  if (decision.status !== 'allowed') reply.header('retry-after', retryAfterSeconds(decision.retryMs))
}
