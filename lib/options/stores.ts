import { checkDuration, checkKeys, checkMax, fail } from './checks.js'
import type { RedisLike } from '../types.js'
import type { ResolvedBreaker, ResolvedOptions, ResolvedRoute } from './resolved.js'

// Where requests are counted, as options: Redis (`redis`, `nameSpace`, `breaker`), or a store of the app's own
// (`store`, `@fastify/rate-limit`'s interface) and what it is given; what such a store cannot count is said by
// each option's descriptor (table.ts).

const REDIS_URL = /^rediss?:\/\/[^\s]+$/

/** A client, a URL or a Cluster's node URLs; null, as theirs takes it, is none. */
export function checkRedis (value: unknown, name: string): ResolvedOptions['redis'] {
  if (value === null) return undefined
  if (typeof value === 'string') {
    if (!REDIS_URL.test(value)) fail(name, value, 'a redis:// or rediss:// URL')
    return value
  }
  if (Array.isArray(value)) {
    if (value.length === 0 || !value.every(url => typeof url === 'string' && REDIS_URL.test(url))) {
      fail(name, value, 'a non-empty list of redis:// or rediss:// URLs of Redis Cluster nodes')
    }
    return Object.freeze([...value as string[]])
  }
  const client = value as Partial<RedisLike>
  if (typeof value !== 'object' || typeof client.defineCommand !== 'function' || typeof client.on !== 'function') {
    fail(name, value, 'an ioredis Redis or Cluster instance, or a redis:// URL')
  }
  return value as RedisLike
}

/** A brace in the prefix would move the Redis Cluster hash tag away from the identity. */
export function checkNameSpace (value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length > 128 || /[{}\s]/.test(value)) {
    fail(name, value, 'a string of at most 128 characters without braces or spaces')
  }
  return value
}

export function checkBreaker (value: unknown, name: string): ResolvedBreaker | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, 'false or { threshold, coolDown }')
  const breaker = value as Record<string, unknown>
  checkKeys(breaker, new Set(['threshold', 'coolDown']), `${name}.`)
  return Object.freeze({
    threshold: checkMax(breaker.threshold, `${name}.threshold`),
    coolDownMs: checkDuration(breaker.coolDown, `${name}.coolDown`)
  })
}

/** `@fastify/rate-limit`'s store interface: a class whose instances have `incr` and `child` (see lib/stores/app-store.ts). */
export function checkStoreClass (value: unknown, name: string): ResolvedOptions['store'] {
  const prototype = (value as { prototype?: Record<string, unknown> } | undefined)?.prototype
  if (typeof value !== 'function' || typeof prototype?.incr !== 'function' || typeof prototype.child !== 'function') {
    fail(name, value, 'a class whose instances have incr(key, callback, timeWindow, max) and child(routeOptions)')
  }
  return value as ResolvedOptions['store']
}

/** What their stores are given (`new Store(options)`, `child(routeOptions)`): their names for a budget's options. */
export function theirParams (route: ResolvedRoute): Record<string, unknown> {
  const [limit] = route.limits
  return {
    max: limit!.max,
    timeWindow: limit!.windowMs,
    ban: route.banDenials ?? -1,
    continueExceeding: route.overLimit === 'continue',
    exponentialBackoff: route.overLimit === 'backoff',
    ipv6Subnet: route.ipv6Subnet,
    keyGenerator: route.keyGenerator,
    allowList: route.allowListGiven,
    hook: route.hook,
    skipOnError: route.failMode === 'open',
    groupId: route.groupId,
    errorResponseBuilder: route.errorResponseBuilder
  }
}
