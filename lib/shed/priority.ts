import type { FastifyRequest } from 'fastify'
import type { Callbacks } from '../callbacks.js'
import { PRIORITIES } from '../options/shed.js'
import type { Priority } from '../shed-types.js'

// A request's priority class for the load shedder: its route's `config.priority`, else the app's `classify`,
// else the default rule. Read from the route as declared (its pattern, its config), never from what the client
// sent: a client cannot make itself critical or exempt. The default rule: a health or readiness route (its
// pattern's last segment health, healthz, healthcheck, livez, readyz, ready, live, ping) is exempt; a request no
// route matched is sheddable; every other is normal.

const HEALTH = /\/(?:health|healthz|healthcheck|livez|readyz|ready|live|ping)\/?$/i

/** A route's class by the default rule, from its pattern. */
export function defaultPriority (url: string | undefined): Priority {
  return url !== undefined && HEALTH.test(url) ? 'exempt' : 'normal'
}

export function isPriority (value: unknown): value is Priority {
  return PRIORITIES.includes(value as Priority)
}

/** Each route's class by its config and the default rule, worked out once (by its config object). */
const ROUTES = new WeakMap<object, Priority | null>()

/** The class a route's own config and pattern give (null: none given, the app's classify may say). */
function routePriority (request: FastifyRequest): Priority | null {
  // Every route Fastify matched has its config object (a request no route matched is not asked here).
  const config = request.routeOptions.config as { priority?: unknown }
  let known = ROUTES.get(config)
  if (known === undefined) {
    known = isPriority(config.priority) ? config.priority : null
    ROUTES.set(config, known)
  }
  return known
}

/** `classify`'s answer, checked: a class, or the error it falls back from. */
function classified (classify: (request: FastifyRequest) => unknown, request: FastifyRequest): Priority | undefined {
  const value = classify(request)
  if (value === undefined || isPriority(value)) return value
  throw new TypeError(`shed.classify returned ${typeof value === 'string' ? JSON.stringify(value.slice(0, 32)) : typeof value}, ` +
    `expected one of ${PRIORITIES.join(', ')} or undefined (synchronously)`)
}

/** The request's class: its route's config, else `classify` (a failing one: normal, logged), else the default rule. */
export function priorityOf (
  request: FastifyRequest, classify: ((request: FastifyRequest) => unknown) | null, callbacks: Callbacks
): Priority {
  if (request.is404) return 'sheddable'
  const own = routePriority(request)
  if (own !== null) return own
  const given = classify === null
    ? undefined
    : callbacks.run('classify', () => classified(classify, request), () => 'normal' as const, request.log) as Priority | undefined
  return given ?? defaultPriority(request.routeOptions.url)
}
