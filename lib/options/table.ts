import { ALGORITHMS, DEFAULT_ALGORITHM } from '../algorithms/index.js'
import { checkBanOption } from './bans.js'
import { checkConcurrency } from './concurrency.js'
import { checkBoolean, checkDeadline, checkFunction, checkMax, checkOneOf, checkShadow } from './checks.js'
import { ADDRESSLESS, API_KEY_HEADER, checkAllowList, checkApiKeyHeader, checkSubnet } from './clients.js'
import { THEIR_DEFAULTS } from './compat.js'
import { InvalidGroupIdError } from '../errors.js'
import { checkStandardHeaders, checkSwitches } from './headers.js'
import { checkCost, checkLimitMax, checkLimitWindow, checkRouteLimits, checkShared } from './limits.js'
import type { ResolvedOptions, ResolvedRoute } from './resolved.js'
import { checkBreaker, checkNameSpace, checkRedis, checkStoreClass } from './stores.js'
import { MAX_WAITING, checkMaxWait } from './wait.js'
import type {
  BanCallback, CountWhenFunction, ErrorFormat, ErrorResponseBuilder, ExceededCallback, FailMode, HookName, KeyCallback, KeyGenerator, Mode, RateGuardOptions,
  RouteRateLimitOptions, SettleFunction
} from '../types.js'

// Every option, once: where it may be given, its check, its default, and how a route's value merges over the
// plugin's. The pass that reads the table is read.ts (what each place accepts, each option checked alone),
// route.ts (a budget's options over the plugin's) and plugin.ts (the plugin's).

/**
 * Where an option may be given: `'route'` ones on the plugin, on a route (`config.rateLimit`) and on a limiter
 * (`fastify.rateLimit()`, `createRateLimit()`), each merged over the plugin's; `'plugin'` ones only at register,
 * as they hold for the whole plugin (one client, one store, one way to name a client, one set of header names).
 */
export type At = 'plugin' | 'route'

/**
 * How an option reaches the resolved object, which is how a route's value merges over the plugin's:
 * - `'over'`: alone, into the field of its name; a route's value replaces the plugin's, and none keeps it;
 * - `'own'`: alone, into the field of its name; a route's value or none, never the plugin's;
 * - `'with'`: with the other options of one field, by that field's resolver (a limit from its parts, a ban
 *   over the limits, the allow list under the key generator…): see route.ts and plugin.ts.
 */
export type Merge = 'over' | 'own' | 'with'

/**
 * How a limiter takes a route option: as a route does, refused (what settles after the response: a limiter the
 * app places settles from the handler), or said unused (`hook`: the limiter runs where the app places it).
 */
export type OnLimiter = 'read' | 'refused' | 'unused'

/** An option's value alone, checked and typed, or the coded error naming it (`name`: where it was given). */
export type Check<T> = (value: unknown, name: string) => T

/** An option: its check, and its value when nobody gives it (written as an app would give it, read by the check; none: undefined). */
interface Spec<A extends At, T, M extends Merge, F> {
  readonly at: A
  readonly check: Check<T>
  readonly fallback: F
  readonly merge: M
  readonly limiter: OnLimiter
}

const option = <A extends At, M extends Merge>(at: A, merge: M) =>
  <T, const F = undefined>(check: Check<T>, fallback?: F, limiter: OnLimiter = 'read'): Spec<A, T, M, F> => ({ at, check, fallback: fallback as F, merge, limiter })
const over = option('route', 'over')
const own = option('route', 'own')
const routeWith = option('route', 'with')
const plugin = option('plugin', 'over')
const pluginWith = option('plugin', 'with')

const HOOKS: readonly HookName[] = ['onRequest', 'preParsing', 'preValidation', 'preHandler']
const MODES: readonly Mode[] = ['enforce', 'shadow', 'report']
const FAIL_MODES: readonly FailMode[] = ['open', 'closed', 'local']
const ERROR_FORMATS: readonly ErrorFormat[] = ['default', 'problem']
const CLOCKS: ReadonlyArray<'redis' | 'app'> = ['redis', 'app']

/** Any string names a group, as theirs; the empty one none (theirs: `if (groupId)`). */
function checkGroupId (value: unknown): string | undefined {
  if (typeof value !== 'string') throw new InvalidGroupIdError()
  return value === '' ? undefined : value
}

