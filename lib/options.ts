import { ADDRESSLESS, addresslessKey } from './addressless.js'
import { ALGORITHMS, DEFAULT_ALGORITHM } from './algorithms/index.js'
import { Callbacks } from './callbacks.js'
import { checkBoolean, checkDeadline, checkDuration, checkFunction, checkKeys, checkMax, checkOneOf, fail } from './check.js'
import { THEIR_DEFAULTS, banPerWindow, checkDenials, checkFailMode, checkOverLimit, theirFallbacks } from './compat.js'
import type { Warn } from './compat.js'
import { InvalidGroupIdError, InvalidRouteConfigError } from './errors.js'
import { ALL_HEADERS, DRAFT_NAMES, PLAIN_NAMES, checkHeaderSwitches } from './headers.js'
import { canonicalKey } from './ip.js'
import { defaultKeyGenerator, keyTiers } from './identity.js'
import type { KeyHierarchyOptions } from './identity.js'
import { checkBan, checkCost, checkLimitList, checkOneLimit, checkShared, checkSizes } from './limit-options.js'
import type {
  AllowListFunction, BanCallback, CountWhenFunction, ErrorResponseBuilder, ExceededCallback, HookName, KeyCallback, KeyGenerator, Mode, ResolvedBreaker,
  RateGuardOptions, RedisLike, ResolvedLimit, ResolvedOptions, ResolvedRoute, RouteRateLimitOptions, SettleFunction
} from './types.js'

// Every option checked once, at register, into one frozen object: the table of options (where each may be
// given; how, and with what default, those that stand alone are read), and the merge of a route's (or a
// limiter's) options over the plugin's. The option types are lib/types.ts's; limits and bans
// lib/limit-options.ts's; header switches lib/headers.ts's; `@fastify/rate-limit`'s spellings and fallbacks
// lib/compat.ts's.

type Scope = 'route' | 'plugin'
type Reader<T> = (value: unknown, name: string) => T

/**
 * An option read on its own: its check, and the value it has when nobody gives it (written as an app would
 * give it and read by the same check; none: undefined).
 */
interface Alone<S extends Scope, T, F> { readonly scope: S, readonly read: Reader<T>, readonly fallback: F }
/** An option read with others (a limit from its parts, a ban over the limits, the key hierarchy…): see resolveRoute and resolveOptions. */
interface Together<S extends Scope> { readonly scope: S }

const alone = <S extends Scope, T, F = undefined>(scope: S, read: Reader<T>, fallback?: F): Alone<S, T, F> => ({ scope, read, fallback: fallback as F })
const together = <S extends Scope>(scope: S): Together<S> => ({ scope })

const HOOKS: readonly HookName[] = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const MODES: readonly Mode[] = ['enforce', 'shadow', 'report']

/**
 * Every option: where it may be given, and, for those read on their own, how and with what default. `route`
 * options are given on the plugin, on a route (`config.rateLimit`) and on a limiter (`fastify.rateLimit()`,
 * `createRateLimit()`), each merged over the plugin's; `plugin` ones only at register, as they hold for the
 * whole plugin (one client, one store, one way to name a client, one set of header names). The table makes
 * the lists of keys each place accepts, and reads the options that stand alone (`readAlone`).
 */
