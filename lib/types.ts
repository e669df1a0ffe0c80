import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import type { Algorithm } from './algorithms/index.js'
import type { ShedPluginOptions } from './shed-types.js'

// The options as the app gives them (public, exported from the package), and the types they name (checked: options/resolved.ts).

/** What a budget does with the requests it denies: count nothing (absent), count them, or double the wait. */
export type OverLimit = 'continue' | 'backoff' | undefined

/** The names of the three fields of the binding limit: `X-RateLimit-*`, or the draft's `RateLimit-*` (`enableDraftSpec`). */
export interface FieldNames {
  readonly limit: string
  readonly remaining: string
  readonly reset: string
}

/** Which headers are sent: the three fields on an allowed request, and on a refusal with `Retry-After`. */
export interface HeaderSwitches {
  readonly allowed: Readonly<Record<keyof FieldNames, boolean>>
  readonly refused: Readonly<Record<keyof FieldNames | 'retryAfter', boolean>>
}

/** The `redis` option: an ioredis client or Cluster. */
export type RedisLike = Redis | Cluster

/** When denials start a ban, and how long each ban in a row lasts. */
export interface BanPolicy {
  /** Denials within one window of the limit hit that start a ban. */
  readonly threshold: number
  /** The nth ban in a row lasts `ladder[n - 1]` ms, the last step repeating; one step: every ban is as long. */
  readonly ladder: readonly number[]
  /** How long after a ban ends it still counts toward the next one's length (ms). */
  readonly forgetMs: number
}

/** The callback of their store's `incr` and `read`. */
export type StoreCallback = (err: Error | null, result?: { current: number, ttl: number }) => void

// Their type names, so a store written against their types compiles unchanged.
/** What a store is made with: the budget's options, by their names (see `theirParams`). */
export interface FastifyRateLimitOptions { }

export interface FastifyRateLimitStoreCtor {
  new (options: FastifyRateLimitOptions): FastifyRateLimitStore
}

export interface FastifyRateLimitStore {
  incr (key: string, callback: StoreCallback, timeWindow: number, max: number): void
  child (routeOptions: RouteOptions & { path: string, prefix: string }): FastifyRateLimitStore
  /** Reads without counting (`createRateLimit`'s `increment: false`). */
  read? (key: string, callback: StoreCallback, timeWindow: number, max: number): void
}

/** An instance of the app's store class (keys are passed as the key generator gave them). */
export interface TheirStore {
  incr (key: unknown, callback: StoreCallback, timeWindow: number, max: number): void
  child (routeOptions: object): TheirStore
  read? (key: unknown, callback: StoreCallback, timeWindow: number, max: number): void
}

export type Awaitable<T> = T | Promise<T>
/** The client's key: a number is taken as its decimal string, as `@fastify/rate-limit` does. */
export type KeyGenerator = (request: FastifyRequest) => Awaitable<string | number>
/**
 * A limit computed per request. One that throws, rejects, misses `callbackTimeout` or gives no valid value is
 * replaced by a static one (the plugin's, or 1000 per minute), whatever the `failMode`, and logged.
 */
export type MaxFunction = (request: FastifyRequest, key: string) => Awaitable<number>
/** A window computed per request; one that fails is replaced as a failing `MaxFunction` is (the plugin's window, or a minute). */
export type TimeWindowFunction = (request: FastifyRequest, key: string) => Awaitable<number | string>
export type AllowListFunction = (request: FastifyRequest, key: string) => Awaitable<boolean>
/** A request's units: a positive integer. One that fails (or gives no positive integer) counts the request at 1, whatever `failMode`. */
export type CostFunction = (request: FastifyRequest, key: string) => Awaitable<number>
/** After the response: whether the request counts (`countWhen`), or what it finally costs (`settle`, units). */
export type CountWhenFunction = (request: FastifyRequest, reply: FastifyReply) => Awaitable<boolean>
export type SettleFunction = (request: FastifyRequest, reply: FastifyReply) => Awaitable<number>
/** `shadow`: the route is in shadow mode, so the request was let through all the same. */
export interface ExceededInfo {
  shadow: boolean
}
export type KeyCallback = (request: FastifyRequest, key: string) => void
/** `onExceeded`: told whether the route is in shadow mode (the request was let through all the same). */
export type ExceededCallback = (request: FastifyRequest, key: string, info: ExceededInfo) => void
/** What `onBanReach` is told of the ban: its length, which ban in a row it is (1 for the first), and whether in shadow mode. */
export interface BanInfo {
  durationMs: number
  offence: number
  shadow: boolean
}
/** `'enforce'` refuses; `'shadow'` decides and counts the same but lets all requests through; `'report'` enforces and logs each refusal. */
export type Mode = 'enforce' | 'shadow' | 'report'
export type BanCallback = (request: FastifyRequest, key: string, ban: BanInfo) => void
export type HookName = 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
export type FailMode = 'open' | 'closed' | 'local'

