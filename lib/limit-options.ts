import type { Algorithm, Limit } from './algorithms/index.js'
import { checkDuration, checkKeys, checkMax, fail } from './check.js'
import type { BanPolicy, CostFunction, MaxFunction, ResolvedLimit, TimeWindowFunction } from './types.js'

/** Limits and bans as options: a limit (or several), a shared budget, an override, a ban policy, a policy's name. */

/** A ban's defaults: the cap on a growing ban's length, and how long a ban counts toward the next one's. */
export const BAN_DEFAULTS = Object.freeze({ maxDuration: 24 * 3600_000, forget: 24 * 3600_000 })

/** Steps a factor ladder may take before it reaches its cap: 2^40 ms outlasts any cap worth setting. */
const MAX_LADDER = 64

/** A request's cost: a positive integer, or a function of the request (its value is checked per request). */
export function checkCost (value: unknown, name: string): number | CostFunction {
  if (typeof value === 'function') return value as CostFunction
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) fail(name, value, 'a positive integer, or a function (request, key) => a positive integer')
  return value
}

export function checkBan (value: unknown, name: string): BanPolicy | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, 'false or { threshold, duration, escalate }')
  const ban = value as Record<string, unknown>
  checkKeys(ban, new Set(['threshold', 'duration', 'escalate', 'maxDuration', 'forget']), `${name}.`)
  const threshold = checkMax(ban.threshold, `${name}.threshold`)
  const forgetMs = ban.forget === undefined ? BAN_DEFAULTS.forget : checkDuration(ban.forget, `${name}.forget`)
  const { escalate } = ban
  let ladder: number[]
  if (Array.isArray(escalate)) {
    if (ban.duration !== undefined || ban.maxDuration !== undefined) {
      fail(`${name}.escalate`, escalate, 'a list of ban lengths without duration or maxDuration (the list holds them all)')
    }
    if (escalate.length === 0 || escalate.length > MAX_LADDER) fail(`${name}.escalate`, escalate, `a list of 1 to ${MAX_LADDER} ban lengths`)
    ladder = escalate.map((step: unknown, i) => checkDuration(step, `${name}.escalate[${i}]`))
  } else {
    ladder = [checkDuration(ban.duration, `${name}.duration`)]
    if (escalate !== undefined) {
      if (typeof escalate !== 'number' || !Number.isFinite(escalate) || escalate <= 1) {
        fail(`${name}.escalate`, escalate, 'a factor above 1, or a list of ban lengths')
      }
      const cap = ban.maxDuration === undefined ? Math.max(BAN_DEFAULTS.maxDuration, ladder[0]!) : checkDuration(ban.maxDuration, `${name}.maxDuration`)
      if (cap < ladder[0]!) fail(`${name}.maxDuration`, ban.maxDuration, 'at least duration')
      while (ladder[ladder.length - 1]! < cap && ladder.length < MAX_LADDER) {
        ladder.push(Math.min(cap, Math.ceil(ladder[ladder.length - 1]! * escalate)))
      }
    } else if (ban.maxDuration !== undefined) {
      fail(`${name}.maxDuration`, ban.maxDuration, 'no cap without escalate')
    }
  }
  return Object.freeze({ threshold, ladder: Object.freeze(ladder), forgetMs })
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
  limits.forEach(({ max, windowMs, burst }, i) => {
    if (typeof max === 'number' && typeof windowMs === 'number') {
      checkLimit(max, windowMs, burst ?? max, algorithm, limits.length === 1 ? `${name}max` : `${name}limits[${i}].max`)
    }
  })
}

export function checkOneLimit (input: Record<string, unknown>, base: ResolvedLimit | undefined, name: string, statics: boolean): ResolvedLimit {
  const { max, timeWindow, burst, name: policy } = input
  const limit: ResolvedLimit = Object.freeze({
    // Only a route's one limit leaves a part out, and then `base` is the plugin's one limit (resolveRoute).
    // A client's limit may be 0, as `@fastify/rate-limit` takes it (see `refusedOutright`); a shared
    // budget's or an override's, kept in Redis for the script, may not.
    max: max === undefined
      ? (base as ResolvedLimit).max
      : typeof max === 'function' && !statics ? max as MaxFunction : checkMax(max, `${name}max`, statics ? 1 : 0),
    windowMs: timeWindow === undefined
      ? (base as ResolvedLimit).windowMs
      : typeof timeWindow === 'function' && !statics ? timeWindow as TimeWindowFunction : checkDuration(timeWindow, `${name}timeWindow`),
    burst: burst === undefined ? base?.burst ?? null : checkMax(burst, `${name}burst`),
    name: policy === undefined ? base?.name : checkPolicyName(policy, `${name}name`)
  })
  return limit
}

export function checkLimitList (value: unknown, name: string, statics: boolean): readonly ResolvedLimit[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > 16) fail(name, value, 'a list of 1 to 16 { max, timeWindow } limits')
  const limits = value.map((item: unknown, i) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) fail(`${name}[${i}]`, item, 'an object { max, timeWindow }')
    checkKeys(item, LIMIT_KEYS, `${name}[${i}].`)
    const limit = item as Record<string, unknown>
    if (limit.max === undefined || limit.timeWindow === undefined) fail(`${name}[${i}]`, item, 'both max and timeWindow')
    return checkOneLimit(limit, undefined, `${name}[${i}].`, statics)
  })
  const names = limits.map(limit => limit.name).filter(n => n !== undefined)
  if (new Set(names).size !== names.length) fail(name, value, 'limits with different names')
  return Object.freeze(limits)
}

const LIMIT_KEYS = new Set(['max', 'timeWindow', 'burst', 'name'])

export function checkShared (value: unknown, name: string): readonly ResolvedLimit[] | null {
  return value === false ? null : checkStaticLimits(value, name)
}

/** `{ max, timeWindow, burst? }` or `{ limits: [...] }` with numbers and durations only (a shared budget, an override). */
export function checkStaticLimits (value: unknown, name: string, ignore: readonly string[] = []): readonly ResolvedLimit[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, '{ max, timeWindow } or { limits }')
  const shared = Object.fromEntries(Object.entries(value).filter(([key]) => !ignore.includes(key)))
  if (shared.limits !== undefined) {
    checkKeys(shared, new Set(['limits']), `${name}.`)
    return checkLimitList(shared.limits, `${name}.limits`, true)
  }
  checkKeys(shared, LIMIT_KEYS, `${name}.`)
  if (shared.max === undefined || shared.timeWindow === undefined) fail(name, value, 'both max and timeWindow, or limits')
  return Object.freeze([checkOneLimit(shared, undefined, `${name}.`, true)])
}

// Printable ASCII without quotes or backslashes: a group id or a limit's name becomes an IETF policy name in a header.
const POLICY_NAME = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/

export function checkPolicyName (value: unknown, name: string): string {
  if (typeof value !== 'string' || !POLICY_NAME.test(value)) {
    fail(name, value, 'a string of 1 to 64 printable characters without quotes, backslashes or spaces')
  }
  return value
}
