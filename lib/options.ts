import { isIP } from 'node:net'
import type { FastifyRequest } from 'fastify'
import { ALGORITHMS, DEFAULT_ALGORITHM } from './algorithms/index.js'
import type { Algorithm, Limit } from './algorithms/index.js'
import { checkBoolean, checkDeadline, checkDuration, checkFunction, checkKeys, checkMax, checkOneOf, fail, show } from './check.js'
import { ALL_HEADERS, DRAFT_NAMES, PLAIN_NAMES, banPerWindow, checkDenials, checkHeaderSwitches, rejectUnsupported } from './compat.js'
import type { FieldNames, HeaderSwitches } from './compat.js'
import { InvalidRouteConfigError } from './errors.js'
import { canonicalKey, defaultKeyGenerator, keyTiers } from './keys.js'
import { Callbacks } from './callbacks.js'
import type { KeyHierarchyOptions } from './keys.js'
import type { RedisLike } from './stores/redis.js'
import type { BanPolicy } from './stores/store.js'

/** Option types, defaults and validation: every option is checked once, at register, into one frozen object. */

export type Awaitable<T> = T | Promise<T>
/** The client's key: a number is taken as its decimal string, as `@fastify/rate-limit` does. */
export type KeyGenerator = (request: FastifyRequest) => Awaitable<string | number>
export type MaxFunction = (request: FastifyRequest, key: string) => Awaitable<number>
export type TimeWindowFunction = (request: FastifyRequest, key: string) => Awaitable<number | string>
export type AllowListFunction = (request: FastifyRequest, key: string) => Awaitable<boolean>
export type KeyCallback = (request: FastifyRequest, key: string) => void
/** What `onBanReach` is told of the ban: its length, and which ban in a row it is (1 for the first). */
export interface BanInfo {
  durationMs: number
  offence: number
}
export type BanCallback = (request: FastifyRequest, key: string, ban: BanInfo) => void
export type HookName = 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
export type FailMode = 'open' | 'closed' | 'local'

/** What `errorResponseBuilder` is given. `ttl` is in milliseconds; `after` is the same wait in words. */
export interface ErrorResponseContext {
  statusCode: 429 | 403
  ban: boolean
  max: number
  ttl: number
  after: string
}
export type ErrorResponseBuilder = (request: FastifyRequest, context: ErrorResponseContext) => object

/** Bans: every ban as long (`duration`), or longer for repeat offenders (`escalate`). */
export type BanOptions = BanCommon & (
  | {
    /** How long a ban lasts (the first, with a factor): milliseconds or a string such as `'10 minutes'`. */
    duration: number | string
    /** Each ban in a row this many times as long as the one before (`2`: doubling), up to `maxDuration`. */
    escalate?: number
    /** The cap on a ban's length with a factor. Default `'1 day'`. */
    maxDuration?: number | string
  }
  | {
    /** The length of every ban in a row (`['1m', '5m', '1h']`), the last repeating. */
    escalate: ReadonlyArray<number | string>
    duration?: never
    maxDuration?: never
  }
)

export interface BanCommon {
  /** Denials within one time window (of the limit hit) that start a ban. */
  threshold: number
  /** A ban still counts toward the next one's length this long after it ends. Default `'1 day'`. */
  forget?: number | string
}

/** One limit: `max` requests per `timeWindow`, and for the token bucket up to `burst` at once (default `max`). */
export interface LimitOptions {
  max: number | MaxFunction
  timeWindow: number | string | TimeWindowFunction
  burst?: number
  /** Its name in the IETF `RateLimit` fields. Default: the budget's (group id or `default`), `-2`, `-3`... after the first. */
  name?: string
}

/** A budget shared by every client of a route, beside each client's own: one limit, or several. */
export type SharedOptions =
  | { max: number, timeWindow: number | string, burst?: number, name?: string }
  | { limits: ReadonlyArray<{ max: number, timeWindow: number | string, burst?: number, name?: string }> }

