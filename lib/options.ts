import type { FastifyRequest } from 'fastify'
import { ALGORITHMS, DEFAULT_ALGORITHM } from './algorithms/index.js'
import type { Algorithm } from './algorithms/index.js'
import { toMilliseconds } from './duration.js'
import { InvalidOptionError, InvalidRouteConfigError } from './errors.js'
import { canonicalKey, defaultKeyGenerator } from './keys.js'
import type { RedisLike } from './stores/redis.js'

/** Option types, defaults and validation: every option is checked once, at register, into one frozen object. */

export type Awaitable<T> = T | Promise<T>
export type KeyGenerator = (request: FastifyRequest) => Awaitable<string>
export type MaxFunction = (request: FastifyRequest, key: string) => Awaitable<number>
export type TimeWindowFunction = (request: FastifyRequest, key: string) => Awaitable<number | string>
export type AllowListFunction = (request: FastifyRequest, key: string) => Awaitable<boolean>
export type KeyCallback = (request: FastifyRequest, key: string) => void
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

export interface BanOptions {
  /** Denials within one time window that start a ban. */
  threshold: number
  /** How long a ban lasts: milliseconds or a string such as `'10 minutes'`. */
  duration: number | string
}

/** The options a route may set in `config.rateLimit`, over the plugin's. */
export interface RouteRateLimitOptions {
  /** How requests are counted: `'sliding-log'` (exact, the default), `'fixed-window'` or `'sliding-window'`. */
  algorithm?: Algorithm
  max?: number | MaxFunction
  timeWindow?: number | string | TimeWindowFunction
  keyGenerator?: KeyGenerator
  ban?: false | BanOptions
  allowList?: readonly string[] | AllowListFunction
  groupId?: string
  errorResponseBuilder?: ErrorResponseBuilder
  onExceeded?: KeyCallback
  onBanReach?: KeyCallback
  legacyHeaders?: boolean
  standardHeaders?: false | 'draft-10'
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
  hook?: HookName
  global?: boolean
  nameSpace?: string
  failMode?: FailMode
  /** `@fastify/rate-limit`'s spelling: true is `failMode: 'open'`, false is `failMode: 'closed'`. */
  skipOnError?: boolean
  timeout?: number
  /** Fail registration when Redis is not ready within 2 s; default: start degraded, keep reconnecting. */
  strict?: boolean
  breaker?: false | BreakerOptions
  cache?: number
  apiKeyHeader?: string | false
  verifyApiKey?: (apiKey: string, request: FastifyRequest) => Awaitable<boolean>
  userId?: (request: FastifyRequest) => unknown
  ipv6Subnet?: number
}

export interface ResolvedBan {
  readonly threshold: number
  readonly durationMs: number
}

export interface ResolvedRoute {
  readonly algorithm: Algorithm
  readonly max: number | MaxFunction
  readonly windowMs: number | TimeWindowFunction
  readonly keyGenerator: KeyGenerator
  readonly ban: ResolvedBan | null
  readonly allowList: ReadonlySet<string> | AllowListFunction | null
  readonly groupId: string | undefined
  readonly errorResponseBuilder: ErrorResponseBuilder | undefined
  readonly onExceeded: KeyCallback | undefined
  readonly onBanReach: KeyCallback | undefined
  readonly legacyHeaders: boolean
  readonly standardHeaders: boolean
}

export interface ResolvedBreaker {
  readonly threshold: number
  readonly coolDownMs: number
}

export interface ResolvedOptions {
  readonly redis: RedisLike | string | readonly string[] | undefined
  readonly hook: HookName
  readonly global: boolean
  readonly nameSpace: string
  readonly failMode: FailMode
  readonly timeout: number
  readonly strict: boolean
  readonly breaker: ResolvedBreaker | null
  readonly cache: number
  /** Writes a key the way the default generator does (see `canonicalKey`). */
  readonly canonicalKey: (key: string) => string
  readonly route: ResolvedRoute
}

const HOOKS: readonly HookName[] = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local']
const ROUTE_KEYS = new Set<string>([
  'algorithm', 'max', 'timeWindow', 'keyGenerator', 'ban', 'allowList', 'groupId', 'errorResponseBuilder',
  'onExceeded', 'onBanReach', 'legacyHeaders', 'standardHeaders'
])
const PLUGIN_KEYS = new Set<string>([
  ...ROUTE_KEYS, 'redis', 'hook', 'global', 'nameSpace', 'failMode', 'skipOnError', 'timeout', 'strict', 'breaker', 'cache',
  'apiKeyHeader', 'verifyApiKey', 'userId', 'ipv6Subnet',
  // Fastify's own registration options reach the plugin too.
  'prefix', 'logLevel', 'logSerializers'
])