const OPTIONS = {
  // A route's options read on their own.
  hook: alone('route', (value, name) => checkOneOf(value, name, HOOKS), 'onRequest'),
  algorithm: alone('route', (value, name) => checkOneOf(value, name, ALGORITHMS), DEFAULT_ALGORITHM),
  shared: alone('route', checkShared, false),
  cost: alone('route', checkCost, 1),
  settle: alone('route', checkFunction<SettleFunction>),
  refundAborted: alone('route', checkBoolean, false),
  mode: alone('route', (value, name) => checkOneOf(value, name, MODES), 'enforce'),
  shadow: alone('route', checkShadow, { ban: false }),
  errorResponseBuilder: alone('route', checkFunction<ErrorResponseBuilder>),
  onExceeding: alone('route', checkFunction<KeyCallback>),
  onExceeded: alone('route', checkFunction<ExceededCallback>),
  onBanReach: alone('route', checkFunction<BanCallback>),
  legacyHeaders: alone('route', checkBoolean, true),
  standardHeaders: alone('route', checkStandardHeaders, false),
  // A route's options read with others in resolveRoute: a limit from its parts or a list, the key generator with
  // the subnet and the allow list, a ban over the limits, header switches over the names, failMode or skipOnError…
  max: together('route'),
  timeWindow: together('route'),
  burst: together('route'),
  limits: together('route'),
  keyGenerator: together('route'),
  ipv6Subnet: together('route'),
  ban: together('route'),
  allowList: together('route'),
  groupId: together('route'),
  addHeaders: together('route'),
  addHeadersOnExceeding: together('route'),
  continueExceeding: together('route'),
  exponentialBackoff: together('route'),
  countWhen: together('route'),
  skipSuccessfulRequests: together('route'),
  skipFailedRequests: together('route'),
  failMode: together('route'),
  skipOnError: together('route'),
  // The plugin's options read on their own.
  redis: alone('plugin', checkRedis),
  store: alone('plugin', checkStoreClass),
  global: alone('plugin', checkBoolean, true),
  nameSpace: alone('plugin', checkNameSpace, 'rate-guard:'),
  enableDraftSpec: alone('plugin', checkBoolean, false),
  timeout: alone('plugin', checkDeadline, 100),
  callbackTimeout: alone('plugin', checkDeadline, 10_000),
  strict: alone('plugin', checkBoolean, false),
  breaker: alone('plugin', checkBreaker, { threshold: 5, coolDown: 500 }),
  banCache: alone('plugin', checkBoolean, true),
  cache: alone('plugin', checkMax, 10_000),
  // Who a request without a client address is (lib/addressless.ts): one shared client, or its connection.
  addressless: alone('plugin', (value, name) => checkOneOf(value, name, ADDRESSLESS), 'shared'),
  // The plugin's options read together in resolveOptions: the key hierarchy.
  apiKeyHeader: together('plugin'),
  verifyApiKey: together('plugin'),
  userId: together('plugin')
} as const

type Table = typeof OPTIONS
/** A scope's options read on their own, as their checks make them (undefined where none is given and there is no default). */
type ReadAlone<S extends Scope> = {
  readonly [K in keyof Table as Table[K] extends Alone<S, unknown, unknown> ? K : never]:
  Table[K] extends Alone<S, infer T, infer F> ? (F extends undefined ? T | undefined : T) : never
}

/**
 * The options of `scope` read on their own: each one given by its check, the others `base`'s (a route's over
 * the plugin's) or, with no base, their defaults.
 */
function readAlone<S extends Scope> (scope: S, input: Record<string, unknown>, where: string, base?: object): ReadAlone<S> {
  const out: Record<string, unknown> = {}
  for (const [option, entry] of Object.entries(OPTIONS) as Array<[string, Alone<Scope, unknown, unknown> | Together<Scope>]>) {
    if (entry.scope !== scope || !('read' in entry)) continue
    const given = input[option]
    out[option] = given !== undefined
      ? entry.read(given, `${where}${option}`)
      : base !== undefined ? (base as Record<string, unknown>)[option] : entry.fallback === undefined ? undefined : entry.read(entry.fallback, option)
  }
  return out as ReadAlone<S>
}

// The table and the public types name the same options, so an option added to one alone fails the build.
type Scoped<S extends Scope> = { [K in keyof Table]: Table[K]['scope'] extends S ? K : never }[keyof Table]
type Exactly<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
type Holds<T extends true> = T
export type TableMatchesTypes = Holds<Exactly<keyof Table, keyof RateGuardOptions> | Exactly<Scoped<'route'>, keyof RouteRateLimitOptions>>

const optionsFor = (scope: Scope): string[] => Object.entries(OPTIONS).filter(([, entry]) => entry.scope === scope).map(([option]) => option)
const ROUTE_KEYS = new Set(optionsFor('route'))
const PLUGIN_ONLY = new Set(optionsFor('plugin'))
// Fastify's own registration options reach the plugin too.
const PLUGIN_KEYS = new Set([...ROUTE_KEYS, ...PLUGIN_ONLY, 'prefix', 'logLevel', 'logSerializers'])

/** The defaults tests and docs name: @fastify/rate-limit's for a limit, the decision's deadline and the breaker's. */
export const DEFAULTS = Object.freeze({ ...THEIR_DEFAULTS, timeout: OPTIONS.timeout.fallback, breaker: OPTIONS.breaker.fallback })

