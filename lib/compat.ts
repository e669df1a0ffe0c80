import { checkBoolean, checkKeys, fail } from './check.js'
import { InvalidOptionError } from './errors.js'
import type { ResolvedLimit } from './options.js'
import type { BanPolicy } from './stores/store.js'

/**
 * `@fastify/rate-limit`'s options that this plugin spells another way, mapped once at register: the per-header
 * switches and the draft header names, `ban` as a number of denials, and the two options it rejects (with the
 * option to use instead) rather than ignore.
 */

/** The names of the three fields of the binding limit: `X-RateLimit-*`, or the draft's `RateLimit-*` (`enableDraftSpec`). */
export interface FieldNames {
  readonly limit: string
  readonly remaining: string
  readonly reset: string
}

export const PLAIN_NAMES: FieldNames = Object.freeze({ limit: 'x-ratelimit-limit', remaining: 'x-ratelimit-remaining', reset: 'x-ratelimit-reset' })
export const DRAFT_NAMES: FieldNames = Object.freeze({ limit: 'ratelimit-limit', remaining: 'ratelimit-remaining', reset: 'ratelimit-reset' })

/** Which headers are sent: the three fields on an allowed request, and on a refusal with `Retry-After`. */
export interface HeaderSwitches {
  readonly allowed: Readonly<Record<keyof FieldNames, boolean>>
  readonly refused: Readonly<Record<keyof FieldNames | 'retryAfter', boolean>>
}

export const ALL_HEADERS: HeaderSwitches = Object.freeze({
  allowed: Object.freeze({ limit: true, remaining: true, reset: true }),
  refused: Object.freeze({ limit: true, remaining: true, reset: true, retryAfter: true })
})

/**
 * `addHeadersOnExceeding` (allowed requests) and `addHeaders` (refusals), `{ '<header name>': boolean }`, over
 * `base`: a header left out keeps its switch. Names are the ones `names` sends (the draft's with `enableDraftSpec`).
 */
export function checkHeaderSwitches (input: Record<string, unknown>, names: FieldNames, base: HeaderSwitches, where: string): HeaderSwitches {
  const switches = (option: 'addHeadersOnExceeding' | 'addHeaders', current: Readonly<Record<string, boolean>>): Record<string, boolean> => {
    const value = input[option]
    if (value === undefined) return current
    if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(`${where}${option}`, value, "an object such as { 'x-ratelimit-reset': false }")
    const fields = option === 'addHeaders' ? { ...names, retryAfter: 'retry-after' } : names
    const byName = new Map(Object.entries(fields).map(([field, name]) => [name, field]))
    checkKeys(value, new Set(byName.keys()), `${where}${option}.`)
    const out = { ...current }
    for (const [name, on] of Object.entries(value)) out[byName.get(name)!] = checkBoolean(on, `${where}${option}.${name}`)
    return out
  }
  return Object.freeze({
    allowed: Object.freeze(switches('addHeadersOnExceeding', base.allowed)) as HeaderSwitches['allowed'],
    refused: Object.freeze(switches('addHeaders', base.refused)) as HeaderSwitches['refused']
  })
}

/**
 * `ban: N`: `@fastify/rate-limit` answers 403 from the (N + 1)th denial within a window until that window
 * ends. Here: a ban of one window (the budget's longest) from the (N + 1)th denial, on every route.
 */
export function banPerWindow (denials: number, limits: readonly ResolvedLimit[], name: string): BanPolicy {
  const windows = limits.map(limit => limit.windowMs)
  if (!windows.every(window => typeof window === 'number')) {
    fail(name, denials, '{ threshold, duration } when timeWindow is a function (ban: N bans for one window, which must be known at register)')
  }
  return Object.freeze({ threshold: denials + 1, ladder: Object.freeze([Math.max(...windows as number[])]), forgetMs: 0 })
}

/** `ban` given as a number of denials: a non-negative integer, or the coded error. */
export function checkDenials (value: unknown, name: string): number {
  if (!Number.isSafeInteger(value) || (value as number) < 0) fail(name, value, 'false, { threshold, duration }, or a number of denials (an integer, 0 or more)')
  return value as number
}

/** What to use instead of `@fastify/rate-limit`'s options that change how a window counts. */
const INSTEAD: Readonly<Record<string, string>> = Object.freeze({
  continueExceeding: 'a client that keeps sending while limited is banned instead: ban: { threshold, duration }',
  exponentialBackoff: 'bans that grow for repeat offenders: ban: { threshold, duration, escalate: 2 }'
})

/** The options this plugin rejects rather than ignore; `false` (their default) is accepted. */
export function rejectUnsupported (input: Record<string, unknown>, where: string): void {
  for (const [option, instead] of Object.entries(INSTEAD)) {
    const value = input[option]
    if (value === undefined || value === false) continue
    throw new InvalidOptionError(`${where}${option}`, `not supported (the window here is exact, it never restarts); use ${instead}`)
  }
}
