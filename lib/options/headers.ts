import { checkBoolean, checkKeys, fail } from './checks.js'
import type { FieldNames, HeaderSwitches } from '../types.js'
import type { Warn } from './compat.js'

// The header options: which names the binding limit's three fields are sent under (`enableDraftSpec`), the
// IETF fields (`standardHeaders`), and `@fastify/rate-limit`'s per-header switches (`addHeaders`,
// `addHeadersOnExceeding`). The headers themselves are written by lib/headers.ts.

export const PLAIN_NAMES: FieldNames = Object.freeze({
  limit: 'x-ratelimit-limit', remaining: 'x-ratelimit-remaining', reset: 'x-ratelimit-reset'
})
export const DRAFT_NAMES: FieldNames = Object.freeze({
  limit: 'ratelimit-limit', remaining: 'ratelimit-remaining', reset: 'ratelimit-reset'
})

export const ALL_HEADERS: HeaderSwitches = Object.freeze({
  allowed: Object.freeze({ limit: true, remaining: true, reset: true }),
  refused: Object.freeze({ limit: true, remaining: true, reset: true, retryAfter: true })
})

/** Every name `@fastify/rate-limit`'s switches take (its types allow both styles'), whichever this plugin sends. */
const THEIR_NAMES = [...Object.values(PLAIN_NAMES), ...Object.values(DRAFT_NAMES), 'retry-after']

/** `standardHeaders`: whether the IETF fields are sent (`'draft-10'`) or not (`false`). */
export function checkStandardHeaders (value: unknown, name: string): boolean {
  if (value !== false && value !== 'draft-10') fail(name, value, "false or 'draft-10'")
  return value === 'draft-10'
}

/** `addHeaders` or `addHeadersOnExceeding` alone: an object of switches, each read by resolveHeaderSwitches. */
export function checkSwitches (value: unknown, name: string): Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    fail(name, value, "an object such as { 'x-ratelimit-reset': false }")
  }
  return value as Readonly<Record<string, unknown>>
}

/** The switches given (checkSwitches): on refusals, and on allowed requests. */
export interface GivenSwitches {
  readonly addHeaders?: Readonly<Record<string, unknown>>
  readonly addHeadersOnExceeding?: Readonly<Record<string, unknown>>
}

/**
 * `addHeadersOnExceeding` (allowed requests) and `addHeaders` (refusals), `{ '<header name>': boolean }`. The
 * plugin's are over every header on (`base`): a header left out is sent. A route's or a limiter's (`replace`)
 * take the place of the plugin's, as `@fastify/rate-limit` merges them: a header left out is not sent. Names are
 * the ones `names` sends (the draft's with `enableDraftSpec`); a name of theirs for a header not sent there (the
 * other style's, `retry-after` on an allowed request) switches nothing, as theirs, and a warning says so.
 */
export function resolveHeaderSwitches (
  given: GivenSwitches, names: FieldNames, base: HeaderSwitches, where: string, replace: boolean, warn: Warn
): HeaderSwitches {
  const switches = (option: keyof GivenSwitches, current: Readonly<Record<string, boolean>>): Record<string, boolean> => {
    const value = given[option]
    if (value === undefined) return current
    const fields = option === 'addHeaders' ? { ...names, retryAfter: 'retry-after' } : names
    const byName = new Map(Object.entries(fields).map(([field, name]) => [name, field]))
    checkKeys(value, new Set([...byName.keys(), ...THEIR_NAMES]), `${where}${option}.`)
    const out = replace ? Object.fromEntries(Object.keys(current).map(field => [field, false])) : { ...current }
    for (const [name, on] of Object.entries(value)) {
      const sent = checkBoolean(on, `${where}${option}.${name}`)
      const field = byName.get(name)
      if (field !== undefined) out[field] = sent
      else {
        warn('OPTION_UNUSED',
          `rate-guard: ${where}${option}.${name} is not used: no such header is sent there (as with @fastify/rate-limit)`)
      }
    }
    return out
  }
  return Object.freeze({
    allowed: Object.freeze(switches('addHeadersOnExceeding', base.allowed)) as HeaderSwitches['allowed'],
    refused: Object.freeze(switches('addHeaders', base.refused)) as HeaderSwitches['refused']
  })
}