/**
 * A route's `limits`, each enforced or (`mode: 'shadow'`) watched: the enforced ones, and the watched ones or
 * null. Watched limits are numbers (they are decided as a budget of their own, beside the route's), and at
 * least one limit is enforced (a route only watched is `mode: 'shadow'`).
 */
function checkRouteLimits (value: unknown, name: string): [readonly ResolvedLimit[], readonly ResolvedLimit[] | null] {
  if (!Array.isArray(value)) return [checkLimitList(value, name, false), null]
  const modes = value.map((item: unknown, i) => {
    const mode = (item as { mode?: unknown } | null)?.mode
    return mode === undefined ? 'enforce' : checkOneOf(mode, `${name}[${i}].mode`, ['enforce', 'shadow'] as const)
  })
  const without = value.map((item: unknown) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return item
    const { mode: _mode, ...rest } = item as Record<string, unknown>
    return rest
  })
  const all = checkLimitList(without, name, false)
  if (!modes.includes('shadow')) return [all, null]
  if (!modes.includes('enforce')) fail(name, value, "at least one limit enforced: a route only watched is mode: 'shadow'")
  const watched = all.filter((_, i) => modes[i] === 'shadow')
  if (watched.some(limit => typeof limit.max === 'function' || typeof limit.windowMs === 'function')) fail(name, value, 'watched limits (mode: \'shadow\') of numbers and durations, not functions')
  return [Object.freeze(all.filter((_, i) => modes[i] === 'enforce')), Object.freeze(watched)]
}

/** `shadow: { ban }`: whether shadow denials strike toward bans. */
function checkShadow (value: unknown, name: string): ResolvedRoute['shadow'] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, '{ ban: true } or { ban: false }')
  checkKeys(value, new Set(['ban']), `${name}.`)
  return Object.freeze({ ban: checkBoolean((value as { ban?: unknown }).ban, `${name}.ban`) })
}

/** `standardHeaders`: whether the IETF fields are sent (`'draft-10'`) or not (`false`). */
function checkStandardHeaders (value: unknown, name: string): boolean {
  if (value !== false && value !== 'draft-10') fail(name, value, "false or 'draft-10'")
  return value === 'draft-10'
}

/** A brace in the prefix would move the Redis Cluster hash tag away from the identity. */
function checkNameSpace (value: unknown, name: string): string {
  if (typeof value !== 'string' || value.length > 128 || /[{}\s]/.test(value)) {
    fail(name, value, 'a string of at most 128 characters without braces or spaces')
  }
  return value
}

function checkBreaker (value: unknown): ResolvedBreaker | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('breaker', value, 'false or { threshold, coolDown }')
  const breaker = value as Record<string, unknown>
  checkKeys(breaker, new Set(['threshold', 'coolDown']), 'breaker.')
  return Object.freeze({
    threshold: checkMax(breaker.threshold, 'breaker.threshold'),
    coolDownMs: checkDuration(breaker.coolDown, 'breaker.coolDown')
  })
}

/**
 * An allow list's keys as the key generator writes them: with the default one (`canonical`), an address in its
 * canonical form (see `canonicalKey`); with the app's, as given, compared with the key it returns.
 */
function checkAllowList (value: unknown, name: string, canonical?: (key: string) => string): ResolvedRoute['allowList'] {
  if (typeof value === 'function') return value as AllowListFunction
  if (!Array.isArray(value) || !value.every(k => typeof k === 'string')) fail(name, value, 'an array of keys or a function')
  return value.length === 0 ? null : new Set(canonical === undefined ? value : value.map(canonical))
}

/**
 * A route's or a limiter's options may not set what holds for the whole plugin; each is named. Unknown names are
 * refused too, but with the app's own store, whose `child()` is given the route's options as they are (theirs
 * pass it options of the app's own that way).
 */
function checkRouteKeys (input: object, where: string, opts: ResolvedOptions): void {
  for (const [key, value] of Object.entries(input)) {
    if (PLUGIN_ONLY.has(key)) fail(`${where}${key}`, value, 'it at register only (it holds for the whole plugin)')
  }
  if (opts.store === undefined) checkKeys(input, ROUTE_KEYS, where)
}

/**
 * Merges one route's (or the plugin's) options over `base`, checking every option given; `keyGeneratorFor`
 * makes the default key generator for a route's own `ipv6Subnet`.
 */
