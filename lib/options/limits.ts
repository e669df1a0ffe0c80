import type { Algorithm, Limit } from '../algorithms/index.js'
import { Calendar, PERS, isTimeZone } from '../calendar.js'
import type { Per } from '../calendar.js'
import { checkDuration, checkKeys, checkMax, checkOneOf, fail } from './checks.js'
import type { CostFunction, MaxFunction, TimeWindowFunction } from '../types.js'
import type { ResolvedLimit, ResolvedRoute } from './resolved.js'

// Limits as options: a limit (or several, some watched), a shared budget, an override, a policy's name, a
// request's cost; a route's limits over the plugin's, and every limit against the algorithm that counts it.

/** A request's cost: a positive integer, or a function of the request (its value is checked per request). */
export function checkCost (value: unknown, name: string): number | CostFunction {
  if (typeof value === 'function') return value as CostFunction
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    fail(name, value, 'a positive integer, or a function (request, key) => a positive integer')
  }
  return value
}

// The largest product of a limit's size and window (or burst and window) the algorithms that multiply count
// exactly: Lua numbers are doubles, the token bucket counts in ticks of 1/max ms, and the sliding window weighs
// the previous window's count by milliseconds. The log and the fixed window only add and compare times, so
// their bound is the duration's own: a window up to the longest, 2^53 - 1024 ms (lib/duration.ts).
const MAX_PRODUCT = 2 ** 50
const MULTIPLIES: ReadonlySet<Algorithm> = new Set(['token-bucket', 'sliding-window'])

/** A limit's values as one decision takes them, or a coded error (the product bound keeps the arithmetic exact). */
export function checkLimit (max: number, windowMs: number, burst: number, algorithm: Algorithm, name: string): Limit {
  if (MULTIPLIES.has(algorithm) && Math.max(max, burst) * windowMs > MAX_PRODUCT) {
    fail(name, `${max} per ${windowMs} ms`, `max (and burst) × timeWindow in ms up to 2^50 with algorithm: '${algorithm}'`)
  }
  return { max, windowMs, burst }
}

/**
 * The limits known at register, against the algorithm that counts them (checkLimit): `name` is where they were
 * given (`''`, `'shared.'`, `'config.rateLimit.'`), and a limit is named `max`, or `limits[i].max` among several.
 */
export function checkSizes (limits: readonly ResolvedLimit[], algorithm: Algorithm, name: string): void {
  limits.forEach(({ max, windowMs, burst, calendar }, i) => {
    // A calendar quota is a count, never multiplied: its algorithm does not count it.
    if (typeof max === 'number' && typeof windowMs === 'number' && calendar === undefined) {
      checkLimit(max, windowMs, burst ?? max, algorithm, limits.length === 1 ? `${name}max` : `${name}limits[${i}].max`)
    }
  })
}

/**
 * A limit's `max`: a function of the request (a client's limit), or an integer. A client's limit may be 0, as
 * `@fastify/rate-limit` takes it (see `refusedOutright`); a shared budget's or an override's (`statics`), kept
 * in Redis for the script, may not.
 */
export function checkLimitMax (value: unknown, name: string, statics = false): number | MaxFunction {
  return typeof value === 'function' && !statics ? value as MaxFunction : checkMax(value, name, statics ? 1 : 0)
}

/** A limit's `timeWindow`: a function of the request (a client's limit), or a duration. */
export function checkLimitWindow (value: unknown, name: string, statics = false): number | TimeWindowFunction {
  return typeof value === 'function' && !statics ? value as TimeWindowFunction : checkDuration(value, name)
}

// A calendar period's usual length, which a limit's options see (its fallbacks, a ban per window); each request
// is given its period's own (lib/request/computed.ts).
const USUAL: Readonly<Record<Per, number>> = Object.freeze({ day: 86_400_000, week: 604_800_000, month: 2_678_400_000 })

/**
 * A calendar quota of a route's or the plugin's limits (or an override's: `statics`): `max` units per `per` in
 * `timeZone` (UTC unless said).
 */
function checkCalendarLimit (input: Record<string, unknown>, name: string, statics: boolean): ResolvedLimit {
  const { max, per, timeZone = 'UTC', burst, name: policy } = input
  if (input.timeWindow !== undefined) fail(`${name}per`, per, 'per (a calendar period) or timeWindow, not both')
  if (burst !== undefined) fail(`${name}burst`, burst, 'no burst on a calendar quota (per): it counts up to its max')
  const period = checkOneOf(per, `${name}per`, PERS)
  if (!isTimeZone(timeZone)) fail(`${name}timeZone`, timeZone, "an IANA time zone this Node knows, such as 'America/New_York', or 'UTC'")
  return Object.freeze({
    max: checkLimitMax(max, `${name}max`, statics),
    windowMs: USUAL[period],
    burst: null,
    name: policy === undefined ? undefined : checkPolicyName(policy, `${name}name`),
    calendar: new Calendar(period, timeZone)
  })
}

