import type { FastifyReply, FastifyRequest } from 'fastify'
import { formatDuration } from './duration.js'
import { BannedError, InvalidOptionError, TooManyRequestsError, UnavailableError } from './errors.js'
import { retryAfterSeconds, writeHeaders } from './headers.js'
import type { HeaderStyle } from './headers.js'
import { identityKeys } from './keys.js'
import type { Limiter } from './limiter.js'
import { checkDuration, checkMax } from './options.js'
import type { ResolvedRoute } from './options.js'

/** The request hook: key → allow list → limits → one decision → headers, and a thrown error on refusal. */

export interface RouteBudget {
  readonly route: ResolvedRoute
  /** Which budget: the plugin-wide one, a route's own, or a group's. */
  readonly scope: string
  readonly headers: HeaderStyle
}

/** The header that says a request went through because Redis could not decide (`failMode: 'open'`). */
export const UNENFORCED_HEADER = 'x-ratelimit-enforced'

export function createHook (limiter: Limiter, nameSpace: string, timeout: number, budget: RouteBudget) {
  const { route, scope, headers } = budget
  const { keyGenerator, allowList, ban, algorithm } = route
  const banThreshold = ban?.threshold ?? 0
  const banMs = ban?.durationMs ?? 0
  // 503 answers say when to try again: one deadline from now, in whole seconds. They are sent, not thrown:
  // Fastify logs every thrown 5xx as an error, which during an outage would be one log line per request.
  const unavailableAfter = retryAfterSeconds(timeout)
  const unavailable = new UnavailableError(formatDuration(unavailableAfter * 1000))
  const unavailableBody = JSON.stringify({ statusCode: 503, code: unavailable.code, error: 'Service Unavailable', message: unavailable.message })

  return async function rateGuard (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const key = checkKey(await keyGenerator(request))
    if (allowList !== null && (typeof allowList === 'function' ? await allowList(request, key) : allowList.has(key))) return

    const max = typeof route.max === 'function' ? checkMax(await route.max(request, key)) : route.max
    const windowMs = typeof route.windowMs === 'function' ? checkDuration(await route.windowMs(request, key), 'timeWindow') : route.windowMs

    const keys = identityKeys(nameSpace, scope, key, algorithm)
    const verdict = await limiter.decide({ keys, max, windowMs, banThreshold, banMs, peek: false, algorithm }, request.log)

    switch (verdict.status) {
      case 'allowed':
        writeHeaders(reply, headers, max, windowMs, verdict)
        return
      case 'unenforced':
        reply.header(UNENFORCED_HEADER, 'false')
        return
      case 'unavailable':
        return reply.code(503).header('retry-after', unavailableAfter).type('application/json; charset=utf-8').send(unavailableBody)
    }

    writeHeaders(reply, headers, max, windowMs, verdict)
    const banned = verdict.status === 'banned'
    route.onExceeded?.(request, key)
    if (verdict.banStarted) route.onBanReach?.(request, key)

    const waitMs = retryAfterSeconds(verdict.retryMs) * 1000
    const after = formatDuration(waitMs)
    if (route.errorResponseBuilder === undefined) throw banned ? new BannedError(after) : new TooManyRequestsError(after)
    const statusCode = banned ? 403 : 429
    const error: unknown = route.errorResponseBuilder(request, { statusCode, ban: banned, max, ttl: verdict.retryMs, after })
    if (typeof error !== 'object' || error === null) {
      throw new InvalidOptionError('errorResponseBuilder', `expected it to return an object, got ${error === null ? 'null' : typeof error}`)
    }
    (error as { statusCode?: number }).statusCode ??= statusCode
    throw error
  }
}

function checkKey (key: unknown): string {
  if (typeof key === 'string') return key
  if (typeof key === 'number' && Number.isFinite(key)) return String(key)
  throw new InvalidOptionError('keyGenerator', `expected it to return a string, got ${typeof key}`)
}