export function resolveRoute (given: Record<string, unknown>, base: ResolvedRoute, where: string, keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator, warn: Warn): ResolvedRoute {
  const input = theirFallbacks(given, where, warn)
  const has = (key: string): boolean => input[key] !== undefined
  const name = (key: string): string => `${where}${key}`
  const alone = readAlone('route', input, where, base)
  // Bits of an IPv6 address that make a client, 0 to 128 (0: every IPv6 address is one client): theirFallbacks
  // gives any other value their default.
  const ipv6Subnet = has('ipv6Subnet') ? input.ipv6Subnet as number : base.ipv6Subnet
  const newSubnet = ipv6Subnet !== base.ipv6Subnet
  const defaultKey = has('keyGenerator') ? false : base.defaultKey
  // Any string names a group, as theirs; the empty one none (theirs: `if (groupId)`).
  const groupId = input.groupId
  if (has('groupId') && typeof groupId !== 'string') throw new InvalidGroupIdError()
  const oneLimit = has('max') || has('timeWindow') || has('burst')
  if (has('limits') && oneLimit) fail(name('limits'), input.limits, 'limits, or max / timeWindow / burst, not both')
  if (oneLimit && base.limits.length > 1 && !(has('max') && has('timeWindow'))) {
    fail(name(has('max') ? 'max' : 'timeWindow'), input[has('max') ? 'max' : 'timeWindow'], 'both max and timeWindow: the plugin has several limits to take the other from')
  }
  // One limit given in parts takes what it does not give from the base's single limit.
  const [limits, watched] = has('limits')
    ? checkRouteLimits(input.limits, name('limits'))
    : [oneLimit ? Object.freeze([checkOneLimit(input, base.limits.length === 1 ? base.limits[0] : undefined, where, false)]) : base.limits, base.watched]
  const { algorithm, shared } = alone
  if (algorithm !== 'token-bucket' && [...limits, ...shared ?? []].some(limit => limit.burst !== null)) {
    fail(name('burst'), limits.find(limit => limit.burst !== null)?.burst ?? shared?.find(limit => limit.burst !== null)?.burst, "no burst but with algorithm: 'token-bucket'")
  }
  checkSizes(limits, algorithm, where)
  if (shared !== null) checkSizes(shared, algorithm, name('shared.'))
  if (watched !== null) checkSizes(watched, algorithm, name('limits.'))
  const allowListGiven = has('allowList') ? input.allowList : base.allowListGiven
  return Object.freeze({
    ...alone,
    failMode: checkFailMode(input, where) ?? base.failMode,
    ipv6Subnet,
    algorithm,
    limits,
    shared,
    watched,
    keyGenerator: has('keyGenerator')
      ? checkFunction<KeyGenerator>(input.keyGenerator, name('keyGenerator'))
      : defaultKey && newSubnet ? keyGeneratorFor(ipv6Subnet) : base.keyGenerator,
    defaultKey,
    ...resolveBan(input.ban, base, limits, name('ban')),
    overLimit: checkOverLimit(input, base.overLimit, where),
    countWhen: checkCountWhen(input, base.countWhen, where),
    // Written again when what writes the keys changes: the subnet, or the app's key generator for the default.
    allowList: has('allowList') || (allowListGiven !== undefined && (newSubnet || defaultKey !== base.defaultKey))
      ? checkAllowList(allowListGiven, name('allowList'), defaultKey ? key => canonicalKey(key, ipv6Subnet) : undefined)
      : base.allowList,
    allowListGiven,
    groupId: has('groupId') && groupId !== '' ? groupId as string : undefined,
    fieldNames: base.fieldNames,
    // The plugin's own options are resolved with no prefix; a route's or a limiter's replace its switches.
    headerSwitches: checkHeaderSwitches(input, base.fieldNames, base.headerSwitches, where, where !== '', warn)
  })
}

/**
 * Whether a response counts: `countWhen` as given, or express-rate-limit's `skipSuccessfulRequests` (a status
 * below 400 is a success) / `skipFailedRequests`; not both ways at once. Neither given: the base's.
 */
