import type { FastifyRequest } from 'fastify'
import type { Algorithm, Limit } from '../algorithms/index.js'
import { andThen } from '../awaitable.js'
import type { Calendar } from '../calendar.js'
import type { Callbacks } from '../callbacks.js'
import { checkDuration, checkMax } from '../options/checks.js'
import { THEIR_DEFAULTS, asTheirs } from '../options/compat.js'
import { checkLimit } from '../options/limits.js'
import type { ResolvedLimit } from '../options/resolved.js'
import type { CostFunction } from '../types.js'

// A request's limits and cost when the route computes them (`max`, `timeWindow`, `cost` as functions of the
// request). One that fails (throws, rejects, misses `callbackTimeout`, gives no valid value) is replaced, never
// skipped: what it reads is often the client's to break (a cost of `request.body.items.length` and a body of
// `{}`, or any body before it is parsed), and a failure that let `failMode` decide let every such request
// through with `'open'` or `'local'`. So a cost falls back to 1, the least a counted request costs, and a
// limit's `max` or `timeWindow` to a static value (see `fallbacksOf`); the store decides with them as with any
// other, whatever the `failMode`, which is Redis's. The app's log says what was used (lib/callbacks.ts).

/** What a failing cost function is replaced by: the least a counted request costs. */
const FALLBACK_COST = 1

/** The static values one limit's functions fall back to, and how the log says each. */
export interface Fallback {
  readonly max: number
  readonly windowMs: number
  /** What the log says a failing `max` function is replaced by. */
  readonly maxUsed: string
  /** What the log says a failing `timeWindow` function is replaced by. */
  readonly windowUsed: string
}

/**
 * What each of a route's limits falls back to when its `max` or `timeWindow` function fails: the limit's
 * other part stays as it is (or as its function gives it), and the failing part is the plugin's, when the
 * plugin has one limit and that part of it is static, or else `@fastify/rate-limit`'s default (1000 a minute).
 * Never no limit. Made once per budget, at register.
 */
export function fallbacksOf (limits: readonly ResolvedLimit[], plugin: readonly ResolvedLimit[]): readonly Fallback[] {
  const base = plugin.length === 1 ? plugin[0]! : undefined
  return Object.freeze(limits.map(({ max, windowMs }) => {
    const fallbackMax = typeof max === 'number' ? max : typeof base?.max === 'number' ? base.max : THEIR_DEFAULTS.max
    const fallbackWindow = typeof windowMs === 'number'
      ? windowMs
      : typeof base?.windowMs === 'number' ? base.windowMs : THEIR_DEFAULTS.timeWindow
    const per = (ms: number): string => `${ms / 1000} s`
    return Object.freeze({
      max: fallbackMax,
      windowMs: fallbackWindow,
      maxUsed: `limited at ${fallbackMax} per ` +
        (typeof windowMs === 'number' ? per(windowMs) : `the timeWindow function's window (${per(fallbackWindow)} when it fails)`),
      windowUsed: 'limited at ' +
        `${typeof max === 'number' ? max : `the max function's max (${fallbackMax} when it fails)`} per ${per(fallbackWindow)}`
    })
  }))
}

/**
 * The limits of one request, when `max` or `timeWindow` is a function of it; a function that fails gives its
 * limit's fallback (`fallbacks`, from `fallbacksOf` over the same limits).
 */
export async function limitsOf (
  limits: readonly ResolvedLimit[], fallbacks: readonly Fallback[], algorithm: Algorithm, request: FastifyRequest, key: string,
  callbacks: Callbacks
): Promise<Limit[]> {
  const out: Limit[] = []
  for (const [i, { max, windowMs, burst, calendar }] of limits.entries()) {
    const fallback = fallbacks[i]!
    const m = typeof max === 'function'
      ? await callbacks.run('max', () => andThen(max(request, key), value => checkMax(asTheirs(value), 'max', 0)), () => fallback.max,
        request.log, fallback.maxUsed)
      : max
    if (calendar !== undefined) {
      out.push(calendarLimit(m, calendar))
      continue
    }
    const w = typeof windowMs === 'function'
      ? await callbacks.run('timeWindow', () => andThen(windowMs(request, key), value => checkDuration(asTheirs(value), 'timeWindow')),
        () => fallback.windowMs, request.log, fallback.windowUsed)
      : windowMs
    out.push(checkLimit(m, w, burst ?? m, algorithm, 'max'))
  }
  return out
}

/**
 * A request's cost, from the route's function; `FALLBACK_COST` when it fails (throws, rejects, misses the deadline or
 * gives no positive integer).
 */
export function costOf (cost: CostFunction, request: FastifyRequest, key: string, callbacks: Callbacks): number | PromiseLike<number> {
  return callbacks.run('cost', () => andThen(cost(request, key), value => checkMax(value, 'cost')), () => FALLBACK_COST, request.log,
    `counted at ${FALLBACK_COST}`)
}

/**
 * A calendar quota of `max` as a request is decided now: the periods around the app's clock (the one before, the
 * current one and the next), which the store chooses from on its own clock; its window, the current one's length.
 */
export function calendarLimit (max: number, calendar: Calendar, at = Date.now()): Limit {
  const { previous, current, next } = calendar.around(at)
  const period = { previous: previous.start, start: current.start, end: current.end, next: next.end }
  return { max, windowMs: current.end - current.start, burst: max, period }
}

/**
 * The limits once, at onRoute, when none is a function of the request (checked by checkSizes). A calendar
 * quota's are the periods of one instant: with `at` (a peek's now), else none (each request works them out).
 */
export function staticLimits (limits: readonly ResolvedLimit[], at?: number): readonly Limit[] | null {
  const fixed = (limit: ResolvedLimit): boolean =>
    typeof limit.max === 'number' && typeof limit.windowMs === 'number' && (limit.calendar === undefined || at !== undefined)
  if (!limits.every(fixed)) return null
  return Object.freeze(limits.map(({ max, windowMs, burst, calendar }) => calendar === undefined
    ? { max: max as number, windowMs: windowMs as number, burst: burst ?? max as number }
    : calendarLimit(max as number, calendar, at)))
}
