import { ALGORITHMS, DEFAULT_ALGORITHM } from '../algorithms/index.js'
import { checkBanOption } from './bans.js'
import { checkConcurrency } from './concurrency.js'
import { checkBoolean, checkDeadline, checkFunction, checkMax, checkOneOf, checkShadow } from './checks.js'
import { ADDRESSLESS, API_KEY_HEADER, checkAllowList, checkApiKeyHeader, checkSubnet } from './clients.js'
import { THEIR_DEFAULTS } from './compat.js'
import { InvalidGroupIdError } from '../errors.js'
import { checkStandardHeaders, checkSwitches } from './headers.js'
import { checkCost, checkLimitMax, checkLimitWindow, checkRouteLimits, checkShared } from './limits.js'
import { settlesItself } from './resolved.js'
import type { ResolvedOptions, ResolvedRoute } from './resolved.js'
import { checkBreaker, checkNameSpace, checkRedis, checkStoreClass } from './stores.js'
import { MAX_WAITING, checkMaxWait, saidOfWaiting } from './wait.js'
import { checkShed } from './shed.js'
import type { Warn } from '../warnings.js'
import type {
  BanCallback, CountWhenFunction, ErrorFormat, ErrorResponseBuilder, ExceededCallback, FailMode, HookName, KeyCallback, KeyGenerator,
  Mode, RateGuardOptions, RouteRateLimitOptions, SettleFunction
} from '../types.js'

// Every option, once, as one descriptor: where it may be given, its check, its default, how a route's value
// merges over the plugin's, how a limiter takes it, how it cannot meet the other options and what is said of
// it once merged. The pass that reads the table is read.ts (what each place accepts, each option checked
// alone), route.ts (a budget's options over the plugin's; conflicts.ts, their conflicts) and plugin.ts (the plugin's).

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

/**
 * Where a budget's options were given: at register, on a route (`config.rateLimit`), to a limiter the app
 * places (`fastify.rateLimit()`), or to a check it calls (`createRateLimit()`, which answers at once).
 */
export type Place = 'plugin' | 'route' | 'limiter' | 'check'

/** A budget as its options' conflicts see it: merged (`route`), with the options its place was given, each checked alone. */
export interface Budget {
  readonly route: ResolvedRoute
  readonly given: Readonly<Record<string, unknown>>
  readonly place: Place
  /** Whether a store of the app's own counts it (`store`). */
  readonly store: boolean
}

/**
 * How an option cannot meet the others, checked once a budget is merged (conflicts.ts): where `when` holds, the
 * option is refused, saying `why` after its name as given (`says`), after "expected" with its value as given
 * (`expected`, the words of a value refused alone), or after its bare name (`store`: what the app's store cannot count).
 */
export interface Conflict {
  /** `option`: the name of the option whose conflict it is. */
  readonly when: (budget: Budget, option: string) => boolean
  readonly why: string
  readonly form: 'says' | 'expected' | 'store'
}

/** What is said of an option once its budget is merged (`where` prefixes names): a warning, never a refusal. */
export type Said = (route: ResolvedRoute, where: string, warn: Warn) => void

/**
 * An option: where it may be given, its check, its value when nobody gives it (written as an app would give it,
 * read by the check; none: undefined), how a route's merges, how a limiter takes it, how it cannot meet the
 * other options, and what is said of it once merged.
 */
interface Spec<A extends At, T, M extends Merge, F> {
  readonly at: A
  readonly check: Check<T>
  readonly fallback: F
  readonly merge: M
  readonly limiter: OnLimiter
  readonly conflicts: readonly Conflict[]
  readonly said: Said | undefined
}

/** An option's descriptor beside its check and default: how a limiter takes it, its conflicts, what is said of it. */
interface More {
  readonly limiter?: OnLimiter
  readonly conflicts?: readonly Conflict[]
  readonly said?: Said
}

const option = <A extends At, M extends Merge>(at: A, merge: M) =>
  <T, const F = undefined>(check: Check<T>, fallback?: F, more: More = {}): Spec<A, T, M, F> =>
    ({ at, check, fallback: fallback as F, merge, limiter: more.limiter ?? 'read', conflicts: more.conflicts ?? [], said: more.said })
const over = option('route', 'over')
const own = option('route', 'own')
const routeWith = option('route', 'with')
const plugin = option('plugin', 'over')
const pluginWith = option('plugin', 'with')

type When = Conflict['when']
/** Refused when `when` holds, `why` said after the option's name. */
const refused = (when: When, why: string): Conflict => ({ when, why, form: 'says' })
/** Refused beside another option given at the same place, saying what to give instead. */
const notBoth = (others: readonly string[], expected: string): Conflict => {
  const when: When = ({ given }, option) => given[option] !== undefined && others.some(other => given[other] !== undefined)
  return { when, why: expected, form: 'expected' }
}
/** Refused on a check (`createRateLimit()`), which answers at once, when given and not false. */
const notOnCheck = (expected: string): Conflict =>
  ({ when: ({ place, given }, option) => place === 'check' && given[option] != null, why: expected, form: 'expected' })
