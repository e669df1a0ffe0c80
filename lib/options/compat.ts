import { show } from './checks.js'
import { LONGEST, pastLongest } from '../duration.js'
import type { CountWhenFunction, FailMode, OverLimit } from '../types.js'
import type { Warn } from '../warnings.js'

// `@fastify/rate-limit`'s options that this plugin spells another way, mapped once at register: `skipOnError`,
// `continueExceeding` and `exponentialBackoff` (and express-rate-limit's `skipSuccessfulRequests` /
// `skipFailedRequests`), and the values theirs replaces by a default rather than refuse (said aloud here).
// Their `ban: N` is bans.ts's; their header switches and names headers.ts's.

/**
 * `continueExceeding` (a denied request is counted, so a client that keeps sending stays limited) and
 * `exponentialBackoff` (each request over the limit doubles the wait), each checked alone, over the base's;
 * `continueExceeding` wins when both are on, as in theirs.
 */
export function resolveOverLimit (given: { continueExceeding?: boolean, exponentialBackoff?: boolean }, base: OverLimit): OverLimit {
  const { continueExceeding, exponentialBackoff } = given
  if (continueExceeding === undefined && exponentialBackoff === undefined) return base
  const continues = continueExceeding ?? base === 'continue'
  const backs = exponentialBackoff ?? base === 'backoff'
  return continues ? 'continue' : backs ? 'backoff' : undefined
}

/** `@fastify/rate-limit`'s defaults for the values it replaces rather than refuses. */
export const THEIR_DEFAULTS = Object.freeze({ max: 1000, timeWindow: 60_000, ipv6Subnet: 64 })

export type { Warn }

/** `@fastify/rate-limit`'s options that it reads as absent when they are null (a `groupId` it refuses, as here). */
const THEIR_OPTIONS = [
  'global', 'max', 'timeWindow', 'hook', 'allowList', 'ban', 'onBanReach', 'onExceeding', 'onExceeded', 'continueExceeding',
  'exponentialBackoff', 'ipv6Subnet', 'keyGenerator', 'errorResponseBuilder', 'skipOnError', 'enableDraftSpec', 'addHeaders',
  'addHeadersOnExceeding', 'store', 'nameSpace', 'cache'
]

/**
 * The options as `@fastify/rate-limit` reads them where it replaces a value instead of refusing it: a `max`
 * that is NaN, infinite or negative, a `timeWindow` that is NaN, infinite or not positive (below 1 ms theirs
 * takes a window of 0 ms, which limits nothing: its default here, said so), an `ipv6Subnet`
 * outside 0–128 get its default, and a fraction its integer part; a `timeWindow` past the longest duration
 * (2^53 - 1024 ms) gets the longest; a `ban` below 0 or not finite is no ban, and a fraction its integer part;
 * one of its options given as null is not given. Each replacement is said aloud, but `ban: -1`, their
 * README's way to say no ban. Any other invalid value (a string `max`, an unreadable duration) stays a coded
 * error.
 */
export function theirFallbacks (input: Record<string, unknown>, where: string, warn: Warn): Record<string, unknown> {
  const out = { ...input }
  const replace = (option: string, value: unknown, shown = String(value), theirs = 'as @fastify/rate-limit does'): void => {
    out[option] = value
    warn('VALUE_REPLACED', `rate-guard: ${where}${option} ${show(input[option])} is not valid; using ${shown}, ${theirs}`)
  }
  for (const option of THEIR_OPTIONS) if (input[option] === null) replace(option, undefined, 'its default')
  const { max, timeWindow, ipv6Subnet, ban } = out
  if (typeof max === 'number' && !Number.isInteger(max)) {
    replace('max', Number.isFinite(max) && max >= 0 ? Math.trunc(max) : THEIR_DEFAULTS.max)
  } else if (typeof max === 'number' && max < 0) replace('max', THEIR_DEFAULTS.max)
  if (typeof timeWindow === 'number' && !(Number.isInteger(timeWindow) && timeWindow > 0)) {
    if (timeWindow >= 0 && timeWindow < 1) {
      replace('timeWindow', THEIR_DEFAULTS.timeWindow, undefined,
        '@fastify/rate-limit\'s default (it would count in a window of 0 ms, which limits nothing)')
    } else replace('timeWindow', Number.isFinite(timeWindow) && timeWindow >= 1 ? Math.trunc(timeWindow) : THEIR_DEFAULTS.timeWindow)
  }
  // Theirs takes any longer window, and stops its waits at 2^53 - 1 ms; here the window stops at the longest.
  if (pastLongest(out.timeWindow)) {
    out.timeWindow = LONGEST
    warn('VALUE_REPLACED', `rate-guard: ${where}timeWindow ${show(timeWindow)} is longer than the longest, ` +
      `2^53 - 1024 ms (about 285,421 years); using ${LONGEST}`)
  }
  if (ipv6Subnet !== undefined && !(Number.isInteger(ipv6Subnet) && (ipv6Subnet as number) >= 0 && (ipv6Subnet as number) <= 128)) {
    replace('ipv6Subnet',
      typeof ipv6Subnet === 'number' && ipv6Subnet >= 0 && ipv6Subnet <= 128 ? Math.trunc(ipv6Subnet) : THEIR_DEFAULTS.ipv6Subnet)
  }
  if (ban === -1) out.ban = false
  else if (typeof ban === 'number' && !(Number.isSafeInteger(ban) && ban >= 0)) {
    if (Number.isFinite(ban) && ban >= 0) replace('ban', Math.trunc(ban))
    else replace('ban', false, 'no ban')
  }
  return out
}

/**
 * A number a limit function gave, read as `@fastify/rate-limit` uses it: a numeric string as its number, a
 * fraction cut to its integer part (theirs counts to 2 with 2.7). Anything else is left for the check to refuse.
 */
export function asTheirs (value: unknown): unknown {
  const number = typeof value === 'string' && /^\s*\d+(\.\d*)?\s*$/.test(value) ? Number(value) : value
  return typeof number === 'number' && Number.isFinite(number) && number >= 0 ? Math.trunc(number) : number
}

/**
 * `failMode`, or `@fastify/rate-limit`'s `skipOnError` (true: open, false: closed), each checked alone; neither
 * given: the base's.
 */
export function resolveFailMode (given: { failMode?: FailMode, skipOnError?: boolean }, base: FailMode): FailMode {
  const { failMode, skipOnError } = given
  if (skipOnError === undefined) return failMode ?? base
  return skipOnError ? 'open' : 'closed'
}

/**
 * Whether a response counts: `countWhen` as given, or express-rate-limit's `skipSuccessfulRequests` (a status
 * below 400 is a success) / `skipFailedRequests`, each checked alone (not both ways at once: table.ts). None given: the base's.
 */
export function resolveCountWhen (
  given: { countWhen?: CountWhenFunction, skipSuccessfulRequests?: boolean, skipFailedRequests?: boolean },
  base: CountWhenFunction | undefined
): CountWhenFunction | undefined {
  const { countWhen, skipSuccessfulRequests: skipSuccess, skipFailedRequests: skipFailure } = given
  if (countWhen !== undefined) return countWhen
  if (skipSuccess === undefined && skipFailure === undefined) return base
  if (skipSuccess !== true && skipFailure !== true) return undefined
  return (_request, reply) => reply.statusCode < 400 ? skipSuccess !== true : skipFailure !== true
}
