import { ALGORITHMS, DEFAULT_ALGORITHM } from './algorithms/index.js'
import { Callbacks } from './callbacks.js'
import { checkBoolean, checkDeadline, checkDuration, checkFunction, checkKeys, checkMax, checkOneOf, fail } from './check.js'
import { THEIR_DEFAULTS, banPerWindow, checkDenials, checkFailMode, checkOverLimit, theirFallbacks } from './compat.js'
import type { Warn } from './compat.js'
import { InvalidGroupIdError, InvalidRouteConfigError } from './errors.js'
import { ALL_HEADERS, DRAFT_NAMES, PLAIN_NAMES, checkHeaderSwitches } from './headers.js'
import { canonicalKey, defaultKeyGenerator, keyTiers } from './keys.js'
import type { KeyHierarchyOptions } from './keys.js'
import { checkBan, checkCost, checkLimitList, checkOneLimit, checkPolicyName, checkShared, checkSizes } from './limit-options.js'
import type { RedisLike } from './stores/redis.js'
import type {
  AllowListFunction, CountWhenFunction, HookName, Mode, KeyGenerator, ResolvedBreaker, ResolvedLimit, ResolvedOptions, ResolvedRoute, SettleFunction
} from './types.js'

/**
 * Every option checked once, at register, into one frozen object: the table of options (where each may be
 * given, how the plain ones are read), the defaults, and the merge of a route's (or a limiter's) options over
 * the plugin's. The option types are lib/types.ts's; limits and bans lib/limit-options.ts's; header switches
 * lib/headers.ts's; `@fastify/rate-limit`'s spellings and fallbacks lib/compat.ts's.
 */

/**
 * Every option and where it may be given: `route` on the plugin, on a route (`config.rateLimit`) and on a
 * limiter (`fastify.rateLimit()`, `createRateLimit()`), merged over the plugin's; `plugin` only at register,
 * as it holds for the whole plugin (one client, one store, one way to name a client, one set of header names).
 */
const OPTIONS = {
  algorithm: 'route',
  max: 'route',
  timeWindow: 'route',
  burst: 'route',
  limits: 'route',
  shared: 'route',
  keyGenerator: 'route',
  ban: 'route',
  allowList: 'route',
  groupId: 'route',
  errorResponseBuilder: 'route',
  onExceeding: 'route',
  onExceeded: 'route',
  onBanReach: 'route',
  legacyHeaders: 'route',
  standardHeaders: 'route',
  addHeaders: 'route',
  addHeadersOnExceeding: 'route',
  continueExceeding: 'route',
  exponentialBackoff: 'route',
  cost: 'route',
  countWhen: 'route',
  skipSuccessfulRequests: 'route',
  skipFailedRequests: 'route',
  settle: 'route',
  refundAborted: 'route',
  mode: 'route',
  shadow: 'route',
  hook: 'route',
  failMode: 'route',
  skipOnError: 'route',
  ipv6Subnet: 'route',
  redis: 'plugin',
  store: 'plugin',
  global: 'plugin',
  nameSpace: 'plugin',
  enableDraftSpec: 'plugin',
  timeout: 'plugin',
  strict: 'plugin',
  breaker: 'plugin',
  banCache: 'plugin',
  cache: 'plugin',
  apiKeyHeader: 'plugin',
  verifyApiKey: 'plugin',
  userId: 'plugin'
} as const satisfies Record<string, 'route' | 'plugin'>

const optionsFor = (scope: 'route' | 'plugin'): string[] => Object.entries(OPTIONS).filter(([, where]) => where === scope).map(([option]) => option)
const ROUTE_KEYS = new Set(optionsFor('route'))
const PLUGIN_ONLY = new Set(optionsFor('plugin'))
// Fastify's own registration options reach the plugin too.
const PLUGIN_KEYS = new Set([...ROUTE_KEYS, ...PLUGIN_ONLY, 'prefix', 'logLevel', 'logSerializers'])

const HOOKS: readonly HookName[] = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const MODES: readonly Mode[] = ['enforce', 'shadow', 'report']

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
function checkShadow (value: unknown, name: string): boolean {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, '{ ban: true } or { ban: false }')
  checkKeys(value, new Set(['ban']), `${name}.`)
  return checkBoolean((value as { ban?: unknown }).ban, `${name}.ban`)
}