/** Refused with a store of the app's own (`@fastify/rate-limit`'s interface) where `when` holds of the budget. */
const notWithStore = (when: (route: ResolvedRoute) => boolean, why: string): Conflict =>
  ({ when: budget => budget.store && when(budget.route), why, form: 'store' })
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
  hook: over((value, name) => checkOneOf(value, name, HOOKS), 'onRequest', { limiter: 'unused' }),
  algorithm: over((value, name) => checkOneOf(value, name, ALGORITHMS), DEFAULT_ALGORITHM),
  shared: over(checkShared, false, {
    conflicts: [notWithStore(route => route.shared !== null, 'false with store: the app\'s store counts per client')]
  }),
  cost: over(checkCost, 1, {
    conflicts: [notWithStore(route => route.cost !== 1, 'no cost with store: the app\'s store counts one per request')]
  }),
  concurrency: over(checkConcurrency, false, {
    conflicts: [
      notOnCheck('false: a check holds no slot, having no response to hold it until; ' +
        'give concurrency to a route or to fastify.rateLimit()'),
      notWithStore(route => route.concurrency !== null,
        'false with store: requests in flight are counted in Redis or in process, not in the app\'s store')
    ]
  }),
  maxWait: over(checkMaxWait, false, {
    conflicts: [
      notOnCheck('false: a check answers at once; give maxWait to a route or to fastify.rateLimit()'),
      // They hold a client off where maxWait lets it through.
      refused(({ route }) => route.maxWait !== null && route.overLimit !== undefined,
        'false with continueExceeding or exponentialBackoff: they hold a client off over the limit, maxWait lets it through'),
      // The shared budget would count the request when it is decided, the client's when its wait ends.
      refused(({ route }) => route.maxWait !== null && route.shared !== null,
        'false with shared: the shared budget would count the request when it is decided, the client\'s when its wait ends'),
      notWithStore(route => route.maxWait !== null,
        'false with store: a place ahead of the clock is kept in Redis or in process, not in the app\'s store')
    ],
    said: saidOfWaiting
  }),
  // Given where no request waits, it would say nothing.
  maxQueue: over(checkMax, undefined, {
    conflicts: [refused(({ route, given }) => given.maxQueue !== undefined && route.maxWait === null,
      'maxWait too: maxQueue bounds the requests that wait')]
  }),
  settle: over(checkFunction<SettleFunction>, undefined, { limiter: 'refused' }),
  refundAborted: over(checkBoolean, false, { limiter: 'refused' }),
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
  limits: routeWith(checkRouteLimits, undefined, {
    conflicts: [
      notBoth(['max', 'timeWindow', 'burst'], 'limits, or max / timeWindow / burst, not both'),
      notWithStore(route => route.limits.length > 1, 'one limit (max, timeWindow) with store: the app\'s store counts one'),
      notWithStore(route => route.limits[0]!.calendar !== undefined,
        'a timeWindow, not per, with store: calendar quotas are counted in Redis or in process, not in the app\'s store')
    ]
  }),
  ban: routeWith(checkBanOption, false, {
    conflicts: [notWithStore(route => route.ban !== null && route.banDenials === null,
      'a number of denials (ban: N) with store: longer bans need Redis or the in-process store')]
  }),
  keyGenerator: routeWith(checkFunction<KeyGenerator>),
  ipv6Subnet: routeWith(checkSubnet, THEIR_DEFAULTS.ipv6Subnet),
  allowList: routeWith(checkAllowList),
  addHeaders: routeWith(checkSwitches),
  addHeadersOnExceeding: routeWith(checkSwitches),
  continueExceeding: routeWith(checkBoolean, false),
  exponentialBackoff: routeWith(checkBoolean, false),
  countWhen: routeWith(checkFunction<CountWhenFunction>, undefined, {
    limiter: 'refused',
    conflicts: [
      notBoth(['skipSuccessfulRequests', 'skipFailedRequests'], 'countWhen, or skipSuccessfulRequests / skipFailedRequests, not both'),
      // Whatever gives a request back.
      notWithStore(settlesItself,
        'no countWhen, skipSuccessfulRequests, skipFailedRequests, settle or refundAborted with store: ' +
        'the app\'s store cannot give a request back')
    ]
  }),
  skipSuccessfulRequests: routeWith(checkBoolean, false, { limiter: 'refused' }),
  skipFailedRequests: routeWith(checkBoolean, false, { limiter: 'refused' }),
  failMode: routeWith((value, name) => checkOneOf(value, name, FAIL_MODES), 'closed'),
  skipOnError: routeWith(checkBoolean, undefined, { conflicts: [notBoth(['failMode'], 'not both failMode and skipOnError')] }),
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
  // The process-level load shedder (shed.ts): which signals shed requests, lowest priority first.
  shed: plugin(checkShed, false),
  // The plugin's options read together: the key hierarchy (clients.ts).
  // A key nobody verifies is an identity any client can mint.
  apiKeyHeader: pluginWith(checkApiKeyHeader, API_KEY_HEADER, {
    conflicts: [{
      when: ({ given }) => given.apiKeyHeader !== undefined && given.apiKeyHeader !== false && given.verifyApiKey === undefined,
      why: 'false, or a header given with verifyApiKey (a key nobody verifies is an identity any client can mint; ' +
        'when a gateway in front has verified it, say so with verifyApiKey: () => true)',
      form: 'expected'
    }]
  }),
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
type Alone<A extends At> = {
  [K in OptionName]: Table[K]['at'] extends A ? (Table[K]['merge'] extends 'with' ? never : K) : never
}[OptionName]
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

const named = (test: (entry: Entry) => boolean): ReadonlySet<string> =>
  new Set(ENTRIES.filter(([, entry]) => test(entry)).map(([name]) => name))
/** The options a route or a limiter takes, and those that hold for the whole plugin. */
export const ROUTE_OPTIONS = named(entry => entry.at === 'route')
export const PLUGIN_ONLY = named(entry => entry.at === 'plugin')

/** The defaults tests and docs name: @fastify/rate-limit's for a limit, the decision's deadline and the breaker's. */
export const DEFAULTS = Object.freeze({ ...THEIR_DEFAULTS, timeout: OPTIONS.timeout.fallback, breaker: OPTIONS.breaker.fallback })