/** The options a route may set in `config.rateLimit`, over the plugin's. */
export interface RouteRateLimitOptions {
  /** How requests are counted: `'sliding-log'` (exact, the default), `'fixed-window'`, `'sliding-window'` or `'token-bucket'`. */
  algorithm?: Algorithm
  max?: number | MaxFunction
  timeWindow?: number | string | TimeWindowFunction
  /** The token bucket's capacity: requests a full bucket lets through at once. Default `max`. */
  burst?: number
  /** Several limits in one decision (instead of `max` / `timeWindow`): a request must pass them all. */
  limits?: readonly LimitOptions[]
  /** A budget the route's clients share, checked after each client's own; `false` for none. */
  shared?: false | SharedOptions
  keyGenerator?: KeyGenerator
  /** Bans; or, as `@fastify/rate-limit` takes it, a number N: a ban of one window from the (N + 1)th denial. */
  ban?: false | BanOptions | number
  allowList?: readonly string[] | AllowListFunction
  groupId?: string
  errorResponseBuilder?: ErrorResponseBuilder
  /** Called on each allowed request (`@fastify/rate-limit`'s name: the request did not exceed the limit). */
  onExceeding?: KeyCallback
  onExceeded?: KeyCallback
  onBanReach?: BanCallback
  legacyHeaders?: boolean
  standardHeaders?: false | 'draft-10'
  /** Per-header switches on refusals: `{ 'x-ratelimit-reset': false, 'retry-after': false }` (draft names with `enableDraftSpec`). */
  addHeaders?: Partial<Record<'x-ratelimit-limit' | 'x-ratelimit-remaining' | 'x-ratelimit-reset' | 'ratelimit-limit' | 'ratelimit-remaining' | 'ratelimit-reset' | 'retry-after', boolean>>
  /** Per-header switches on allowed requests. */
  addHeadersOnExceeding?: Partial<Record<'x-ratelimit-limit' | 'x-ratelimit-remaining' | 'x-ratelimit-reset' | 'ratelimit-limit' | 'ratelimit-remaining' | 'ratelimit-reset', boolean>>
  /** The hook that limits: `'onRequest'` (default), or later, once the request is authenticated or parsed. */
  hook?: HookName
  /** What decides when Redis cannot in time: `'open'` (default) lets the request through, `'closed'` answers 503, `'local'` counts in process. */
  failMode?: FailMode
  /** `@fastify/rate-limit`'s spelling: true is `failMode: 'open'`, false is `failMode: 'closed'`. */
  skipOnError?: boolean
  /** Bits of an IPv6 address that make one client (1–128, default 64), for the default key. */
  ipv6Subnet?: number
  /** `@fastify/rate-limit`'s; not supported here: only `false` is accepted (use `ban`). */
  continueExceeding?: false
  /** `@fastify/rate-limit`'s; not supported here: only `false` is accepted (use `ban.escalate`). */
  exponentialBackoff?: false
}

export interface BreakerOptions {
  /** Transient Redis failures in a row that open the breaker. */
  threshold: number
  /** How long it stays open before one decision probes Redis: ms or a string such as `'1s'`. */
  coolDown: number | string
}

export interface RateGuardOptions extends RouteRateLimitOptions {
  /** A client you lend, a URL, or the URLs of Redis Cluster nodes (a client is made with fail-fast options). */
  redis?: RedisLike | string | readonly string[]
  global?: boolean
  nameSpace?: string
  /** Send the three fields as `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (an IETF draft, as `@fastify/rate-limit` does) instead of `X-RateLimit-*`. */
  enableDraftSpec?: boolean
  /** How long Redis has to answer a decision (ms, 1 to 60,000) before `failMode` decides; time the request waits for the app's own event loop is not counted. */
  timeout?: number
  /** Fail registration when Redis is not ready within 2 s; default: start degraded, keep reconnecting. */
  strict?: boolean
  breaker?: false | BreakerOptions
  /**
   * Hold bans Redis reported in process until they end, so a banned client costs no Redis call (default
   * true). Lift bans with `fastify.rateGuard.unban`, which every instance hears; set false if bans are
   * lifted behind the plugin's back (a `DEL` from redis-cli).
   */
  banCache?: boolean
  cache?: number
  apiKeyHeader?: string | false
  verifyApiKey?: (apiKey: string, request: FastifyRequest) => Awaitable<boolean>
  userId?: (request: FastifyRequest) => unknown
}

export interface ResolvedLimit {
  readonly max: number | MaxFunction
  readonly windowMs: number | TimeWindowFunction
  /** `null`: the limit's max. */
  readonly burst: number | null
  readonly name: string | undefined
}