/** The bodies of refusals: `@fastify/rate-limit`'s, or RFC 9457 problem details. */
export type ErrorFormat = 'default' | 'problem'
/** Who a request without a client address is (a Unix socket, `trustProxy` giving none): one shared client, or its connection. */
export type Addressless = 'shared' | 'connection'

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

/** One limit of `limits`: per `timeWindow` (`WindowLimitOptions`), or per calendar period (`CalendarLimitOptions`). */
export type LimitOptions = WindowLimitOptions | CalendarLimitOptions

/** One limit: `max` requests per `timeWindow`, and for the token bucket up to `burst` at once (default `max`). */
export interface WindowLimitOptions {
  max: number | MaxFunction
  timeWindow: number | string | TimeWindowFunction
  burst?: number
  /** Its name in the IETF `RateLimit` fields. Default: the budget's (group id or `default`), `-2`, `-3`... after the first. */
  name?: string
  /**
   * A route's limits only: `'shadow'` watches this limit without enforcing it (see `mode`): it is decided
   * apart, after the enforced limits allowed the request, and what it would have refused is reported.
   */
  mode?: 'enforce' | 'shadow'
}

/** A calendar quota: `max` units a day, week (from Monday) or month in `timeZone` (IANA; `'UTC'`), reset when it ends. */
export interface CalendarLimitOptions {
  max: number | MaxFunction
  per: 'day' | 'week' | 'month'
  timeZone?: string
  name?: string
  mode?: 'enforce'
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
  /**
   * The bodies of 429, 403 and 503 answers: `'default'`, `@fastify/rate-limit`'s; `'problem'`, RFC 9457 problem
   * details (`application/problem+json`) with the problem types of the IETF rate-limit draft, the names of the
   * violated limits and `retry-after`. An app's `errorResponseBuilder` or error handler still shapes its own.
   */
  errorFormat?: ErrorFormat
  /** Called on each allowed request (`@fastify/rate-limit`'s name: the request did not exceed the limit). */
  onExceeding?: KeyCallback
  onExceeded?: ExceededCallback
  onBanReach?: BanCallback
  legacyHeaders?: boolean
  standardHeaders?: false | 'draft-10'
  /** Per-header switches on refusals: `{ 'x-ratelimit-reset': false, 'retry-after': false }` (draft names with `enableDraftSpec`). */
  addHeaders?: Partial<Record<`${'x-' | ''}ratelimit-${'limit' | 'remaining' | 'reset'}` | 'retry-after', boolean>>
  /** Per-header switches on allowed requests. */
  addHeadersOnExceeding?: Partial<Record<`${'x-' | ''}ratelimit-${'limit' | 'remaining' | 'reset'}`, boolean>>
  /** The hook that limits: `'onRequest'` (default), or later, once the request is authenticated or parsed. */
  hook?: HookName
  /** When Redis cannot decide in time: `'closed'` (default) answers 503, `'open'` lets the request through, `'local'` counts in process. */
  failMode?: FailMode
  /** `@fastify/rate-limit`'s spelling: true is `failMode: 'open'`, false is `failMode: 'closed'`. */
  skipOnError?: boolean
  /** Bits of an IPv6 address that make one client (0–128, default 64), for the default key. */
  ipv6Subnet?: number
  /** A denied request is counted too (the fixed window starts again), so a client that keeps sending stays limited. */
  continueExceeding?: boolean
  /** Each request over the limit doubles the wait: one window, then two, four... (`@fastify/rate-limit`'s). */
  exponentialBackoff?: boolean
  /**
   * What a request costs, in the units `max` counts (default 1): a positive integer, or a function of the
   * request giving one. Charged atomically on every limit of the decision (and the shared budget); a request
   * that costs more than a limit holds is refused (429, no `Retry-After`: it never passes).
   */
  cost?: number | CostFunction
  /**
   * At most `max` of a client's requests in flight on this budget, across every instance (a request of `cost`
   * units takes as many): the one past it is refused at once (429, `FST_RATE_GUARD_TOO_MANY_IN_FLIGHT`,
   * `Retry-After: 1`) and strikes toward bans as any refusal. A request holds its slots until its response
   * ends (sent, failed or aborted); each is a lease Redis ends `lease` (default 30 s) after it was last
   * renewed, so slots held by a process that died come free. A request still running renews its lease.
   * Default false. See docs/options.md, concurrency.
   */
  concurrency?: false | { max: number, lease?: number | string }
  /**
   * A request its limits deny, which every one of them would allow within this long, waits and goes on then
   * instead of being refused: its place counted at the wait's end in the same decision (the requests waiting
   * never pass a limit, across instances), given back if its client leaves; the response says how long
   * (`X-RateLimit-Waited-Ms`). Not with `continueExceeding`, `exponentialBackoff` or `shared`. Default false.
   */
  maxWait?: false | number | string
  /** With `maxWait`: at most this many of a client's requests wait at once (default: the smallest `max` of its limits). */
  maxQueue?: number
  /**
   * After the response: whether the request counts. One that does not is given back its charge on every
   * budget. Until then it counts: requests in flight count, whatever their outcome (see docs/algorithms.md, costs and settling).
   */
  countWhen?: CountWhenFunction
  /** express-rate-limit's: a response with a status below 400 does not count (only failures do: a failed login). */
  skipSuccessfulRequests?: boolean
  /** express-rate-limit's: a response with a status of 400 or more does not count. */
  skipFailedRequests?: boolean
  /** After the response: the request's final charge in units (tokens used), up or down from its cost. */
  settle?: SettleFunction
  /**
   * A request whose client leaves before its handler starts (during the body's read, a slow preHandler)
   * counts nothing, and its handler does not run. Once the handler started, the charge stands (its work is
   * done) and the handler may still settle it. Default false.
   */
  refundAborted?: boolean
  /**
   * `'enforce'` (default); `'shadow'`: decide and count exactly as enforce would, but never refuse (the request
   * goes on; `onExceeded` / `onBanReach` are told `shadow: true`, the diagnostics channel says `shadow-…`);
   * `'report'`: enforce, and log each refusal (info level, the key's hash, never the key).
   */
  mode?: Mode
  /** In shadow mode, whether denials strike toward bans (and bans are recorded, though never enforced). Default `{ ban: false }`. */
  shadow?: { ban: boolean }
}