/**
 * One limit of a list, or a shared budget's or an override's (`statics`): its max and window given (the callers
 * see to it). A calendar quota only where `calendars` (a route's, the plugin's, an override's).
 */
function checkOneLimit (input: Record<string, unknown>, name: string, statics: boolean, calendars: boolean): ResolvedLimit {
  const { max, timeWindow, burst, name: policy } = input
  if (input.timeZone !== undefined && input.per === undefined) {
    fail(`${name}timeZone`, input.timeZone, 'a time zone with per (a calendar period) only')
  }
  if (input.per !== undefined) {
    if (!calendars) {
      fail(`${name}per`, input.per, "a calendar period on a route's or the plugin's limits (or an override's), not a shared budget's")
    }
    return checkCalendarLimit(input, name, statics)
  }
  return Object.freeze({
    max: checkLimitMax(max, `${name}max`, statics),
    windowMs: checkLimitWindow(timeWindow, `${name}timeWindow`, statics),
    burst: burst === undefined ? null : checkMax(burst, `${name}burst`),
    name: policy === undefined ? undefined : checkPolicyName(policy, `${name}name`)
  })
}

function checkLimitList (value: unknown, name: string, statics: boolean, calendars: boolean): readonly ResolvedLimit[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > 16) fail(name, value, 'a list of 1 to 16 { max, timeWindow } limits')
  const limits = value.map((item: unknown, i) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) fail(`${name}[${i}]`, item, 'an object { max, timeWindow }')
    checkKeys(item, LIMIT_KEYS, `${name}[${i}].`)
    const limit = item as Record<string, unknown>
    if (limit.max === undefined || (limit.timeWindow === undefined && limit.per === undefined)) {
      fail(`${name}[${i}]`, item, calendars ? 'max, and timeWindow or per (a calendar period)' : 'both max and timeWindow')
    }
    return checkOneLimit(limit, `${name}[${i}].`, statics, calendars)
  })
  const names = limits.map(limit => limit.name).filter(n => n !== undefined)
  if (new Set(names).size !== names.length) fail(name, value, 'limits with different names')
  return Object.freeze(limits)
}

/** `limits` with the calendar quotas last: the stores count them after the algorithm's limits (lua/quota.lua). */
function calendarsLast (limits: readonly ResolvedLimit[]): readonly ResolvedLimit[] {
  return Object.freeze([...limits.filter(limit => limit.calendar === undefined), ...limits.filter(limit => limit.calendar !== undefined)])
}

// A calendar quota's too: checkOneLimit refuses one where it cannot go, saying so.
const LIMIT_KEYS = new Set(['max', 'timeWindow', 'burst', 'name', 'per', 'timeZone'])

export function checkShared (value: unknown, name: string): readonly ResolvedLimit[] | null {
  return value === false ? null : checkStaticLimits(value, name)
}

/**
 * `{ max, timeWindow, burst? }` or `{ limits: [...] }` with numbers and durations only (a shared budget, an
 * override); `calendars`: a calendar quota's max too (`{ max, per, timeZone }`, an override's).
 */
export function checkStaticLimits (
  value: unknown, name: string, ignore: readonly string[] = [], calendars = false
): readonly ResolvedLimit[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, '{ max, timeWindow } or { limits }')
  const shared = Object.fromEntries(Object.entries(value).filter(([key]) => !ignore.includes(key)))
  if (shared.limits !== undefined) {
    checkKeys(shared, new Set(['limits']), `${name}.`)
    return checkLimitList(shared.limits, `${name}.limits`, true, calendars)
  }
  checkKeys(shared, LIMIT_KEYS, `${name}.`)
  if (shared.max === undefined || (shared.timeWindow === undefined && (shared.per === undefined || !calendars))) {
    fail(name, value, 'both max and timeWindow, or limits')
  }
  return Object.freeze([checkOneLimit(shared, `${name}.`, true, calendars)])
}

// Printable ASCII without quotes or backslashes: a group id or a limit's name becomes an IETF policy name in a header.
const POLICY_NAME = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/