export interface ResolvedRoute {
  readonly hook: HookName
  readonly failMode: FailMode
  readonly ipv6Subnet: number
  readonly algorithm: Algorithm
  readonly limits: readonly ResolvedLimit[]
  readonly shared: readonly ResolvedLimit[] | null
  readonly keyGenerator: KeyGenerator
  /** The hierarchical default (API key, user, IP), which `ipv6Subnet` shapes; false for the app's own. */
  readonly defaultKey: boolean
  readonly ban: BanPolicy | null
  /** `ban: N` as given, when it was: a route with another window bans for its own window. */
  readonly banDenials: number | null
  readonly allowList: ReadonlySet<string> | AllowListFunction | null
  /** The allow list as given: written again under a route's own `ipv6Subnet`. */
  readonly allowListGiven: unknown
  readonly groupId: string | undefined
  readonly errorResponseBuilder: ErrorResponseBuilder | undefined
  readonly onExceeding: KeyCallback | undefined
  readonly onExceeded: KeyCallback | undefined
  readonly onBanReach: BanCallback | undefined
  readonly legacyHeaders: boolean
  readonly standardHeaders: boolean
  /** The names of the binding limit's three fields (set for the whole plugin by `enableDraftSpec`). */
  readonly fieldNames: FieldNames
  readonly headerSwitches: HeaderSwitches
}

export interface ResolvedBreaker {
  readonly threshold: number
  readonly coolDownMs: number
}

export interface ResolvedOptions {
  readonly redis: RedisLike | string | readonly string[] | undefined
  readonly global: boolean
  readonly nameSpace: string
  readonly timeout: number
  readonly strict: boolean
  readonly breaker: ResolvedBreaker | null
  readonly banCache: boolean
  readonly cache: number
  /** Writes a key the way the default generator does with the plugin's `ipv6Subnet` (see `canonicalKey`). */
  readonly canonicalKey: (key: string) => string
  /** The default key generator for a subnet. */
  readonly keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator
  /** Which tiers the default key generator names clients by (for the log at register). */
  readonly keyTiers: string
  /** Runs the app's callbacks under the deadline, with their fallbacks. */
  readonly callbacks: Callbacks
  /** The plugin's options as the base of every route's, limiter's and group's. */
  readonly route: ResolvedRoute
}

const HOOKS: readonly HookName[] = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local']
const ROUTE_KEYS = new Set<string>([
  'algorithm', 'max', 'timeWindow', 'burst', 'limits', 'shared', 'keyGenerator', 'ban', 'allowList', 'groupId', 'errorResponseBuilder',
  'onExceeding', 'onExceeded', 'onBanReach', 'legacyHeaders', 'standardHeaders', 'addHeaders', 'addHeadersOnExceeding',
  'continueExceeding', 'exponentialBackoff', 'hook', 'failMode', 'skipOnError', 'ipv6Subnet'
])
/** What only the plugin sets: one client, one store, one way to name a client, one set of header names. */
const PLUGIN_ONLY = new Set<string>([
  'redis', 'global', 'nameSpace', 'enableDraftSpec', 'timeout', 'strict', 'breaker', 'banCache', 'cache', 'apiKeyHeader', 'verifyApiKey', 'userId'
])
const PLUGIN_KEYS = new Set<string>([
  ...ROUTE_KEYS, ...PLUGIN_ONLY,
  // Fastify's own registration options reach the plugin too.
  'prefix', 'logLevel', 'logSerializers'
])