export const DEFAULTS = Object.freeze({
  max: 1000,
  timeWindow: 60_000,
  nameSpace: 'rate-guard:',
  timeout: 100,
  breaker: { threshold: 5, coolDown: 500 },
  cache: 10_000,
  apiKeyHeader: 'x-api-key',
  ipv6Subnet: 64
})

/** Renders a bad value for an error message without dumping whole objects or functions. */
function show (value: unknown): string {
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? value.slice(0, 64) + '…' : value)
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? 'an array' : 'an object'
  return String(value)
}

function fail (name: string, value: unknown, expected: string): never {
  throw new InvalidOptionError(name, `expected ${expected}, got ${show(value)}`)
}

/** A positive safe integer, or the coded error naming the option and the value. */
export function checkMax (value: unknown, name = 'max'): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) fail(name, value, 'a positive integer')
  return value
}

/** Integer milliseconds from a number or a human string, or the coded error. */
export function checkDuration (value: unknown, name: string): number {
  const ms = toMilliseconds(value)
  if (ms === undefined) fail(name, value, "a positive number of milliseconds or a duration such as '1 minute'")
  return ms
}

function checkFunction<T> (value: unknown, name: string): T {
  if (typeof value !== 'function') fail(name, value, 'a function')
  return value as T
}

function checkBoolean (value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') fail(name, value, 'true or false')
  return value
}

function checkOneOf<T extends string> (value: unknown, name: string, allowed: readonly T[]): T {
  if (!allowed.includes(value as T)) fail(name, value, `one of ${allowed.map(a => `'${a}'`).join(', ')}`)
  return value as T
}