export const OPTIONS = {
  // A budget's options read alone.
  hook: over((value, name) => checkOneOf(value, name, HOOKS), 'onRequest', 'unused'),
  algorithm: over((value, name) => checkOneOf(value, name, ALGORITHMS), DEFAULT_ALGORITHM),
  shared: over(checkShared, false),
  cost: over(checkCost, 1),
  concurrency: over(checkConcurrency, false),
  maxWait: over(checkMaxWait, false),
  maxQueue: over(checkMax),
  settle: over(checkFunction<SettleFunction>, undefined, 'refused'),
  refundAborted: over(checkBoolean, false, 'refused'),
  mode: over((value, name) => checkOneOf(value, name, MODES), 'enforce'),
  shadow: over(checkShadow, { ban: false }),
  errorResponseBuilder: over(checkFunction<ErrorResponseBuilder>),
  errorFormat: over((value, name) => checkOneOf(value, name, ERROR_FORMATS), 'default'),
  onExceeding: over(checkFunction<KeyCallback>),
  onExceeded: over(checkFunction<ExceededCallback>),
  onBanReach: over(checkFunction<BanCallback>),
  legacyHeaders: over(checkBoolean, true),
  standardHeaders: over(checkStandardHeaders, false),
  groupId: own(checkGroupId),
  // A budget's options read with others: its limits (limits.ts), ban (bans.ts), keys (clients.ts), header
  // switches (headers.ts), and `@fastify/rate-limit`'s or express-rate-limit's spellings (compat.ts).
  max: routeWith(checkLimitMax, THEIR_DEFAULTS.max),
  timeWindow: routeWith(checkLimitWindow, THEIR_DEFAULTS.timeWindow),
  burst: routeWith(checkMax),
  limits: routeWith(checkRouteLimits),
  ban: routeWith(checkBanOption, false),
  keyGenerator: routeWith(checkFunction<KeyGenerator>),
  ipv6Subnet: routeWith(checkSubnet, THEIR_DEFAULTS.ipv6Subnet),
  allowList: routeWith(checkAllowList),
  addHeaders: routeWith(checkSwitches),
  addHeadersOnExceeding: routeWith(checkSwitches),
  continueExceeding: routeWith(checkBoolean, false),
  exponentialBackoff: routeWith(checkBoolean, false),
  countWhen: routeWith(checkFunction<CountWhenFunction>, undefined, 'refused'),
  skipSuccessfulRequests: routeWith(checkBoolean, false, 'refused'),
  skipFailedRequests: routeWith(checkBoolean, false, 'refused'),
  failMode: routeWith((value, name) => checkOneOf(value, name, FAIL_MODES), 'closed'),
  skipOnError: routeWith(checkBoolean),
  // The plugin's options read alone (stores.ts: where requests are counted).
  redis: plugin(checkRedis),
  store: plugin(checkStoreClass),
  global: plugin(checkBoolean, true),
  nameSpace: plugin(checkNameSpace, 'rate-guard:'),
  enableDraftSpec: plugin(checkBoolean, false),
  timeout: plugin(checkDeadline, 100),
  clock: plugin((value, name) => checkOneOf(value, name, CLOCKS), 'redis'),
  callbackTimeout: plugin(checkDeadline, 10_000),
  strict: plugin(checkBoolean, false),
  breaker: plugin(checkBreaker, { threshold: 5, coolDown: 500 }),
  banCache: plugin(checkBoolean, true),
  cache: plugin(checkMax, 10_000),
  // The requests waiting at once (`maxWait`) in the registration, all its budgets together (wait.ts).
  maxWaiting: plugin(checkMax, MAX_WAITING),
  // Who a request without a client address is (lib/addressless.ts): one shared client, or its connection.
  addressless: plugin((value, name) => checkOneOf(value, name, ADDRESSLESS), 'shared'),
  // The plugin's options read together: the key hierarchy (clients.ts).
  apiKeyHeader: pluginWith(checkApiKeyHeader, API_KEY_HEADER),
  verifyApiKey: pluginWith(checkFunction<NonNullable<RateGuardOptions['verifyApiKey']>>),
  userId: pluginWith(checkFunction<NonNullable<RateGuardOptions['userId']>>)
} as const

export type Table = typeof OPTIONS
export type OptionName = keyof Table
type Entry = Spec<At, unknown, Merge, unknown>

/** Every option with its entry, in the table's order. */
export const ENTRIES = Object.entries(OPTIONS) as ReadonlyArray<[OptionName, Entry]>

/** Each option given, checked alone (absent: not given). */
export type Given = { readonly [K in OptionName]?: ReturnType<Table[K]['check']> }

/** The options at `A` read alone: into the fields of their names. */
type Alone<A extends At> = { [K in OptionName]: Table[K]['at'] extends A ? (Table[K]['merge'] extends 'with' ? never : K) : never }[OptionName]
/** Those options' values: as their checks make them, undefined where none is given and there is no default. */
export type ReadAlone<A extends At> = {
  readonly [K in Alone<A>]: Table[K] extends Spec<A, infer T, Merge, infer F> ? (F extends undefined ? T | undefined : T) : never
}

// The table and the public types name the same options, and the options read alone fill the resolved fields
// of their names, so an option added to one alone fails the build.
type Exactly<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
type Holds<T extends true> = T
type Scoped<A extends At> = { [K in OptionName]: Table[K]['at'] extends A ? K : never }[OptionName]
export type TableMatchesTypes = Holds<Exactly<OptionName, keyof RateGuardOptions> | Exactly<Scoped<'route'>, keyof RouteRateLimitOptions>>
export type AloneMatchesResolved = Holds<
  (ReadAlone<'route'> extends Pick<ResolvedRoute, Alone<'route'>> ? true : false) |
  (ReadAlone<'plugin'> extends Pick<ResolvedOptions, Alone<'plugin'>> ? true : false)
>

const named = (test: (entry: Entry) => boolean): ReadonlySet<string> => new Set(ENTRIES.filter(([, entry]) => test(entry)).map(([name]) => name))
/** The options a route or a limiter takes, and those that hold for the whole plugin. */
export const ROUTE_OPTIONS = named(entry => entry.at === 'route')
export const PLUGIN_ONLY = named(entry => entry.at === 'plugin')

/** The defaults tests and docs name: @fastify/rate-limit's for a limit, the decision's deadline and the breaker's. */
export const DEFAULTS = Object.freeze({ ...THEIR_DEFAULTS, timeout: OPTIONS.timeout.fallback, breaker: OPTIONS.breaker.fallback })
