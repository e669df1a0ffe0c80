import type { Limit } from '../algorithms/index.js'
import type { RouteBudget } from '../budgets.js'
import type { Callbacks } from '../callbacks.js'
import { fallbacksOf, staticLimits } from './computed.js'
import type { Fallback } from './computed.js'
import type { Decider } from '../decider.js'
import { formatDuration } from '../duration.js'
import { UnavailableError } from '../errors.js'
import { retryAfterSeconds } from '../headers.js'
import { TheirBudget } from '../stores/app-store.js'
import { sharedKeys } from '../stores/key-names.js'
import type { Family } from '../stores/key-names.js'
import type { Decidable, WaitPolicy } from '../stores/store.js'
import { settlesItself } from '../options/resolved.js'
import type { ResolvedOptions, ResolvedRoute } from '../options/resolved.js'
import type { BanPolicy, TheirStore } from '../types.js'
import { keyerOf } from './identify.js'
import { headerStyle } from '../headers.js'
import { PROBLEM_TYPE, unavailableProblem } from './problem.js'
import type { HeaderStyle } from '../headers.js'
import type { Leases } from '../leases.js'
import type { ResolvedConcurrency } from '../options/concurrency.js'
import type { Keyed } from './identify.js'
import type { WaitingRoom } from './waiting-room.js'

// What a budget's requests are decided with, worked out once when its route is added (onRoute): every stage
// of lib/request/pipeline.ts reads it, and nothing in it changes afterwards. How the route's features meet
// is decided here, in one place:
// - shadow mode counts on keys of its own (`family`), and strikes toward bans only when the route says so;
// - a denial is held in process only where nothing but time can change it (`holdable`);
// - watched limits and the shared budget are budgets of their own beside the client's.

export interface Plan {
  readonly budget: RouteBudget
  readonly route: ResolvedRoute
  readonly decider: Decider
  readonly nameSpace: string
  readonly callbacks: Callbacks
  /** The request's key, as the route names its clients. */
  readonly keyOf: Keyed
  /** Whose keys the decisions write: enforcing ones, or shadow mode's (which no enforcing decision reads). */
  readonly family: Family
  /** The ban policy, when denials strike toward bans; `banEach`: `ban: N` over a window computed per request. */
  readonly ban: BanPolicy | null
  readonly banEach: number | null
  /** The limits, when none is a function of the request; else what a failing function gives instead. */
  readonly fixedLimits: readonly Limit[] | null
  readonly fallbacks: readonly Fallback[]
  /** Whether only time can change a denial (see HeldAnswers); per request also: no route gives counts back to the scope. */
  readonly holdable: boolean
  /** `maxWait` and `maxQueue` for a request decided on `limits` (null: no request waits). */
  readonly waitFor: ((limits: readonly Limit[]) => WaitPolicy) | null
  /** Where the requests that wait do, every budget of the registration together (`maxWaiting`). */
  readonly room: WaitingRoom
  /** The scopes some route gives counts back to (it has a shared budget): complete once the app is ready. */
  readonly undoneScopes: ReadonlySet<string>
  /** The limits the route watches (`mode: 'shadow'` per limit), as a budget of their own; its keys per request. */
  readonly watched: Omit<Decidable, 'keys'> | null
  /** The budget the route's clients share, asked after the client's own allowed. */
  readonly shared: Decidable | null
  /** The app's own store (`@fastify/rate-limit`'s `store`), when it counts this budget instead. */
  readonly appStore: TheirBudget | undefined
  /** `concurrency`, with where slots are taken (`leases`) and the headers of a refusal for it (null: none). */
  readonly concurrency: ResolvedConcurrency | null
  readonly leases: Leases
  readonly inFlightHeaders: HeaderStyle
  /** The 503 of a budget that cannot decide (`failMode: 'closed'`): `Retry-After` one deadline from now, and its body. */
  readonly unavailable: { readonly after: number, readonly body: string, readonly type: string }
}