function checkPolicyName (value: unknown, name: string): string {
  if (typeof value !== 'string' || !POLICY_NAME.test(value)) {
    fail(name, value, 'a string of 1 to 64 printable characters without quotes, backslashes or spaces')
  }
  return value
}

/** A route's `limits`, each enforced or (`mode: 'shadow'`) watched. */
export type RouteLimits = Pick<ResolvedRoute, 'limits' | 'watched'>

/**
 * A route's `limits`, each enforced or (`mode: 'shadow'`) watched: the enforced ones, and the watched ones or
 * null. Watched limits are numbers (they are decided as a budget of their own, beside the route's), and at
 * least one limit is enforced (a route only watched is `mode: 'shadow'`).
 */
export function checkRouteLimits (value: unknown, name: string): RouteLimits {
  if (!Array.isArray(value)) return { limits: checkLimitList(value, name, false, true), watched: null }
  const modes = value.map((item: unknown, i) => {
    const mode = (item as { mode?: unknown } | null)?.mode
    return mode === undefined ? 'enforce' : checkOneOf(mode, `${name}[${i}].mode`, ['enforce', 'shadow'] as const)
  })
  const without = value.map((item: unknown) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return item
    const { mode: _mode, ...rest } = item as Record<string, unknown>
    return rest
  })
  const all = checkLimitList(without, name, false, true)
  if (!modes.includes('shadow')) return { limits: calendarsLast(all), watched: null }
  if (!modes.includes('enforce')) fail(name, value, "at least one limit enforced: a route only watched is mode: 'shadow'")
  const watched = all.filter((_, i) => modes[i] === 'shadow')
  if (watched.some(limit => typeof limit.max === 'function' || typeof limit.windowMs === 'function' || limit.calendar !== undefined)) {
    fail(name, value, 'watched limits (mode: \'shadow\') of numbers and durations, not functions or calendar periods')
  }
  return { limits: calendarsLast(all.filter((_, i) => modes[i] === 'enforce')), watched: Object.freeze(watched) }
}

/** A route's limit options, each checked alone: `limits`, or one limit in parts. */
export interface LimitParts {
  readonly max?: number | MaxFunction
  readonly timeWindow?: number | TimeWindowFunction
  readonly burst?: number
  readonly limits?: RouteLimits
}

/**
 * A route's limits over the base's: its `limits` as given, or one limit given in parts, which takes what it does
 * not give from the base's single limit (with several, it gives both max and timeWindow), or the base's.
 * `input` is the options as given, for the messages.
 */
export function resolveLimits (parts: LimitParts, input: Record<string, unknown>, base: ResolvedRoute, where: string): RouteLimits {
  const { max, timeWindow, burst, limits } = parts
  if (limits !== undefined) return limits
  const oneLimit = max !== undefined || timeWindow !== undefined || burst !== undefined
  if (!oneLimit) return { limits: base.limits, watched: base.watched }
  const from = base.limits.length === 1 ? base.limits[0] : undefined
  if (from === undefined && (max === undefined || timeWindow === undefined)) {
    const named = max === undefined ? 'timeWindow' : 'max'
    fail(`${where}${named}`, input[named], 'both max and timeWindow: the plugin has several limits to take the other from')
  }
  const limit: ResolvedLimit = Object.freeze({
    max: max ?? from!.max,
    windowMs: timeWindow ?? from!.windowMs,
    burst: burst ?? from?.burst ?? null,
    name: from?.name,
    // The plugin's calendar quota, its max changed: still counted in its periods.
    ...timeWindow === undefined && from?.calendar !== undefined ? { calendar: from.calendar } : {}
  })
  return { limits: Object.freeze([limit]), watched: base.watched }
}

/**
 * A budget's limits against its algorithm: a burst only with the token bucket, and each limit known at register
 * within the bound of the arithmetic (checkSizes).
 */
export function checkLimitsFit (route: Pick<ResolvedRoute, 'algorithm' | 'limits' | 'shared' | 'watched'>, where: string): void {
  const { algorithm, limits, shared, watched } = route
  if (algorithm !== 'token-bucket') {
    const burst = [...limits, ...shared ?? []].find(limit => limit.burst !== null)?.burst
    if (burst !== undefined) fail(`${where}burst`, burst, "no burst but with algorithm: 'token-bucket'")
  }
  checkSizes(limits, algorithm, where)
  if (shared !== null) checkSizes(shared, algorithm, `${where}shared.`)
  if (watched !== null) checkSizes(watched, algorithm, `${where}limits.`)
}
