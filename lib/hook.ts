import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Limit } from './algorithms/index.js'
import { formatDuration } from './duration.js'
import { BannedError, InvalidOptionError, TooManyRequestsError, UnavailableError } from './errors.js'
import { retryAfterSeconds, writeHeaders } from './headers.js'
import type { HeaderStyle } from './headers.js'
import { identityKeys, sharedKeys } from './keys.js'
import type { Limiter, Verdict } from './limiter.js'
import { checkDuration, checkLimit, checkMax } from './options.js'
import type { ResolvedLimit, ResolvedRoute } from './options.js'
import type { DecideInput } from './stores/store.js'

/**
 * The request hook: key → allow list → limits → one decision (then the route's shared budget, when it has
 * one) → headers, and a thrown error on refusal.
 */

export interface RouteBudget {
  readonly route: ResolvedRoute
  /** Which budget: the plugin-wide one, a route's own, or a group's. */
  readonly scope: string
  readonly headers: HeaderStyle
  /** The headers of the budget shared by the route's clients, when it has one. */
  readonly sharedHeaders: HeaderStyle
}

/** The header that says a request went through because Redis could not decide (`failMode: 'open'`). */
export const UNENFORCED_HEADER = 'x-ratelimit-enforced'

export function createHook (limiter: Limiter, nameSpace: string, timeout: number, budget: RouteBudget) {
  const { route, scope } = budget
  const { keyGenerator, allowList, ban, algorithm } = route
  const fixedLimits = staticLimits(route.limits)
  const shared: DecideInput | null = route.shared === null
    ? null
    : { keys: sharedKeys(nameSpace, scope, algorithm), limits: staticLimits(route.shared)!, ban: null, peek: false, algorithm }
  // 503 answers say when to try again: one deadline from now, in whole seconds. They are sent, not thrown:
  // Fastify logs every thrown 5xx as an error, which during an outage would be one log line per request.
  const unavailableAfter = retryAfterSeconds(timeout)
  const unavailable = new UnavailableError(formatDuration(unavailableAfter * 1000))
  const unavailableBody = JSON.stringify({ statusCode: 503, code: unavailable.code, error: 'Service Unavailable', message: unavailable.message })

  return async function rateGuard (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const key = checkKey(await keyGenerator(request))
    if (allowList !== null && (typeof allowList === 'function' ? await allowList(request, key) : allowList.has(key))) return

    const limits = fixedLimits ?? await limitsOf(route.limits, request, key)
    const input: DecideInput = { keys: identityKeys(nameSpace, scope, key, algorithm), limits, ban, peek: false, algorithm }
    let verdict: Verdict = await limiter.decide(input, request.log)
    let headers = budget.headers

    // The shared budget is asked only for a request the client's own allowed; when it refuses, the client's
    // count is given back, so a refused request costs neither budget.
    if (verdict.status === 'allowed' && shared !== null) {
      const own = verdict
      const whole = await limiter.decide(shared, request.log)
      if (whole.status === 'limited' || whole.status === 'unavailable') {
        limiter.undo({ keys: input.keys, limits, algorithm, member: own.member, at: own.at }, request.log)
        verdict = whole
        headers = budget.sharedHeaders
      }
    }

    switch (verdict.status) {
      case 'allowed':
        writeHeaders(reply, headers, verdict)
        return
      case 'unenforced':
        reply.header(UNENFORCED_HEADER, 'false')
        return
      case 'unavailable':
        return reply.code(503).header('retry-after', unavailableAfter).type('application/json; charset=utf-8').send(unavailableBody)
    }

    writeHeaders(reply, headers, verdict)
    const banned = verdict.status === 'banned'
    route.onExceeded?.(request, key)
    if (verdict.banStarted) route.onBanReach?.(request, key, { durationMs: verdict.retryMs, offence: verdict.offence })

    const waitMs = retryAfterSeconds(verdict.retryMs) * 1000
    const after = formatDuration(waitMs)
    if (route.errorResponseBuilder === undefined) throw banned ? new BannedError(after) : new TooManyRequestsError(after)
    const statusCode = banned ? 403 : 429
    const error: unknown = route.errorResponseBuilder(request, { statusCode, ban: banned, max: verdict.limit, ttl: verdict.retryMs, after })
    if (typeof error !== 'object' || error === null) {
      throw new InvalidOptionError('errorResponseBuilder', `expected it to return an object, got ${error === null ? 'null' : typeof error}`)
    }
    (error as { statusCode?: number }).statusCode ??= statusCode
    throw error
  }
}

/** The limits once, at register, when none is a function of the request. */
export function staticLimits (limits: readonly ResolvedLimit[]): readonly Limit[] | null {
  if (!limits.every(limit => typeof limit.max === 'number' && typeof limit.windowMs === 'number')) return null
  return Object.freeze(limits.map(({ max, windowMs, burst }) => checkLimit(max as number, windowMs as number, burst ?? max as number, 'max')))
}

/** The limits of one request, when `max` or `timeWindow` is a function of it. */
async function limitsOf (limits: readonly ResolvedLimit[], request: FastifyRequest, key: string): Promise<Limit[]> {
  return await Promise.all(limits.map(async ({ max, windowMs, burst }) => {
    const m = typeof max === 'function' ? checkMax(await max(request, key)) : max
    const w = typeof windowMs === 'function' ? checkDuration(await windowMs(request, key), 'timeWindow') : windowMs
    return checkLimit(m, w, burst ?? m, 'max')
  }))
}

function checkKey (key: unknown): string {
  if (typeof key === 'string') return key
  if (typeof key === 'number' && Number.isFinite(key)) return String(key)
  throw new InvalidOptionError('keyGenerator', `expected it to return a string, got ${typeof key}`)
}