export function planBudget (
  decider: Decider, leases: Leases, room: WaitingRoom, opts: ResolvedOptions, budget: RouteBudget, undoneScopes: ReadonlySet<string>,
  appStore?: TheirStore
): Plan {
  const { route, scope } = budget
  const { algorithm, failMode, mode } = route
  // In shadow mode denials strike toward bans only when the route says so.
  const strikes = mode !== 'shadow' || route.shadow.ban
  // A shadow decision counts, strikes and bans on keys of its own, which no enforcing decision reads: a shadow
  // route in an enforced route's group (or an instance in shadow beside enforcing ones) takes nothing from it.
  const family = mode === 'shadow' ? 'shadow' : 'enforce'
  const ban = strikes ? route.ban : null
  const fixedLimits = staticLimits(route.limits)
  // Only time can change a denial when it counts no strike, no request's limits or cost differ, a denial sets
  // no over-limit wait, no request waits (one whose client leaves gives its place back) and the route gives
  // nothing back after its responses (see HeldAnswers); a shared budget's denials, too: nothing is ever given
  // back to it. (A handler that settles lower says so: ./charge.ts.)
  const holdable = ban === null && fixedLimits !== null && route.overLimit === undefined && route.maxWait === null &&
    typeof route.cost === 'number' && !settlesItself(route)
  // Watched limits write only their state, under a scope no enforcing budget has (`~`), and never a strike, a
  // ban or an over-limit wait: nothing an enforcing decision reads.
  // A shared budget's decisions take the same fields (no strike, no ban), on keys of their own.
  const unstruck = { ban: null, peek: false, algorithm, holdDenials: true, failMode }
  const watched = route.watched === null ? null : { limits: staticLimits(route.watched)!, ...unstruck }
  const shared = route.shared === null
    ? null
    : { keys: sharedKeys(opts.nameSpace, scope, algorithm, family), limits: staticLimits(route.shared)!, ...unstruck }
  return Object.freeze({
    budget,
    route,
    decider,
    nameSpace: opts.nameSpace,
    callbacks: opts.callbacks,
    keyOf: keyerOf(route, opts),
    family,
    ban,
    banEach: strikes && route.ban === null ? route.banDenials : null,
    fixedLimits,
    // A limit function that fails gives a static limit, never none (./computed.ts): failMode is Redis's.
    fallbacks: fixedLimits === null ? fallbacksOf(route.limits, opts.route.limits) : [],
    holdable,
    waitFor: waitPolicy(route, fixedLimits),
    room,
    undoneScopes,
    watched,
    shared,
    appStore: appStore === undefined ? undefined : new TheirBudget(appStore, route.banDenials, opts.callbackTimeout, decider.failed),
    concurrency: route.concurrency,
    leases,
    // The IETF fields name it, in concurrent requests (draft-10's `qu`).
    inFlightHeaders: Object.freeze({ ...headerStyle(route, ['concurrency']), unit: ';qu="concurrent-requests"' }),
    // 503 answers are sent, not thrown: Fastify logs every thrown 5xx as an error, which during an outage would
    // be one log line per request.
    unavailable: unavailableAnswer(route, opts)
  })
}

/** A plan's `unavailable`: the 503's `Retry-After` and body, as problem details or the default error body. */
function unavailableAnswer (route: ResolvedRoute, opts: ResolvedOptions): Plan['unavailable'] {
  const unavailable = unavailableError(opts.timeout)
  return route.errorFormat === 'problem'
    ? {
        after: retryAfterSeconds(opts.timeout),
        body: unavailableProblem(retryAfterSeconds(opts.timeout), unavailable.message),
        type: PROBLEM_TYPE
      }
    : {
        after: retryAfterSeconds(opts.timeout),
        body: JSON.stringify({ statusCode: 503, code: unavailable.code, error: 'Service Unavailable', message: unavailable.message }),
        type: 'application/json; charset=utf-8'
      }
}

/**
 * `maxWait` and `maxQueue` as a decision takes them: one object for static limits (a batch sends a policy once),
 * else made per request, whose limits give the default queue (the smallest max).
 */
function waitPolicy ({ maxWait, maxQueue }: ResolvedRoute, fixedLimits: readonly Limit[] | null): Plan['waitFor'] {
  if (maxWait === null) return null
  const policy = (limits: readonly Limit[]): WaitPolicy =>
    Object.freeze({ maxMs: maxWait, maxQueue: maxQueue ?? Math.min(...limits.map(limit => limit.max)) })
  if (fixedLimits === null) return policy
  const fixed = policy(fixedLimits)
  return () => fixed
}

/** What a budget that cannot decide answers (`failMode: 'closed'`): try again one deadline from now, in whole seconds. */
export function unavailableError (timeout: number): Error & { code: string } {
  return new UnavailableError(formatDuration(retryAfterSeconds(timeout) * 1000))
}
