import type { FastifyReply } from 'fastify'
import { checkBoolean, checkKeys, fail } from './check.js'
import type { FieldNames, HeaderSwitches, ResolvedRoute } from './types.js'
import type { Decision } from './stores/store.js'

/**
 * Every rate-limit header, written in one place: `X-RateLimit-*` (legacy, default) for the limit that binds
 * first, the IETF draft-10 `RateLimit` / `RateLimit-Policy` fields for every limit, and `Retry-After` on a
 * refusal: the wait until every limit allows. Whole seconds, rounded up. A reset (`X-RateLimit-Reset`, a
 * policy's `t`) is one value by design: the time until one more unit is free than now (the draft's "additional
 * quota", §4.1.2), so a refused request of one unit waits exactly its binding policy's `t`, and one of more
 * units no less (§6: `Retry-After` never points earlier than the reset).
 */

export const PLAIN_NAMES: FieldNames = Object.freeze({ limit: 'x-ratelimit-limit', remaining: 'x-ratelimit-remaining', reset: 'x-ratelimit-reset' })
export const DRAFT_NAMES: FieldNames = Object.freeze({ limit: 'ratelimit-limit', remaining: 'ratelimit-remaining', reset: 'ratelimit-reset' })

export const ALL_HEADERS: HeaderSwitches = Object.freeze({
  allowed: Object.freeze({ limit: true, remaining: true, reset: true }),
  refused: Object.freeze({ limit: true, remaining: true, reset: true, retryAfter: true })
})

/** Every name `@fastify/rate-limit`'s switches take (its types allow both styles'), whichever this plugin sends. */
const THEIR_NAMES = [...Object.values(PLAIN_NAMES), ...Object.values(DRAFT_NAMES), 'retry-after']

/**
 * `addHeadersOnExceeding` (allowed requests) and `addHeaders` (refusals), `{ '<header name>': boolean }`. The
 * plugin's are over every header on (`base`): a header left out is sent. A route's or a limiter's (`replace`)
 * take the place of the plugin's, as `@fastify/rate-limit` merges them: a header left out is not sent. Names are
 * the ones `names` sends (the draft's with `enableDraftSpec`); a name of theirs for a header not sent there (the
 * other style's, `retry-after` on an allowed request) switches nothing, as theirs, and a warning says so.
 */
export function checkHeaderSwitches (input: Record<string, unknown>, names: FieldNames, base: HeaderSwitches, where: string, replace: boolean, warn: (message: string) => void): HeaderSwitches {
  const switches = (option: 'addHeadersOnExceeding' | 'addHeaders', current: Readonly<Record<string, boolean>>): Record<string, boolean> => {
    const value = input[option]
    if (value === undefined) return current
    if (replace) current = Object.fromEntries(Object.keys(current).map(field => [field, false]))
    if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(`${where}${option}`, value, "an object such as { 'x-ratelimit-reset': false }")
    const fields = option === 'addHeaders' ? { ...names, retryAfter: 'retry-after' } : names
    const byName = new Map(Object.entries(fields).map(([field, name]) => [name, field]))
    checkKeys(value, new Set([...byName.keys(), ...THEIR_NAMES]), `${where}${option}.`)
    const out = { ...current }
    for (const [name, on] of Object.entries(value)) {
      const sent = checkBoolean(on, `${where}${option}.${name}`)
      const field = byName.get(name)
      if (field !== undefined) out[field] = sent
      else warn(`rate-guard: ${where}${option}.${name} is not used: no such header is sent there (as with @fastify/rate-limit)`)
    }
    return out
  }
  return Object.freeze({
    allowed: Object.freeze(switches('addHeadersOnExceeding', base.allowed)) as HeaderSwitches['allowed'],
    refused: Object.freeze(switches('addHeaders', base.refused)) as HeaderSwitches['refused']
  })
}

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
  return Object.freeze({ allowed: sent(allowed), refused: sent(refused), retryAfter: refused.retryAfter, standard: route.standardHeaders, policies, unit })
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

export function writeHeaders (reply: FastifyReply, style: HeaderStyle, decision: Decision): void {
  const banned = decision.status === 'banned'
  // A ban resets when it ends; otherwise when one more unit is free (see LimitState.resetMs).
  const resetOf = (resetMs: number): number => seconds(banned ? decision.retryMs : resetMs)
  const fields = decision.status === 'allowed' ? style.allowed : style.refused
  if (fields.limit !== null) reply.header(fields.limit, decision.limit)
  if (fields.remaining !== null) reply.header(fields.remaining, remainingOf(decision.limit, decision.count, banned))
  if (fields.reset !== null) reply.header(fields.reset, resetOf(decision.resetMs))
  if (style.standard) {
    const name = (i: number): string => style.policies[i] ?? `${style.policies[0]!}-${i + 1}`
    reply.header('ratelimit-policy', decision.limits.map((l, i) => `"${name(i)}";q=${l.limit}${style.unit};w=${seconds(l.windowMs)}`).join(', '))
    reply.header('ratelimit', decision.limits.map((l, i) => `"${name(i)}";r=${remainingOf(l.limit, l.count, banned)};t=${resetOf(l.resetMs)}`).join(', '))
  }
  // A refusal with no wait (a request costing more than a limit holds) never passes: no time to retry after.
  if (decision.status !== 'allowed' && style.retryAfter && decision.retryMs > 0) reply.header('retry-after', retryAfterSeconds(decision.retryMs))
}