export const DEFAULTS = Object.freeze({
  max: 1000,
  timeWindow: 60_000,
  nameSpace: 'rate-guard:',
  timeout: 100,
  breaker: { threshold: 5, coolDown: 500 },
  banMaxDuration: 24 * 3600_000,
  banForget: 24 * 3600_000,
  cache: 10_000,
  apiKeyHeader: 'x-api-key',
  ipv6Subnet: 64
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

/** Steps a factor ladder may take before it reaches its cap: 2^40 ms outlasts any cap worth setting. */
const MAX_LADDER = 64

function checkBan (value: unknown, name: string): BanPolicy | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, 'false or { threshold, duration, escalate }')
  const ban = value as Record<string, unknown>
  checkKeys(ban, new Set(['threshold', 'duration', 'escalate', 'maxDuration', 'forget']), `${name}.`)
  const threshold = checkMax(ban.threshold, `${name}.threshold`)
  const forgetMs = ban.forget === undefined ? DEFAULTS.banForget : checkDuration(ban.forget, `${name}.forget`)
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
      const cap = ban.maxDuration === undefined ? Math.max(DEFAULTS.banMaxDuration, ladder[0]!) : checkDuration(ban.maxDuration, `${name}.maxDuration`)
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

// The largest product of a limit's size and window (or burst and window) the scripts count exactly: Lua
// numbers are doubles, and the token bucket counts in ticks of 1/max ms.
const MAX_PRODUCT = 2 ** 50

/** A limit's values as one decision takes them, or a coded error (the product bound keeps the arithmetic exact). */
export function checkLimit (max: number, windowMs: number, burst: number, name: string): Limit {
  if (Math.max(max, burst) * windowMs > MAX_PRODUCT) {
    fail(name, `${max} per ${windowMs} ms`, 'max (and burst) × timeWindow in ms up to 2^50')
  }
  return { max, windowMs, burst }
}

function checkOneLimit (input: Record<string, unknown>, base: ResolvedLimit | undefined, name: string, statics: boolean): ResolvedLimit {
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
  if (typeof limit.max === 'number' && typeof limit.windowMs === 'number') checkLimit(limit.max, limit.windowMs, limit.burst ?? limit.max, `${name}max`)
  return limit
}

function checkLimitList (value: unknown, name: string, statics: boolean): readonly ResolvedLimit[] {
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

function checkShared (value: unknown, name: string): readonly ResolvedLimit[] | null {
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

/**
 * An allow list's keys as the key generator writes them. A bare address (`@fastify/rate-limit`'s keys are
 * addresses) also stands for its `ip:` key; it stays as written for a key generator of the app's own.
 */
function checkAllowList (value: unknown, name: string, canonical: (key: string) => string): ResolvedRoute['allowList'] {
  if (typeof value === 'function') return value as AllowListFunction
  if (!Array.isArray(value) || !value.every(k => typeof k === 'string')) fail(name, value, 'an array of keys or a function')
  return value.length === 0 ? null : new Set(value.flatMap(key => isIP(key) === 0 ? [canonical(key)] : [key, canonical(`ip:${key}`)]))
}

// Printable ASCII without quotes or backslashes: a group id or a limit's name becomes an IETF policy name in a header.
const POLICY_NAME = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/

function checkPolicyName (value: unknown, name: string): string {
  if (typeof value !== 'string' || !POLICY_NAME.test(value)) {
    fail(name, value, 'a string of 1 to 64 printable characters without quotes, backslashes or spaces')
  }
  return value
}

/** `failMode`, or `@fastify/rate-limit`'s `skipOnError` (true: open, false: closed), or undefined. */
function checkFailMode (input: Record<string, unknown>, where: string): FailMode | undefined {
  const { failMode, skipOnError } = input
  if (skipOnError === undefined) return failMode === undefined ? undefined : checkOneOf(failMode, `${where}failMode`, FAIL_MODES)
  if (failMode !== undefined) fail(`${where}skipOnError`, skipOnError, 'not both failMode and skipOnError')
  return checkBoolean(skipOnError, `${where}skipOnError`) ? 'open' : 'closed'
}

function checkSubnet (value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 128) fail(name, value, 'an integer from 1 to 128')
  return value
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
export function resolveRoute (input: Record<string, unknown>, base: ResolvedRoute, where: string, keyGeneratorFor: (ipv6Subnet: number) => KeyGenerator): ResolvedRoute {
  const has = (key: string): boolean => input[key] !== undefined
  const name = (key: string): string => `${where}${key}`
  const ipv6Subnet = has('ipv6Subnet') ? checkSubnet(input.ipv6Subnet, name('ipv6Subnet')) : base.ipv6Subnet
  const newSubnet = ipv6Subnet !== base.ipv6Subnet
  const defaultKey = has('keyGenerator') ? false : base.defaultKey
  const groupId = input.groupId
  const standardHeaders = input.standardHeaders
  if (has('groupId')) checkPolicyName(groupId, name('groupId'))
  if (has('standardHeaders') && standardHeaders !== false && standardHeaders !== 'draft-10') {
    fail(name('standardHeaders'), standardHeaders, "false or 'draft-10'")
  }
  const oneLimit = has('max') || has('timeWindow') || has('burst')
  if (has('limits') && oneLimit) fail(name('limits'), input.limits, 'limits, or max / timeWindow / burst, not both')
  if (oneLimit && base.limits.length > 1 && !(has('max') && has('timeWindow'))) {
    fail(name(has('max') ? 'max' : 'timeWindow'), input[has('max') ? 'max' : 'timeWindow'], 'both max and timeWindow: the plugin has several limits to take the other from')
  }
  // One limit given in parts takes what it does not give from the base's single limit.
  const limits = has('limits')
    ? checkLimitList(input.limits, name('limits'), false)
    : oneLimit ? Object.freeze([checkOneLimit(input, base.limits.length === 1 ? base.limits[0] : undefined, where, false)]) : base.limits
  rejectUnsupported(input, where)
  const algorithm = has('algorithm') ? checkOneOf(input.algorithm, name('algorithm'), ALGORITHMS) : base.algorithm
  const shared = has('shared') ? checkShared(input.shared, name('shared')) : base.shared
  if (algorithm !== 'token-bucket' && [...limits, ...shared ?? []].some(limit => limit.burst !== null)) {
    fail(name('burst'), limits.find(limit => limit.burst !== null)?.burst ?? shared?.find(limit => limit.burst !== null)?.burst, "no burst but with algorithm: 'token-bucket'")
  }
  const allowListGiven = has('allowList') ? input.allowList : base.allowListGiven
  return Object.freeze({
    hook: has('hook') ? checkOneOf(input.hook, name('hook'), HOOKS) : base.hook,
    failMode: checkFailMode(input, where) ?? base.failMode,
    ipv6Subnet,
    algorithm,
    limits,
    shared,
    keyGenerator: has('keyGenerator')
      ? checkFunction<KeyGenerator>(input.keyGenerator, name('keyGenerator'))
      : defaultKey && newSubnet ? keyGeneratorFor(ipv6Subnet) : base.keyGenerator,
    defaultKey,
    ...resolveBan(input.ban, base, limits, name('ban')),
    allowList: has('allowList') || (newSubnet && allowListGiven !== undefined)
      ? checkAllowList(allowListGiven, name('allowList'), key => canonicalKey(key, ipv6Subnet))
      : base.allowList,
    allowListGiven,
    groupId: has('groupId') ? groupId as string : undefined,
    errorResponseBuilder: has('errorResponseBuilder')
      ? checkFunction<ErrorResponseBuilder>(input.errorResponseBuilder, name('errorResponseBuilder'))
      : base.errorResponseBuilder,
    onExceeding: has('onExceeding') ? checkFunction<KeyCallback>(input.onExceeding, name('onExceeding')) : base.onExceeding,
    onExceeded: has('onExceeded') ? checkFunction<KeyCallback>(input.onExceeded, name('onExceeded')) : base.onExceeded,
    onBanReach: has('onBanReach') ? checkFunction<BanCallback>(input.onBanReach, name('onBanReach')) : base.onBanReach,
    legacyHeaders: has('legacyHeaders') ? checkBoolean(input.legacyHeaders, name('legacyHeaders')) : base.legacyHeaders,
    standardHeaders: has('standardHeaders') ? standardHeaders === 'draft-10' : base.standardHeaders,
    fieldNames: base.fieldNames,
    headerSwitches: checkHeaderSwitches(input, base.fieldNames, base.headerSwitches, where)
  })
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
export function resolveRouteConfig (config: unknown, opts: ResolvedOptions, route: string): ResolvedRoute | false {
  if (config === false) return false
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new InvalidRouteConfigError(route, show(config))
  }
  checkRouteKeys(config, 'config.rateLimit.')
  return resolveRoute(config as Record<string, unknown>, opts.route, 'config.rateLimit.', opts.keyGeneratorFor)
}

/** The options given to `fastify.rateLimit()` / `createRateLimit()` (`call`), merged over the plugin's. */
export function resolveLimiterOptions (options: unknown, opts: ResolvedOptions, call: string): ResolvedRoute {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) fail(call, options, 'an object of options, as a route\'s config.rateLimit')
  checkRouteKeys(options, `${call}.`)
  const { hook } = options as { hook?: unknown }
  if (hook !== undefined) fail(`${call}.hook`, hook, 'no hook: the limiter runs where the app places it')
  return resolveRoute(options as Record<string, unknown>, opts.route, `${call}.`, opts.keyGeneratorFor)
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

/** Checks and resolves the plugin options into one frozen object, or throws a coded error. */
export function resolveOptions (input: unknown): ResolvedOptions {
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
    failMode: 'open',
    ipv6Subnet: DEFAULTS.ipv6Subnet,
    algorithm: DEFAULT_ALGORITHM,
    limits: Object.freeze([{ max: DEFAULTS.max, windowMs: DEFAULTS.timeWindow, burst: null, name: undefined }]),
    shared: null,
    keyGenerator: keyGeneratorFor(DEFAULTS.ipv6Subnet),
    defaultKey: true,
    ban: null,
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

  const route = resolveRoute(opts, defaults, '', keyGeneratorFor)
  return Object.freeze({
    redis: checkRedis(opts.redis),
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