/** The route options read as given, over the base's, each by its check; the others are read together in `resolveRoute`. */
const PLAIN: { readonly [K in 'hook' | 'errorResponseBuilder' | 'onExceeding' | 'onExceeded' | 'onBanReach' | 'legacyHeaders']: (value: unknown, name: string) => ResolvedRoute[K] } = {
  hook: (value, name) => checkOneOf(value, name, HOOKS),
  errorResponseBuilder: checkFunction,
  onExceeding: checkFunction,
  onExceeded: checkFunction,
  onBanReach: checkFunction,
  legacyHeaders: checkBoolean
}

/** The defaults of the plugin's own options, and of the route options the plugin does not set (theirs where they have one). */
export const DEFAULTS = Object.freeze({
  ...THEIR_DEFAULTS,
  nameSpace: 'rate-guard:',
  timeout: 100,
  breaker: { threshold: 5, coolDown: 500 },
  cache: 10_000,
  apiKeyHeader: 'x-api-key'
})

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

/** An allow list's keys as the key generator writes them: an address in its canonical form (see `canonicalKey`). */
function checkAllowList (value: unknown, name: string, canonical: (key: string) => string): ResolvedRoute['allowList'] {
  if (typeof value === 'function') return value as AllowListFunction
  if (!Array.isArray(value) || !value.every(k => typeof k === 'string')) fail(name, value, 'an array of keys or a function')
  return value.length === 0 ? null : new Set(value.map(canonical))
}

/** A route's or a limiter's options may not set what holds for the whole plugin; each is named. */
function checkRouteKeys (input: object, where: string): void {
  for (const [key, value] of Object.entries(input)) {
    if (PLUGIN_ONLY.has(key)) fail(`${where}${key}`, value, 'it at register only (it holds for the whole plugin)')
  }
  checkKeys(input, ROUTE_KEYS, where)
}

/**
 * Merges one route's (or the plugin's) options over `base`, checking every option given; `keyGeneratorFor`
 * makes the default key generator for a route's own `ipv6Subnet`.
 */