function checkCountWhen (input: Record<string, unknown>, base: CountWhenFunction | undefined, where: string): CountWhenFunction | undefined {
  const skipSuccess = input.skipSuccessfulRequests === undefined ? undefined : checkBoolean(input.skipSuccessfulRequests, `${where}skipSuccessfulRequests`)
  const skipFailure = input.skipFailedRequests === undefined ? undefined : checkBoolean(input.skipFailedRequests, `${where}skipFailedRequests`)
  if (input.countWhen !== undefined) {
    if (skipSuccess !== undefined || skipFailure !== undefined) fail(`${where}countWhen`, input.countWhen, 'countWhen, or skipSuccessfulRequests / skipFailedRequests, not both')
    return checkFunction<CountWhenFunction>(input.countWhen, `${where}countWhen`)
  }
  if (skipSuccess === undefined && skipFailure === undefined) return base
  if (skipSuccess !== true && skipFailure !== true) return undefined
  return (_request, reply) => reply.statusCode < 400 ? skipSuccess !== true : skipFailure !== true
}

/**
 * A ban as given (`false`, an object, or `@fastify/rate-limit`'s number of denials), or the base's; a number
 * inherited from the plugin bans for this budget's own window.
 */
function resolveBan (value: unknown, base: ResolvedRoute, limits: readonly ResolvedLimit[], name: string): Pick<ResolvedRoute, 'ban' | 'banDenials'> {
  const windows = limits.map(limit => limit.windowMs)
  if (typeof value === 'number') {
    const banDenials = checkDenials(value, name)
    return { ban: banPerWindow(banDenials, windows), banDenials }
  }
  if (value !== undefined) return { ban: checkBan(value, name), banDenials: null }
  const { banDenials } = base
  return { ban: banDenials === null ? base.ban : banPerWindow(banDenials, windows), banDenials }
}

/** A route's `config.rateLimit`: `false` (off), an object (merged over the plugin's), or a coded error. */
export function resolveRouteConfig (config: unknown, opts: ResolvedOptions, warn: Warn): ResolvedRoute | false {
  if (config === false) return false
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new InvalidRouteConfigError()
  checkRouteKeys(config, 'config.rateLimit.', opts)
  return resolveRoute(config as Record<string, unknown>, opts.route, 'config.rateLimit.', opts.keyGeneratorFor, warn)
}

/** The options given to `fastify.rateLimit()` / `createRateLimit()` (`call`), merged over the plugin's. */
export function resolveLimiterOptions (options: unknown, opts: ResolvedOptions, call: string, warn: Warn): ResolvedRoute {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) fail(call, options, 'an object of options, as a route\'s config.rateLimit')
  checkRouteKeys(options, `${call}.`, opts)
  // Theirs take a hook here and never use it: said, not refused.
  const { hook, ...rest } = options as { hook?: unknown }
  if (hook !== undefined) warn(`rate-guard: ${call}.hook is not used: the limiter runs where the app places it`)
  for (const option of ['countWhen', 'skipSuccessfulRequests', 'skipFailedRequests', 'settle', 'refundAborted']) {
    const value = (options as Record<string, unknown>)[option]
    if (value !== undefined) fail(`${call}.${option}`, value, 'it on a route\'s config.rateLimit or the plugin\'s options: a limiter the app places settles from the handler (request.rateGuard.settle)')
  }
  return resolveRoute(rest, opts.route, `${call}.`, opts.keyGeneratorFor, warn)
}

/** `@fastify/rate-limit`'s store interface: a class whose instances have `incr` and `child` (see lib/stores/app-store.ts). */
function checkStoreClass (value: unknown): ResolvedOptions['store'] {
  const prototype = (value as { prototype?: Record<string, unknown> } | undefined)?.prototype
  if (typeof value !== 'function' || typeof prototype?.incr !== 'function' || typeof prototype.child !== 'function') {
    fail('store', value, 'a class whose instances have incr(key, callback, timeWindow, max) and child(routeOptions)')
  }
  return value as ResolvedOptions['store']
}

const REDIS_URL = /^rediss?:\/\/[^\s]+$/

/** A client, a URL or a Cluster's node URLs; null, as theirs takes it, is none. */
function checkRedis (value: unknown): ResolvedOptions['redis'] {
  if (value === null) return undefined
  if (typeof value === 'string') {
    if (!REDIS_URL.test(value)) fail('redis', value, 'a redis:// or rediss:// URL')
    return value
  }
  if (Array.isArray(value)) {
    if (value.length === 0 || !value.every(url => typeof url === 'string' && REDIS_URL.test(url))) {
      fail('redis', value, 'a non-empty list of redis:// or rediss:// URLs of Redis Cluster nodes')
    }
    return Object.freeze([...value as string[]])
  }
  const client = value as Partial<RedisLike>
  if (typeof value !== 'object' || typeof client.defineCommand !== 'function' || typeof client.on !== 'function') {
    fail('redis', value, 'an ioredis Redis or Cluster instance, or a redis:// URL')
  }
  return value as RedisLike
}

