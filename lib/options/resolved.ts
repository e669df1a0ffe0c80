import type { Algorithm } from '../algorithms/index.js'
import type { Callbacks } from '../callbacks.js'
import type { Calendar } from '../calendar.js'
import type { ResolvedConcurrency } from './concurrency.js'
import type { ResolvedShed } from './shed.js'
import type {
  Addressless, AllowListFunction, BanCallback, BanPolicy, CostFunction, CountWhenFunction, ErrorFormat, ErrorResponseBuilder,
  ExceededCallback, FailMode, FastifyRateLimitStoreCtor, FieldNames, HeaderSwitches, HookName, KeyCallback, KeyGenerator, MaxFunction,
  Mode, OverLimit, RedisLike, SettleFunction, TimeWindowFunction
} from '../types.js'

// The options once checked: one frozen object for the plugin (ResolvedOptions), and one per budget
// (ResolvedRoute: the plugin's, a route's, a limiter's), of resolved values only. The pass that makes them is
// plugin.ts and route.ts; the options as the app gives them are lib/types.ts's.

export interface ResolvedLimit {
  readonly max: number | MaxFunction
  /** A calendar quota's: its period's usual length (a month: 31 days); each request is given the period's own. */
  readonly windowMs: number | TimeWindowFunction
  /** `null`: the limit's max. */
  readonly burst: number | null
  readonly name: string | undefined
  /** A calendar quota (`per`, `timeZone`): counted since its period began, whatever the algorithm. */
  readonly calendar?: Calendar
}

export interface ResolvedRoute {
  readonly hook: HookName
  readonly failMode: FailMode
  readonly ipv6Subnet: number
  readonly algorithm: Algorithm
  readonly limits: readonly ResolvedLimit[]
  readonly shared: readonly ResolvedLimit[] | null
  /** The limits given `mode: 'shadow'`: watched, not enforced (null: none). */
  readonly watched: readonly ResolvedLimit[] | null
  readonly keyGenerator: KeyGenerator
  /** The hierarchical default (API key, user, IP), which `ipv6Subnet` shapes; false for the app's own. */
  readonly defaultKey: boolean
  readonly ban: BanPolicy | null
  /** What a denied request does: nothing, counted (`continueExceeding`), or doubling the wait (`exponentialBackoff`). */
  readonly overLimit: OverLimit
  /** A request's units: 1 unless the route says. */
  readonly cost: number | CostFunction
  /** At most this many units of a client's requests in flight (`concurrency`); null: no such limit. */
  readonly concurrency: ResolvedConcurrency | null
  /** A request its limits would allow within this many ms waits instead of being refused (`maxWait`); null: none does. */
  readonly maxWait: number | null
  /** At most this many of a client's requests wait at once; undefined: the smallest max of its limits. */
  readonly maxQueue: number | undefined
  /** Whether a response counts (`countWhen`, or what `skipSuccessfulRequests` / `skipFailedRequests` make of the status). */
  readonly countWhen: CountWhenFunction | undefined
  readonly settle: SettleFunction | undefined
  readonly refundAborted: boolean
  readonly mode: Mode
  /** In shadow mode, whether denials strike toward bans. */
  readonly shadow: { readonly ban: boolean }
  /**
   * `ban: N` as given, when it was: a route with another window bans for its own window; with `ban` null (a
   * window computed per request), each request's decision carries a ban of its window.
   */
  readonly banDenials: number | null
  /** The allow list as the key generator writes keys (an empty list: null). */
  readonly allowList: ReadonlySet<string> | AllowListFunction | null
  /** The allow list as the app gave it (checked): written again under a route's own `ipv6Subnet`, and given to the app's store. */
  readonly allowListGiven: readonly string[] | AllowListFunction | undefined
  readonly groupId: string | undefined
  readonly errorResponseBuilder: ErrorResponseBuilder | undefined
  /** The bodies of refusals: `@fastify/rate-limit`'s (`'default'`), or RFC 9457 problem details (`'problem'`). */
  readonly errorFormat: ErrorFormat
  readonly onExceeding: KeyCallback | undefined
  readonly onExceeded: ExceededCallback | undefined
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
  /** The app's store class (`@fastify/rate-limit`'s interface), when it gave one. */
  readonly store: FastifyRateLimitStoreCtor | undefined
  readonly global: boolean
  readonly nameSpace: string
  /** The draft's header names (`RateLimit-Limit`…) for the binding limit's fields (see `route.fieldNames`). */
  readonly enableDraftSpec: boolean
  readonly timeout: number
  /** Whose clock the scripts read: Redis's `TIME`, or the app's (a server that refuses `TIME` in scripts). */
  readonly clock: 'redis' | 'app'
  readonly callbackTimeout: number
  readonly strict: boolean
  readonly breaker: ResolvedBreaker | null
  readonly banCache: boolean
  readonly cache: number
  /** At most this many requests wait at once (`maxWait`) in the registration, all its budgets together. */
  readonly maxWaiting: number
  readonly addressless: Addressless
  /** The process-level load shedder; null: none. */
  readonly shed: ResolvedShed | null
  /**
   * Writes a key the way the plugin's key generator does: the default one with the plugin's `ipv6Subnet` (see
   * `canonicalKey`), the app's as given.
   */
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

/** Whether a route settles by itself, after the response or an abort: only then are its hooks added. */
export function settlesItself (route: ResolvedRoute): boolean {
  return route.countWhen !== undefined || route.settle !== undefined || route.refundAborted
}
