import { resolveBan } from './bans.js'
import { checkConflicts, sayMerged } from './conflicts.js'
import { resolveKeys } from './clients.js'
import { resolveCountWhen, resolveFailMode, resolveOverLimit } from './compat.js'
import type { Warn } from './compat.js'
import { fail } from './checks.js'
import { docsUrl } from '../docs-links.js'
import { InvalidOptionError, InvalidRouteConfigError } from '../errors.js'
import { ALL_HEADERS, resolveHeaderSwitches } from './headers.js'
import { checkLimitsFit, resolveLimits } from './limits.js'
import { readAlone, readOptions } from './read.js'
import type { Read } from './read.js'
import type { ResolvedOptions, ResolvedRoute } from './resolved.js'
import { OPTIONS } from './table.js'
import type { FieldNames, KeyGenerator } from '../types.js'

// A budget's options, the second half of the pass: the plugin's over the defaults, and a route's
// (`config.rateLimit`) or a limiter's (`fastify.rateLimit()`, `createRateLimit()`) over the plugin's, into one
// frozen object of resolved values.

/**
 * What merging a budget's options takes besides them: the default key generator for a subnet, where to say what
 * was replaced, and whether the app's store counts the budget (for their conflicts).
 */
export interface RouteContext {
  readonly keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator
  readonly warn: Warn
  readonly store: boolean
}

/**
 * Merges one budget's options, read (read.ts), over `base`: those read alone by the table, the others by their
 * fields' resolvers. `where` prefixes their names: `''` for the plugin's own, whose header switches are over
 * every header on; a route's or a limiter's replace the plugin's.
 */
export function resolveRoute (read: Read, base: ResolvedRoute, where: string, context: RouteContext): ResolvedRoute {
  const { input, given } = read
  const alone = readAlone('route', given, base)
  const limits = resolveLimits(given, input, base, where)
  const route: ResolvedRoute = Object.freeze({
    ...alone,
    ...limits,
    ...resolveKeys(given, base, context.keyGeneratorFor),
    ...resolveBan(given.ban, base, limits.limits),
    failMode: resolveFailMode(given, base.failMode),
    overLimit: resolveOverLimit(given, base.overLimit),
    countWhen: resolveCountWhen(given, base.countWhen),
    fieldNames: base.fieldNames,
    headerSwitches: resolveHeaderSwitches(given, base.fieldNames, base.headerSwitches, where, where !== '', context.warn)
  })
  checkConflicts(route, { ...read, store: context.store }, where)
  checkLimitsFit(route, where)
  sayMerged(route, where, context.warn)
  return route
}

/**
 * The defaults the plugin's options are merged over: the table's, and for the options read with others what
 * none of them given comes to (one limit of the default max and window, the default key generator, every
 * header on under `fieldNames`).
 */
export function defaultRoute (keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator, fieldNames: FieldNames): ResolvedRoute {
  return {
    ...readAlone('route', {}),
    failMode: OPTIONS.failMode.fallback,
    ipv6Subnet: OPTIONS.ipv6Subnet.fallback,
    limits: Object.freeze([{ max: OPTIONS.max.fallback, windowMs: OPTIONS.timeWindow.fallback, burst: null, name: undefined }]),
    watched: null,
    keyGenerator: keyGeneratorFor(OPTIONS.ipv6Subnet.fallback),
    defaultKey: true,
    ban: null,
    banDenials: null,
    overLimit: undefined,
    countWhen: undefined,
    allowList: null,
    allowListGiven: undefined,
    fieldNames,
    headerSwitches: ALL_HEADERS
  }
}

/**
 * A route's `config.rateLimit`: `false` (off), an object (merged over the plugin's), or a coded error; an
 * invalid option's names the route (`route`: its methods and URL, `GET /search`).
 */
export function resolveRouteConfig (config: unknown, opts: ResolvedOptions, warn: Warn, route: string): ResolvedRoute | false {
  if (config === false) return false
  if (config === true) throw new InvalidRouteConfigError(trueInstead(route))
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new InvalidRouteConfigError('')
  const where = 'config.rateLimit.'
  try {
    const store = opts.store !== undefined
    const read = readOptions(config, 'route', where, warn, store)
    return resolveRoute(read, opts.route, where, { keyGeneratorFor: opts.keyGeneratorFor, warn, store })
  } catch (err) {
    throw onRoute(err, route)
  }
}

/** What a route's `rateLimit: true` is told to write instead, after `@fastify/rate-limit`'s words. */
function trueInstead (route: string): string {
  return `: ${route} gives config: { rateLimit: true }, which is not a configuration. Leave rateLimit out (or null)` +
    ' to count on the plugin\'s budget; write rateLimit: {} for a budget of the route\'s own with the plugin\'s' +
    ' options (how to limit a route under global: false), or rateLimit: false for no limit. See ' +
    docsUrl('options', 'per-route-configuration')
}

/**
 * An invalid option of a route, its message led by the route's methods and URL; any other error (`groupId`'s,
 * `@fastify/rate-limit`'s words) as it is. The stack's first line says the same.
 */
function onRoute (err: unknown, route: string): unknown {
  // The checks throw coded errors only. InvalidGroupIdError shares the code, so `instanceof` holds for it too:
  // the constructor tells them apart.
  const error = err as Error
  const made: unknown = error.constructor
  if (made !== InvalidOptionError) return error
  const message = `${route}: ${error.message}`
  error.stack = error.stack?.replace(error.message, message)
  error.message = message
  return error
}

/** The options given to `fastify.rateLimit()` / `createRateLimit()` (`call`), merged over the plugin's. */
export function resolveLimiterOptions (options: unknown, opts: ResolvedOptions, call: string, warn: Warn): ResolvedRoute {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    fail(call, options, 'an object of options, as a route\'s config.rateLimit')
  }
  const where = `${call}.`
  const store = opts.store !== undefined
  // A check answers and is done: the options that need a response of its own (a hook's: rateLimit()) say so.
  const read = readOptions(options, call === 'createRateLimit' ? 'check' : 'limiter', where, warn, store)
  return resolveRoute(read, opts.route, where, { keyGeneratorFor: opts.keyGeneratorFor, warn, store })
}