/**
 * Checks and resolves the plugin options into one frozen object, or throws a coded error; `warn` is told of
 * each value replaced by `@fastify/rate-limit`'s default (see `theirFallbacks`).
 */
export function resolveOptions (input: unknown, warn: Warn): ResolvedOptions {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) fail('options', input, 'an object')
  checkKeys(input, PLUGIN_KEYS, '')
  // Read once as theirs reads them: resolveRoute finds nothing more to replace in the plugin's own.
  const opts = theirFallbacks(input as Record<string, unknown>, '', warn)
  const has = (key: string): boolean => opts[key] !== undefined
  let plugin = readAlone('plugin', opts, '')
  if (plugin.store !== undefined && plugin.redis !== undefined) {
    warn('rate-guard: redis is not used: the store given counts, as with @fastify/rate-limit')
    plugin = { ...plugin, redis: undefined }
  }

  const callbacks = new Callbacks(plugin.callbackTimeout)
  const verifyApiKey = has('verifyApiKey') ? checkFunction<KeyHierarchyOptions['verifyApiKey']>(opts.verifyApiKey, 'verifyApiKey') : undefined
  const apiKeyHeader = has('apiKeyHeader') ? opts.apiKeyHeader : 'x-api-key'
  if (apiKeyHeader !== false && (typeof apiKeyHeader !== 'string' || !/^[a-z0-9!#$%&'*+.^_`|~-]+$/i.test(apiKeyHeader))) {
    fail('apiKeyHeader', apiKeyHeader, 'a header name or false')
  }
  // An API key is an identity only when the app verifies it: any client can mint an unverified one, a fresh
  // budget per request. Naming the header without a way to verify it is a mistake, refused.
  if (has('apiKeyHeader') && apiKeyHeader !== false && verifyApiKey === undefined) {
    fail('apiKeyHeader', apiKeyHeader, 'false, or a header given with verifyApiKey (a key nobody verifies is an identity any client can mint; when a gateway in front has verified it, say so with verifyApiKey: () => true)')
  }
  const hierarchy = {
    apiKeyHeader: apiKeyHeader === false || verifyApiKey === undefined ? false as const : apiKeyHeader.toLowerCase(),
    verifyApiKey,
    userId: has('userId') ? checkFunction<KeyHierarchyOptions['userId']>(opts.userId, 'userId') : undefined,
    callbacks,
    addressless: addresslessKey(plugin.addressless)
  }
  const keyGeneratorFor = (ipv6Subnet: number): KeyGenerator => defaultKeyGenerator({ ...hierarchy, ipv6Subnet })

  // Defaults, under the plugin's options: route, limiter and group options are resolved over the result.
  const defaults: ResolvedRoute = {
    ...readAlone('route', {}, ''),
    // As @fastify/rate-limit (skipOnError: false): a limit nobody can enforce refuses.
    failMode: 'closed',
    ipv6Subnet: DEFAULTS.ipv6Subnet,
    limits: Object.freeze([{ max: DEFAULTS.max, windowMs: DEFAULTS.timeWindow, burst: null, name: undefined }]),
    watched: null,
    keyGenerator: keyGeneratorFor(DEFAULTS.ipv6Subnet),
    defaultKey: true,
    ban: null,
    overLimit: undefined,
    countWhen: undefined,
    allowList: null,
    allowListGiven: undefined,
    groupId: undefined,
    banDenials: null,
    fieldNames: plugin.enableDraftSpec ? DRAFT_NAMES : PLAIN_NAMES,
    headerSwitches: ALL_HEADERS
  }

  const route = resolveRoute(opts, defaults, '', keyGeneratorFor, warn)
  return Object.freeze({
    ...plugin,
    canonicalKey: route.defaultKey ? (key: string) => canonicalKey(key, route.ipv6Subnet) : (key: string) => key,
    keyGeneratorFor,
    keyTiers: keyTiers(hierarchy),
    callbacks,
    route
  })
}