export function resolveRoute (given: Record<string, unknown>, base: ResolvedRoute, where: string, keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator, warn: Warn): ResolvedRoute {
  const input = theirFallbacks(given, where, warn)
  const has = (key: string): boolean => input[key] !== undefined
  const name = (key: string): string => `${where}${key}`
  const plain = Object.fromEntries(Object.entries(PLAIN).map(([option, check]) =>
    [option, has(option) ? check(input[option], name(option)) : base[option as keyof typeof PLAIN]]))
  // Bits of an IPv6 address that make a client, 0 to 128 (0: every IPv6 address is one client): theirFallbacks
  // gives any other value their default.
  const ipv6Subnet = has('ipv6Subnet') ? input.ipv6Subnet as number : base.ipv6Subnet
  const newSubnet = ipv6Subnet !== base.ipv6Subnet
  const defaultKey = has('keyGenerator') ? false : base.defaultKey
  const groupId = input.groupId
  const standardHeaders = input.standardHeaders
  if (has('groupId')) {
    if (typeof groupId !== 'string') throw new InvalidGroupIdError()
    checkPolicyName(groupId, name('groupId'))
  }
  if (has('standardHeaders') && standardHeaders !== false && standardHeaders !== 'draft-10') {
    fail(name('standardHeaders'), standardHeaders, "false or 'draft-10'")
  }
  const oneLimit = has('max') || has('timeWindow') || has('burst')
  if (has('limits') && oneLimit) fail(name('limits'), input.limits, 'limits, or max / timeWindow / burst, not both')
  if (oneLimit && base.limits.length > 1 && !(has('max') && has('timeWindow'))) {
    fail(name(has('max') ? 'max' : 'timeWindow'), input[has('max') ? 'max' : 'timeWindow'], 'both max and timeWindow: the plugin has several limits to take the other from')
  }
  // One limit given in parts takes what it does not give from the base's single limit.
  const [limits, watched] = has('limits')
    ? checkRouteLimits(input.limits, name('limits'))
    : [oneLimit ? Object.freeze([checkOneLimit(input, base.limits.length === 1 ? base.limits[0] : undefined, where, false)]) : base.limits, base.watched]
  const algorithm = has('algorithm') ? checkOneOf(input.algorithm, name('algorithm'), ALGORITHMS) : base.algorithm
  const shared = has('shared') ? checkShared(input.shared, name('shared')) : base.shared
  if (algorithm !== 'token-bucket' && [...limits, ...shared ?? []].some(limit => limit.burst !== null)) {
    fail(name('burst'), limits.find(limit => limit.burst !== null)?.burst ?? shared?.find(limit => limit.burst !== null)?.burst, "no burst but with algorithm: 'token-bucket'")
  }
  checkSizes(limits, algorithm, where)
  if (shared !== null) checkSizes(shared, algorithm, name('shared.'))
  if (watched !== null) checkSizes(watched, algorithm, name('limits.'))
  const allowListGiven = has('allowList') ? input.allowList : base.allowListGiven
  return Object.freeze({
    ...plain as Pick<ResolvedRoute, keyof typeof PLAIN>,
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
    cost: has('cost') ? checkCost(input.cost, name('cost')) : base.cost,
    countWhen: checkCountWhen(input, base.countWhen, where),
    settle: has('settle') ? checkFunction<SettleFunction>(input.settle, name('settle')) : base.settle,
    refundAborted: has('refundAborted') ? checkBoolean(input.refundAborted, name('refundAborted')) : base.refundAborted,
    mode: has('mode') ? checkOneOf(input.mode, name('mode'), MODES) : base.mode,
    shadowBans: has('shadow') ? checkShadow(input.shadow, name('shadow')) : base.shadowBans,
    allowList: has('allowList') || (newSubnet && allowListGiven !== undefined)
      ? checkAllowList(allowListGiven, name('allowList'), key => canonicalKey(key, ipv6Subnet))
      : base.allowList,
    allowListGiven,
    groupId: has('groupId') ? groupId as string : undefined,
    standardHeaders: has('standardHeaders') ? standardHeaders === 'draft-10' : base.standardHeaders,
    fieldNames: base.fieldNames,
    headerSwitches: checkHeaderSwitches(input, base.fieldNames, base.headerSwitches, where)
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
  if (typeof value === 'number') {
    const banDenials = checkDenials(value, name)
    return { ban: banPerWindow(banDenials, limits, name), banDenials }
  }
  if (value !== undefined) return { ban: checkBan(value, name), banDenials: null }
  const { banDenials } = base
  return { ban: banDenials === null ? base.ban : banPerWindow(banDenials, limits, name), banDenials }
}

/** A route's `config.rateLimit`: `false` (off), an object (merged over the plugin's), or a coded error. */
export function resolveRouteConfig (config: unknown, opts: ResolvedOptions, warn: Warn): ResolvedRoute | false {
  if (config === false) return false
  if (typeof config !== 'object' || config === null || Array.isArray(config)) throw new InvalidRouteConfigError()
  checkRouteKeys(config, 'config.rateLimit.')
  return resolveRoute(config as Record<string, unknown>, opts.route, 'config.rateLimit.', opts.keyGeneratorFor, warn)
}

/** The options given to `fastify.rateLimit()` / `createRateLimit()` (`call`), merged over the plugin's. */
export function resolveLimiterOptions (options: unknown, opts: ResolvedOptions, call: string, warn: Warn): ResolvedRoute {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) fail(call, options, 'an object of options, as a route\'s config.rateLimit')
  checkRouteKeys(options, `${call}.`)
  const { hook } = options as { hook?: unknown }
  if (hook !== undefined) fail(`${call}.hook`, hook, 'no hook: the limiter runs where the app places it')
  for (const option of ['countWhen', 'skipSuccessfulRequests', 'skipFailedRequests', 'settle', 'refundAborted']) {
    const value = (options as Record<string, unknown>)[option]
    if (value !== undefined) fail(`${call}.${option}`, value, 'it on a route\'s config.rateLimit or the plugin\'s options: a limiter the app places settles from the handler (request.rateGuard.settle)')
  }
  return resolveRoute(options as Record<string, unknown>, opts.route, `${call}.`, opts.keyGeneratorFor, warn)
}

/** `@fastify/rate-limit`'s store interface: a class whose instances have `incr` and `child` (see lib/stores/theirs.ts). */
function checkStoreClass (value: unknown): ResolvedOptions['store'] {
  const prototype = (value as { prototype?: Record<string, unknown> } | undefined)?.prototype
  if (typeof value !== 'function' || typeof prototype?.incr !== 'function' || typeof prototype.child !== 'function') {
    fail('store', value, 'a class whose instances have incr(key, callback, timeWindow, max) and child(routeOptions)')
  }
  return value as ResolvedOptions['store']
}

const REDIS_URL = /^rediss?:\/\/[^\s]+$/

function checkRedis (value: unknown): ResolvedOptions['redis'] {
  if (value === undefined || value === null) return undefined
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
  const opts = input as Record<string, unknown>
  checkKeys(opts, PLUGIN_KEYS, '')
  const has = (key: string): boolean => opts[key] !== undefined

  const timeout = has('timeout') ? checkDeadline(opts.timeout, 'timeout') : DEFAULTS.timeout
  const callbacks = new Callbacks(timeout)
  const verifyApiKey = has('verifyApiKey') ? checkFunction<KeyHierarchyOptions['verifyApiKey']>(opts.verifyApiKey, 'verifyApiKey') : undefined
  const apiKeyHeader = has('apiKeyHeader') ? opts.apiKeyHeader : DEFAULTS.apiKeyHeader
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
    callbacks
  }
  const keyGeneratorFor = (ipv6Subnet: number): KeyGenerator => defaultKeyGenerator({ ...hierarchy, ipv6Subnet })

  const nameSpace = has('nameSpace') ? opts.nameSpace : DEFAULTS.nameSpace
  // A brace in the prefix would move the Redis Cluster hash tag away from the identity.
  if (typeof nameSpace !== 'string' || nameSpace.length > 128 || /[{}\s]/.test(nameSpace)) {
    fail('nameSpace', nameSpace, 'a string of at most 128 characters without braces or spaces')
  }

  // Defaults, under the plugin's options: route, limiter and group options are resolved over the result.
  const defaults: ResolvedRoute = {
    hook: 'onRequest',
    // As @fastify/rate-limit (skipOnError: false): a limit nobody can enforce refuses.
    failMode: 'closed',
    ipv6Subnet: DEFAULTS.ipv6Subnet,
    algorithm: DEFAULT_ALGORITHM,
    limits: Object.freeze([{ max: DEFAULTS.max, windowMs: DEFAULTS.timeWindow, burst: null, name: undefined }]),
    shared: null,
    watched: null,
    keyGenerator: keyGeneratorFor(DEFAULTS.ipv6Subnet),
    defaultKey: true,
    ban: null,
    overLimit: undefined,
    cost: 1,
    countWhen: undefined,
    settle: undefined,
    refundAborted: false,
    mode: 'enforce',
    shadowBans: false,
    allowList: null,
    allowListGiven: undefined,
    groupId: undefined,
    errorResponseBuilder: undefined,
    onExceeding: undefined,
    onExceeded: undefined,
    onBanReach: undefined,
    legacyHeaders: true,
    standardHeaders: false,
    banDenials: null,
    fieldNames: (has('enableDraftSpec') ? checkBoolean(opts.enableDraftSpec, 'enableDraftSpec') : false) ? DRAFT_NAMES : PLAIN_NAMES,
    headerSwitches: ALL_HEADERS
  }

  const route = resolveRoute(opts, defaults, '', keyGeneratorFor, warn)
  const store = has('store') ? checkStoreClass(opts.store) : undefined
  if (store !== undefined && has('redis')) fail('store', opts.store, 'a store, or redis, not both')
  return Object.freeze({
    redis: checkRedis(opts.redis),
    store,
    global: has('global') ? checkBoolean(opts.global, 'global') : true,
    nameSpace,
    timeout,
    strict: has('strict') ? checkBoolean(opts.strict, 'strict') : false,
    breaker: checkBreaker(has('breaker') ? opts.breaker : DEFAULTS.breaker),
    banCache: has('banCache') ? checkBoolean(opts.banCache, 'banCache') : true,
    cache: has('cache') ? checkMax(opts.cache, 'cache') : DEFAULTS.cache,
    canonicalKey: (key: string) => canonicalKey(key, route.ipv6Subnet),
    keyGeneratorFor,
    keyTiers: keyTiers(hierarchy),
    callbacks,
    route
  })
}