function checkKeys (input: object, allowed: ReadonlySet<string>, where: string): void {
  for (const key of Object.keys(input)) {
    if (!allowed.has(key)) fail(`${where}${key}`, (input as Record<string, unknown>)[key], 'no such option (see the README for the list)')
  }
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

function checkBan (value: unknown, name: string): ResolvedBan | null {
  if (value === false) return null
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail(name, value, 'false or { threshold, duration }')
  const ban = value as Record<string, unknown>
  checkKeys(ban, new Set(['threshold', 'duration']), `${name}.`)
  return Object.freeze({
    threshold: checkMax(ban.threshold, `${name}.threshold`),
    durationMs: checkDuration(ban.duration, `${name}.duration`)
  })
}

function checkAllowList (value: unknown, name: string, canonical: (key: string) => string): ResolvedRoute['allowList'] {
  if (typeof value === 'function') return value as AllowListFunction
  if (!Array.isArray(value) || !value.every(k => typeof k === 'string')) fail(name, value, 'an array of keys or a function')
  return value.length === 0 ? null : new Set(value.map(canonical))
}

// Printable ASCII without quotes or backslashes: a group id becomes an IETF policy name in a header.
const GROUP_ID = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/

/**
 * Merges one route's (or the plugin's) options over `base`, checking every option given; `canonical`
 * writes allow-list keys the way the key generator does.
 */
export function resolveRoute (input: Record<string, unknown>, base: ResolvedRoute, where: string, canonical: (key: string) => string): ResolvedRoute {
  const has = (key: string): boolean => input[key] !== undefined
  const name = (key: string): string => `${where}${key}`
  const max = input.max
  const timeWindow = input.timeWindow
  const groupId = input.groupId
  const standardHeaders = input.standardHeaders
  if (has('groupId') && (typeof groupId !== 'string' || !GROUP_ID.test(groupId))) {
    fail(name('groupId'), groupId, 'a string of 1 to 64 printable characters without quotes, backslashes or spaces')
  }
  if (has('standardHeaders') && standardHeaders !== false && standardHeaders !== 'draft-10') {
    fail(name('standardHeaders'), standardHeaders, "false or 'draft-10'")
  }
  return Object.freeze({
    algorithm: has('algorithm') ? checkOneOf(input.algorithm, name('algorithm'), ALGORITHMS) : base.algorithm,
    max: !has('max') ? base.max : typeof max === 'function' ? max as MaxFunction : checkMax(max, name('max')),
    windowMs: !has('timeWindow')
      ? base.windowMs
      : typeof timeWindow === 'function' ? timeWindow as TimeWindowFunction : checkDuration(timeWindow, name('timeWindow')),
    keyGenerator: has('keyGenerator') ? checkFunction<KeyGenerator>(input.keyGenerator, name('keyGenerator')) : base.keyGenerator,
    ban: has('ban') ? checkBan(input.ban, name('ban')) : base.ban,
    allowList: has('allowList') ? checkAllowList(input.allowList, name('allowList'), canonical) : base.allowList,
    groupId: has('groupId') ? groupId as string : undefined,
    errorResponseBuilder: has('errorResponseBuilder')
      ? checkFunction<ErrorResponseBuilder>(input.errorResponseBuilder, name('errorResponseBuilder'))
      : base.errorResponseBuilder,
    onExceeded: has('onExceeded') ? checkFunction<KeyCallback>(input.onExceeded, name('onExceeded')) : base.onExceeded,
    onBanReach: has('onBanReach') ? checkFunction<KeyCallback>(input.onBanReach, name('onBanReach')) : base.onBanReach,
    legacyHeaders: has('legacyHeaders') ? checkBoolean(input.legacyHeaders, name('legacyHeaders')) : base.legacyHeaders,
    standardHeaders: has('standardHeaders') ? standardHeaders === 'draft-10' : base.standardHeaders
  })
}

/** A route's `config.rateLimit`: `false` (off), an object (merged over the plugin's), or a coded error. */
export function resolveRouteConfig (config: unknown, opts: ResolvedOptions, route: string): ResolvedRoute | false {
  if (config === false) return false
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new InvalidRouteConfigError(route, show(config))
  }
  checkKeys(config, ROUTE_KEYS, 'config.rateLimit.')
  return resolveRoute(config as Record<string, unknown>, opts.route, 'config.rateLimit.', opts.canonicalKey)
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

  const apiKeyHeader = has('apiKeyHeader') ? opts.apiKeyHeader : DEFAULTS.apiKeyHeader
  if (apiKeyHeader !== false && (typeof apiKeyHeader !== 'string' || !/^[a-z0-9!#$%&'*+.^_`|~-]+$/i.test(apiKeyHeader))) {
    fail('apiKeyHeader', apiKeyHeader, 'a header name or false')
  }
  const ipv6Subnet = has('ipv6Subnet') ? opts.ipv6Subnet : DEFAULTS.ipv6Subnet
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < 1 || ipv6Subnet > 128) {
    fail('ipv6Subnet', ipv6Subnet, 'an integer from 1 to 128')
  }
  const canonical = (key: string): string => canonicalKey(key, ipv6Subnet)
  const keyGenerator = defaultKeyGenerator({
    apiKeyHeader: apiKeyHeader === false ? false : apiKeyHeader.toLowerCase(),
    verifyApiKey: has('verifyApiKey') ? checkFunction(opts.verifyApiKey, 'verifyApiKey') : undefined,
    userId: has('userId') ? checkFunction(opts.userId, 'userId') : undefined,
    ipv6Subnet
  })

  if (has('failMode') && has('skipOnError')) fail('skipOnError', opts.skipOnError, 'not both failMode and skipOnError')
  const failMode = has('skipOnError')
    ? (checkBoolean(opts.skipOnError, 'skipOnError') ? 'open' : 'closed')
    : has('failMode') ? checkOneOf(opts.failMode, 'failMode', FAIL_MODES) : 'open'

  const nameSpace = has('nameSpace') ? opts.nameSpace : DEFAULTS.nameSpace
  // A brace in the prefix would move the Redis Cluster hash tag away from the identity.
  if (typeof nameSpace !== 'string' || nameSpace.length > 128 || /[{}\s]/.test(nameSpace)) {
    fail('nameSpace', nameSpace, 'a string of at most 128 characters without braces or spaces')
  }

  const base: ResolvedRoute = {
    algorithm: DEFAULT_ALGORITHM,
    max: DEFAULTS.max,
    windowMs: DEFAULTS.timeWindow,
    keyGenerator,
    ban: null,
    allowList: null,
    groupId: undefined,
    errorResponseBuilder: undefined,
    onExceeded: undefined,
    onBanReach: undefined,
    legacyHeaders: true,
    standardHeaders: false
  }

  return Object.freeze({
    redis: checkRedis(opts.redis),
    hook: has('hook') ? checkOneOf(opts.hook, 'hook', HOOKS) : 'onRequest',
    global: has('global') ? checkBoolean(opts.global, 'global') : true,
    nameSpace,
    failMode,
    timeout: has('timeout') ? checkMax(opts.timeout, 'timeout') : DEFAULTS.timeout,
    strict: has('strict') ? checkBoolean(opts.strict, 'strict') : false,
    breaker: checkBreaker(has('breaker') ? opts.breaker : DEFAULTS.breaker),
    cache: has('cache') ? checkMax(opts.cache, 'cache') : DEFAULTS.cache,
    canonicalKey: canonical,
    route: resolveRoute(opts, base, '', canonical)
  })
}