export interface BreakerOptions {
  /** Transient Redis failures in a row that open the breaker. */
  threshold: number
  /** How long it stays open before one decision probes Redis: ms or a string such as `'1s'`. */
  coolDown: number | string
}

export interface RateGuardOptions extends RouteRateLimitOptions, ShedPluginOptions {
  /** A client you lend, a URL, or Cluster nodes' URLs (a client is made, failing fast); null, `@fastify/rate-limit`'s default, is none. */
  redis?: RedisLike | string | readonly string[] | null
  global?: boolean
  nameSpace?: string
  /** The three fields as `RateLimit-Limit`, `-Remaining`, `-Reset` (an IETF draft, as `@fastify/rate-limit` does), not `X-RateLimit-*`. */
  enableDraftSpec?: boolean
  /** How long Redis has to answer a decision (ms, 1 to 60,000) before `failMode` decides; the app's own event-loop delay is not counted. */
  timeout?: number
  /**
   * Whose clock decides: `'redis'` (default), Redis's `TIME`, one clock for every instance; `'app'`, each
   * instance's own (`Date.now()`), sent with every call, for a server that refuses `TIME` in scripts
   * (ElastiCache Serverless). A Redis found refusing it at start is read on the app's clock, with a warning:
   * every instance's clock must then be in sync (NTP).
   */
  clock?: 'redis' | 'app'
  /**
   * How long the app's own code that decides a request has (ms, 1 to 60,000; default 10,000): the key
   * generator, `verifyApiKey`, `userId`, the allow list, limit and cost functions, and the app's `store`. One
   * that is later is replaced by its fallback (a store's call by `failMode`).
   */
  callbackTimeout?: number
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
  /** At most this many requests wait (`maxWait`) at once in the registration, all budgets together (default 1000). */
  maxWaiting?: number
  apiKeyHeader?: string | false
  /**
   * Who a request without a client address is (a server on a Unix socket, with `trustProxy` giving no
   * `request.ip`), for the default key: `'shared'` (default), all of them one client (`noaddr:`), never more
   * generous than one; `'connection'`, each connection a client of its own (`conn:<n>`): only where every
   * connection is one client, as a proxy that opens a connection per request gives each request a fresh
   * budget. Either way a warning says once how to give Fastify the client's address.
   */
  addressless?: Addressless
  verifyApiKey?: (apiKey: string, request: FastifyRequest) => Awaitable<boolean>
  userId?: (request: FastifyRequest) => unknown
  /** A store class with `@fastify/rate-limit`'s interface (`incr`, `child`): it counts instead of Redis or the in-process store. */
  store?: FastifyRateLimitStoreCtor
}
